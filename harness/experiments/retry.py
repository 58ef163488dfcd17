"""``harness trials --retry-failed SUMMARY_OR_DIR``: rerun each failed trial once.

The failures are read from a ``trials_summary.json`` (its runs' ``failures``) or from every
run dir below a dir. They are deduplicated by trial id — a task and rollout that failed in
two runs is rerun once — and rerun together in one new run dir, with the config of the
first source run (options given on the command line go over it) and ``tasks.trial_ids``
naming exactly them. Nothing to rerun is :class:`~harness.errors.NothingToRetry` (exit 3).
A trial that passes on its rerun is flaky; one that fails again is a real failure.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.config import RunConfig, load_saved_config
from harness.errors import NothingToRetry, UsageError
from harness.experiments.runs import Failure, RunRow, find_run_dirs, run_row
from harness.experiments.trials import read_summary

__all__ = ["RetryPlan", "default_retry_dir", "plan_retry", "retry_config"]


@dataclass(frozen=True)
class RetryPlan:
    """What ``--retry-failed`` reruns.

    Attributes:
        source: The summary or dir given.
        run_dirs: The source runs.
        failures: One per failed trial id, sorted by id.
        config: The first readable source run's saved config.
    """

    source: Path
    run_dirs: list[Path]
    failures: list[Failure]
    config: RunConfig

    def describe(self) -> dict[str, object]:
        """The summary's ``retry_of``: the source and each trial rerun, with why."""
        return {
            "source": str(self.source.absolute()),
            "runs": [str(d) for d in self.run_dirs],
            "trials": [failure.model_dump(mode="json") for failure in self.failures],
        }


def _rows(source: Path, warn: Callable[[str], None]) -> list[RunRow]:
    if source.is_file():
        return read_summary(source).runs
    run_dirs = find_run_dirs([source])
    rows = []
    for index, run_dir in enumerate(run_dirs, 1):
        try:
            rows.append(run_row(run_dir, index))
        except UsageError as exc:
            warn(f"{run_dir}: left out: {exc}")
    if run_dirs and not rows:
        raise NothingToRetry(
            f"found {len(run_dirs)} run dir(s) under {source} but none is readable"
        )
    return rows


def _base_config(rows: list[RunRow], source: Path) -> RunConfig:
    for row in rows:
        try:
            return load_saved_config(Path(row.run_dir))
        except UsageError:
            continue
    raise UsageError(
        f"the runs of {source} are not here ({', '.join(r.run_dir for r in rows[:3])}...): "
        "retry from a dir that holds them"
    )


def plan_retry(source: Path, *, warn: Callable[[str], None] | None = None) -> RetryPlan:
    """Find the failed trials of a summary or of the run dirs below a dir.

    Raises:
        NothingToRetry: No run dir, none readable, or no failed trial.
        UsageError: ``source`` is missing, or its runs' configs cannot be read.
    """
    source = Path(source)
    if not source.exists():
        raise UsageError(f"--retry-failed {source}: no such summary or dir")
    rows = _rows(source, warn or (lambda text: None))
    if not rows:
        raise NothingToRetry(f"no run dir found under {source}: nothing to retry")
    failures: dict[str, Failure] = {}
    for row in rows:
        for failure in row.failures:
            failures.setdefault(failure.trial_id, failure)
    if not failures:
        raise NothingToRetry(
            f"no failed trial in the {len(rows)} run(s) of {source}: nothing to retry"
        )
    return RetryPlan(
        source=source,
        run_dirs=[Path(row.run_dir) for row in rows],
        failures=[failures[key] for key in sorted(failures)],
        config=_base_config(rows, source),
    )


def retry_config(plan: RetryPlan, config: RunConfig) -> RunConfig:
    """``config`` (the source's, with the options given) restricted to the failed trials."""
    rollouts = max([config.rollouts, *(f.rollout + 1 for f in plan.failures)])
    tasks = config.tasks.model_copy(update={"trial_ids": [f.trial_id for f in plan.failures]})
    return config.model_copy(update={"tasks": tasks, "rollouts": rollouts, "run_name": None})


def default_retry_dir(source: Path) -> Path:
    """``retry--<source>--<8 hex>`` beside the source dir.

    Never inside it: an aggregate of the source must not take the rerun for one more run.
    """
    base = (source.parent if source.is_file() else source).absolute()
    return base.parent / f"retry--{base.name}--{secrets.token_hex(4)}"
