"""Running a paired experiment and reporting it: ``harness experiment -c experiment.toml``.

:func:`run_experiment` makes the experiment dir, applies the variants' overlays, checks
every arm as ``harness run`` would (nothing runs if one cannot), writes the protocol
(``experiment_plan.json``), runs the arms in the interleaved plan (one normal run dir each,
under ``runs/``), then reports. :func:`report_experiment` derives the report from the
experiment dir alone, so it can be made again (e.g. after ``harness run --resume`` of an
arm that died)::

    <experiment dir>/
      experiment_plan.json      the protocol: arms, planned tasks, order, digest
      overlays/<variant>/...    the variants' task-set copies (overlays only)
      runs/rep-001--<variant>/  one run dir per arm and repetition
      experiment_report.json    the paired comparisons
      experiment_report.txt     the same as text
"""

from __future__ import annotations

import hashlib
import json
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import api  # called as api.run: one seam to stand a run in for (tests)
from harness.config import RunConfig
from harness.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_TRIAL_ERRORS, ConfigError, UsageError
from harness.experiments.design import ExperimentDesign, PlannedRun, plan_runs
from harness.experiments.overlays import apply_overlay
from harness.experiments.pairing import Observation, compare
from harness.experiments.report import ExperimentReport
from harness.experiments.text import experiment_text
from harness.records import TRIALS_FILENAME, TrialRecord
from harness.records.atomic import write_bytes_atomic
from harness.records.metrics import trial_duration
from harness.runner import RunEvents
from harness.runner.plan import slug

__all__ = [
    "PLAN_FILENAME",
    "REPORT_JSON",
    "REPORT_TXT",
    "STABILITY_NOTE",
    "ExperimentOutcome",
    "ExperimentReport",
    "report_experiment",
    "run_experiment",
]

PLAN_FILENAME = "experiment_plan.json"
REPORT_JSON = "experiment_report.json"
REPORT_TXT = "experiment_report.txt"
RUNS_DIRNAME = "runs"
STABILITY_NOTE = "One repetition cannot establish stability."
NO_MODEL = "-"
"""The model axis value of an experiment without ``[experiment] models``."""


@dataclass
class ExperimentOutcome:
    """What :func:`run_experiment` did.

    Attributes:
        directory: The experiment dir.
        report: The report (None when a run stopped on a fault of the machine).
        interrupted: A signal stopped the arms.
        exit_code: 0 (every headline published), 1 (one withheld), 130 (interrupted), or
            a stopped run's (74, 75).
        stopped: A fault of the machine stopped a run in order (its message, with the
            ``--resume`` command); no later arm ran and no report was written.
    """

    directory: Path
    report: ExperimentReport | None
    interrupted: bool = False
    exit_code: int = EXIT_OK
    stopped: str | None = None


