"""Plain-text renderings of trials summaries and experiment reports.

What ``harness trials`` and ``harness aggregate`` print, and ``experiment_report.txt``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from harness.experiments.pairing import Comparison, PairedMetric
from harness.experiments.stats import Stats
from harness.experiments.trials import TrialsSummary

if TYPE_CHECKING:
    from harness.experiments.report import ExperimentReport

__all__ = ["READING_THE_SPREAD", "experiment_text", "number", "stats_table", "trials_text"]

READING_THE_SPREAD = (
    "How to read the spread: stdev is how much a metric moves between runs of the same "
    "config (noise). Compare it with the change a candidate (a prompt, a tool description, "
    "an agent) makes to the mean: a change much larger than the stdev is a signal; one about "
    "the size of the stdev is noise — run more trials, or treat it as noise. With one run "
    "stdev is null: a single run says nothing about stability. For a with/without change, "
    "`harness experiment` pairs the two sides task by task and gives the lift with a CI."
)
"""The note every trials summary's text ends with."""

_SHOWN_FAILURES = 10


def number(value: float | None) -> str:
    """A figure for a table: 4 decimals, ``-`` when there is none."""
    if value is None:
        return "-"
    if float(value).is_integer() and abs(value) >= 1000:
        return f"{int(value):,}"
    if abs(value) >= 100:
        return f"{value:,.1f}"
    return f"{value:.4f}"


def stats_table(rows: Mapping[str, Stats], title: str) -> list[str]:
    """Lines of a ``name n mean median stdev min max`` table."""
    width = max([len(title), *(len(name) for name in rows)])
    head = f"{title:<{width}}  {'n':>3}" + "".join(
        f"  {column:>9}" for column in ("mean", "median", "stdev", "min", "max")
    )
    lines = [head]
    for name, stats in rows.items():
        figures = (stats.mean, stats.median, stats.stdev, stats.min, stats.max)
        lines.append(
            f"{name:<{width}}  {stats.n:>3}" + "".join(f"  {number(v):>9}" for v in figures)
        )
    return lines


def _failures(summary: TrialsSummary) -> list[str]:
    lines = []
    for row in summary.runs:
        for failure in row.failures[:_SHOWN_FAILURES]:
            reward = "-" if failure.reward is None else f"{failure.reward:g}"
            lines.append(
                f"  run {row.index} {failure.trial_id}: {failure.status} reward={reward} "
                f"({failure.reason[:120]})"
            )
        if len(row.failures) > _SHOWN_FAILURES:
            lines.append(f"  run {row.index}: {len(row.failures) - _SHOWN_FAILURES} more")
    return lines


def _retried(summary: TrialsSummary) -> list[str]:
    """Each retried trial: why it failed before, and whether it fails again."""
    retry = summary.retry_of or {}
    failing = {f.trial_id for row in summary.runs for f in row.failures}
    lines = [f"retried {len(retry.get('trials', []))} failed trial(s) of {retry.get('source')}:"]
    for before in retry.get("trials", []):
        trial_id = before.get("trial_id")
        now = "fails again" if trial_id in failing else "passes now: flaky"
        lines.append(f"  {trial_id}: {now} (before: {str(before.get('reason'))[:100]})")
    return lines


def trials_text(summary: TrialsSummary, *, path: str | None = None) -> str:
    """The summary as text: header, metrics, counts, categories, failures, how to read it."""
    lines = [
        f"=== {summary.n_trials} run(s) · model={summary.model} · agent={summary.agent} · "
        f"harness {summary.harness_version} ===",
        "",
        *stats_table(summary.metrics, "metric"),
        "",
        *stats_table(summary.counts, "count per run"),
    ]
    if summary.category_scores:
        lines += ["", *stats_table(summary.category_scores, "category score")]
    if summary.dataset_metrics:
        lines += ["", *stats_table(summary.dataset_metrics, "dataset metric")]
    failures = _failures(summary)
    if failures:
        lines += ["", "failed trials (errored, ungraded or below the threshold):", *failures]
    if summary.retry_of:
        lines += ["", *_retried(summary)]
    for warning in summary.warnings:
        lines += [f"warning: {warning}"]
    lines += ["", READING_THE_SPREAD]
    if path is not None:
        lines.append(f"wrote {path}")
    return "\n".join(lines) + "\n"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _pp(value: float) -> str:
    return f"{value * 100:+.1f} pp"


