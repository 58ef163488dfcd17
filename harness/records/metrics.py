"""Run metrics: pass@k, pass^k, bootstrap intervals and the run summary (``summary.json``).

Stdlib only; ``summary.json`` is described in docs/run-dir.md. Conventions:

* Only the latest record per trial id counts (a retried trial supersedes its earlier tries).
* A trial is *graded* when its reward is a finite number; a success when reward ≥ threshold.
* The headline figures (``mean_reward``, ``success_rate``, ``pass_at_k``, ``pass_hat_k`` and
  their intervals) count every trial of the plan: an ungraded trial (any error status, a
  non-finite reward) and a planned trial without a record count as reward 0, a failure. An
  agent that makes its failures ungraded (by breaking the verifier, say) so never raises
  them. Without a plan, the recorded trials are the denominator.
* The graded-only figures stay beside them (``graded_only``), with what was ungraded and
  why (``ungraded``: counts by status and by first error type).
* pass@k / pass^k are computed per task from its planned trials (its recorded ones when the
  plan per task is unknown) and averaged over the tasks, for every k up to the smallest
  per-task count.
* Confidence intervals resample *tasks* (trials of one task are correlated); all metrics
  share each resample's draw, and when few distinct per-task rows exist the draw is an
  exact multinomial over them (O(distinct) instead of O(tasks) per resample).
* Missing telemetry is never counted as 0: usage totals say how many trials measured it.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness.records.model import (
    TrialRecord,
    TrialStatus,
    latest_by_id,
    tampered_verdict,
    verdict_with_agent_processes,
)

__all__ = [
    "SUMMARY_VERSION",
    "UNRECORDED",
    "USAGE_FIELDS",
    "DurationSummary",
    "GradedOnly",
    "Summary",
    "TaskSummary",
    "Ungraded",
    "UsageTotal",
    "bootstrap_ci",
    "bootstrap_cis",
    "pass_at_k",
    "pass_hat_k",
    "summarize",
    "trial_duration",
]

USAGE_FIELDS: tuple[str, ...] = (
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "cost_usd",
    "calls",
)
"""The :class:`~harness.records.Usage` fields totalled in :attr:`Summary.usage`."""
SUMMARY_VERSION = 2
"""``summary.json``'s ``summary_version``: 2 since the headline counts every planned trial
(a summary without the key is version 1, whose headline counted graded trials only)."""
UNRECORDED = "unrecorded"
"""The :attr:`Ungraded.by_status` key of planned trials without a record."""


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


def _binomial(trials: int, p: float, rng: random.Random) -> int:
    """An exact Binomial(trials, p) draw.

    Devroye's geometric method (O(trials * p)) when ``trials * p < 10``, else Hörmann's
    BTRS transformed rejection with squeeze (W. Hörmann, "The generation of binomial random
    variates", 1993) — the algorithms behind Python 3.12's ``random.binomialvariate``.
    """
    if trials <= 0 or p <= 0.0:
        return 0
    if p >= 1.0:
        return trials
    if p > 0.5:
        return trials - _binomial(trials, 1.0 - p, rng)
    draw = rng.random
    if trials * p < 10.0:
        count = position = 0
        step = math.log2(1.0 - p)
        while True:
            position += math.floor(math.log2(1.0 - draw()) / step) + 1
            if position > trials:
                return count
            count += 1
    spq = math.sqrt(trials * p * (1.0 - p))
    b = 1.15 + 2.53 * spq
    a = -0.0873 + 0.0248 * b + 0.01 * p
    c = trials * p + 0.5
    vr = 0.92 - 4.2 / b
    alpha = (2.83 + 5.1 / b) * spq
    lpq = math.log(p / (1.0 - p))
    mode = math.floor((trials + 1) * p)
    h = math.lgamma(mode + 1) + math.lgamma(trials - mode + 1)
    while True:
        u = draw() - 0.5
        us = 0.5 - abs(u)
        k = math.floor((2.0 * a / us + b) * u + c)
        if k < 0 or k > trials:
            continue
        v = draw()
        if us >= 0.07 and v <= vr:
            return k
        v *= alpha / (a / (us * us) + b)
        if v > 0.0 and math.log(v) <= (
            h - math.lgamma(k + 1) - math.lgamma(trials - k + 1) + (k - mode) * lpq
        ):
            return k


def _multinomial(trials: int, weights: Sequence[int], rng: random.Random) -> list[int]:
    """Counts of ``trials`` draws over categories with integer ``weights``.

    Conditional binomials: each category takes a Binomial of what the previous ones left.
    """
    counts = []
    left_trials, left_weight = trials, sum(weights)
    for weight in weights[:-1]:
        count = _binomial(left_trials, weight / left_weight, rng) if left_weight else 0
        counts.append(count)
        left_trials -= count
        left_weight -= weight
    counts.append(left_trials)
    return counts


def bootstrap_cis(
    columns: Mapping[str, Sequence[float]],
    *,
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> dict[str, tuple[float, float] | None]:
    """Percentile-bootstrap confidence intervals for the means of several per-task columns.

    Every column holds one value per task, in the same task order; each resample draws
    tasks with replacement once and averages every column over the same draw (a cluster
    bootstrap: trials of one task are correlated, so the task is the unit). Sharing the
    draws keeps the intervals of related metrics consistent and halves the cost.
    Deterministic for a given ``seed``.

    Args:
        columns: Name → per-task values (all of the same length).
        level: Confidence level, in (0, 1).
        resamples: Number of bootstrap resamples (>= 1).
        seed: Seed for ``random.Random``.

    Returns:
        Name → ``(low, high)``, or None for every column when there are fewer than 2 tasks.

    Raises:
        ValueError: If ``level`` is not in (0, 1), ``resamples < 1``, or the columns differ
            in length.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    data = {name: [float(v) for v in values] for name, values in columns.items()}
    sizes = {len(values) for values in data.values()}
    if len(sizes) > 1:
        raise ValueError(f"columns differ in length: {sorted(sizes)}")
    size = sizes.pop() if sizes else 0
    if size < 2:
        return {name: None for name in data}
    rng = random.Random(seed)
    names = list(data)
    means: dict[str, list[float]] = {name: [] for name in names}
    # Tasks with equal values in every column are interchangeable: a resample only needs
    # how many times each distinct row was drawn, a multinomial over the distinct rows.
    rows: dict[tuple[float, ...], int] = {}
    for row in zip(*(data[name] for name in names), strict=True):
        rows[row] = rows.get(row, 0) + 1
    if len(rows) * 16 <= size:
        distinct = list(rows)
        weights = list(rows.values())
        columns_of = [[row[i] for row in distinct] for i in range(len(names))]
        for _ in range(resamples):
            counts = _multinomial(size, weights, rng)
            for name, column in zip(names, columns_of, strict=True):
                means[name].append(math.fsum(map(float.__mul__, column, counts)) / size)
    else:
        tasks = range(size)
        getters = [(name, data[name].__getitem__) for name in names]
        for _ in range(resamples):
            draw = rng.choices(tasks, k=size)
            for name, get in getters:
                means[name].append(math.fsum(map(get, draw)) / size)
    alpha = 1.0 - level
    result: dict[str, tuple[float, float] | None] = {}
    for name, values in means.items():
        values.sort()
        result[name] = (_percentile(values, alpha / 2), _percentile(values, 1.0 - alpha / 2))
    return result


def bootstrap_ci(
    per_task_values: Sequence[float],
    *,
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float] | None:
    """Percentile-bootstrap confidence interval for the mean of per-task values.

    See :func:`bootstrap_cis` (this is its one-column form).

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
    return bootstrap_cis({"mean": per_task_values}, level=level, resamples=resamples, seed=seed)[
        "mean"
    ]


# --------------------------------------------------------------------------------------------
# Summary
# --------------------------------------------------------------------------------------------


class TaskSummary(BaseModel):
    """Per-task figures.

    Attributes:
        trials: Trials of the task (latest record per id).
        graded: Trials with a reward.
        mean_reward: Mean reward over the task's planned trials (its recorded ones when
            the plan per task is unknown), an ungraded trial counting 0 (None if none).
        variance: Sample variance (n-1) of those rewards (None with fewer than 2).
        successes: Graded trials with reward ≥ threshold.
        planned: Trials of the task in the plan (None when unknown).
        ungraded: Trials of the task counted 0: recorded without a reward, or planned
            without a record.
        graded_mean_reward: Mean reward over the task's graded trials only (None if none).
    """

    model_config = ConfigDict(extra="allow")

    trials: int
    graded: int
    mean_reward: float | None
    variance: float | None
    successes: int
    planned: int | None = None
    ungraded: int = 0
    graded_mean_reward: float | None = None


class GradedOnly(BaseModel):
    """The figures over the graded trials alone: secondary, never the headline.

    An agent that makes its failures ungraded raises these; :class:`Summary`'s headline
    counts them as failures.

    Attributes:
        n: Graded trials.
        tasks: Tasks with at least one graded trial.
        mean_reward: Mean reward over the graded trials (None if none).
        success_rate: Successes over the graded trials (None if none).
        pass_at_k: ``str(k)`` → pass@k from each task's graded trials, averaged over the
            tasks with any.
        pass_hat_k: ``str(k)`` → pass^k likewise.
        ci: Bootstrap intervals over those tasks, keys ``mean_reward`` and ``success_rate``.
    """

    model_config = ConfigDict(extra="allow")

    n: int = 0
    tasks: int = 0
    mean_reward: float | None = None
    success_rate: float | None = None
    pass_at_k: dict[str, float] = Field(default_factory=dict)
    pass_hat_k: dict[str, float] = Field(default_factory=dict)
    ci: dict[str, tuple[float, float] | None] = Field(default_factory=dict)


class Ungraded(BaseModel):
    """The trials the headline counts as reward 0 because they have none, and why.

    Attributes:
        trials: How many: recorded without a finite reward, plus planned without a record.
        by_status: Status → count; planned trials without a record under ``unrecorded``.
        by_error: The first error's ``type`` → count, over the recorded ones with an error.
    """

    model_config = ConfigDict(extra="allow")

    trials: int = 0
    by_status: dict[str, int] = Field(default_factory=dict)
    by_error: dict[str, int] = Field(default_factory=dict)


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
        mean_reward: The headline: the rewards' sum over every planned trial (the recorded
            ones without a plan), an ungraded or unrecorded trial counting 0 (None if none).
        success_rate: Successes over the same trials (None if none).
        pass_at_k: ``str(k)`` → pass@k per task over its planned trials, an ungraded one a
            failure, averaged over :attr:`pass_k_tasks` tasks.
        pass_hat_k: ``str(k)`` → pass^k averaged likewise.
        pass_k_tasks: Number of tasks the pass@k / pass^k averages are over.
        per_task: Task key → :class:`TaskSummary`.
        ci: Metric → bootstrap interval over tasks ``[low, high]`` of the per-task headline
            means (None with < 2 tasks); keys ``mean_reward`` and ``success_rate``.
        ci_level: Confidence level of :attr:`ci`.
        usage: Usage field → :class:`UsageTotal` (see :data:`USAGE_FIELDS`).
        duration_sec: Trial durations.
        planned: Trials the run planned (None when the plan is unknown).
        recorded: Planned trials with a record (with ``planned``).
        unrecorded: Planned trials without any record: never run, or lost (with
            ``planned``).
        mean_reward_planned: :attr:`mean_reward`, kept under its version-1 name (with
            ``planned`` > 0).
        success_rate_planned: :attr:`success_rate` likewise.
        summary_version: :data:`SUMMARY_VERSION`.
        graded_only: The figures over graded trials alone (:class:`GradedOnly`).
        ungraded: The trials counted 0 and why (:class:`Ungraded`).

    Where an agent rewrote what a verifier runs (``tampering`` events, docs/grading.md), an
    extra ``tampering`` key counts ``trials``, ``events`` and ``verdicts`` (graded trials
    whose verifier ran in the agent's container after it: ``tampered_verdict``).
    Where verdicts were taken beside services the agent left running (``agent_services =
    keep``), an extra ``agent_services`` key counts them: ``verdicts`` (graded trials with
    a non-empty ``agent_processes_alive``).
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
    planned: int | None = None
    recorded: int | None = None
    unrecorded: int | None = None
    mean_reward_planned: float | None = None
    success_rate_planned: float | None = None
    summary_version: int = SUMMARY_VERSION
    graded_only: GradedOnly = Field(default_factory=GradedOnly)
    ungraded: Ungraded = Field(default_factory=Ungraded)


def _variance(values: Sequence[float], mean: float, zeros: int = 0) -> float:
    """Sample variance (n - 1) of ``values`` and ``zeros`` more 0s around a known mean.

    Exact summation, no Fractions.
    """
    squares = [(v - mean) ** 2 for v in values]
    squares.append(zeros * mean * mean)
    return math.fsum(squares) / (len(values) + zeros - 1)


def _graded_reward(record: TrialRecord) -> float | None:
    """The record's reward if it counts as graded (a finite number), else None."""
    reward = record.reward
    if reward is None or not math.isfinite(reward):
        return None
    return reward


