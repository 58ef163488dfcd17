"""Repeated runs and their spread: ``harness trials N`` and ``harness aggregate``.

:func:`run_trials` runs one resolved config N times, one normal run dir each
(``<parent>/trial-001``...), one after the other, then writes ``trials_summary.json``.
:func:`aggregate` finds every run dir below some dirs (the parts may come from separate CI
jobs) and merges them into the same summary. A summary is a pure function of its run dirs:
the same dirs, found in the same (sorted) order, give the same summary byte for byte.

``trials_summary.json`` (indent 2, sorted keys)::

    {"schema_version": 2, "n_trials": 3, "model": "...", "harness_version": "...",
     "agent": "...", "taskset_digest": "...", "threshold": 1.0,
     "metrics": {"mean_reward": S, "success_rate": S, "pass_at_1": S,
                 "graded_mean_reward": S, "graded_success_rate": S, "graded_pass_at_1": S,
                 "median_trial_duration_s": S, "tokens": S, "cost_usd": S},
     "counts": {"trials": S, "graded": S, "ungraded": S, "failed": S, "errored": S,
                "tampered": S},
     "category_scores": {"<category>": S},
     "dataset_metrics": {"<metric>": S, "<metric>.<key>": S},
     "runs": [<one row per run, see runs.RunRow>],
     "warnings": ["..."]}

where each ``S`` is ``{n, mean, median, stdev, min, max}`` over the runs (:mod:`.stats`).
A run's ``mean_reward``, ``success_rate`` and ``pass_at_1`` count every planned trial, an
ungraded one as a failure (its summary's headline); the ``graded_*`` ones count its graded
trials only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness import api  # called as api.run: one seam to stand a run in for (tests)
from harness.config import RunConfig
from harness.errors import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TRIAL_ERRORS,
    ConfigError,
    UsageError,
)
from harness.experiments.runs import RunRow, find_run_dirs, run_row
from harness.experiments.stats import Stats, describe
from harness.records.atomic import write_bytes_atomic
from harness.runner import RunEvents, RunOutcome, run_name
from harness.tasks import taskset_name

__all__ = [
    "COUNTS",
    "MAX_TRIALS",
    "METRICS",
    "SUMMARY_FILENAME",
    "TrialsOutcome",
    "TrialsSummary",
    "aggregate",
    "exit_code",
    "read_summary",
    "run_trials",
    "summarize_rows",
    "trials_parent",
    "write_summary",
]

SUMMARY_FILENAME = "trials_summary.json"
"""The summary a trials parent (or ``--summary-out``) holds."""
MAX_TRIALS = 50
"""The most runs one ``harness trials`` makes."""
METRICS: tuple[str, ...] = (
    "mean_reward",
    "success_rate",
    "pass_at_1",
    "graded_mean_reward",
    "graded_success_rate",
    "graded_pass_at_1",
    "median_trial_duration_s",
    "tokens",
    "cost_usd",
)
"""Per-run metrics a summary describes (fields of :class:`~.runs.RunRow`)."""
COUNTS: tuple[str, ...] = ("trials", "graded", "ungraded", "failed", "errored", "tampered")
"""Per-run counts a summary describes."""
#: Identity fields whose disagreement across runs is warned about.
_IDENTITY = (
    ("model", "models"),
    ("harness_version", "harness versions"),
    ("taskset_digest", "task sets"),
    ("agent", "agents"),
)


class TrialsSummary(BaseModel):
    """``trials_summary.json``: the spread of every metric across runs.

    Attributes:
        schema_version: 2 (1: its runs' ``mean_reward``, ``success_rate`` and ``pass_at_1``
            counted graded trials only).
        n_trials: How many runs it covers.
        model: The model of the runs (the first run's when they differ: see warnings).
        harness_version: Likewise.
        agent: Likewise.
        taskset_digest: Likewise.
        threshold: Likewise.
        metrics: Metric → :class:`~.stats.Stats` over the runs.
        counts: Count → :class:`~.stats.Stats` over the runs.
        category_scores: Category → :class:`~.stats.Stats` over the runs that ran it.
        dataset_metrics: A dataset metric's value (``NAME`` or ``NAME.KEY``, as
            :class:`~.runs.RunRow` has it) → :class:`~.stats.Stats` over the runs.
        runs: One row per run.
        warnings: Mixed identities, values left out.
        retry_of: For a ``--retry-failed`` summary: the source and the trials rerun.
    """

    model_config = ConfigDict(extra="allow")

    schema_version: int = 2
    n_trials: int
    model: str | None = None
    harness_version: str | None = None
    agent: str | None = None
    taskset_digest: str | None = None
    threshold: float | None = None
    metrics: dict[str, Stats]
    counts: dict[str, Stats]
    category_scores: dict[str, Stats] = Field(default_factory=dict)
    dataset_metrics: dict[str, Stats] = Field(default_factory=dict)
    runs: list[RunRow]
    warnings: list[str] = Field(default_factory=list)
    retry_of: dict[str, Any] | None = None

    def failed_mean(self) -> float:
        """``counts.failed.mean`` (0 when no run counted)."""
        stats = self.counts.get("failed")
        return 0.0 if stats is None or stats.mean is None else stats.mean


def _mixed(rows: Sequence[RunRow], warn: Callable[[str], None]) -> None:
    for attribute, plural in _IDENTITY:
        values: dict[str, int] = {}
        for row in rows:
            value = str(getattr(row, attribute))
            values[value] = values.get(value, 0) + 1
        if len(values) > 1:
            listed = ", ".join(f"{value} ({count} run(s))" for value, count in values.items())
            warn(
                f"the runs mix {plural}: {listed}; results of different models, harness "
                "versions or task sets must not be used for regression conclusions"
            )


def summarize_rows(
    rows: Sequence[RunRow], *, warn: Callable[[str], None] | None = None
) -> TrialsSummary:
    """The summary of these runs (in this order).

    Args:
        rows: One per run.
        warn: Also called with each warning (they are in the summary either way).
    """
    warnings: list[str] = []

    def note(text: str) -> None:
        warnings.append(text)
        if warn is not None:
            warn(text)

    _mixed(rows, note)
    dumped = [row.model_dump() for row in rows]
    categories = sorted({name for row in rows for name in row.category_scores})
    datasets = sorted({name for row in rows for name in row.dataset_metrics})
    first = rows[0] if rows else None
    return TrialsSummary(
        n_trials=len(rows),
        model=first.model if first else None,
        harness_version=first.harness_version if first else None,
        agent=first.agent if first else None,
        taskset_digest=first.taskset_digest if first else None,
        threshold=first.threshold if first else None,
        metrics={m: describe((d[m] for d in dumped), name=m, warn=note) for m in METRICS},
        counts={c: describe((d[c] for d in dumped), name=c, warn=note) for c in COUNTS},
        category_scores={
            name: describe(
                (row.category_scores.get(name) for row in rows), name=f"category {name}", warn=note
            )
            for name in categories
        },
        dataset_metrics={
            name: describe(
                (row.dataset_metrics.get(name) for row in rows),
                name=f"dataset metric {name}",
                warn=note,
            )
            for name in datasets
        },
        runs=list(rows),
        warnings=warnings,
    )


def aggregate(dirs: Iterable[Path], *, warn: Callable[[str], None] | None = None) -> TrialsSummary:
    """Merge every run dir below ``dirs`` into one summary (sorted by path).

    Raises:
        UsageError: A path is not a directory, or no run dir was found.
    """
    given = [Path(d) for d in dirs]
    run_dirs = find_run_dirs(given)
    if not run_dirs:
        raise UsageError(
            f"no run dir (config.toml and trials.jsonl) found below {', '.join(map(str, given))}"
        )
    return summarize_rows([run_row(d, i) for i, d in enumerate(run_dirs, 1)], warn=warn)


def write_summary(summary: TrialsSummary, path: Path) -> None:
    """Write the summary as JSON (indent 2, sorted keys, trailing newline), atomically."""
    text = json.dumps(summary.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, text.encode())


def read_summary(path: Path) -> TrialsSummary:
    """Read a ``trials_summary.json``.

    Raises:
        ConfigError: Not readable, not JSON, or not a summary.
    """
    try:
        return TrialsSummary.model_validate_json(Path(path).read_bytes())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValidationError as exc:
        raise ConfigError(f"{path} is not a trials summary: {exc.errors()[0]['msg']}") from None


def exit_code(summary: TrialsSummary, fail_under: float | None) -> int:
    """0 with no failure; 1 when ``counts.failed.mean > 0`` or ``fail_under`` is not met."""
    if summary.failed_mean() > 0:
        return EXIT_TRIAL_ERRORS
    mean = summary.metrics["mean_reward"].mean
    if fail_under is not None and (mean is None or mean < fail_under):
        return EXIT_TRIAL_ERRORS
    return EXIT_OK


@dataclass
class TrialsOutcome:
    """What :func:`run_trials` did.

    Attributes:
        parent: The dir holding the runs.
        summary: The summary of the runs made (None when none was).
        summary_path: Where it was written.
        outcomes: Each run's outcome, in order.
        interrupted: A signal stopped the runs.
        stopped: A fault of the machine stopped a run in order (its message, with the
            ``--resume`` command); no later run started and no summary was written.
        exit_code: 0, 1, 130, or the stopped run's (74, 75).
    """

    parent: Path
    summary: TrialsSummary | None
    summary_path: Path | None
    outcomes: list[RunOutcome] = field(default_factory=list)
    interrupted: bool = False
    stopped: str | None = None
    exit_code: int = EXIT_OK


def trials_parent(config: RunConfig, out_dir: Path | None, prefix: str = "trials") -> Path:
    """Where the runs go: ``out_dir``, else ``<output_dir>/<prefix>--<taskset>--<model>--...``.

    Raises:
        UsageError: The dir exists and is not empty.
    """
    if out_dir is None:
        paths = [Path(p) for p in config.tasks.paths]
        # A config of dataset tasks only (docs/datasets.md) is named after its datasets.
        taskset = taskset_name(paths) if paths else "+".join(config.tasks.datasets.names)
        taskset = taskset or "datasets"
        name = run_name(taskset, config.model, config.agent.name)
        out_dir = Path(config.output_dir) / f"{prefix}--{name}"
    parent = Path(out_dir).absolute()
    if parent.exists() and (not parent.is_dir() or any(parent.iterdir())):
        raise UsageError(f"{parent} exists and is not empty: give a new --out-dir")
    return parent


def run_trials(
    config: RunConfig,
    n: int,
    *,
    out_dir: Path | None = None,
    summary_out: Path | None = None,
    events: Callable[[int], RunEvents | None] | None = None,
    warn: Callable[[str], None] | None = None,
    retry_of: dict[str, Any] | None = None,
    prefix: str = "trials",
) -> TrialsOutcome:
    """Run ``config`` ``n`` times, one run dir each, then write the summary.

    Args:
        config: The resolved run config (its ``run_name`` must be unset).
        n: How many runs (1 to 50).
        out_dir: The parent of the runs (default: a new dir under ``config.output_dir``).
        summary_out: Where the summary goes (default: ``<parent>/trials_summary.json``).
        events: Run index (1-based) → an observer of that run.
        warn: Called with each warning of the summary.
        retry_of: What a ``--retry-failed`` run reruns (kept in the summary).
        prefix: Of the default parent's name.

    Raises:
        UsageError: ``n`` out of range, a run name given, a non-empty parent, or a bad
            config (as :func:`harness.run`; nothing is written then).
    """
    if not 1 <= n <= MAX_TRIALS:
        raise UsageError(f"the number of trials must be between 1 and {MAX_TRIALS}, got {n}")
    if config.run_name is not None:
        raise UsageError(
            "--run-name names one run; trials names its runs trial-001... under --out-dir"
        )
    parent = trials_parent(config, out_dir, prefix)
    outcome = TrialsOutcome(parent, None, None)
    for index in range(1, n + 1):
        one = config.model_copy(
            update={"output_dir": str(parent), "run_name": f"trial-{index:03d}"}
        )
        try:
            result = api.run(one, events=events(index) if events is not None else None)
        except KeyboardInterrupt:
            outcome.interrupted = True
            break
        outcome.outcomes.append(result)
        if result.interrupted:
            outcome.interrupted = True
            break
        if result.stopped is not None:  # a full disk, an engine away: no run would do better
            outcome.stopped, outcome.exit_code = result.stopped, result.exit_code
            return outcome  # a summary over a run cut short would mislead (and may not fit)
    made = [result.run_dir for result in outcome.outcomes]
    if made:
        rows = [run_row(run_dir, i) for i, run_dir in enumerate(made, 1)]
        outcome.summary = summarize_rows(rows, warn=warn)
        outcome.summary.retry_of = retry_of
        outcome.summary_path = summary_out or parent / SUMMARY_FILENAME
        write_summary(outcome.summary, outcome.summary_path)
    if outcome.interrupted:
        outcome.exit_code = EXIT_INTERRUPTED
    elif outcome.summary is not None:
        outcome.exit_code = exit_code(outcome.summary, config.fail_under)
    return outcome
