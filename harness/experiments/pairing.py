"""Pairing the arms of an experiment, and what the pairs say (pure functions).

A **pair** is one (task, model, repetition) seen by the control and by one treatment. It
counts only when each side has exactly one observation and that observation completed and
was graded. Otherwise it is **blocked**, with one reason per side:

- ``<variant>: expected 1 observation, found <n>`` (missing: the task did not run on that
  side; or duplicated);
- ``<variant>: skipped (cancelled)`` (the run was interrupted before the trial ran);
- ``<variant>: errored (<status>: <first error>)`` (agent, verifier or environment error);
- ``<variant>: ungraded`` (completed without a reward).

Any blocked pair withholds the headline: the pass rates, the lift (treatment pass rate −
control pass rate, a pass being reward ≥ the threshold) and its CI are published only when
every pair is eligible and there is at least one. The CI is a percentile bootstrap over
tasks of the per-task mean of paired differences (the pairs of one task — its repetitions
and models — are resampled together: they are correlated). Flags, per task and overall:
``no-lift`` (equal rates), ``negative-delta`` (treatment below control),
``control-saturated`` / ``treatment-saturated`` (a rate of 1) and ``flaky`` (a variant both
passed and failed the same task and model across repetitions; computed even without a
headline).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from harness.records.metrics import bootstrap_ci

__all__ = [
    "PAIRED_METRICS",
    "BlockedPair",
    "Comparison",
    "Headline",
    "Observation",
    "PairedMetric",
    "TaskLift",
    "compare",
    "flaky_keys",
]

PAIRED_METRICS: tuple[str, ...] = ("total_tokens", "calls", "duration_s", "cost_usd")
"""Operational figures compared over eligible pairs where both sides measured them."""
CI_LEVEL = 0.95


@dataclass(frozen=True)
class Observation:
    """One trial of one arm.

    Attributes:
        task: The task key.
        model: The model axis value (``"-"`` without one).
        repetition: 1-based.
        variant: The arm.
        status: The trial's status.
        reward: Its reward (None: not graded).
        error: Its first error's message, if any.
        metrics: ``total_tokens``, ``calls``, ``duration_s``, ``cost_usd`` (None: not measured).
    """

    task: str
    model: str
    repetition: int
    variant: str
    status: str
    reward: float | None
    error: str | None = None
    metrics: dict[str, float | None] = field(default_factory=dict)


class BlockedPair(BaseModel):
    """A pair left out, and why."""

    model_config = ConfigDict(frozen=True)

    task: str
    model: str
    repetition: int
    reasons: list[str]


class Headline(BaseModel):
    """The pass-rate lift, or why it is withheld.

    Attributes:
        published: Whether the figures below are given.
        reason: Why not (``withheld because pairs are blocked``, ``unavailable``...).
        control_pass_rate: Share of control arms that passed (over eligible pairs).
        treatment_pass_rate: Likewise for the treatment.
        lift: ``treatment_pass_rate - control_pass_rate``.
        ci: Bootstrap interval of the lift over tasks (None with fewer than 2 tasks).
        ci_level: Its level.
        mean_reward_delta: Mean paired difference of the rewards themselves.
    """

    model_config = ConfigDict(extra="allow")

    published: bool
    reason: str | None = None
    control_pass_rate: float | None = None
    treatment_pass_rate: float | None = None
    lift: float | None = None
    ci: tuple[float, float] | None = None
    ci_level: float = CI_LEVEL
    mean_reward_delta: float | None = None


class PairedMetric(BaseModel):
    """An operational figure over the eligible pairs where both sides measured it."""

    pairs: int
    control_mean: float | None
    treatment_mean: float | None
    mean_delta: float | None


class TaskLift(BaseModel):
    """One task of a comparison."""

    model_config = ConfigDict(extra="allow")

    task: str
    pairs: int
    eligible: int
    blocked: int
    control_pass_rate: float | None
    treatment_pass_rate: float | None
    delta: float | None
    flags: list[str] = Field(default_factory=list)


class Comparison(BaseModel):
    """One treatment against the control."""

    model_config = ConfigDict(extra="allow")

    control: str
    treatment: str
    total_pairs: int
    eligible_pairs: int
    blocked_pairs: int
    headline: Headline
    flags: list[str]
    tasks: list[TaskLift]
    paired_metrics: dict[str, PairedMetric]
    blocked: list[BlockedPair]


def _side_problem(variant: str, found: Sequence[Observation]) -> str | None:
    if len(found) != 1:
        return f"{variant}: expected 1 observation, found {len(found)}"
    only = found[0]
    if only.status == "cancelled":
        return f"{variant}: skipped (cancelled)"
    if only.status != "completed":
        detail = f": {only.error[:160]}" if only.error else ""
        return f"{variant}: errored ({only.status}{detail})"
    if only.reward is None:
        return f"{variant}: ungraded"
    return None


def _rate_flags(control: float, treatment: float) -> list[str]:
    flags = []
    if treatment == control:
        flags.append("no-lift")
    if treatment < control:
        flags.append("negative-delta")
    if control == 1.0:
        flags.append("control-saturated")
    if treatment == 1.0:
        flags.append("treatment-saturated")
    return flags


def flaky_keys(observations: Iterable[Observation], threshold: float) -> set[tuple[str, str, str]]:
    """``(task, model, variant)`` that both passed and failed across repetitions."""
    outcomes: dict[tuple[str, str, str], set[bool]] = {}
    for obs in observations:
        if obs.status == "completed" and obs.reward is not None:
            key = (obs.task, obs.model, obs.variant)
            outcomes.setdefault(key, set()).add(obs.reward >= threshold)
    return {key for key, seen in outcomes.items() if len(seen) == 2}


@dataclass
class _Pair:
    task: str
    control: Observation
    treatment: Observation
    threshold: float

    @property
    def difference(self) -> int:
        """+1, 0 or -1: treatment pass minus control pass."""
        return self._passed(self.treatment) - self._passed(self.control)

    def _passed(self, obs: Observation) -> int:
        assert obs.reward is not None
        return int(obs.reward >= self.threshold)


def _paired_metrics(pairs: Sequence[_Pair]) -> dict[str, PairedMetric]:
    result = {}
    for name in PAIRED_METRICS:
        both = [
            (c, t)
            for pair in pairs
            if (c := pair.control.metrics.get(name)) is not None
            and (t := pair.treatment.metrics.get(name)) is not None
        ]
        result[name] = PairedMetric(
            pairs=len(both),
            control_mean=statistics.fmean(c for c, _ in both) if both else None,
            treatment_mean=statistics.fmean(t for _, t in both) if both else None,
            mean_delta=statistics.fmean(t - c for c, t in both) if both else None,
        )
    return result


def _task_row(task: str, pairs: Sequence[_Pair], total: int, flaky: bool) -> TaskLift:
    control: float | None
    treatment: float | None
    if pairs:
        control = statistics.fmean(p._passed(p.control) for p in pairs)
        treatment = statistics.fmean(p._passed(p.treatment) for p in pairs)
        flags = _rate_flags(control, treatment)
    else:
        control = treatment = None
        flags = []
    if flaky:
        flags.append("flaky")
    return TaskLift(
        task=task,
        pairs=total,
        eligible=len(pairs),
        blocked=total - len(pairs),
        control_pass_rate=control,
        treatment_pass_rate=treatment,
        delta=None if control is None or treatment is None else treatment - control,
        flags=flags,
    )


def _headline(pairs: Sequence[_Pair], blocked: int, by_task: dict[str, list[_Pair]]) -> Headline:
    if blocked:
        return Headline(published=False, reason="withheld because pairs are blocked")
    if not pairs:
        return Headline(published=False, reason="unavailable: no eligible pair")
    control = statistics.fmean(p._passed(p.control) for p in pairs)
    treatment = statistics.fmean(p._passed(p.treatment) for p in pairs)
    per_task = [
        statistics.fmean(p.difference for p in task_pairs) for task_pairs in by_task.values()
    ]
    rewards = [(p.treatment.reward or 0.0) - (p.control.reward or 0.0) for p in pairs]
    return Headline(
        published=True,
        control_pass_rate=control,
        treatment_pass_rate=treatment,
        lift=treatment - control,
        ci=bootstrap_ci(per_task, level=CI_LEVEL),
        mean_reward_delta=statistics.fmean(rewards),
    )


def compare(
    observations: Sequence[Observation],
    *,
    control: str,
    treatment: str,
    keys: Iterable[tuple[str, str, int]],
    threshold: float,
) -> Comparison:
    """Pair ``treatment`` with ``control`` over every planned (task, model, repetition).

    Args:
        observations: Every observation of the experiment.
        control: The control variant.
        treatment: The treatment variant.
        keys: Every planned (task, model, repetition), whether observed or not.
        threshold: Reward at or above which an arm passed.
    """
    found: dict[tuple[str, str, int, str], list[Observation]] = {}
    for obs in observations:
        found.setdefault((obs.task, obs.model, obs.repetition, obs.variant), []).append(obs)
    pairs: list[_Pair] = []
    blocked: list[BlockedPair] = []
    totals: dict[str, int] = {}
    for task, model, repetition in sorted(set(keys)):
        totals[task] = totals.get(task, 0) + 1
        sides = {v: found.get((task, model, repetition, v), []) for v in (control, treatment)}
        reasons = [r for v, obs in sides.items() if (r := _side_problem(v, obs)) is not None]
        if reasons:
            blocked.append(
                BlockedPair(task=task, model=model, repetition=repetition, reasons=reasons)
            )
        else:
            pairs.append(_Pair(task, sides[control][0], sides[treatment][0], threshold))
    by_task: dict[str, list[_Pair]] = {task: [] for task in totals}
    for pair in pairs:
        by_task[pair.task].append(pair)
    flaky = flaky_keys((o for o in observations if o.variant in (control, treatment)), threshold)
    flaky_tasks = {task for task, _model, _variant in flaky}
    headline = _headline(pairs, len(blocked), by_task)
    flags = []
    if headline.published:
        assert headline.control_pass_rate is not None and headline.treatment_pass_rate is not None
        flags = _rate_flags(headline.control_pass_rate, headline.treatment_pass_rate)
    if flaky:
        flags.append("flaky")
    return Comparison(
        control=control,
        treatment=treatment,
        total_pairs=len(pairs) + len(blocked),
        eligible_pairs=len(pairs),
        blocked_pairs=len(blocked),
        headline=headline,
        flags=flags,
        tasks=[
            _task_row(task, by_task[task], totals[task], task in flaky_tasks) for task in totals
        ],
        paired_metrics=_paired_metrics(pairs),
        blocked=blocked,
    )
