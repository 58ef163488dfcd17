"""One harness process per run dir: the run lock, and what a resume refuses while held."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from harness.config import RunConfig, save_config
from harness.errors import UsageError
from harness.records.layout import RUN_LOCK_FILENAME
from harness.runner import prepare_run
from harness.runner.rundir import lock_run_dir


def test_a_held_run_dir_is_refused(tmp_path: Path) -> None:
    holder = FileLock(str(tmp_path / RUN_LOCK_FILENAME))
    holder.acquire()
    try:
        with pytest.raises(UsageError, match="in use by another harness process"):
            lock_run_dir(tmp_path)
    finally:
        holder.release()
    lock = lock_run_dir(tmp_path)  # free again
    assert lock.is_locked
    lock.release()


def test_resume_takes_the_lock_and_a_new_run_refuses_a_non_empty_dir(
    tmp_path: Path, make_task: Any
) -> None:
    task = make_task()
    out = tmp_path / "runs"
    config = RunConfig(paths=[str(task.path)], agent="nop", output_dir=str(out), run_name="r1")
    run_dir = out / "r1"
    run_dir.mkdir(parents=True)
    save_config(config, run_dir / "config.toml")
    with pytest.raises(UsageError, match="not empty.*--resume"):
        prepare_run(config)
    prepared = prepare_run(config, resume_dir=run_dir)
    try:
        assert prepared.resume is not None and prepared.resume.missing
        with pytest.raises(UsageError, match="in use"):
            prepare_run(config, resume_dir=run_dir)
    finally:
        prepared.close()
    again = prepare_run(config, resume_dir=run_dir)  # released by close()
    again.close()
