"""Trials summaries and experiment reports on the report's comparison page.

Registered under the entry-point group ``harness.report.comparisons`` (docs/report.md).
For the runs of a report, it looks at each run's parent dir:

- a trials parent (``trials_summary.json`` beside the runs): one comparison whose sides are
  the runs, per task each run's figures, the per-run metrics, and ``notes`` with every
  metric's spread (``mean ± stdev``, n) and how to read it;
- an experiment's ``runs/`` (``experiment_report.json`` one level up): one comparison per
  treatment, control and treatment as sides (each aggregated over its repetitions), the
  pass-rate lift with its CI as the paired delta (withheld when pairs are blocked), flags,
  and the blocked pairs with their reasons in ``notes``.

``harness report <trials parent or experiment dir>`` takes every run dir below the dir.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.experiments.experiment import REPORT_JSON, RUNS_DIRNAME
from harness.experiments.pairing import Comparison as Paired
from harness.experiments.report import ExperimentReport
from harness.experiments.stats import Stats
from harness.experiments.text import READING_THE_SPREAD, number
from harness.experiments.trials import SUMMARY_FILENAME, TrialsSummary
from harness.records import TrialRecord
from harness.report.compare import Comparison, ComparisonRow, side_stats
from harness.report.rundata import RunData

__all__ = ["experiment_comparisons"]

_TRIAL_METRICS = (
    ("mean_reward", "mean reward", "number"),
    ("success_rate", "success rate", "percent"),
    ("pass_at_1", "pass@1", "percent"),
    ("graded_mean_reward", "mean reward (graded only)", "number"),
    ("median_trial_duration_s", "median trial duration (s)", "seconds"),
    ("tokens", "tokens", "count"),
    ("cost_usd", "cost (USD)", "usd"),
)


def _by_task(records: Sequence[TrialRecord]) -> dict[str, list[TrialRecord]]:
    grouped: dict[str, list[TrialRecord]] = {}
    for record in records:
        grouped.setdefault(record.task.key, []).append(record)
    return grouped


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _spread_note(name: str, stats: Stats) -> str:
    if stats.n == 0:
        return f"{name}: not measured"
    stdev = "-" if stats.stdev is None else number(stats.stdev)
    return (
        f"{name}: mean {number(stats.mean)} ± stdev {stdev} (n={stats.n}, "
        f"min {number(stats.min)}, max {number(stats.max)})"
    )


def _trials(summary: TrialsSummary, runs: list[tuple[int, RunData]]) -> Comparison:
    threshold = summary.threshold if summary.threshold is not None else 1.0
    tasks = sorted({r.task.key for _, run in runs for r in run.records})
    per_run = [_by_task(run.records) for _, run in runs]
    rows = []
    for key in tasks:
        sides = [side_stats(g[key], threshold) if key in g else None for g in per_run]
        means = [s.mean for s in sides if s is not None and s.mean is not None]
        first, last = sides[0], sides[-1]
        delta = None
        if (
            first is not None
            and last is not None
            and first.mean is not None
            and last.mean is not None
        ):
            delta = last.mean - first.mean
        flags = ["varies across runs"] if len(set(means)) > 1 else []
        rows.append(
            ComparisonRow(key=key, sides=sides, delta=delta, blocked=delta is None, flags=flags)
        )
    rows_by_name = {row.name: row.model_dump() for row in summary.runs}
    metrics = []
    for field, label, fmt in _TRIAL_METRICS:
        values = [rows_by_name.get(run.name, {}).get(field) for _, run in runs]
        first_value, last_value = values[0], values[-1]
        metric_delta = None
        if isinstance(first_value, int | float) and isinstance(last_value, int | float):
            metric_delta = last_value - first_value
        metrics.append({"name": label, "values": values, "delta": metric_delta, "format": fmt})
    notes = [
        _spread_note(label, summary.metrics[field])
        for field, label, _ in _TRIAL_METRICS
        if field in summary.metrics  # a schema-1 summary has no graded_* metric
    ]
    notes.append(_spread_note("failed trials per run", summary.counts["failed"]))
    notes += [f"warning: {w}" for w in summary.warnings]
    if len(runs) < summary.n_trials:
        notes.append(f"{len(runs)} of the summary's {summary.n_trials} runs are in this report")
    notes.append(READING_THE_SPREAD)
    model = summary.model or "no model"
    return Comparison.model_validate(
        dict(
            kind="trials",
            title=f"{summary.n_trials} trials of {model} ({summary.agent}): spread",
            sides=[run.name for _, run in runs],
            run_index=[index for index, _ in runs],
            metrics=metrics,
            rows=rows,
            summary=_summary(rows, None),
            notes=notes,
        )
    )


def _mean_delta(deltas: Sequence[float], headline: Any) -> float | None:
    """The lift for an experiment (None when withheld), else the mean per-task delta."""
    if headline is not None:
        return headline.lift if headline.published else None
    return statistics.fmean(deltas) if deltas else None


def _summary(rows: Sequence[ComparisonRow], headline: Any) -> dict[str, Any]:
    """The comparison page's paired figures (the lift and its CI for an experiment)."""
    deltas = [row.delta for row in rows if row.delta is not None]
    published = headline is not None and headline.published
    return {
        "paired": len(deltas),
        "blocked": sum(1 for row in rows if row.blocked),
        "improved": sum(1 for d in deltas if d > 0),
        "regressed": sum(1 for d in deltas if d < 0),
        "unchanged": sum(1 for d in deltas if d == 0),
        "mean_delta": _mean_delta(deltas, headline),
        "delta_spread": statistics.stdev(deltas) if len(deltas) >= 2 else None,
        "ci": list(headline.ci) if published and headline.ci is not None else None,
        "ci_level": 0.95,
    }


