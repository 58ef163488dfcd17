"""An agent cannot raise its score by making its failures ungraded (issue 34, finding 4).

Attack through the real CLI on local, docker (runc) and gVisor. The agent is a coin flip,
right on exactly the trials whose id hashes even (so the honest figures are known before
the run); on the others, instead of failing, it breaks the verifier: where the verifier
reads its answer it leaves a directory, the verifier exits without a reward and the trial
ends as ``verifier_error``. Graded-only figures would make that agent perfect. Judged from
outside: ``trials.jsonl`` holds one record per planned trial, on its first attempt; and
``summary.json``'s headline (mean reward, success rate, pass@k, pass^k) is the honest one,
an ungraded trial counted as a failure, with the graded-only figures beside it named as
such and the ungraded trials counted by status.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import write_task

from harness.records.metrics import pass_at_k, pass_hat_k
from harness.runner.plan import trial_id
from harness.tasks import load_task

ROLLOUTS = 8

COIN = r"""
cd "$HARNESS_WORKSPACE"
h=$(printf %s "$HARNESS_TRIAL_ID" | sha256sum | cut -c1-8)
if [ $(( 0x$h % 2 )) -eq 0 ]; then
  echo right > answer
  exit 0
fi
rm -rf answer
mkdir answer
exit 0
"""

# A verifier that cannot read the answer gives no reward (as many real ones do).
CHECK = (
    'answer=$(cat "$HARNESS_WORKSPACE/answer") || exit 1\n'
    'if [ "$answer" = right ]; then echo 1; else echo 0; fi > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
)


def _right(trial: str) -> bool:
    """The coin: what the agent's script computes from its trial id."""
    return int(hashlib.sha256(trial.encode()).hexdigest()[:8], 16) % 2 == 0


def test_a_broken_verifier_counts_as_a_failure_in_the_headline(
    any_cli: Any, tmp_path: Path
) -> None:
    task_dir = write_task(
        tmp_path / "tasks", "coin-breaks-grading", attack=COIN, test_sh=CHECK, agent_timeout=60
    )
    planned = [trial_id(load_task(task_dir), r) for r in range(ROLLOUTS)]
    right = sum(_right(t) for t in planned)
    assert 0 < right < ROLLOUTS  # both sides of the coin are exercised
    run = any_cli.run([task_dir], jobs=2, extra=["-r", str(ROLLOUTS)], timeout=600)
    assert run.run_dir is not None, str(run)
    assert run.code == 1, str(run)  # the verifier errors are errors of the run
    assert sorted(r["id"] for r in run.records) == sorted(planned), str(run)
    for record in run.records:
        assert record["attempt"] == 1 and record["previous_attempts"] == [], record
        expected = ("completed", 1.0) if _right(record["id"]) else ("verifier_error", None)
        assert (record["status"], record["reward"]) == expected, record["errors"]

    summary = json.loads((run.run_dir / "summary.json").read_text())
    honest = right / ROLLOUTS
    assert summary["mean_reward"] == pytest.approx(honest), (
        f"mean {summary['mean_reward']} is not the honest {honest}: ungraded trials left out"
    )
    assert summary["success_rate"] == pytest.approx(honest)
    for k in range(1, ROLLOUTS + 1):
        assert summary["pass_at_k"][str(k)] == pytest.approx(pass_at_k(ROLLOUTS, right, k))
        assert summary["pass_hat_k"][str(k)] == pytest.approx(pass_hat_k(ROLLOUTS, right, k))
    assert summary["graded_only"]["mean_reward"] == 1.0  # what the sabotage would have bought
    assert summary["graded_only"]["n"] == right
    assert summary["ungraded"]["trials"] == ROLLOUTS - right
    assert summary["ungraded"]["by_status"] == {"verifier_error": ROLLOUTS - right}
    # The end-of-run table says the headline, the graded-only figure after it, named.
    assert f"{honest:.3f}" in run.stdout and "(graded only)" in run.stdout, run.stdout
