"""The docker backend through the CLI: images, users, workdirs, failures, maintenance commands."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import docker.errors
import pytest
from support.docker import docker_client, require_image

from sandbox.docker.images import ImageRequest, ImageResolver, parse_aliases, rewrite_from_lines
from sandbox.docker.labels import IMAGE_HASH

pytestmark = pytest.mark.docker


def _cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


def _run_docker(
    tasks: Path, out: Path, *options: str, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    """``harness run TASKS --sandbox docker -o OUT OPTIONS...``."""
    return _cli("run", str(tasks), "--sandbox", "docker", "-o", str(out), *options, **kwargs)


COMMAND_AGENT = ("--agent", "command", "--agent-cmd", "bash {instruction_file}")


def _task(
    root: Path,
    name: str,
    *,
    dockerfile: str | None = None,
    toml_extra: str = "",
    instruction: str = "do it",
    test_sh: str = 'echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n',
) -> Path:
    task = root / name
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text(
        f'[task]\nname = "dockertest/{name}"\n[agent]\ntimeout_sec = 30\n'
        f"[verifier]\ntimeout_sec = 30\n{toml_extra}"
    )
    (task / "instruction.md").write_text(instruction)
    (task / "tests" / "test.sh").write_text(test_sh)
    if dockerfile is not None:
        (task / "environment").mkdir()
        (task / "environment" / "Dockerfile").write_text(dockerfile)
    return task


def _records(out: Path) -> list[dict[str, Any]]:
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]


@pytest.fixture(autouse=True)
def _engine() -> None:
    require_image(docker_client())


def test_failed_build_is_an_environment_error_with_the_log_tail_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    client = docker_client()
    # Ids only (one call): the SDK's list() inspects each container, and one that another
    # run on this engine removes in between makes it raise NotFound.
    before = {c["Id"] for c in client.api.containers(all=True, quiet=True)}
    tasks = tmp_path / "tasks"
    _task(tasks, "broken", dockerfile="FROM harness/base:bookworm\nRUN exit 42\n")
    _task(tasks, "fine", dockerfile="FROM harness/base:bookworm\n")
    result = _run_docker(tasks, tmp_path / "o", "--agent", "nop")
    assert result.returncode == 1, result.stderr
    by_name = {r["task"]["name"]: r for r in _records(tmp_path / "o")}
    broken = by_name["dockertest/broken"]
    assert broken["status"] == "environment_error"
    message = broken["errors"][0]["message"]
    assert "building the image of task dockertest/broken failed" in message
    assert "build log (tail)" in message and "42" in message
    assert by_name["dockertest/fine"]["status"] == "completed"
    # The failed build's intermediate container is removed too (--force-rm). Other runs
    # share this engine, so only containers of this build's layers (every layer carries
    # the build's content hash, sandbox/docker/images.py) count.
    request = ImageRequest(
        name="dockertest/broken", dockerfile=tasks / "broken" / "environment" / "Dockerfile"
    )
    content = ImageResolver(client).tag_for(request).rsplit(":", 1)[1]
    ours = set()
    for cid in {c["Id"] for c in client.api.containers(all=True, quiet=True)} - before:
        try:
            image = client.api.inspect_image(client.api.inspect_container(cid)["Image"])
        except docker.errors.NotFound:
            continue  # gone already: not left behind
        if (image["Config"].get("Labels") or {}).get(IMAGE_HASH) == content:
            ours.add(cid)
    assert not ours


def test_unreachable_engine_is_one_clear_error_and_exit_2(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    _task(tasks, "t")
    out = tmp_path / "o"
    result = _run_docker(
        tasks,
        out,
        "--agent",
        "nop",
        env={"DOCKER_HOST": f"unix://{tmp_path}/no-such.sock"},
        timeout=60,
    )
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cannot reach the Docker engine" in errors[0]
    assert "docker/start-engine.sh" in errors[0]
    assert not out.exists() or not any(out.iterdir())


def test_image_is_content_addressed_and_reused_not_rebuilt(tmp_path: Path) -> None:
    client = docker_client()
    task = _task(
        tmp_path, "cached", dockerfile="FROM harness/base:bookworm\nRUN echo cached > /marker\n"
    )
    resolver = ImageResolver(client)
    request = ImageRequest(name="dockertest/cached", dockerfile=task / "environment" / "Dockerfile")
    tag = resolver.resolve(request)
    assert tag.startswith("harness-task/dockertest-cached:")
    first_id = client.images.get(tag).id
    # A new resolver (a new run) reuses the tag instead of rebuilding it.
    assert ImageResolver(client).resolve(request) == tag
    assert client.images.get(tag).id == first_id
    # Any change of the build context gives another tag.
    (task / "environment" / "extra.txt").write_text("x")
    assert ImageResolver(client).tag_for(request) != tag


def test_base_alias_rewrites_from_lines(tmp_path: Path) -> None:
    aliases = parse_aliases(["ubuntu:24.04=harness/base:bookworm"])
    text = (
        "FROM ubuntu:24.04 AS build\nRUN true\n"
        "FROM --platform=linux/amd64 ubuntu:24.04\nFROM other\n"
    )
    assert rewrite_from_lines(text, aliases) == (
        "FROM harness/base:bookworm AS build\nRUN true\n"
        "FROM --platform=linux/amd64 harness/base:bookworm\nFROM other\n"
    )
    with pytest.raises(ValueError, match="FROM=LOCAL"):
        parse_aliases(["nonsense"])
    tasks = tmp_path / "tasks"
    _task(tasks, "aliased", dockerfile="FROM ubuntu:24.04\n")
    result = _run_docker(
        tasks,
        tmp_path / "o",
        "--agent",
        "nop",
        "--base-alias",
        "ubuntu:24.04=harness/base:bookworm",
    )
    assert result.returncode == 0, result.stderr
    assert _records(tmp_path / "o")[0]["status"] == "completed"


def test_image_without_python_agent_user_and_workdir_are_honoured(tmp_path: Path) -> None:
    """No python3 in the image: the supervisor brings its own, read-only."""
    tasks = tmp_path / "tasks"
    dockerfile = textwrap.dedent(
        """\
        FROM harness/base:bookworm
        RUN rm -f /usr/bin/python3* && useradd -u 4242 -m agent && mkdir /srv/work \\
            && echo seeded > /srv/work/from-image.txt
        WORKDIR /
        """
    )
    instruction = (
        "id -u > uid.txt; pwd > pwd.txt; cat from-image.txt > copy.txt; "
        "command -v python3 > py.txt; true"
    )
    test_sh = textwrap.dedent(
        """\
        cd "$HARNESS_WORKSPACE"
        ok=1
        [ "$(cat uid.txt)" = 4242 ] || ok=0
        [ "$(cat pwd.txt)" = /srv/work ] || ok=0
        [ "$(cat copy.txt)" = seeded ] || ok=0
        [ ! -s py.txt ] || ok=0
        echo $ok > "$HARNESS_VERIFIER_DIR/reward.txt"
        """
    )
    _task(
        tasks,
        "nopython",
        dockerfile=dockerfile,
        instruction=instruction,
        test_sh=test_sh,
        toml_extra='[environment]\nworkdir = "/srv/work"\n',
    )
    (tasks / "nopython" / "task.toml").write_text(
        (tasks / "nopython" / "task.toml")
        .read_text()
        .replace("[agent]\ntimeout_sec = 30\n", '[agent]\ntimeout_sec = 30\nuser = "agent"\n')
    )
    result = _run_docker(tasks, tmp_path / "o", *COMMAND_AGENT)
    assert result.returncode == 0, result.stderr
    (record,) = _records(tmp_path / "o")
    assert record["reward"] == 1.0, record
    assert record["posture"]["uid"] == [4242, 4242, 4242]
    assert record["sandbox"]["backend"] == "docker"


def test_gvisor_runtime_runs_a_trial(tmp_path: Path) -> None:
    if "runsc" not in (docker_client().info().get("Runtimes") or {}):
        pytest.fail("runsc is not registered; docker/start-engine.sh registers it on Debian")
    tasks = tmp_path / "tasks"
    _task(tasks, "gvisor", instruction="dmesg 2>/dev/null | head -1 > dmesg.txt; true")
    result = _run_docker(tasks, tmp_path / "o", *COMMAND_AGENT, "--runtime", "runsc")
    assert result.returncode == 0, result.stderr
    (record,) = _records(tmp_path / "o")
    assert record["sandbox"]["runtime"] == "runsc"
    assert record["status"] == "completed"


def test_unknown_runtime_is_a_usage_error(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    _task(tasks, "t")
    result = _run_docker(tasks, tmp_path / "o", "--agent", "nop", "--runtime", "nosuch")
    assert result.returncode == 2
    assert "--runtime nosuch is not registered" in result.stderr


def test_doctor_and_sandbox_cleanup(tmp_path: Path) -> None:
    doctor = _cli("doctor", timeout=60)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "API version" in doctor.stdout and "base image" in doctor.stdout
    client = docker_client()
    run = f"leak-test-{secrets.token_hex(4)}"
    labels = {"org.harness.managed": "1", "org.harness.run": run}
    leaked = client.containers.create("harness/base:bookworm", ["true"], labels=labels)
    bystander = client.containers.create(
        "harness/base:bookworm", ["true"], labels={**labels, "org.harness.run": f"{run}-other"}
    )
    try:
        # --run: other runs on this engine (concurrent test sessions too) are left alone.
        cleanup = _cli("sandbox", "cleanup", "--run", run, timeout=60)
        assert cleanup.returncode == 0, cleanup.stderr
        assert "removed 1 container(s)" in cleanup.stdout, cleanup.stdout
        assert not client.containers.list(all=True, filters={"id": leaked.id})
        assert client.containers.list(all=True, filters={"id": bystander.id})
    finally:
        bystander.remove(force=True)


@pytest.mark.root
def test_doctor_says_whether_compose_host_rules_can_be_installed() -> None:
    """Root on the engine's host with iptables: yes. Without iptables: no, and what to do."""

    def table(doctor: subprocess.CompletedProcess[str]) -> str:
        assert doctor.returncode == 0, doctor.stdout + doctor.stderr
        return " ".join(doctor.stdout.replace("│", " ").split())  # the table, unwrapped

    doctor = _cli("doctor", timeout=60)
    assert "compose host rules can be installed" in table(doctor), doctor.stdout
    # The same host with iptables off PATH: the rules cannot be installed, and doctor says
    # why and what guards compose networks instead (the engine: still exit 0).
    no_sbin = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep) if "sbin" not in d)
    doctor = _cli("doctor", env={"PATH": no_sbin}, timeout=60)
    text = table(doctor)
    assert "compose host rules cannot be installed: iptables is not installed" in text, text
    assert "made by the engine without a host address" in text, text
    assert "an engine-made network without a host address" in text, text


