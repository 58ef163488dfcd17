"""One run dir as a row of a trials summary: its counts, metrics, failures and identity.

Words, as the summaries use them (docs/experiments.md):

- a trial is **graded** when its latest record has a finite reward;
- a trial **errored** when its status is not ``completed`` (agent, verifier or environment
  error, timeout, cancelled); an errored trial can still be graded (an agent that crashed
  after writing its answer);
- a trial **failed** when it did not succeed: it errored, it has no reward, or its reward is
  below the run's threshold (default 1.0). This is what deepagents calls a failed test:
  ``harness trials`` exits 1 when any run has one, and ``--retry-failed`` reruns exactly
  these. So ``failed`` counts every errored trial plus the graded ones below the threshold.

Everything here is read from the run dir alone (its ``config.toml`` and ``trials.jsonl``),
so a run produced on another machine aggregates the same way; only the task category is
looked up in the task's ``task.toml`` (``uncategorized`` when it is not there).
"""

from __future__ import annotations

import hashlib
import math
import os
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from harness.api import RunResults, load_run
from harness.datasets.metrics import check_metric_name
from harness.errors import UsageError
from harness.records import TrialRecord
from harness.records.layout import CONFIG_FILENAME, TRIALS_FILENAME
from harness.records.metrics import trial_duration
from harness.records.run import read_summary
from harness.report.rundata import task_category

__all__ = [
    "UNCATEGORIZED",
    "Failure",
    "RunRow",
    "expand_run_dirs",
    "find_run_dirs",
    "is_run_dir",
    "is_failure",
    "run_row",
    "taskset_digest",
]

UNCATEGORIZED = "uncategorized"
"""The category of a task whose ``task.toml`` has none (or is not readable here)."""


def is_failure(record: TrialRecord, threshold: float) -> bool:
    """Whether a trial failed: it errored, or has no finite reward, or one below ``threshold``."""
    reward = record.reward
    if str(record.status) != "completed" or reward is None or not math.isfinite(reward):
        return True
    return reward < threshold


