"""Run metrics (DESIGN.md §8): pass@k, pass^k, bootstrap intervals and the run summary.

Stdlib only. Conventions:

* Only the latest record per trial id counts (a retried trial supersedes its earlier tries).
* A trial is *graded* when its reward is a finite number; a success when reward ≥ threshold.
* pass@k / pass^k are computed per task from its graded trials and averaged over the tasks
  that have at least one graded trial, for every k up to the smallest per-task count.
* Confidence intervals resample *tasks* (trials of one task are correlated).
* Missing telemetry is never counted as 0: usage totals say how many trials measured it.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness.records import TrialRecord, TrialStatus, latest_by_id

__all__ = [
    "USAGE_FIELDS",
    "DurationSummary",
    "Summary",
    "TaskSummary",
    "UsageTotal",
    "bootstrap_ci",
    "pass_at_k",
    "pass_hat_k",
    "summarize",
]

USAGE_FIELDS: tuple[str, ...] = (
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "cost_usd",
    "calls",
)
"""The :class:`~harness.records.Usage` fields totalled in :attr:`Summary.usage`."""


def _check_counts(n: int, c: int, k: int) -> None:
    """Validate the arguments shared by :func:`pass_at_k` and :func:`pass_hat_k`."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got n={n}")
    if not 0 <= c <= n:
        raise ValueError(f"c must be in [0, n], got c={c}, n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, n], got k={k}, n={n}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k: the chance that at least one of k draws (without replacement) passes.

    Computes ``1 - C(n-c, k) / C(n, k)`` in the numerically stable product form
    ``1 - prod_{i=n-c+1..n} (1 - k/i)`` (Chen et al., 2021).

    Args:
        n: Number of graded trials.
        c: Number of successful trials among them.
        k: Number of draws.

    Returns:
        The estimate in [0, 1]; exactly 1.0 when ``n - c < k``.

    Raises:
        ValueError: If ``k < 1``, ``k > n``, or ``c`` is not in ``[0, n]``.
    """
    _check_counts(n, c, k)
    if n - c < k:
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k: the chance that all of k draws (without replacement) pass.

    Computes ``C(c, k) / C(n, k)`` as ``prod_{i=0..k-1} (c-i)/(n-i)``.

    Args:
        n: Number of graded trials.
        c: Number of successful trials among them.
        k: Number of draws.

    Returns:
        The estimate in [0, 1]; exactly 0.0 when ``c < k``.

    Raises:
        ValueError: If ``k < 1``, ``k > n``, or ``c`` is not in ``[0, n]``.
    """
    _check_counts(n, c, k)
    if c < k:
        return 0.0
    product = 1.0
    for i in range(k):
        product *= (c - i) / (n - i)
    return product


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in [0, 1]) of already-sorted values."""
    position = q * (len(sorted_values) - 1)
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    fraction = position - low
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * fraction


def bootstrap_ci(
    per_task_values: Sequence[float],
    *,
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float] | None:
    """Percentile-bootstrap confidence interval for the mean of per-task values.

    Resamples tasks with replacement (a cluster bootstrap: several trials of one task are
    correlated, so the task is the unit). Deterministic for a given ``seed``.

    Args:
        per_task_values: One value per task (e.g. the task's mean reward).
        level: Confidence level, in (0, 1).
        resamples: Number of bootstrap resamples (>= 1).
        seed: Seed for ``random.Random``.

    Returns:
        ``(low, high)``, or None when there are fewer than 2 tasks.

    Raises:
        ValueError: If ``level`` is not in (0, 1) or ``resamples < 1``.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    values = [float(v) for v in per_task_values]
    if len(values) < 2:
        return None
    rng = random.Random(seed)
    size = len(values)
    means = sorted(math.fsum(rng.choices(values, k=size)) / size for _ in range(resamples))
    alpha = 1.0 - level
    return _percentile(means, alpha / 2), _percentile(means, 1.0 - alpha / 2)


# --------------------------------------------------------------------------------------------
# Summary
# --------------------------------------------------------------------------------------------


class TaskSummary(BaseModel):
    """Per-task figures.

    Attributes:
        trials: Trials of the task (latest record per id).
        graded: Trials with a reward.
        mean_reward: Mean reward over graded trials (None if none).
        variance: Sample variance (n-1) of the rewards (None with fewer than 2 graded).
        successes: Graded trials with reward ≥ threshold.
    """

    model_config = ConfigDict(extra="allow")

    trials: int
    graded: int
    mean_reward: float | None
    variance: float | None
    successes: int


class UsageTotal(BaseModel):
    """A usage total that is honest about missing telemetry.

    Attributes:
        total: Sum over the trials that measured it; None if no trial did.
        measured: Number of trials that measured it.
        of: Number of trials.
    """

    model_config = ConfigDict(extra="allow")

    total: int | float | None
    measured: int
    of: int


class DurationSummary(BaseModel):
    """Wall-clock time of the trials.

    Attributes:
        total: Sum of trial durations in seconds (None with no trials).
        mean: Mean trial duration in seconds (None with no trials).
    """

    model_config = ConfigDict(extra="allow")

    total: float | None
    mean: float | None


class Summary(BaseModel):
    """Run metrics, written to ``summary.json`` (``model_dump(mode="json")``).

    Attributes:
        trials: Number of trials (latest record per id).
        graded: Trials with a reward.
        ok: Trials whose record says ``ok``.
        tasks: Number of distinct tasks.
        errors_by_status: Status → count for each non-completed status that occurred.
        threshold: Reward at or above which a trial is a success.
        mean_reward: Mean reward over graded trials (None if none).
        success_rate: Fraction of graded trials that succeeded (None if none).
        pass_at_k: ``str(k)`` → pass@k averaged over tasks with graded trials.
        pass_hat_k: ``str(k)`` → pass^k averaged likewise.
        pass_k_tasks: Number of tasks the pass@k / pass^k averages are over.
        per_task: Task key → :class:`TaskSummary`.
        ci: Metric → bootstrap interval over tasks ``[low, high]`` (None with < 2 tasks);
            keys ``mean_reward`` and ``success_rate``.
        ci_level: Confidence level of :attr:`ci`.
        usage: Usage field → :class:`UsageTotal` (see :data:`USAGE_FIELDS`).
        duration_sec: Trial durations.
    """

    model_config = ConfigDict(extra="allow")

    trials: int
    graded: int
    ok: int
    tasks: int
    errors_by_status: dict[str, int] = Field(default_factory=dict)
    threshold: float
    mean_reward: float | None
    success_rate: float | None
    pass_at_k: dict[str, float] = Field(default_factory=dict)
    pass_hat_k: dict[str, float] = Field(default_factory=dict)
    pass_k_tasks: int = 0
    per_task: dict[str, TaskSummary] = Field(default_factory=dict)
    ci: dict[str, tuple[float, float] | None] = Field(default_factory=dict)
    ci_level: float = 0.95
    usage: dict[str, UsageTotal] = Field(default_factory=dict)
    duration_sec: DurationSummary


def _graded_reward(record: TrialRecord) -> float | None:
    """The record's reward if it counts as graded (a finite number), else None."""
    reward = record.reward
    if reward is None or not math.isfinite(reward):
        return None
    return reward


def _duration(record: TrialRecord) -> float:
    """Trial duration: ``timings["total"]`` if recorded, else finished_at − started_at."""
    total = record.timings.get("total")
    if total is not None and math.isfinite(total):
        return total
    return (record.finished_at - record.started_at).total_seconds()


def _usage_total(records: Sequence[TrialRecord], name: str) -> UsageTotal:
    """Total one usage field over the trials that measured it."""
    measured: list[Any] = [
        value for r in records if (value := getattr(r.usage, name, None)) is not None
    ]
    total: int | float | None = None
    if measured:
        total = math.fsum(measured) if name == "cost_usd" else sum(measured)
    return UsageTotal(total=total, measured=len(measured), of=len(records))


def summarize(
    records: Sequence[TrialRecord],
    *,
    threshold: float = 1.0,
    ci_level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> Summary:
    """Compute the run metrics of DESIGN.md §8.

    Args:
        records: Trial records in file order; only the latest record per id counts.
        threshold: A graded trial is a success when its reward ≥ threshold.
        ci_level: Confidence level of the bootstrap intervals.
        resamples: Bootstrap resamples.
        seed: Bootstrap seed.

    Returns:
        The summary.

    Raises:
        ValueError: If ``threshold`` is not finite.
    """
    if not math.isfinite(threshold):
        raise ValueError(f"threshold must be finite, got {threshold}")
    latest = list(latest_by_id(records).values())

    errors_by_status: dict[str, int] = {}
    for record in latest:
        if record.status is not TrialStatus.COMPLETED:
            key = str(record.status)
            errors_by_status[key] = errors_by_status.get(key, 0) + 1

    by_task: dict[str, list[TrialRecord]] = {}
    for record in latest:
        by_task.setdefault(record.task.key, []).append(record)

    all_rewards: list[float] = []
    per_task: dict[str, TaskSummary] = {}
    task_counts: list[tuple[int, int]] = []  # (graded, successes) for tasks with graded trials
    task_means: list[float] = []
    task_success_rates: list[float] = []
    for key, task_records in by_task.items():
        rewards = [r for rec in task_records if (r := _graded_reward(rec)) is not None]
        successes = sum(1 for r in rewards if r >= threshold)
        all_rewards.extend(rewards)
        mean = statistics.fmean(rewards) if rewards else None
        per_task[key] = TaskSummary(
            trials=len(task_records),
            graded=len(rewards),
            mean_reward=mean,
            variance=statistics.variance(rewards) if len(rewards) >= 2 else None,
            successes=successes,
        )
        if rewards and mean is not None:
            task_counts.append((len(rewards), successes))
            task_means.append(mean)
            task_success_rates.append(successes / len(rewards))

    graded = len(all_rewards)
    pass_at: dict[str, float] = {}
    pass_hat: dict[str, float] = {}
    if task_counts:
        for k in range(1, min(n for n, _ in task_counts) + 1):
            pass_at[str(k)] = statistics.fmean(pass_at_k(n, c, k) for n, c in task_counts)
            pass_hat[str(k)] = statistics.fmean(pass_hat_k(n, c, k) for n, c in task_counts)

    def ci(values: list[float]) -> tuple[float, float] | None:
        return bootstrap_ci(values, level=ci_level, resamples=resamples, seed=seed)

    durations = [_duration(r) for r in latest]
    return Summary(
        trials=len(latest),
        graded=graded,
        ok=sum(1 for r in latest if r.ok),
        tasks=len(by_task),
        errors_by_status=errors_by_status,
        threshold=threshold,
        mean_reward=statistics.fmean(all_rewards) if all_rewards else None,
        success_rate=(sum(1 for r in all_rewards if r >= threshold) / graded if graded else None),
        pass_at_k=pass_at,
        pass_hat_k=pass_hat,
        pass_k_tasks=len(task_counts),
        per_task=per_task,
        ci={"mean_reward": ci(task_means), "success_rate": ci(task_success_rates)},
        ci_level=ci_level,
        usage={name: _usage_total(latest, name) for name in USAGE_FIELDS},
        duration_sec=DurationSummary(
            total=math.fsum(durations) if durations else None,
            mean=statistics.fmean(durations) if durations else None,
        ),
    )