def _headline(c: Comparison) -> str:
    h = c.headline
    if not h.published:
        return f"Pass rate: {h.reason}"
    assert h.lift is not None
    line = (
        f"Pass rate: {_pp(h.lift)} ({c.treatment} {_pct(h.treatment_pass_rate)}, "
        f"{c.control} {_pct(h.control_pass_rate)})"
    )
    if h.ci is not None:
        line += f", {h.ci_level:.0%} CI [{_pp(h.ci[0])}, {_pp(h.ci[1])}] (bootstrap over tasks)"
    else:
        line += ", no CI (fewer than 2 tasks)"
    return line


def _metric_line(label: str, m: PairedMetric) -> str:
    if m.pairs == 0:
        return f"{label}: not measured"
    return (
        f"{label}: {number(m.treatment_mean)} vs {number(m.control_mean)} "
        f"(mean delta {number(m.mean_delta)}, {m.pairs} pair(s))"
    )


def _comparison(c: Comparison) -> list[str]:
    lines = [
        f"{c.treatment} vs {c.control}",
        f"  Pairs {c.eligible_pairs}/{c.total_pairs} eligible",
        f"  {_headline(c)}",
        f"  Flags: {', '.join(c.flags) or 'none'}",
    ]
    for name, label in (
        ("total_tokens", "Tokens"),
        ("calls", "Model calls"),
        ("duration_s", "Latency (s)"),
        ("cost_usd", "Est. cost (USD)"),
    ):
        lines.append(f"  {_metric_line(label, c.paired_metrics[name])}")
    lines.append("  Per task (pass rate treatment / control, delta, flags):")
    for task in c.tasks:
        lines.append(
            f"    {task.task}: {_pct(task.treatment_pass_rate)} / {_pct(task.control_pass_rate)}"
            f", {'-' if task.delta is None else _pp(task.delta)}, {task.eligible}/{task.pairs} "
            f"pair(s){', ' + ', '.join(task.flags) if task.flags else ''}"
        )
    return lines


def _total(item: Any) -> str:
    if not isinstance(item, dict) or item.get("total") is None:
        return "not measured"
    total = item["total"]
    shown = f"{int(total):,}" if float(total).is_integer() else number(total)
    return f"{shown} ({item['measured']}/{item['of']} measured)"


def experiment_text(report: ExperimentReport) -> str:
    """The report as text: per comparison the pairs, headline, flags, metrics; totals; blocked."""
    lines = [
        f"Paired experiment {report.name} (control {report.control}, "
        f"{report.runs_per_variant} repetition(s), protocol {report.protocol_digest[:12]})",
        "",
    ]
    for comparison in report.comparisons:
        lines += [*_comparison(comparison), ""]
    lines.append("Operational totals")
    for totals in report.operational_totals:
        lines.append(
            f"  {totals['variant']}: {totals['runs']} run(s), {totals['trials']} trial(s); "
            f"tokens {_total(totals['total_tokens'])}; calls {_total(totals['calls'])}; "
            f"time {_total(totals['duration_s'])} s; cost {_total(totals['cost_usd'])}"
        )
    blocked = [(c, b) for c in report.comparisons for b in c.blocked]
    if blocked:
        lines += ["", "Blocked pairs"]
        for c, b in blocked:
            lines.append(
                f"  {c.treatment}: {b.task}/{b.model}/run-{b.repetition}: {'; '.join(b.reasons)}"
            )
    if report.notes:
        lines += ["", *report.notes]
    return "\n".join(lines) + "\n"
