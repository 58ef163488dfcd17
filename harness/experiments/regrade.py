"""``harness regrade RUN_DIR``: the verifiers and judges again, on saved evidence.

No agent runs again. A new run dir is made with the source's config, but the agent is
``replay`` (:mod:`harness.agents.replay`), which puts each trial's saved workspace (and
session) back into a fresh sandbox; then the task's tests run as in any trial — in the
sandbox backend of the source (or ``--sandbox``), as the grader, because tests that judge
agent-written files are untrusted too — and then its judges, plus any ``--judge`` (a judge of
the same name replaces the task's or the source run's). Only trials with a saved workspace
are regraded (``tasks.trial_ids``), and no multi-step trial (only the workspace after its
last step is kept, and each step was graded on the state it left); ``regrade.json`` lists
the trials left out and why (``not_regraded``).

The new run dir names its source: its ``config.toml`` has ``agent.kwargs.source``, every
record's ``agent.source``, and ``regrade.json`` lists, per trial, the source's reward and
status beside the new ones, and the tasks whose content changed since the source ran
(regrading after fixing a test is what this is for).

The regrade's ``summary.json`` is its own: the datasets' declared metrics are computed
anew over the regraded trials' rewards, as any run computes them (a ``metric.py`` in a
sandbox), and nothing is carried over from the source. ``regrade.json``'s
``dataset_metrics`` puts each number of the source's beside the regrade's, and says why a
number the source had has none in the regrade (the metric's error, or a dataset that no
longer declares it).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import api  # called as api.run: one seam to stand a run in for (tests)
from harness.config import AgentConfig, RunConfig, load_saved_config, resolve_config
from harness.config.judges import JudgeSpec
from harness.errors import UsageError
from harness.experiments.runs import dataset_metric_values
from harness.records import TrialRecord
from harness.records.atomic import write_bytes_atomic
from harness.records.layout import SESSION_FILENAME, WORKSPACE_DIRNAME, trial_evidence_dir
from harness.records.run import read_summary
from harness.records.workspace import damaged, workspace_kept
from harness.runner import RunEvents, RunOutcome
from sandbox.beneath import is_dir_beneath, is_file_beneath, safe_relative

__all__ = [
    "REGRADE_FILENAME",
    "RegradeOutcome",
    "metric_changes",
    "not_regradable",
    "regrade",
    "regrade_config",
]

REGRADE_FILENAME = "regrade.json"
"""What a regrade run dir says about its source and the changes."""


@dataclass
class RegradeOutcome:
    """A regrade: the run's outcome and, per trial, before and after.

    Attributes:
        run: The regrade run's outcome.
        source: The source run dir.
        changes: Per regraded trial: ``{trial_id, task, before, after}``.
        metrics: Per dataset metric value of either run: ``{metric, before, after, reason}``.
    """

    run: RunOutcome
    source: Path
    changes: list[dict[str, Any]]
    metrics: list[dict[str, Any]] = field(default_factory=list)


def _merge_judges(old: Sequence[JudgeSpec], new: Sequence[JudgeSpec]) -> list[JudgeSpec]:
    names = {spec.key for spec in new}
    return [spec for spec in old if spec.key not in names] + list(new)


def regrade_config(
    source: Path,
    records: Sequence[TrialRecord],
    *,
    judges: Sequence[JudgeSpec] = (),
    options: Mapping[str, Any] | None = None,
    sets: Sequence[str] = (),
) -> RunConfig:
    """The regrade run's config: the source's, with the replay agent and the trials to regrade.

    Args:
        source: The source run dir.
        records: Its records.
        judges: Judges added (by name, replacing namesakes).
        options: Run options over the source's config (``sandbox``, ``concurrency``,
            ``output_dir``, ``run_name``...).
        sets: ``--set`` items, last.

    Raises:
        ConfigError: Not a run dir, or a bad option.
        UsageError: No trial of the source can be regraded.
    """
    source = Path(source).absolute()
    given = dict(options or {})
    run_name = given.pop("run_name", None)
    saved = load_saved_config(source)
    config = resolve_config(base=saved.model_dump(mode="json"), options=given, sets=sets)
    trial_ids = sorted(r.id for r in records if not_regradable(source, r) is None)
    if not trial_ids:
        reasons = sorted({str(not_regradable(source, r)) for r in records})
        raise UsageError(
            f"{source}: no trial can be regraded ({'; '.join(reasons) or 'no trials'})"
        )
    session = any(
        _safe_id(r.id) and is_file_beneath(source, f"{trial_evidence_dir(r.id)}/{SESSION_FILENAME}")
        for r in records
    )
    return config.model_copy(
        update={
            "agent": AgentConfig(name="replay", kwargs={"source": str(source), "session": session}),
            "model": None,
            "tasks": config.tasks.model_copy(update={"trial_ids": trial_ids}),
            "judges": _merge_judges(config.judges, judges),
            "run_name": run_name or f"regrade--{source.name[:80]}--{secrets.token_hex(4)}",
        }
    )


def not_regradable(source: Path, record: TrialRecord) -> str | None:
    """Why the source's trial cannot be regraded (None: it can).

    A multi-step trial cannot: only the workspace after its last step is kept, and each
    step's tests judged the state that step left, which is gone.
    """
    if (record.model_extra or {}).get("steps"):
        return "a multi-step trial (only its last step's workspace is kept)"
    if not _safe_id(record.id) or not is_dir_beneath(source, trial_evidence_dir(record.id)):
        return "no evidence dir (trials/<id> missing, or a symlink)"
    evidence = source / trial_evidence_dir(record.id)
    if damaged(evidence):
        return "a damaged workspace manifest (an entry with an invalid path or sha256)"
    if not workspace_kept(evidence, Path(record.task.path) / WORKSPACE_DIRNAME):
        return "no saved workspace (or, with --evidence none, only its manifest)"
    return None


def _safe_id(trial_id: str) -> bool:
    """Whether a trial id is one harmless path component (a forged record may hold any)."""
    return safe_relative(trial_id) is not None and "/" not in trial_id


def _side(record: TrialRecord | None) -> dict[str, Any] | None:
    if record is None:
        return None
    return {"status": str(record.status), "reward": record.reward, "rewards": record.rewards}


def regrade(
    run_dir: Path,
    config: RunConfig,
    *,
    events: RunEvents | None = None,
) -> RegradeOutcome:
    """Run the regrade ``config`` (from :func:`regrade_config`) and write ``regrade.json``.

    Raises:
        UsageError: As :func:`harness.run`.
    """
    source = Path(run_dir).absolute()
    before = {r.id: r for r in api.load_run(source).records}
    outcome = api.run(config, events=events)
    regraded = {record.id for record in outcome.records}
    left_out = [
        {"trial_id": r.id, "task": r.task.key, "reason": not_regradable(source, r)}
        for r in before.values()
        if r.id not in regraded
    ]
    changes = [
        {
            "trial_id": record.id,
            "task": record.task.key,
            "task_changed": (
                record.id in before and before[record.id].task.hash != record.task.hash
            ),
            "before": _side(before.get(record.id)),
            "after": _side(record),
        }
        for record in outcome.records
    ]
    metrics = metric_changes(source, outcome.run_dir)
    data = {
        "source": str(source),
        "source_name": source.name,
        "trials": changes,
        "not_regraded": left_out,
        "dataset_metrics": metrics,
    }
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    write_bytes_atomic(outcome.run_dir / REGRADE_FILENAME, text.encode())
    return RegradeOutcome(outcome, source, changes, metrics)


def metric_changes(source: Path, regraded: Path) -> list[dict[str, Any]]:
    """Each dataset metric value of the source beside the regrade's, and why one has none.

    The source may be anyone's run dir: its values are taken as
    :func:`~harness.experiments.runs.dataset_metric_values` takes them (finite numbers
    under names a run writes, capped). A value the regrade has not gets a ``reason``: its
    metric's error in the regrade's summary, or that the dataset does not declare it now.
    """
    before = dataset_metric_values(source)
    after = dataset_metric_values(regraded)
    summary = read_summary(regraded) or {}
    entries = summary.get("dataset_metrics")
    entries = entries if isinstance(entries, dict) else {}
    found = []
    for name in sorted({*before, *after}):
        reason = None
        if name not in after:
            entry = entries.get(name) or next(
                (v for k, v in entries.items() if isinstance(k, str) and name.startswith(f"{k}.")),
                None,
            )
            error = entry.get("error") if isinstance(entry, dict) else None
            reason = (
                str(error)[:1024]
                if error
                else "the dataset declares no such metric now (its metric.py or registry "
                "entry is gone or renamed): not computed in the regrade"
            )
        found.append(
            {"metric": name, "before": before.get(name), "after": after.get(name), "reason": reason}
        )
    return found
