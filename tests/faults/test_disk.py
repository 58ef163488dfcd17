"""A run dir that fills up or turns read-only is an orderly stop, never a traceback.

The run dir is on a small tmpfs of the test's own: it fills up for real (ENOSPC) or is
remounted read-only (EROFS) while trials run. The run stops scheduling, lets running trials
finish and clean up, prints one message (the records, the full path, ``--resume``) and exits
74; after space is freed ``--resume`` completes every planned trial exactly once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from support.faults import (
    Cli,
    Ext4,
    Result,
    assert_each_once,
    assert_left_clean,
    assert_no_traceback,
    make_tasks,
    records,
    remount,
    run_args,
    wait_until,
)
from support.private_engine import PrivateEngine

pytestmark = [pytest.mark.docker, pytest.mark.serial]

EXIT_DISK_FULL = 74


def assert_stopped_in_order(result: Result, run_dir: Path, planned: int, reason: str) -> None:
    """Exit 74, one message naming the fault, the records and the command; nothing torn."""
    assert result.code == EXIT_DISK_FULL, result
    assert_no_traceback(result)
    assert result.output.count("stopped: ") == 1, result
    assert reason in result.output, result
    ids = {r["id"] for r in records(run_dir)}  # every line a whole record
    assert 0 < len(ids) < planned, result
    assert f"{len(ids)} of {planned} trial(s) are recorded" in result.output, result
    assert f"then continue with: harness run --resume {run_dir}" in result.output, result
    assert result.output.count("repairing torn line") <= 1, result


def test_a_full_run_dir_stops_the_run_in_order_and_resume_completes_it(
    engine_cli: Cli,
    engine: PrivateEngine,
    small_fs: Callable[[str], Path],
    tmp_path: Path,
) -> None:
    tasks = make_tasks(tmp_path / "tasks", 40, "head -c 4000 /dev/urandom | base64")
    out = small_fs("300k")
    run_dir = out / "full"
    stopped = engine_cli.run(*run_args(tasks, out, "full"), timeout=300)

    assert_stopped_in_order(stopped, run_dir, 40, "no space left on device (ENOSPC) at")
    assert_left_clean(engine, engine_cli, stopped)  # running trials clean up on a full disk

    remount(out, "size=20m")
    resumed = engine_cli.run("run", "--resume", run_dir, "--display", "plain", timeout=300)
    assert resumed.code == 0, resumed
    assert_no_traceback(resumed)
    assert_each_once(run_dir, 40)
    assert_left_clean(engine, engine_cli, resumed)


def test_a_run_dir_turned_read_only_stops_the_run_in_order(
    engine_cli: Cli, engine: PrivateEngine, ext4: Callable[[int], Ext4], tmp_path: Path
) -> None:
    tasks = make_tasks(tmp_path / "tasks", 8, "sleep 2")
    fs = ext4(32)
    run_dir = fs.point / "ro"
    proc = engine_cli.start(*run_args(tasks, fs.point, "ro"))
    wait_until(lambda: len(records(run_dir)) >= 2, "two records")
    fs.fail()
    stopped = proc.wait(120)

    assert_stopped_in_order(stopped, run_dir, 8, "read-only file system (EROFS) at")
    assert_left_clean(engine, engine_cli, stopped)

    fs.repair()
    resumed = engine_cli.run("run", "--resume", run_dir, "--display", "plain")
    assert resumed.code == 0, resumed
    assert_no_traceback(resumed)
    assert_each_once(run_dir, 8)
    assert_left_clean(engine, engine_cli, resumed)
