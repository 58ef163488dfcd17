"""A multi-step trial's steps: what each one produced, and the trial's reward from them.

Harbor's rules: ``mean`` (the default) takes, for every reward key, the mean over the steps
that produced rewards, a key missing from a step counting 0; ``final`` takes the last step's
rewards as they are (none when the last step produced none).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.trial.grading import trial_reward


@dataclass
class StepOutcome:
    """What one step of a trial produced (a line of the record's ``steps``)."""

    name: str
    index: int
    rewards: dict[str, float] | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    #: Why the steps after this one did not run (min_reward not met, or a failure).
    stopped: str | None = None
    #: Each of its phases' effective network policy: ``{"agent": ..., "verifier": ...}``
    #: (``NetworkPolicy.to_json``), as the trial ran them.
    network: dict[str, Any] | None = None

    def as_record(self) -> dict[str, Any]:
        """The step as the record stores it."""
        data: dict[str, Any] = {
            "name": self.name,
            "index": self.index,
            "reward": trial_reward(self.rewards) if self.rewards else None,
            "rewards": self.rewards or {},
            "errors": self.errors,
            "timings": self.timings,
        }
        if self.network is not None:
            data["network"] = self.network
        if self.stopped is not None:
            data["stopped"] = self.stopped
        return data


def aggregate_rewards(steps: list[StepOutcome], strategy: str | None) -> dict[str, float] | None:
    """The trial's rewards from its steps' (None when no step produced any)."""
    if strategy == "final":
        return dict(steps[-1].rewards) if steps and steps[-1].rewards else None
    graded = [step.rewards for step in steps if step.rewards]
    if not graded:
        return None
    keys = sorted({key for rewards in graded for key in rewards})
    return {key: sum(rewards.get(key, 0.0) for rewards in graded) / len(graded) for key in keys}