class Failure(BaseModel):
    """A failed trial, as ``--retry-failed`` reads it.

    Attributes:
        trial_id: Its id (the task and rollout; the same in every run of the same tasks).
        task: The task key.
        rollout: The rollout index.
        status: How it ended.
        reward: Its reward, if graded.
        reason: Its first error's message, or why the reward is a failure.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    trial_id: str
    task: str
    rollout: int
    status: str
    reward: float | None
    reason: str


class RunRow(BaseModel):
    """One run of a trials summary (``runs[i]`` of ``trials_summary.json``).

    Attributes:
        index: 1-based position in the summary.
        run_dir: The run dir (absolute).
        name: Its name.
        created_at: When its first trial started (UTC, ISO 8601).
        model: The model of its config.
        agent: Its agent.
        harness_version: The harness version its trials recorded.
        taskset_digest: sha256 of its tasks' keys and content hashes.
        threshold: Its success threshold.
        interrupted: Whether its summary says it was interrupted.
        trials: Trials recorded (latest record per id).
        graded: Trials with a reward.
        failed: Trials that did not succeed: errored, ungraded or below the threshold.
        errored: Trials whose status is not ``completed``.
        tampered: Trials with a ``tampering`` event (an agent rewrote what a verifier in its
            container runs: docs/grading.md, "A root agent and a shared verifier").
        mean_reward: Mean reward over every planned trial, an ungraded one counting 0 (the
            summary's headline, docs/run-dir.md).
        success_rate: Successes over every planned trial.
        pass_at_1: pass@1 averaged over tasks, an ungraded trial a failure.
        ungraded: Planned trials the headline counts 0 for want of a reward.
        graded_mean_reward: Mean reward over graded trials only (secondary).
        graded_success_rate: Successes over graded trials only (secondary).
        graded_pass_at_1: pass@1 over graded trials only (secondary).
        median_trial_duration_s: Median trial duration, in seconds.
        tokens: Total tokens, over the trials that measured them (None: none did).
        cost_usd: Total cost (None: not priced or not measured).
        category_scores: Category → share of its trials that did not fail.
        failures: The failed trials.
        dataset_metrics: The numbers of its ``summary.json``'s ``dataset_metrics``: a
            metric's value by its name, or each of its values as ``NAME.KEY``.
    """

    model_config = ConfigDict(extra="allow")

    index: int
    run_dir: str
    name: str
    created_at: str | None
    model: str | None
    agent: str
    harness_version: str | None
    taskset_digest: str
    threshold: float
    interrupted: bool = False
    trials: int
    graded: int
    failed: int
    errored: int
    tampered: int = 0
    mean_reward: float | None
    success_rate: float | None
    pass_at_1: float | None
    ungraded: int = 0
    graded_mean_reward: float | None = None
    graded_success_rate: float | None = None
    graded_pass_at_1: float | None = None
    median_trial_duration_s: float | None
    tokens: int | None
    cost_usd: float | None
    category_scores: dict[str, float] = Field(default_factory=dict)
    failures: list[Failure] = Field(default_factory=list)
    dataset_metrics: dict[str, float] = Field(default_factory=dict)


#: The most dataset metric values a run row takes from a run's ``summary.json``.
MAX_DATASET_VALUES = 64


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _metric_name(name: object) -> bool:
    try:
        check_metric_name(name)  # type: ignore[arg-type]
    except ValueError:
        return False
    return True


def dataset_metric_values(run_dir: Path) -> dict[str, float]:
    """The numbers of a run's ``summary.json``'s ``dataset_metrics`` (see :class:`RunRow`).

    The run dir may be anyone's: the summary is read by the run-dir reader (capped, beneath
    the run dir), and only finite numbers under names a run writes are taken (a metric's
    name and a value's key as :func:`~harness.datasets.metrics.check_metric_name` allows
    them: no control character reaches a terminal), at most :data:`MAX_DATASET_VALUES`.
    """
    data = read_summary(run_dir)
    found = data.get("dataset_metrics") if data is not None else None
    values: dict[str, float] = {}
    for name, metric in (found if isinstance(found, dict) else {}).items():
        value = metric.get("value") if isinstance(metric, dict) else None
        pairs = value.items() if isinstance(value, dict) else [("", value)]
        if not _metric_name(name):
            continue
        for key, raw in pairs:
            number = _number(raw)
            if number is None or not isinstance(key, str) or (key and not _metric_name(key)):
                continue
            label = f"{name}.{key}" if key else str(name)
            values[label[:130]] = number
            if len(values) >= MAX_DATASET_VALUES:
                return values
    return values


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` holds a run (a ``config.toml`` and a ``trials.jsonl``)."""
    return (path / CONFIG_FILENAME).is_file() and (path / TRIALS_FILENAME).is_file()


def find_run_dirs(dirs: Iterable[Path]) -> list[Path]:
    """Every run dir at or below ``dirs`` (links not followed), sorted, without repeats.

    A run dir's own subdirs (evidence) are not searched.

    Raises:
        UsageError: A given path is not a directory.
    """
    found: set[Path] = set()
    for top in dirs:
        top = Path(top)
        if not top.is_dir():
            raise UsageError(f"{top} is not a directory (give run dirs or dirs that hold them)")
        for root, subdirs, _files in os.walk(top):
            here = Path(root)
            if is_run_dir(here):
                found.add(here.absolute())
                subdirs.clear()
            else:
                subdirs.sort()
    return sorted(found)


def expand_run_dirs(paths: Iterable[Path]) -> list[Path]:
    """Each path that is a run dir, or else the run dirs below it (as given when none is)."""
    expanded: list[Path] = []
    for path in map(Path, paths):
        below = [] if is_run_dir(path) or not path.is_dir() else find_run_dirs([path])
        expanded += below or [path]
    return expanded


