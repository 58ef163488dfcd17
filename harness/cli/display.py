"""Terminal output: the consoles, errors, progress lines, the summary table, task lists."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from harness.records import TrialRecord
from harness.records.metrics import Summary
from harness.runner import RunOutcome
from harness.tasks import Task
from sandbox.pathnames import escape

err = Console(stderr=True, highlight=False, soft_wrap=True)
"""Where messages, warnings, errors and progress go."""
out = Console(highlight=False, soft_wrap=True)
"""Where results go (tables, ``--json``)."""


def print_error(message: str) -> None:
    """``error: ...`` on stderr, one line each (messages are plain text, never markup)."""
    for line in message.splitlines() or [message]:
        err.print(Text.assemble(("error:", "red"), " ", line))


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def progress_line(record: TrialRecord, done: int, total: int) -> str:
    """One plain line per finished trial (safe for logs and pipes)."""
    reward = "-" if record.reward is None else f"{record.reward:g}"
    secs = record.timings.get("total")
    took = f" {secs:.2f}s" if secs is not None else ""
    # The message may quote a name the agent chose: escaped, it always prints.
    first_error = f" ({escape(record.errors[0].message)})" if record.errors else ""
    return f"[{done}/{total}] {record.id}: {record.status} reward={reward}{took}{first_error}"


def print_summary(console: Console, outcome: RunOutcome) -> None:
    """The end-of-run table: per task, then the run's totals."""
    summary = outcome.summary
    per_task = Table(title="Tasks", title_justify="left")
    columns = ("task", "trials", "graded", "mean reward", "mean reward (graded only)", "successes")
    for column in columns:
        per_task.add_column(column, justify="left" if column == "task" else "right")
    for key, task in sorted(summary.per_task.items()):
        per_task.add_row(
            key,
            str(task.trials if task.planned is None else task.planned),
            str(task.graded),
            _num(task.mean_reward),
            _num(task.graded_mean_reward),
            str(task.successes),
        )
    console.print(per_task)

    totals = Table(title="Run", title_justify="left", show_header=False)
    totals.add_column("metric")
    totals.add_column("value", justify="right")
    # The plan is the denominator: a trial without a record, or without a reward, counts
    # as a failure; the figures over graded trials alone come after, named as such.
    totals.add_row("planned", str(outcome.planned))
    totals.add_row("recorded", str(summary.trials))
    if outcome.planned > summary.trials:
        totals.add_row("without a record (see --resume)", str(outcome.planned - summary.trials))
    totals.add_row("graded", str(summary.graded))
    totals.add_row("mean reward", _num(summary.mean_reward))
    totals.add_row(f"success (reward ≥ {summary.threshold:g})", _pct(summary.success_rate))
    for k, value in summary.pass_at_k.items():
        totals.add_row(f"pass@{k}", _pct(value))
    for k, value in summary.pass_hat_k.items():
        if k != "1":
            totals.add_row(f"pass^{k}", _pct(value))
    ci = summary.ci.get("mean_reward")
    if ci is not None:
        totals.add_row(f"mean reward {summary.ci_level:.0%} CI", f"[{ci[0]:.3f}, {ci[1]:.3f}]")
    ungraded = summary.ungraded
    if ungraded.trials:
        why = ", ".join(f"{n} {status}" for status, n in sorted(ungraded.by_status.items()))
        totals.add_row("ungraded, counted as failures", f"{ungraded.trials} ({why})")
        graded = summary.graded_only
        totals.add_row("mean reward (graded only)", _num(graded.mean_reward))
        totals.add_row("success (graded only)", _pct(graded.success_rate))
        if "1" in graded.pass_at_k:
            totals.add_row("pass@1 (graded only)", _pct(graded.pass_at_k["1"]))
    for status, count in sorted(summary.errors_by_status.items()):
        totals.add_row(f"status {status}", str(count))
    for name, label in (
        ("calls", "model calls"),
        ("total_tokens", "tokens"),
        ("cost_usd", "cost (USD)"),
    ):
        total = summary.usage.get(name)
        if total is None or total.measured == 0:
            continue  # not measured is not 0
        shown = f"{total.total:.4f}" if name == "cost_usd" else f"{total.total:,}"
        partial = "" if total.measured == total.of else f" ({total.measured}/{total.of} measured)"
        totals.add_row(label, shown + partial)
    for name, shown in dataset_metric_rows(summary):
        # Text, not markup: an error quotes what the dataset's script or registry chose.
        totals.add_row(Text(f"dataset metric {name}"), Text(escape(shown)))
    totals.add_row("run dir", str(outcome.run_dir))
    console.print(totals)


def dataset_metric_rows(summary: Summary) -> list[tuple[str, str]]:
    """``(name, shown)`` per dataset metric of the summary: its value, over which trials."""
    found = (summary.model_extra or {}).get("dataset_metrics")
    rows: list[tuple[str, str]] = []
    for name, metric in (found if isinstance(found, dict) else {}).items():
        value = metric.get("value")
        if isinstance(value, dict):
            shown = ", ".join(f"{key}={_num(number)}" for key, number in value.items())
        else:
            shown = _num(value) if value is not None else "-"
        seen = f"{metric.get('trials_counted')} trials, {metric.get('graded')} graded"
        error = metric.get("error")
        rows.append((str(name), f"{shown} ({seen})" + (f"; error: {error}" if error else "")))
    return rows


def print_task_list(console: Console, tasks: Sequence[Task]) -> None:
    """A table of tasks: key, category, difficulty, timeouts, hash."""
    table = Table(show_lines=False)
    for column in ("key", "category", "difficulty", "agent timeout", "hash"):
        table.add_column(column)
    for task in tasks:
        timeout = task.agent_timeout_sec
        table.add_row(
            task.key,
            task.category or "-",
            task.difficulty or "-",
            "none" if timeout is None else f"{timeout:g}s",
            task.hash[:12],
        )
    console.print(table)
