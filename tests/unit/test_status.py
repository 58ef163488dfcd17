"""Live run state and status.json: counts, running trials, throttled atomic writes."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path

from harness.records import AgentRef, SandboxRef, TaskRef, TrialRecord, TrialStatus
from harness.records.status import RunState, StatusWriter, read_status

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _record(trial_id: str, status: str, reward: float | None) -> TrialRecord:
    return TrialRecord(
        id=trial_id,
        task=TaskRef(name="t", key="t", hash="h", path="/t"),
        agent=AgentRef(name="nop"),
        sandbox=SandboxRef(backend="local"),
        status=TrialStatus(status),
        ok=status == "completed",
        reward=reward,
        started_at=T0,
        finished_at=T0,
    )


def test_state_counts_kept_running_and_finished(tmp_path: Path) -> None:
    state = RunState(
        name="run-a",
        run_dir=tmp_path,
        planned=5,
        kept=[_record("k1", "completed", 1.0), _record("k2", "agent_error", None)],
        threshold=1.0,
        invocation=2,
    )
    state.trial_started("t1", "task-x", 1)
    state.trial_started("t2", "task-y", 3)
    state.phase("t1", "execute")
    state.retrying("t2")
    snap = state.snapshot()
    assert snap["run"] == "run-a" and snap["invocation"] == 2 and snap["state"] == "running"
    assert snap["pid"] == os.getpid()
    assert snap["counts"] == {
        "planned": 5,
        "done": 2,
        "running": 2,
        "pending": 1,
        "kept": 2,
        "retries": 1,
        "by_status": {"agent_error": 1, "completed": 1},
    }
    phases = {r["id"]: (r["phase"], r["attempt"], r["task"]) for r in snap["running"]}
    assert phases == {"t1": ("execute", 1, "task-x"), "t2": ("backoff", 3, "task-y")}

    state.trial_finished(_record("t1", "completed", 0.5))
    state.trial_dropped("t2")
    state.finish("interrupted")
    snap = state.snapshot()
    assert snap["state"] == "interrupted"
    assert snap["counts"]["done"] == 3 and snap["counts"]["running"] == 0
    assert snap["counts"]["pending"] == 2
    assert snap["success"] == {
        "threshold": 1.0,
        "graded": 2,
        "successes": 1,
        "rate": 0.5,
        "mean_reward": 0.75,
        # Over the 3 trials done, the agent_error one (no reward) counting 0.
        "rate_done": 1 / 3,
        "mean_reward_done": 0.5,
    }
    assert state.finished_now == 1


def test_writer_throttles_changes_but_never_loses_the_final_state(tmp_path: Path) -> None:
    state = RunState(name="r", run_dir=tmp_path, planned=2)
    writer = StatusWriter(tmp_path / "status.json", state, min_interval=60.0)
    assert writer.flush(force=True)
    assert not writer.flush()  # nothing changed
    state.trial_started("t1", "task", 1)
    assert not writer.flush()  # changed, but within the interval
    assert read_status(tmp_path)["counts"]["running"] == 0
    state.finish("finished")
    assert writer.flush(force=True)
    data = read_status(tmp_path)
    assert data is not None and data["state"] == "finished"
    assert data["running"][0]["id"] == "t1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]  # no temp files left

    fast = StatusWriter(tmp_path / "fast.json", state, min_interval=0.0)
    fast.flush(force=True)
    state.phase("t1", "grade")
    time.sleep(0.001)
    assert fast.flush()
    assert json.loads((tmp_path / "fast.json").read_text())["running"][0]["phase"] == "grade"


def test_read_status_of_a_dir_without_one(tmp_path: Path) -> None:
    assert read_status(tmp_path) is None
