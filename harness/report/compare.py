"""Comparisons: two or more sides (runs, experiment arms) task by task, in one shape.

A :class:`Comparison` is what the comparison page renders, whatever produced it: the
built-in source pairs the runs of a report (:func:`compare_runs`); an experiment or a
trials summary can produce the same shape and plug in as a *comparison source*, a callable
``(runs: Sequence[RunData]) -> list[Comparison]`` registered under the entry-point group
``harness.report.comparisons`` (see :func:`comparison_sources`).

Per task the page shows each side's mean reward and successes over all its trials of the
task, an ungraded one counting 0 (as ``summary.json``'s headline counts it), the spread
(the sample standard deviation of those rewards), the delta of the last side against the
first, and flags (``nothing graded in <side>``, ``<n> error(s) in <side>``). A pair is
*blocked* (left out of the paired figures) when a side lacks the task or the task's content
hash differs between the sides (they did not run the same task).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from itertools import combinations
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness.records import TrialRecord
from harness.records.metrics import bootstrap_ci
from harness.report.rundata import RunData

__all__ = [
    "ENTRY_POINT_GROUP",
    "Comparison",
    "ComparisonRow",
    "ComparisonSource",
    "SideStats",
    "side_stats",
    "compare_runs",
    "comparison_sources",
    "run_pairs",
]

ENTRY_POINT_GROUP = "harness.report.comparisons"
"""Entry-point group of third-party comparison sources."""

MAX_PAIRS = 15
"""Most run pairs a report compares (all pairs of up to 6 runs)."""


class SideStats(BaseModel):
    """One side's figures for one task.

    Attributes:
        trials: Trials of the task on this side.
        graded: Trials with a reward.
        successes: Graded trials at or above the threshold.
        mean: Mean reward over every trial, an ungraded one counting 0 (None without trials).
        spread: Sample standard deviation of those rewards (None with fewer than 2).
        hash: The task's content hash on this side.
        errors: Trials that did not complete.
        graded_mean: Mean reward over the graded trials only (None when nothing was graded).
    """

    model_config = ConfigDict(extra="allow")

    trials: int = 0
    graded: int = 0
    successes: int = 0
    mean: float | None = None
    spread: float | None = None
    hash: str | None = None
    errors: int = 0
    graded_mean: float | None = None


class ComparisonRow(BaseModel):
    """One task across the sides.

    Attributes:
        key: Task key.
        sides: One :class:`SideStats` per side (None where the side lacks the task).
        delta: Mean of the last side minus mean of the first (None when blocked).
        blocked: Whether the pair is left out of the paired figures.
        flags: Why it is blocked, or what else to look at.
    """

    model_config = ConfigDict(extra="allow")

    key: str
    sides: list[SideStats | None]
    delta: float | None = None
    blocked: bool = False
    flags: list[str] = Field(default_factory=list)


class Comparison(BaseModel):
    """What the comparison page shows.

    Attributes:
        kind: What produced it (``runs``; an experiment or trials summary names itself).
        title: Heading.
        sides: Label of each side.
        run_index: For each side, the index of its run in the report (None when the side
            is not a run of the report), so rows can link to the run's trials.
        metrics: Headline figures: ``{"name", "values": [...], "delta"}``.
        rows: Per-task rows.
        summary: Paired figures: ``paired``, ``blocked``, ``improved``, ``regressed``,
            ``unchanged``, ``mean_delta``, ``delta_spread``, ``ci`` and ``ci_level``.
    """

    model_config = ConfigDict(extra="allow")

    kind: str
    title: str
    sides: list[str]
    run_index: list[int | None] = Field(default_factory=list)
    metrics: list[dict[str, Any]] = Field(default_factory=list)
    rows: list[ComparisonRow] = Field(default_factory=list)
    summary: dict[str, Any] = Field(default_factory=dict)


ComparisonSource = Callable[[Sequence[RunData]], list[Comparison]]
"""Makes comparisons from the runs of a report (may return none)."""


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def side_stats(records: Sequence[TrialRecord], threshold: float) -> SideStats:
    """One side's trials of a task: counts, successes, the mean and spread of the rewards.

    A trial without a finite reward counts 0 in ``mean`` and ``spread``; ``graded_mean`` is
    over the graded ones only.
    """
    rewards = [r for rec in records if (r := _finite(rec.reward)) is not None]
    values = [_finite(rec.reward) or 0.0 for rec in records]
    return SideStats(
        trials=len(records),
        graded=len(rewards),
        successes=sum(1 for r in rewards if r >= threshold),
        mean=statistics.fmean(values) if values else None,
        spread=statistics.stdev(values) if len(values) >= 2 else None,
        hash=records[0].task.hash if records else None,
        errors=sum(1 for rec in records if str(rec.status) != "completed"),
        graded_mean=statistics.fmean(rewards) if rewards else None,
    )


def _by_task(run: RunData) -> dict[str, list[TrialRecord]]:
    grouped: dict[str, list[TrialRecord]] = {}
    for record in run.records:
        grouped.setdefault(record.task.key, []).append(record)
    return grouped


def _row(
    key: str, a: SideStats | None, b: SideStats | None, labels: Sequence[str]
) -> ComparisonRow:
    flags = []
    if a is None:
        flags.append(f"only in {labels[1]}")
    if b is None:
        flags.append(f"only in {labels[0]}")
    if a is not None and b is not None and a.hash != b.hash:
        flags.append("task changed")
    for label, side in zip(labels, (a, b), strict=True):
        if side is not None and side.graded == 0:
            flags.append(f"nothing graded in {label}")
        elif side is not None and side.errors:
            flags.append(f"{side.errors} error(s) in {label}")
    blocked = a is None or b is None or a.mean is None or b.mean is None or "task changed" in flags
    delta = None if blocked or a is None or b is None else (b.mean or 0.0) - (a.mean or 0.0)
    return ComparisonRow(key=key, sides=[a, b], delta=delta, blocked=blocked, flags=flags)


_METRIC_FORMATS = {
    "mean reward": "number",
    "success rate": "percent",
    "pass@1": "percent",
    "trials": "count",
    "errors": "count",
    "tokens": "count",
    "cost (USD)": "usd",
    "mean duration (s)": "seconds",
}
"""How the page formats each headline figure of a run comparison."""


def _metric(name: str, a: Any, b: Any) -> dict[str, Any]:
    delta = None
    if isinstance(a, int | float) and isinstance(b, int | float):
        delta = b - a
    return {"name": name, "values": [a, b], "delta": delta, "format": _METRIC_FORMATS[name]}


def _headline(run: RunData) -> dict[str, Any]:
    summary = run.summary
    usage = summary.get("usage") if isinstance(summary.get("usage"), dict) else {}

    def total(name: str) -> Any:
        item = usage.get(name) if isinstance(usage, dict) else None
        return item.get("total") if isinstance(item, dict) else None

    pass_at = summary.get("pass_at_k") if isinstance(summary.get("pass_at_k"), dict) else {}
    duration = summary.get("duration_sec")
    return {
        "mean reward": summary.get("mean_reward"),
        "success rate": summary.get("success_rate"),
        "pass@1": pass_at.get("1") if isinstance(pass_at, dict) else None,
        "trials": summary.get("trials"),
        "errors": sum(
            v for v in (summary.get("errors_by_status") or {}).values() if isinstance(v, int)
        ),
        "tokens": total("total_tokens"),
        "cost (USD)": total("cost_usd"),
        "mean duration (s)": duration.get("mean") if isinstance(duration, dict) else None,
    }


def compare_runs(a: RunData, b: RunData, *, indices: tuple[int, int] = (0, 1)) -> Comparison:
    """Compare two runs task by task (``b`` against ``a``).

    Args:
        a: The baseline run.
        b: The run compared with it.
        indices: The runs' indices in the report (for links).

    Returns:
        The comparison; its paired figures cover the tasks not blocked.
    """
    labels = [a.name, b.name]
    threshold = float(a.summary.get("threshold", 1.0) or 1.0)
    tasks_a, tasks_b = _by_task(a), _by_task(b)
    rows = []
    for key in list(tasks_a) + [k for k in tasks_b if k not in tasks_a]:
        side_a = side_stats(tasks_a[key], threshold) if key in tasks_a else None
        side_b = side_stats(tasks_b[key], threshold) if key in tasks_b else None
        rows.append(_row(key, side_a, side_b, labels))
    deltas = [row.delta for row in rows if row.delta is not None]
    ci = bootstrap_ci(deltas) if deltas else None
    head_a, head_b = _headline(a), _headline(b)
    return Comparison(
        kind="runs",
        title=f"{b.name} against {a.name}",
        sides=labels,
        run_index=list(indices),
        metrics=[_metric(name, head_a[name], head_b[name]) for name in head_a],
        rows=rows,
        summary={
            "paired": len(deltas),
            "blocked": sum(1 for row in rows if row.blocked),
            "improved": sum(1 for d in deltas if d > 0),
            "regressed": sum(1 for d in deltas if d < 0),
            "unchanged": sum(1 for d in deltas if d == 0),
            "mean_delta": statistics.fmean(deltas) if deltas else None,
            "delta_spread": statistics.stdev(deltas) if len(deltas) >= 2 else None,
            "ci": list(ci) if ci else None,
            "ci_level": 0.95,
        },
    )


def run_pairs(runs: Sequence[RunData]) -> list[Comparison]:
    """The built-in source: every pair of runs of the report, later against earlier."""
    pairs = list(combinations(range(len(runs)), 2))[:MAX_PAIRS]
    return [compare_runs(runs[i], runs[j], indices=(i, j)) for i, j in pairs]


def comparison_sources() -> list[ComparisonSource]:
    """The built-in source, then those registered under :data:`ENTRY_POINT_GROUP`."""
    sources: list[ComparisonSource] = [run_pairs]
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        sources.append(entry.load())
    return sources
