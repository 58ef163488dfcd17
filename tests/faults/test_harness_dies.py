"""The harness dying or stalling at any point leaves nothing a resume cannot mend.

``kill -9`` lands in each phase of a trial, in the middle of its evidence copy, in an atomic
write (the compaction of ``trials.jsonl``, ``summary.json``, ``status.json``,
``config.toml``) and in an image build; the harness is stopped (SIGSTOP) for longer than a
trial's timeout; ``status.json`` is damaged. Asserted from outside: after ``--resume``
every planned trial is recorded exactly once, no partial file is left, the engine holds
nothing of the run, no traceback.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest
from support.faults import (
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

from sandbox.evidence_diff import MANIFEST_NAME

pytestmark = [pytest.mark.docker, pytest.mark.serial]

KILL_POINTS = [
    "phase:prepare",
    "phase:execute",
    "phase:collect",
    "evidence",
    "phase:grade",
    "phase:cleanup",
    "replace:config.toml",
    "replace:status.json",
    "replace:summary.json",
]


def resume_completes(cli: Cli, engine: PrivateEngine, run_dir: Path, planned: int) -> None:
    """``--resume`` ends with every trial once, no partial file, an empty engine."""
    resumed = cli.run("run", "--resume", run_dir, "--display", "plain")
    assert resumed.code == 0, resumed
    assert_no_traceback(resumed)
    assert_each_once(run_dir, planned)
    partial = [p.name for p in run_dir.iterdir() if p.name.endswith(".tmp")]
    assert not partial, partial
    assert_left_clean(engine, cli, resumed)


@pytest.mark.parametrize("point", KILL_POINTS)
def test_kill_9_at_any_point_then_resume_completes(
    engine_cli: Cli, engine: PrivateEngine, tmp_path: Path, point: str
) -> None:
    tasks = make_tasks(tmp_path / "tasks", 3)
    run_dir = tmp_path / "runs" / "killed"
    killed = engine_cli.run(*run_args(tasks, tmp_path / "runs", "killed"),
                            env={"HARNESS_KILL_AT": point})  # fmt: skip
    assert killed.code == -signal.SIGKILL, killed
    if point == "replace:config.toml":
        # Killed before the run dir was whole: the same command starts the run again.
        again = engine_cli.run(*run_args(tasks, tmp_path / "runs", "killed"))
        assert again.code == 0, again
        assert_no_traceback(again)
        assert_each_once(run_dir, 3)
        assert not [p.name for p in run_dir.iterdir() if p.name.endswith(".tmp")]
        assert_left_clean(engine, engine_cli, again)
        return
    resume_completes(engine_cli, engine, run_dir, 3)
    # Every trial's evidence whole, the one killed halfway out included.
    for trial in (run_dir / "trials").iterdir():
        manifest = json.loads((trial / MANIFEST_NAME).read_text())
        assert manifest, trial


def test_kill_9_while_compacting_the_records_then_resume_completes(
    engine_cli: Cli, engine: PrivateEngine, tmp_path: Path
) -> None:
    tasks = make_tasks(tmp_path / "tasks", 3)
    run_dir = tmp_path / "runs" / "compact"
    done = engine_cli.run(*run_args(tasks, tmp_path / "runs", "compact"))
    assert done.code == 0, done
    # Earlier attempts' lines, as retries leave them: the next invocation compacts them.
    trials = run_dir / "trials.jsonl"
    lines = trials.read_bytes()
    trials.write_bytes(lines + lines)
    killed = engine_cli.run("run", "--resume", run_dir, "--display", "plain",
                            env={"HARNESS_KILL_AT": "replace:trials.jsonl"})  # fmt: skip
    assert killed.code == -signal.SIGKILL, killed
    assert trials.read_bytes() == lines + lines, "the records are whole, as before"
    resume_completes(engine_cli, engine, run_dir, 3)


def test_kill_9_during_an_image_build_then_resume_completes(
    engine_cli: Cli, engine: PrivateEngine, tmp_path: Path
) -> None:
    tasks = make_tasks(tmp_path / "tasks", 2, prefix="b",
                       dockerfile="FROM harness/base:bookworm\nRUN sleep 4\n")  # fmt: skip
    run_dir = tmp_path / "runs" / "build"
    proc = engine_cli.start(*run_args(tasks, tmp_path / "runs", "build"))

    def building() -> bool:
        try:
            children = psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return False
        # Resumable only once the run dir exists: images may start building beforehand.
        return (run_dir / "config.toml").exists() and any("build" in _cmdline(c) for c in children)

    wait_until(building, "an image build")
    proc.kill9()
    resume_completes(engine_cli, engine, run_dir, 2)


def test_sigstop_longer_than_a_trial_timeout_then_the_run_goes_on(
    engine_cli: Cli, engine: PrivateEngine, tmp_path: Path
) -> None:
    tasks = make_tasks(tmp_path / "tasks", 4, "sleep 1", timeout=3)
    run_dir = tmp_path / "runs" / "stopped"
    proc = engine_cli.start(*run_args(tasks, tmp_path / "runs", "stopped"))
    wait_until(lambda: agents_running(run_dir), "two agents running")
    os.kill(proc.pid, signal.SIGSTOP)
    time.sleep(8)
    os.kill(proc.pid, signal.SIGCONT)
    result = proc.wait(180)
    assert result.code == 0, result
    assert_no_traceback(result)
    assert_each_once(run_dir, 4)
    assert_left_clean(engine, engine_cli, result)


@pytest.mark.parametrize(
    "damage",
    [b'{"run": "x", "state": "runn', b"\x00\x00\x00", b'{"counts": 5, "running": "x"}', b"[]"],
)
def test_a_damaged_status_json_trips_nothing(
    engine_cli: Cli, engine: PrivateEngine, tmp_path: Path, damage: bytes
) -> None:
    tasks = make_tasks(tmp_path / "tasks", 2)
    run_dir = tmp_path / "runs" / "damaged"
    proc = engine_cli.start(*run_args(tasks, tmp_path / "runs", "damaged"))
    wait_until(lambda: status(run_dir).get("state") == "running", "a running status")
    proc.kill9()
    (run_dir / "status.json").write_bytes(damage)

    report = engine_cli.run("report", run_dir, "-o", tmp_path / "report.html")
    assert report.code == 0, report
    assert_no_traceback(report)
    resume_completes(engine_cli, engine, run_dir, 2)
    assert status(run_dir)["state"] == "finished"


def _cmdline(process: psutil.Process) -> list[str]:
    """A child's argv, or none for one that ended (or is a zombie) while we looked."""
    try:
        return process.cmdline() or []
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return []