def trial_duration(record: TrialRecord) -> float:
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


def _pass_k(
    counts: Sequence[tuple[int, int]], most: int
) -> tuple[dict[str, float], dict[str, float]]:
    """pass@k and pass^k averaged over per-task ``(n, c)``.

    For every k up to the smallest n and at most ``most`` (the most trials a task
    recorded: a forged plan of a billion trials per task costs no more than the records).
    """
    pass_at: dict[str, float] = {}
    pass_hat: dict[str, float] = {}
    if counts:
        for k in range(1, min(min(n for n, _ in counts), most) + 1):
            pass_at[str(k)] = statistics.fmean(pass_at_k(n, c, k) for n, c in counts)
            pass_hat[str(k)] = statistics.fmean(pass_hat_k(n, c, k) for n, c in counts)
    return pass_at, pass_hat


def _ungraded(records: Sequence[TrialRecord], unrecorded: int) -> Ungraded:
    """The trials without a finite reward by status and first error, plus ``unrecorded``."""
    by_status: dict[str, int] = {}
    by_error: dict[str, int] = {}
    count = 0
    for record in records:
        if _graded_reward(record) is not None:
            continue
        count += 1
        status = str(record.status)
        by_status[status] = by_status.get(status, 0) + 1
        if record.errors:
            kind = record.errors[0].type
            by_error[kind] = by_error.get(kind, 0) + 1
    if unrecorded > 0:
        by_status[UNRECORDED] = unrecorded
    return Ungraded(trials=count + max(unrecorded, 0), by_status=by_status, by_error=by_error)


