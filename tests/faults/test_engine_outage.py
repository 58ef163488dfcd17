"""An engine outage pauses the run: a Docker restart mid-run, an engine that stays away.

Real faults on a private engine (``dockerd`` of the test's own, stopped as ``systemctl stop
docker`` would and started again). Asserted from outside: the output (one message, no
traceback), the records (every planned trial exactly once, graded), the engine (empty).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
from support.faults import (
    NOTHING_LEFT,
    Cli,
    agents_running,
    assert_each_once,
    assert_left_clean,
    assert_no_traceback,
    make_tasks,
    run_args,
    status,
    wait_until,
)
from support.private_engine import PrivateEngine

import docker
from sandbox.docker.egress import LABEL as EGRESS_LABEL
from sandbox.docker.egress import NETWORK as EGRESS_NETWORK
from sandbox.docker.engine import engine_failure, ping
from sandbox.docker.pulls import ImagePuller
from sandbox.docker.sdk import UNREACHABLE_WORDS, EngineUnreachable, call

pytestmark = [pytest.mark.docker, pytest.mark.serial]


def unreachable(engine: PrivateEngine) -> str:
    """The start of the one outage message: what happened, and where."""
    return f"docker engine unreachable at {engine.host} since"


def test_docker_restart_mid_run_pauses_and_the_run_finishes_by_itself(
    engine_cli: Cli, engine: PrivateEngine, tmp_path: Path
) -> None:
    tasks = make_tasks(tmp_path / "tasks", 6, "sleep 3")
    run_dir = tmp_path / "runs" / "outage"
    # No retries at all: a trial the outage broke must rerun without spending one.
    proc = engine_cli.start(*run_args(tasks, tmp_path / "runs", "outage",
                                      "--set", "retry.max_retries=0"))  # fmt: skip
    wait_until(lambda: agents_running(run_dir), "two agents running")
    engine.stop()
    wait_until(lambda: unreachable(engine) in proc.output(), "the outage message")
    assert status(run_dir)["paused"]["reason"].startswith(
        f"docker engine unreachable at {engine.host} (error: "
    )
    engine.start()
    result = proc.wait(240)

    assert result.code == 0, result
    assert result.output.count(unreachable(engine)) == 1, result
    said = " ".join(result.output.split())  # the live display may wrap it
    assert "Start it: the run waits up to 30 min, then stops (continue with: harness run " \
        f"--resume {run_dir}); Ctrl-C stops it now. (error: " in said, result  # fmt: skip
    assert_no_traceback(result)
    assert_each_once(run_dir, 6)
    assert_left_clean(engine, engine_cli, result)


def test_engine_away_past_the_deadline_stops_in_order_and_resume_completes(
    engine_cli: Cli, engine: PrivateEngine, tmp_path: Path
) -> None:
    tasks = make_tasks(tmp_path / "tasks", 5, "sleep 3")
    run_dir = tmp_path / "runs" / "away"
    proc = engine_cli.start(*run_args(tasks, tmp_path / "runs", "away",
                                      "--set", "retry.engine_wait_sec=5"))  # fmt: skip
    wait_until(lambda: agents_running(run_dir), "two agents running")
    engine.stop()
    stopped = proc.wait(120)

    assert stopped.code == 75, stopped
    assert stopped.output.count(unreachable(engine)) == 1, stopped
    said = " ".join(stopped.output.split())
    assert f"stopped: the docker engine at {engine.host} has been unreachable since" in said
    assert "the run waited 5 s for it (error: " in said, stopped
    assert f"then continue with: harness run --resume {run_dir}" in stopped.output, stopped
    assert_no_traceback(stopped)
    assert status(run_dir)["state"] == "stopped"

    engine.start()
    resumed = engine_cli.run("run", "--resume", run_dir, "--display", "plain")
    assert resumed.code == 0, resumed
    assert_no_traceback(resumed)
    assert_each_once(run_dir, 5)
    assert_left_clean(engine, engine_cli, resumed)


def test_objects_an_engine_crash_left_without_labels_are_removed_by_resume_and_cleanup(
    engine_cli: Cli, engine: PrivateEngine, tmp_path: Path
) -> None:
    """The engine died between creating a trial's volume and labelling it: found by name."""
    tasks = make_tasks(tmp_path / "tasks", 3, "sleep 5")
    run_dir = tmp_path / "runs" / "unlabelled"
    proc = engine_cli.start(*run_args(tasks, tmp_path / "runs", "unlabelled"))
    wait_until(lambda: agents_running(run_dir), "two agents running")
    client = engine.client()
    names = [str(v.name) for v in client.volumes.list(filters={"label": "org.harness.run"})]
    assert names, "the run's trials have volumes"
    proc.kill9()
    # What the crashed engine left: the run's volumes by their names, without any label.
    engine.remove_everything()
    for name in names:
        client.volumes.create(name)
    client.containers.create("harness/base:bookworm", "true", name=f"{names[0]}-c")

    cleanup = engine_cli.run("sandbox", "cleanup", "--run", "unlabelled")
    assert cleanup.code == 0, cleanup
    assert engine.leftovers() == NOTHING_LEFT, cleanup

    for name in names:
        client.volumes.create(name)
    resumed = engine_cli.run("run", "--resume", run_dir, "--display", "plain")
    assert resumed.code == 0, resumed
    assert_no_traceback(resumed)
    assert_each_once(run_dir, 3)
    assert_left_clean(engine, engine_cli, resumed)
    for name in names:
        with pytest.raises(docker.errors.NotFound):
            client.volumes.get(name)
    client.close()


