"""The one run-dir reader (harness.records.run): what every caller sees of a forged run dir.

The API's ``load_run``, the report and the experiments read through it; these tests plant
hostile files in a real run dir (FIFOs, links out of it, oversized files) and check what is
read, from outside: a FIFO that were opened would hang the test, a followed link would leak
the canary's value.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from harness.records import (
    AgentRef,
    SandboxRef,
    TaskRef,
    TrialRecord,
    TrialStatus,
    TrialStore,
    layout,
)
from harness.records.run import MAX_PLANNED_TASKS, evidence_path, read_run, read_summary

T0 = datetime(2026, 11, 30, 5, 0, tzinfo=UTC)


def _record(trial_id: str) -> TrialRecord:
    return TrialRecord(
        id=trial_id,
        task=TaskRef(name="t", key="t", hash="h", path="/nonexistent"),
        agent=AgentRef(name="nop"),
        sandbox=SandboxRef(backend="local"),
        status=TrialStatus.COMPLETED,
        ok=True,
        reward=1.0,
        started_at=T0,
        finished_at=T0 + timedelta(seconds=1),
    )


def _run_dir(tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / layout.CONFIG_FILENAME).write_text(
        '[run]\nthreshold = 0.5\n[versions]\nharness = "x"\n'
    )
    store = TrialStore(run_dir)
    store.append(_record("a"))
    store.append(_record("b"))
    return run_dir


def test_reads_an_honest_run_dir(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path)
    (run_dir / layout.SUMMARY_FILENAME).write_text(json.dumps({"planned": 3}))
    (run_dir / layout.STATUS_FILENAME).write_text(json.dumps({"state": "running"}))
    read = read_run(run_dir)
    assert [r.id for r in read.records] == ["a", "b"]
    assert read.config == {"threshold": 0.5} and read.versions == {"harness": "x"}
    assert read.planned == 3 and read.running


def test_forged_own_files_read_as_missing(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path)
    canary = tmp_path / "canary.json"
    canary.write_text(json.dumps({"state": "running", "planned": 99}))
    os.mkfifo(run_dir / layout.SUMMARY_FILENAME)  # opened, it would block for ever
    (run_dir / layout.STATUS_FILENAME).symlink_to(canary)  # followed, it would leak
    read = read_run(run_dir)
    assert read.summary is None and read.planned is None
    assert read.status is None and not read.running
    assert read_summary(run_dir) is None


def test_summary_over_the_cap_reads_as_missing(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path)
    (run_dir / layout.SUMMARY_FILENAME).write_text(json.dumps({"planned": 2, "pad": "x" * 4096}))
    assert read_run(run_dir, summary_cap=1024).summary is None
    assert read_run(run_dir).planned == 2


def test_linked_trials_file_is_refused(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    outside = tmp_path / "outside.jsonl"
    outside.write_text(_record("x").model_dump_json() + "\n")
    (run_dir / layout.TRIALS_FILENAME).symlink_to(outside)
    with pytest.raises(OSError):
        read_run(run_dir)


@pytest.mark.parametrize("relative", ["/etc", "../x", "trials/../../x", "a/./b"])
def test_forged_evidence_dirs_lie_nowhere(tmp_path: Path, relative: str) -> None:
    assert evidence_path(tmp_path, relative, "t") is None


def test_default_evidence_dir_is_the_layouts(tmp_path: Path) -> None:
    assert evidence_path(tmp_path, None, "t1") == tmp_path / layout.trial_evidence_dir("t1")
    assert evidence_path(tmp_path, None, "..") is None


@pytest.mark.parametrize(
    ("per_task", "expected"),
    [
        ({"t": {"planned": 3}, "u": {"planned": 2}}, {"t": 3, "u": 2}),
        ({"t": {"planned": 3}, "u": {}}, None),  # version 1: no plan per task
        ({"t": {"planned": -1}}, None),
        ({"t": {"planned": True}}, None),
        ({"t": {"planned": "3"}}, None),
        ({"t": [1]}, None),
        ([], None),
        ({}, None),
        ({f"t{i}": {"planned": 1} for i in range(MAX_PLANNED_TASKS + 1)}, None),
    ],
    ids=["whole", "version-1", "negative", "bool", "text", "list", "not-a-map", "empty", "many"],
)
def test_the_plan_per_task_reads_only_as_whole_counts(
    tmp_path: Path, per_task: object, expected: dict[str, int] | None
) -> None:
    run_dir = _run_dir(tmp_path)
    summary = {"planned": 5, "per_task": per_task}
    (run_dir / layout.SUMMARY_FILENAME).write_text(json.dumps(summary))
    assert read_run(run_dir).planned_tasks == expected


def test_a_forged_plan_per_task_is_a_denominator_and_nothing_more(tmp_path: Path) -> None:
    """``harness.load_run`` over a summary.json that claims a plan of 10**15 per task."""
    from harness.api import load_run
    from harness.config import AgentConfig, RunConfig, TasksConfig, save_config

    run_dir = _run_dir(tmp_path)
    config = RunConfig(tasks=TasksConfig(paths=["tasks"]), agent=AgentConfig(name="nop"))
    save_config(config, run_dir / layout.CONFIG_FILENAME)
    forged = {
        "planned": 2 * 10**15,
        "per_task": {"t": {"planned": 10**15}, "x": {"planned": 10**15}},
    }
    (run_dir / layout.SUMMARY_FILENAME).write_text(json.dumps(forged))
    summary = load_run(run_dir).summary
    assert summary.planned == 2 * 10**15 and summary.recorded == 2
    assert set(summary.pass_at_k) == {"1", "2"}  # k stops at the most trials a task recorded
    assert summary.mean_reward == pytest.approx(2 / (2 * 10**15))
    assert summary.graded_only.mean_reward == 1.0