_PAIRED_FIGURES = (
    ("total_tokens", "tokens per trial", "count"),
    ("calls", "model calls per trial", "count"),
    ("duration_s", "trial duration (s)", "seconds"),
    ("cost_usd", "cost per trial (USD)", "usd"),
)


def _arm_rows(
    report: ExperimentReport, paired: Paired, runs: list[tuple[int, RunData]]
) -> tuple[list[ComparisonRow], list[int | None]]:
    """Per task: each side over its repetitions; and each side's first run in the report."""
    variant_of = {r["run_name"]: r["variant"] for r in report.runs}
    sides: dict[str, list[TrialRecord]] = {paired.control: [], paired.treatment: []}
    first_index: dict[str, int] = {}
    for index, run in runs:
        variant = variant_of.get(run.name)
        if variant in sides:
            sides[variant] += run.records
            first_index.setdefault(variant, index)
    grouped = {variant: _by_task(records) for variant, records in sides.items()}
    rows = []
    for task in paired.tasks:
        stats = [
            side_stats(grouped[v][task.task], report.threshold) if task.task in grouped[v] else None
            for v in (paired.control, paired.treatment)
        ]
        reasons = [
            f"run {b.repetition}: {'; '.join(b.reasons)}"
            for b in paired.blocked
            if b.task == task.task
        ]
        rows.append(
            ComparisonRow(
                key=task.task,
                sides=stats,
                delta=task.delta,
                blocked=task.blocked > 0,
                flags=[*task.flags, *reasons],
            )
        )
    return rows, [first_index.get(paired.control), first_index.get(paired.treatment)]


def _arm_metrics(paired: Paired) -> list[dict[str, Any]]:
    """The pass rate with the lift as its delta, then the paired operational figures."""
    h = paired.headline
    metrics: list[dict[str, Any]] = [
        {
            "name": "pass rate",
            "values": [h.control_pass_rate, h.treatment_pass_rate],
            "delta": h.lift,
            "format": "percent",
        }
    ]
    for name, label, fmt in _PAIRED_FIGURES:
        m = paired.paired_metrics[name]
        values = [m.control_mean, m.treatment_mean]
        metrics.append({"name": label, "values": values, "delta": m.mean_delta, "format": fmt})
    return metrics


def _experiment(
    report: ExperimentReport, paired: Paired, runs: list[tuple[int, RunData]]
) -> Comparison:
    rows, run_index = _arm_rows(report, paired, runs)
    h = paired.headline
    notes = [
        f"pairs: {paired.eligible_pairs}/{paired.total_pairs} eligible",
        "headline: "
        + ("published" if h.published else str(h.reason))
        + (f"; lift {h.lift:+.4f}" if h.lift is not None else ""),
        f"flags: {', '.join(paired.flags) or 'none'}",
        *report.notes,
    ]
    notes += [
        f"blocked: {b.task}/{b.model}/run-{b.repetition}: {'; '.join(b.reasons)}"
        for b in paired.blocked
    ]
    summary = _summary(rows, h)
    summary.update(paired=paired.eligible_pairs, blocked=paired.blocked_pairs)
    return Comparison.model_validate(
        dict(
            kind="experiment",
            title=f"experiment {report.name}: {paired.treatment} vs {paired.control}",
            sides=[paired.control, paired.treatment],
            run_index=run_index,
            metrics=_arm_metrics(paired),
            rows=rows,
            summary=summary,
            notes=notes,
            flags=paired.flags,
            headline=h.model_dump(mode="json"),
        )
    )


def experiment_comparisons(runs: Sequence[RunData]) -> list[Comparison]:
    """The comparisons of the trials parents and experiments the report's runs belong to."""
    by_parent: dict[Path, list[tuple[int, RunData]]] = {}
    for index, run in enumerate(runs):
        by_parent.setdefault(Path(run.run_dir).absolute().parent, []).append((index, run))
    made: list[Comparison] = []
    for parent, members in by_parent.items():
        trials = _read(parent / SUMMARY_FILENAME)
        if trials is not None:
            try:
                made.append(_trials(TrialsSummary.model_validate(trials), members))
            except ValueError:
                pass  # not a summary this version reads: the runs still show on their own
        report = _read(parent.parent / REPORT_JSON) if parent.name == RUNS_DIRNAME else None
        if report is not None:
            try:
                parsed = ExperimentReport.model_validate(report)
            except ValueError:
                continue
            made += [_experiment(parsed, paired, members) for paired in parsed.comparisons]
    return made