def taskset_digest(records: Sequence[TrialRecord]) -> str:
    """sha256 of the sorted ``key <tab> content hash`` of the tasks the records ran."""
    lines = sorted({f"{r.task.key}\t{r.task.hash}" for r in records})
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _category_scores(records: Sequence[TrialRecord], threshold: float) -> dict[str, float]:
    by_category: dict[str, list[bool]] = {}
    for record in records:
        category = task_category(record) or UNCATEGORIZED
        by_category.setdefault(category, []).append(not is_failure(record, threshold))
    return {name: sum(ok) / len(ok) for name, ok in sorted(by_category.items())}


def _reason(record: TrialRecord, threshold: float) -> str:
    if record.errors:
        return record.errors[0].message
    if record.reward is None:
        return f"not graded ({record.status})"
    return f"reward {record.reward:g} below the threshold {threshold:g}"


def _failures(records: Sequence[TrialRecord], threshold: float) -> list[Failure]:
    return [
        Failure(
            trial_id=record.id,
            task=record.task.key,
            rollout=record.rollout,
            status=str(record.status),
            reward=record.reward,
            reason=_reason(record, threshold),
        )
        for record in records
        if is_failure(record, threshold)
    ]


@dataclass(frozen=True)
class _Usage:
    tokens: int | None
    cost_usd: float | None


def _usage(results: RunResults) -> _Usage:
    usage = results.summary.usage
    tokens = usage.get("total_tokens")
    cost = usage.get("cost_usd")
    return _Usage(
        tokens=None if tokens is None or tokens.total is None else int(tokens.total),
        cost_usd=None if cost is None or cost.total is None else float(cost.total),
    )


def _interrupted(run_dir: Path) -> bool:
    """Whether the run's ``summary.json`` says it was interrupted.

    Read by the run-dir reader (beneath the run dir, a regular file only, capped): a forged
    run dir's ``summary.json`` that is a FIFO or a link is as good as none.
    """
    data = read_summary(run_dir)
    return bool(data is not None and data.get("interrupted"))


def run_row(run_dir: Path, index: int) -> RunRow:
    """The row of one run dir.

    Raises:
        ConfigError: Not a run dir.
        CorruptRecordError: Its records are damaged.
    """
    results = load_run(run_dir)
    records, summary, config = results.records, results.summary, results.config
    threshold = config.threshold
    started = min((r.started_at for r in records), default=None)
    versions = {v for r in records if (v := r.versions.get("harness")) is not None}
    usage = _usage(results)
    return RunRow(
        index=index,
        run_dir=str(Path(run_dir).absolute()),
        name=Path(run_dir).name,
        created_at=None if started is None else started.isoformat().replace("+00:00", "Z"),
        model=config.model,
        agent=config.agent.name,
        harness_version=min(versions) if versions else None,
        taskset_digest=taskset_digest(records),
        threshold=threshold,
        interrupted=_interrupted(Path(run_dir)),
        trials=len(records),
        graded=summary.graded,
        failed=sum(1 for r in records if is_failure(r, threshold)),
        errored=sum(1 for r in records if str(r.status) != "completed"),
        tampered=sum(
            1
            for r in records
            if any(e.get("type") == "tampering" and e.get("path") for e in r.events)
        ),
        mean_reward=summary.mean_reward,
        success_rate=summary.success_rate,
        pass_at_1=summary.pass_at_k.get("1"),
        ungraded=summary.ungraded.trials,
        graded_mean_reward=summary.graded_only.mean_reward,
        graded_success_rate=summary.graded_only.success_rate,
        graded_pass_at_1=summary.graded_only.pass_at_k.get("1"),
        median_trial_duration_s=(
            statistics.median(trial_duration(r) for r in records) if records else None
        ),
        tokens=usage.tokens,
        cost_usd=usage.cost_usd,
        category_scores=_category_scores(records, threshold),
        failures=_failures(records, threshold),
        dataset_metrics=dataset_metric_values(Path(run_dir)),
    )