def _digest(plan: dict[str, Any]) -> str:
    compact = json.dumps(plan, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(compact.encode()).hexdigest()


def _write_json(path: Path, data: Any) -> None:
    write_bytes_atomic(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())


def _arm_configs(design: ExperimentDesign, directory: Path) -> dict[tuple[str, str], RunConfig]:
    """(variant, model) → the arm's config: overlay applied, model set, runs under runs/."""
    arms = {}
    for variant, config in design.variants.items():
        overlay = design.overlays.get(variant)
        if overlay is not None:
            config = apply_overlay(
                config, overlay, directory / "overlays" / slug(variant), design.source.parent
            )
        for model in design.model_axis:
            update: dict[str, Any] = {"output_dir": str(directory / RUNS_DIRNAME), "rollouts": 1}
            if model is not None:
                update["model"] = model
            arms[(variant, model or NO_MODEL)] = config.model_copy(update=update)
    return arms


def _protocol(
    design: ExperimentDesign,
    arms: dict[tuple[str, str], RunConfig],
    tasks: dict[tuple[str, str], list[str]],
    planned: list[PlannedRun],
) -> dict[str, Any]:
    plan: dict[str, Any] = {
        "schema_version": 1,
        "name": design.name,
        "source": str(design.source),
        "control": design.control,
        "treatments": design.treatments,
        "runs_per_variant": design.runs_per_variant,
        "models": design.models or [NO_MODEL],
        "threshold": design.variants[design.control].threshold,
        "arms": [
            {
                "variant": variant,
                "model": model,
                "config": config.model_dump(mode="json"),
                "tasks": tasks[(variant, model)],
            }
            for (variant, model), config in arms.items()
        ],
        "plan": [
            {
                "repetition": p.repetition,
                "model": p.model or NO_MODEL,
                "variant": p.variant,
                "position": p.position,
                "run_name": p.run_name,
            }
            for p in planned
        ],
    }
    plan["protocol_digest"] = _digest(plan)
    return plan


def _prepare(design: ExperimentDesign, directory: Path) -> dict[str, Any]:
    """Overlays, every arm checked, the protocol written; the dir removed on a usage error."""
    planned = plan_runs(design)
    directory.mkdir(parents=True)
    try:
        arms = _arm_configs(design, directory)
        first_run = {(p.variant, p.model or NO_MODEL): p.run_name for p in reversed(planned)}
        tasks = {
            arm: sorted(
                {
                    plan.task.key
                    for plan in api.check(config.model_copy(update={"run_name": first_run[arm]}))
                }
            )
            for arm, config in arms.items()
        }
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    plan = _protocol(design, arms, tasks, planned)
    _write_json(directory / PLAN_FILENAME, plan)
    return plan


def experiment_dir(design: ExperimentDesign, out_dir: Path | None) -> Path:
    """``out_dir``, else ``<control's output_dir>/experiment--<name>--<8 hex>``.

    Raises:
        UsageError: It exists and is not empty.
    """
    if out_dir is None:
        root = Path(design.variants[design.control].output_dir)
        out_dir = root / f"experiment--{slug(design.name)}--{secrets.token_hex(4)}"
    directory = Path(out_dir).absolute()
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise UsageError(f"{directory} exists and is not empty: give a new --out-dir")
    if directory.exists():
        directory.rmdir()
    return directory


def run_experiment(
    design: ExperimentDesign,
    *,
    out_dir: Path | None = None,
    events: Callable[[int, int, dict[str, Any]], RunEvents | None] | None = None,
) -> ExperimentOutcome:
    """Run every arm of the plan, then report.

    Args:
        design: From :func:`~harness.experiments.design.load_design`.
        out_dir: The experiment dir (default: a new one beside the control's runs).
        events: ``(index, total, planned run)`` → an observer of that run.

    Raises:
        UsageError: An arm that cannot run (nothing runs then, nothing is left).
    """
    directory = experiment_dir(design, out_dir)
    plan = _prepare(design, directory)
    interrupted = False
    arms = {(a["variant"], a["model"]): RunConfig.model_validate(a["config"]) for a in plan["arms"]}
    for index, planned in enumerate(plan["plan"], 1):
        config = arms[(planned["variant"], planned["model"])]
        one = config.model_copy(update={"run_name": planned["run_name"]})
        observer = events(index, len(plan["plan"]), planned) if events is not None else None
        try:
            outcome = api.run(one, events=observer)
        except KeyboardInterrupt:
            interrupted = True
            break
        if outcome.interrupted:
            interrupted = True
            break
        if outcome.stopped is not None:  # a full disk, an engine away: stop, resume later
            return ExperimentOutcome(
                directory, None, exit_code=outcome.exit_code, stopped=outcome.stopped
            )
    report = report_experiment(directory)
    if interrupted:
        return ExperimentOutcome(directory, report, True, EXIT_INTERRUPTED)
    return ExperimentOutcome(directory, report, False, exit_code(report))


def exit_code(report: ExperimentReport) -> int:
    """0 when every comparison's headline is published, else 1."""
    return EXIT_OK if report.published else EXIT_TRIAL_ERRORS


def _observations(record: TrialRecord, planned: dict[str, Any]) -> Observation:
    usage = record.usage
    return Observation(
        task=record.task.key,
        model=planned["model"],
        repetition=planned["repetition"],
        variant=planned["variant"],
        status=str(record.status),
        reward=record.reward,
        error=record.errors[0].message if record.errors else None,
        metrics={
            "total_tokens": usage.total_tokens,
            "calls": usage.calls,
            "duration_s": trial_duration(record),
            "cost_usd": usage.cost_usd,
        },
    )


def _read_plan(directory: Path) -> dict[str, Any]:
    try:
        plan: dict[str, Any] = json.loads((directory / PLAN_FILENAME).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"{directory} is not an experiment dir: {PLAN_FILENAME} unreadable ({exc})"
        ) from None
    return plan


def _totals(observations: list[Observation], variant: str, runs: int) -> dict[str, Any]:
    mine = [o for o in observations if o.variant == variant]
    totals: dict[str, Any] = {"variant": variant, "runs": runs, "trials": len(mine)}
    for name in ("total_tokens", "calls", "duration_s", "cost_usd"):
        values = [v for o in mine if (v := o.metrics.get(name)) is not None]
        totals[name] = {
            "measured": len(values),
            "of": len(mine),
            "total": sum(values) if values else None,
        }
    return totals


def _observe(
    directory: Path, plan: dict[str, Any]
) -> tuple[list[Observation], list[dict[str, Any]]]:
    """Every trial of the planned runs that ran, and each planned run with ``present``."""
    observations: list[Observation] = []
    runs = []
    for planned in plan["plan"]:
        run_dir = directory / RUNS_DIRNAME / planned["run_name"]
        present = (run_dir / TRIALS_FILENAME).is_file()
        runs.append({**planned, "run_dir": str(run_dir), "present": present})
        if present:
            observations += [_observations(r, planned) for r in api.load_run(run_dir).records]
    return observations, runs


def report_experiment(directory: Path) -> ExperimentReport:
    """The report of an experiment dir (from its plan and run dirs), written as JSON and text.

    Raises:
        ConfigError: Not an experiment dir.
    """
    directory = Path(directory)
    plan = _read_plan(directory)
    observations, runs = _observe(directory, plan)
    tasks = {(arm["variant"], arm["model"]): arm["tasks"] for arm in plan["arms"]}
    threshold = float(plan["threshold"])
    comparisons = []
    for treatment in plan["treatments"]:
        keys = [
            (task, model, repetition)
            for model in plan["models"]
            for variant in (plan["control"], treatment)
            for task in tasks.get((variant, model), [])
            for repetition in range(1, plan["runs_per_variant"] + 1)
        ]
        comparisons.append(
            compare(
                observations,
                control=plan["control"],
                treatment=treatment,
                keys=keys,
                threshold=threshold,
            )
        )
    notes = []
    if plan["runs_per_variant"] == 1:
        notes.append(STABILITY_NOTE)
    missing = [r["run_name"] for r in runs if not r["present"]]
    if missing:
        notes.append(f"{len(missing)} planned run(s) did not run: {', '.join(missing[:5])}")
    variants = [plan["control"], *plan["treatments"]]
    report = ExperimentReport(
        name=plan["name"],
        protocol_digest=plan["protocol_digest"],
        control=plan["control"],
        treatments=plan["treatments"],
        runs_per_variant=plan["runs_per_variant"],
        models=plan["models"],
        threshold=threshold,
        comparisons=comparisons,
        operational_totals=[
            _totals(observations, v, sum(1 for r in runs if r["variant"] == v and r["present"]))
            for v in variants
        ],
        runs=runs,
        notes=notes,
        published=all(c.headline.published for c in comparisons),
    )
    _write_json(directory / REPORT_JSON, report.model_dump(mode="json"))
    (directory / REPORT_TXT).write_text(experiment_text(report), encoding="utf-8")
    return report