@pytest.mark.root
def test_cleanup_of_one_run_unmounts_what_a_killed_harness_left(tmp_path: Path) -> None:
    """kill -9 of a run mid-trial leaves trial filesystems mounted: cleanup --run removes them.

    From outside: the run's temp dir held a mounted trial filesystem while the agent slept;
    after ``harness sandbox cleanup --run NAME`` nothing is mounted under it and it is gone.
    """
    from sandbox.storage import mounts_under

    task = tmp_path / "tasks" / "sleepy"
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text('[task]\nname = "sleepy"\n[agent]\ntimeout_sec = 120\n')
    (task / "instruction.md").write_text("sleep\n")
    (task / "tests" / "test.sh").write_text('echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n')
    host_tmp = tmp_path / "host-tmp"
    host_tmp.mkdir()
    name = f"killed-{secrets.token_hex(4)}"
    env = {**os.environ, "TMPDIR": str(host_tmp)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "run", str(task), "--agent", "command",
         "--agent-cmd", "sleep 60", "-o", str(tmp_path / "runs"), "--run-name", name],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    run_tmp = host_tmp / f"harness-run-{name}"
    try:
        for _ in range(600):
            if run_tmp.exists() and mounts_under(run_tmp):
                break
            assert proc.poll() is None, "the run ended before its trial started"
            time.sleep(0.05)
        assert mounts_under(run_tmp), "no trial filesystem was mounted (test did not bite)"
    finally:
        proc.kill()
        proc.wait()
    assert mounts_under(run_tmp), "the killed harness left nothing mounted (test did not bite)"
    cleanup = _cli("sandbox", "cleanup", "--run", name, env={"TMPDIR": str(host_tmp)}, timeout=60)
    assert cleanup.returncode == 0, cleanup.stderr
    assert not mounts_under(host_tmp), mounts_under(host_tmp)
    assert not run_tmp.exists()
