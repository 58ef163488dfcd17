"""The report's data: an index of every run (small, loaded at once) and per-trial details.

The index holds, per run, its config, versions, summary, live status and one compact row
per trial (a list of values in the order of :data:`TRIAL_COLUMNS`, so 10,000 trials stay a
few megabytes), plus per-task figures and the comparisons. A trial's page data
(:func:`harness.report.evidence.trial_detail`) is separate: the HTML report embeds it per
trial, parsed only when the page is opened; ``harness view`` serves it on request.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness._version import __version__
from harness.records import TrialRecord
from harness.records.metrics import trial_duration
from harness.report.clip import Limits, clip_text
from harness.report.compare import comparison_sources
from harness.report.evidence import trial_detail
from harness.report.rundata import RunData, task_category

__all__ = ["TRIAL_COLUMNS", "build_index", "iter_details", "run_index", "trial_row"]

BUNDLE_FORMAT = 1
"""Version of the index's shape (the page refuses nothing: unknown keys are ignored)."""

TRIAL_COLUMNS = (
    "id",
    "task",
    "category",
    "status",
    "reward",
    "attempt",
    "rollout",
    "duration",
    "tokens",
    "cost",
    "calls",
    "error",
    "events",
    "started",
)
"""The values of a trial row, in order."""

_ERROR_CHARS = 300


def _finite(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _tokens(record: TrialRecord) -> int | None:
    usage = record.usage
    if usage.total_tokens is not None:
        return usage.total_tokens
    if usage.input_tokens is not None and usage.output_tokens is not None:
        return usage.input_tokens + usage.output_tokens
    return None


def trial_row(record: TrialRecord) -> list[Any]:
    """One trial as a row of :data:`TRIAL_COLUMNS`."""
    first = record.errors[0] if record.errors else None
    error = clip_text(f"{first.type}: {first.message}", _ERROR_CHARS) if first else None
    return [
        record.id,
        record.task.key,
        task_category(record),
        str(record.status),
        _finite(record.reward),
        record.attempt,
        record.rollout,
        _finite(trial_duration(record)),
        _tokens(record),
        _finite(record.usage.cost_usd),
        record.usage.calls,
        error if isinstance(error, str) or error is None else error["$clip"] + "…",
        len(record.events),
        record.started_at.isoformat().replace("+00:00", "Z"),
    ]


def _sum(values: Sequence[float | int | None]) -> float | None:
    known = [v for v in values if v is not None]
    return math.fsum(known) if known else None


def _task_rows(run: RunData) -> list[dict[str, Any]]:
    """Per-task figures: the summary's, plus duration, tokens and cost."""
    per_task = run.summary.get("per_task")
    per_task = per_task if isinstance(per_task, dict) else {}
    grouped: dict[str, list[TrialRecord]] = {}
    for record in run.records:
        grouped.setdefault(record.task.key, []).append(record)
    rows = []
    for key, records in grouped.items():
        found = per_task.get(key)
        figures: dict[str, Any] = found if isinstance(found, dict) else {}
        durations = [trial_duration(r) for r in records]
        rows.append(
            {
                "key": key,
                "name": records[0].task.name,
                "category": task_category(records[0]),
                "trials": len(records),
                "graded": figures.get("graded"),
                "successes": figures.get("successes"),
                "planned": figures.get("planned"),
                "mean_reward": figures.get("mean_reward"),
                "graded_mean_reward": figures.get("graded_mean_reward"),
                "variance": figures.get("variance"),
                "errors": sum(1 for r in records if str(r.status) != "completed"),
                "duration_mean": statistics.fmean(durations) if durations else None,
                "tokens": _sum([_tokens(r) for r in records]),
                "cost": _sum([r.usage.cost_usd for r in records]),
            }
        )
    return rows


def run_index(run: RunData, index: int) -> dict[str, Any]:
    """The index entry of one run."""
    return {
        "index": index,
        "name": run.name,
        "dir": str(run.run_dir),
        "config": run.config,
        "versions": run.versions,
        "summary": run.summary,
        "summary_source": run.summary_source,
        "status": run.status,
        "notes": run.notes,
        "columns": list(TRIAL_COLUMNS),
        "trials": [trial_row(record) for record in run.records],
        "tasks": _task_rows(run),
        "fingerprint": run.fingerprint,
    }


def build_index(runs: Sequence[RunData], *, live: bool) -> dict[str, Any]:
    """The report's index: every run and every comparison the sources make of them.

    Args:
        runs: The runs, in the order given on the command line.
        live: Whether the page is served by ``harness view`` (it then polls for changes).
    """
    comparisons = [
        comparison.model_dump(mode="json")
        for source in comparison_sources()
        for comparison in source(runs)
    ]
    return {
        "format": BUNDLE_FORMAT,
        "generated_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        "harness_version": __version__,
        "live": live,
        "runs": [run_index(run, i) for i, run in enumerate(runs)],
        "comparisons": comparisons,
    }


def iter_details(
    runs: Sequence[RunData], limits: Limits
) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """``(run index, trial row index, page data)`` of every trial, one at a time."""
    for run_number, run in enumerate(runs):
        for row, record in enumerate(run.records):
            yield run_number, row, trial_detail(Path(run.run_dir), record, limits)