def summarize(
    records: Sequence[TrialRecord],
    *,
    threshold: float = 1.0,
    ci_level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    planned: int | None = None,
    planned_tasks: Mapping[str, int] | None = None,
) -> Summary:
    """Compute the run metrics (docs/run-dir.md, ``summary.json``).

    The headline counts every planned trial, one without a reward as 0 (see the module's
    docstring); the graded-only figures are in ``graded_only``.

    Args:
        records: Trial records in file order; only the latest record per id counts.
        threshold: A graded trial is a success when its reward ≥ threshold.
        ci_level: Confidence level of the bootstrap intervals.
        resamples: Bootstrap resamples.
        seed: Bootstrap seed.
        planned: How many trials the run planned (``records`` are of planned trials):
            the headline's denominator (at least the recorded trials).
        planned_tasks: Task key → its planned trials: each task's figures are over its
            plan, and a planned task without any record counts too. Without it, a planned
            trial without a record counts only in the run-wide mean and success rate.

    Returns:
        The summary.

    Raises:
        ValueError: If ``threshold`` is not finite.
    """
    if not math.isfinite(threshold):
        raise ValueError(f"threshold must be finite, got {threshold}")
    latest = list(latest_by_id(records).values())
    if planned is None and planned_tasks is not None:
        planned = sum(planned_tasks.values())

    errors_by_status: dict[str, int] = {}
    for record in latest:
        if record.status is not TrialStatus.COMPLETED:
            key = str(record.status)
            errors_by_status[key] = errors_by_status.get(key, 0) + 1

    by_task: dict[str, list[TrialRecord]] = {key: [] for key in planned_tasks or {}}
    for record in latest:
        by_task.setdefault(record.task.key, []).append(record)

    all_rewards: list[float] = []
    per_task: dict[str, TaskSummary] = {}
    counted = 0  # trials the tasks' figures are over
    task_counts: list[tuple[int, int]] = []  # (trials counted, successes) per task
    task_means: list[float] = []
    task_success_rates: list[float] = []
    graded_counts: list[tuple[int, int]] = []  # (graded, successes) for tasks with graded
    graded_means: list[float] = []
    graded_success_rates: list[float] = []
    for key, task_records in by_task.items():
        rewards = [r for rec in task_records if (r := _graded_reward(rec)) is not None]
        successes = sum(1 for r in rewards if r >= threshold)
        all_rewards.extend(rewards)
        task_planned = None if planned_tasks is None else planned_tasks.get(key, 0)
        n = max(task_planned or 0, len(task_records))
        counted += n
        # Every trial of the task counts: one without a reward (or a record) as 0. The zeros
        # are counted, never listed: a forged summary's plan may be huge.
        zeros = n - len(rewards)
        mean = math.fsum(rewards) / n if n else None
        graded_mean = statistics.fmean(rewards) if rewards else None
        per_task[key] = TaskSummary(
            trials=len(task_records),
            graded=len(rewards),
            mean_reward=mean,
            variance=_variance(rewards, mean, zeros) if n >= 2 and mean is not None else None,
            successes=successes,
            planned=task_planned,
            ungraded=n - len(rewards),
            graded_mean_reward=graded_mean,
        )
        if n and mean is not None:
            task_counts.append((n, successes))
            task_means.append(mean)
            task_success_rates.append(successes / n)
        if rewards and graded_mean is not None:
            graded_counts.append((len(rewards), successes))
            graded_means.append(graded_mean)
            graded_success_rates.append(successes / len(rewards))

    graded = len(all_rewards)
    succeeded = sum(1 for r in all_rewards if r >= threshold)
    total = max(planned or 0, counted)
    most = max((len(task_records) for task_records in by_task.values()), default=0)
    pass_at, pass_hat = _pass_k(task_counts, most)
    intervals = bootstrap_cis(
        {"mean_reward": task_means, "success_rate": task_success_rates},
        level=ci_level,
        resamples=resamples,
        seed=seed,
    )
    graded_pass_at, graded_pass_hat = _pass_k(graded_counts, most)
    graded_only = GradedOnly(
        n=graded,
        tasks=len(graded_counts),
        mean_reward=statistics.fmean(all_rewards) if all_rewards else None,
        success_rate=succeeded / graded if graded else None,
        pass_at_k=graded_pass_at,
        pass_hat_k=graded_pass_hat,
        ci=bootstrap_cis(
            {"mean_reward": graded_means, "success_rate": graded_success_rates},
            level=ci_level,
            resamples=resamples,
            seed=seed,
        ),
    )
    mean_reward = math.fsum(all_rewards) / total if total else None
    success_rate = succeeded / total if total else None

    durations = [trial_duration(r) for r in latest]
    over_plan: dict[str, Any] = {}
    tampering = [
        sum(1 for e in r.events if e.get("type") == "tampering" and e.get("path")) for r in latest
    ]
    verdicts = sum(1 for r in latest if tampered_verdict(r))
    if any(tampering) or verdicts:
        # Only where it happened: a root agent rewrote what a shared verifier runs.
        over_plan["tampering"] = {
            "trials": sum(1 for n in tampering if n),
            "events": sum(tampering),
            "verdicts": verdicts,
        }
    alive = sum(1 for r in latest if verdict_with_agent_processes(r))
    if alive:
        over_plan["agent_services"] = {"verdicts": alive}
    if planned is not None:
        recorded = len(latest)
        over_plan.update({"planned": planned, "recorded": recorded})
        over_plan["unrecorded"] = max(planned - recorded, 0)
        if planned > 0:  # the headline, under its version-1 names
            over_plan["mean_reward_planned"] = mean_reward
            over_plan["success_rate_planned"] = success_rate
    return Summary(
        trials=len(latest),
        graded=graded,
        ok=sum(1 for r in latest if r.ok),
        tasks=len(by_task),
        errors_by_status=errors_by_status,
        threshold=threshold,
        mean_reward=mean_reward,
        success_rate=success_rate,
        pass_at_k=pass_at,
        pass_hat_k=pass_hat,
        pass_k_tasks=len(task_counts),
        per_task=per_task,
        ci=intervals,
        ci_level=ci_level,
        usage={name: _usage_total(latest, name) for name in USAGE_FIELDS},
        duration_sec=DurationSummary(
            total=math.fsum(durations) if durations else None,
            mean=statistics.fmean(durations) if durations else None,
        ),
        graded_only=graded_only,
        ungraded=_ungraded(latest, total - len(latest)),
        **over_plan,
    )
