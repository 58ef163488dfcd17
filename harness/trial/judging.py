"""After the trial: its judges score the evidence it left (docs/judges.md).

Judges run once per trial, on the host, after the sandbox is gone and ``transcript.jsonl``
is written, and only when the trial has a reward. They score the trial's final state: the
workspace as the last agent phase left it and the whole transcript. In a multi-step task
that is the state after the last step that ran; the steps' own rewards (the record's
``steps``) are the verifier's alone, and a judge's score joins the trial's ``rewards``
beside the steps' aggregate. (A step has no evidence of its own for a judge to read: the
transcript spans the trial, so a step's ``verifier.judges`` is refused when the task loads.)
"""

from __future__ import annotations

from typing import Any

from harness.records import TrialStatus
from harness.trial.state import TrialState


class Judging(TrialState):
    """Runs the trial's judges (:class:`~harness.judges.JudgePanel`) on its evidence."""

    def judge(self) -> None:
        """Score the trial's evidence with its judges, and apply what they decided.

        Scores join ``rewards``; a judge that cannot score makes the trial a
        ``verifier_error`` (not graded); a gate below its threshold makes the reward 0.
        """
        panel = self.settings.judges
        if panel is None or self.reward is None or self.settings.cancel.is_set():
            return
        self.view = self.task  # the trial's, not its last step's: errors are the trial's
        with self.clock.phase("judges"):
            result = panel.judge(self.task, self.plan.id, self.evidence, self.rewards)
        if result is None:
            return
        self.judge_details = result.details
        self.rewards.update(result.scores)
        for error in result.errors:
            self.fail(TrialStatus.VERIFIER_ERROR, error, "judge")
        if result.errors:
            self.reward = None
        elif result.gates_failed:
            self.reward = 0.0

    def judge_fields(self) -> dict[str, Any]:
        """The record's ``judges`` (what each judge decided), when the trial had any."""
        return {"judges": self.judge_details} if self.judge_details else {}


__all__ = ["Judging"]
