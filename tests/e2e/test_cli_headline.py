"""End-to-end: ``summary.json``'s headline counts every planned trial (docs/run-dir.md).

An agent that makes its failures ungraded (here it breaks the verifier on the task it
cannot solve, so those trials end as ``verifier_error``) must never score higher than one
that fails them: the headline counts an ungraded trial as reward 0, and the graded-only
figures stay beside it, named as such.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

# The verifier trusts a file the agent wrote: "sabotage" in it breaks grading (no reward).
TEST_SH = """#!/bin/bash
if grep -q sabotage "$HARNESS_WORKSPACE/answer.txt"; then
  echo "the agent broke me" >&2
  exit 3
fi
if grep -q solved "$HARNESS_WORKSPACE/answer.txt"; then
  echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"
else
  echo 0 > "$HARNESS_VERIFIER_DIR/reward.txt"
fi
"""
ROLLOUTS = 2
TASKS = {"solved": "solved", "sabotaged": "sabotage", "failed": "wrong"}


def _task_set(e2e: Any, root: Path) -> Path:
    for name, answer in TASKS.items():
        e2e.make_task(root, name, instruction=f"{answer}\n", test_sh=TEST_SH)
    return root


def test_ungraded_trials_count_as_failures_in_summary_json(e2e: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = e2e.run(
        "run",
        _task_set(e2e, tmp_path / "set"),
        "--agent",
        "command",
        "--agent-cmd",
        "cp {instruction_file} {workspace}/answer.txt",
        "-r",
        str(ROLLOUTS),
        "-j",
        "3",
        "-o",
        out,
        "--display",
        "plain",
        timeout=300,
    )
    assert result.code == 1, result  # the verifier errors are errors of the run
    run = e2e.read_run(e2e.only_run_dir(out))
    summary = json.loads((run.path / "summary.json").read_text())
    records = run.records
    planned = len(TASKS) * ROLLOUTS
    assert summary["planned"] == planned == len(records)
    rewards = [r["reward"] for r in records if r["reward"] is not None]
    statuses = sorted(r["status"] for r in records)
    assert statuses.count("verifier_error") == ROLLOUTS, statuses
    assert len(rewards) == planned - ROLLOUTS

    # The headline, read from summary.json itself: every planned trial counted.
    assert summary["mean_reward"] == pytest.approx(sum(rewards) / planned)
    assert summary["summary_version"] == 2
    assert summary["mean_reward"] == pytest.approx(1 / 3)
    assert summary["success_rate"] == pytest.approx(1 / 3)
    assert summary["pass_at_k"]["1"] == pytest.approx(1 / 3)
    assert summary["pass_at_k"]["2"] == pytest.approx(1 / 3)
    assert summary["pass_hat_k"]["2"] == pytest.approx(1 / 3)
    assert summary["per_task"]["e2e/sabotaged"]["mean_reward"] == 0.0
    low, high = summary["ci"]["mean_reward"]
    assert low <= summary["mean_reward"] <= high

    # The graded-only figures, beside it, and why the rest was ungraded.
    graded = summary["graded_only"]
    assert graded["n"] == len(rewards)
    assert graded["mean_reward"] == pytest.approx(0.5)
    assert graded["pass_at_k"]["1"] == pytest.approx(0.5)
    assert summary["ungraded"]["trials"] == ROLLOUTS
    assert summary["ungraded"]["by_status"] == {"verifier_error": ROLLOUTS}

    # The end-of-run table says the headline plainly, the graded-only figure as secondary.
    lines = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in result.stdout.splitlines()
        if line.count("│") >= 3
    }
    assert lines["mean reward"] == "0.333", result.stdout
    assert lines["mean reward (graded only)"] == "0.500", result.stdout
    assert lines["success (reward ≥ 1)"] == "33.3%", result.stdout
    assert lines["pass@1"] == "33.3%", result.stdout

    # ``harness aggregate`` (``harness.load_run`` beneath it) follows the same headline.
    summary_out = tmp_path / "trials_summary.json"
    agg = e2e.run("aggregate", out, "--summary-out", summary_out, "--json")
    assert agg.code == 1, agg  # a run with failed trials
    metrics = agg.json()["metrics"]
    assert metrics["mean_reward"]["mean"] == pytest.approx(1 / 3)
    assert metrics["pass_at_1"]["mean"] == pytest.approx(1 / 3)
    assert metrics["graded_mean_reward"]["mean"] == pytest.approx(0.5)
    assert agg.json()["counts"]["ungraded"]["mean"] == ROLLOUTS