def test_the_filtered_network_goes_with_cleanup_of_a_run_once_no_live_run_holds_it(
    engine_cli: Cli, engine: PrivateEngine, tmp_path: Path
) -> None:
    """What a run says it could not remove at its end: ``sandbox cleanup --run`` takes it.

    The network the runs of an engine share, never while a live run holds it.
    """
    tasks = make_tasks(tmp_path / "tasks", 2, "sleep 4")
    run_dir = tmp_path / "runs" / "holder"
    proc = engine_cli.start(*run_args(tasks, tmp_path / "runs", "holder"))
    wait_until(lambda: agents_running(run_dir), "two agents running")
    client = engine.client()
    try:
        held = engine_cli.run("sandbox", "cleanup", "--run", "gone")
        assert held.code == 0, held
        assert [n.name for n in client.networks.list(names=[EGRESS_NETWORK])] == [EGRESS_NETWORK], (
            held
        )
        result = proc.wait(120)
        assert result.code == 0, result
        assert_each_once(run_dir, 2)
        assert_left_clean(engine, engine_cli, result)

        # As a run whose removal the engine refused leaves it: labelled, no run holds it.
        client.networks.create(EGRESS_NETWORK, labels={EGRESS_LABEL: "1"})
        cleanup = engine_cli.run("sandbox", "cleanup", "--run", "gone")
        assert cleanup.code == 0, cleanup
        assert f"removed the egress filter no live run held: network {EGRESS_NETWORK}" in (
            cleanup.output
        ), cleanup
        assert engine.leftovers() == NOTHING_LEFT, cleanup
    finally:
        client.close()


def test_a_stopped_engine_is_told_from_its_socket_and_a_pull_on_it_is_no_image_failure(
    engine: PrivateEngine,
) -> None:
    """The engine itself stopped: the SDK seam says it did not answer, whatever the words."""
    client = engine.client()
    puller = ImagePuller(client)
    engine.stop()
    try:
        with pytest.raises(EngineUnreachable) as caught:
            call(client.info)
        assert isinstance(caught.value.__cause__, requests.exceptions.ConnectionError)
        assert engine_failure(str(caught.value)), caught.value
        # A pull the engine could not even be asked for is the engine's, not the image's:
        # not a permanent ImagePullError remembered for the run.
        with pytest.raises(EngineUnreachable):
            puller.ensure("127.0.0.1:5000/harness-test/outage:v1")
        # The health ping says why in the SDK's own words, not the seam's.
        why = ping(client.api)
        assert why is not None and UNREACHABLE_WORDS not in why, why
    finally:
        client.close()
