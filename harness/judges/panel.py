"""The judges of a run: which judges a trial gets, checked up front, run on its evidence.

A trial's judges are its task's ``[[verifier.judges]]`` plus the run's ``judges`` (a run
judge replaces a task judge of the same name). They are all built and checked before any
trial (a bad table, an unknown type or a judge model that is unknown or has no key is a
usage error, exit 2). After a trial is graded and its evidence written, :meth:`JudgePanel.judge`
runs its judges on that evidence; the trial applies the result: every score joins
``rewards`` under the judge's name, the details go to the record's ``judges``, a judge that
could not score makes the trial a ``verifier_error`` (not graded), and a gate (a judge with
a ``threshold``) scoring below its threshold makes the main reward 0.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config import RunConfig
from harness.config.judges import JudgeSpec, judge_spec
from harness.errors import ConfigError, HarnessError, JudgeError, TaskError, UsageError
from harness.judges.base import Judge, JudgeInput, ModelAccess
from harness.judges.evidence import TrialEvidence
from harness.judges.models import JudgeModels
from harness.judges.registry import JUDGES
from harness.tasks import TASK_TOML, Task
from sandbox.credentials import CredentialStore

__all__ = ["JudgePanel", "PanelResult", "build_panel", "judge_problems", "task_judge_specs"]


def task_judge_specs(task: Task) -> list[JudgeSpec]:
    """The task's ``[[verifier.judges]]`` tables, validated as judge tables.

    Raises:
        TaskError: A table is not a valid judge (the type of the key is checked when the
            task loads).
    """
    toml = task.path / TASK_TOML
    specs = []
    for index, item in enumerate(task.config.verifier.judges):
        try:
            specs.append(judge_spec(item, f"verifier.judges[{index}]"))
        except ConfigError as exc:
            raise TaskError(toml, str(exc)) from None
    return specs


def _build(specs: Sequence[JudgeSpec], where: str) -> list[Judge]:
    """Judges from their tables; names must be unique.

    Raises:
        UsageError: An unknown type, bad options, or a repeated name.
    """
    judges = [JUDGES.get(spec.type).from_spec(spec, where) for spec in specs]
    names = [judge.name for judge in judges]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigError(
            f"{where}: judge name(s) {', '.join(repeated)} used twice; name them apart"
        )
    return judges


@dataclass
class PanelResult:
    """What a trial's judges decided.

    Attributes:
        scores: Judge name → score (joins the record's ``rewards``).
        details: Judge name → what the record's ``judges`` shows.
        errors: Judges that could not score.
        gates_failed: Names of gates that scored below their threshold.
    """

    scores: dict[str, float] = field(default_factory=dict)
    details: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: list[JudgeError] = field(default_factory=list)
    gates_failed: list[str] = field(default_factory=list)


class JudgePanel:
    """The run's judges: per task, built once and run on each trial's evidence.

    Args:
        run_specs: The run's ``judges``.
        models: Model access for judges that call a model.
    """

    def __init__(self, run_specs: Sequence[JudgeSpec], models: ModelAccess | None = None) -> None:
        self.run_judges = _build(run_specs, "judges")
        self.models = models
        self._by_task: dict[tuple[Path, str], list[Judge]] = {}
        self._lock = threading.Lock()

    def for_task(self, task: Task) -> list[Judge]:
        """The task's judges followed by the run's (a run judge replaces a namesake).

        Raises:
            UsageError: The task's judge tables are invalid.
        """
        key = (task.path, task.hash)
        with self._lock:
            cached = self._by_task.get(key)
        if cached is not None:
            return cached
        try:
            own = _build(task_judge_specs(task), "verifier.judges")
        except TaskError:
            raise
        except UsageError as exc:
            raise TaskError(task.path / TASK_TOML, str(exc)) from None
        replaced = {judge.name for judge in self.run_judges}
        judges = [judge for judge in own if judge.name not in replaced] + self.run_judges
        with self._lock:
            self._by_task[key] = judges
        return judges

    def models_used(self, tasks: Sequence[Task]) -> list[str]:
        """Every model a judge of these tasks calls."""
        return sorted(
            {model for task in tasks for judge in self.for_task(task) for model in judge.models()}
        )

    def judge(
        self, task: Task, trial_id: str, evidence_dir: Path, verifier_rewards: Mapping[str, float]
    ) -> PanelResult | None:
        """Run the task's judges on a trial's evidence (None when the task has none)."""
        judges = self.for_task(task)
        if not judges:
            return None
        trial = JudgeInput(TrialEvidence(evidence_dir), task, trial_id, self.models)
        result = PanelResult()
        for judge in judges:
            detail: dict[str, Any] = {"type": judge.type_name, "threshold": judge.spec.threshold}
            result.details[judge.name] = detail
            try:
                if judge.name in verifier_rewards:
                    raise judge.fail(
                        f"the verifier's reward.json already has {judge.name!r}; rename the judge"
                    )
                verdict = judge.score(trial)
            except JudgeError as exc:
                detail["error"] = str(exc)
                result.errors.append(exc)
                continue
            except HarnessError as exc:  # a model that cannot be reached, a refused call
                error = judge.fail(f"{type(exc).__name__}: {exc}")
                detail["error"] = str(error)
                result.errors.append(error)
                continue
            result.scores[judge.name] = verdict.score
            detail["score"] = verdict.score
            threshold = judge.spec.threshold
            if threshold is not None:
                detail["passed"] = verdict.score >= threshold
                if not detail["passed"]:
                    result.gates_failed.append(judge.name)
            detail.update(verdict.detail)
        return result


def judge_problems(tasks: Sequence[Task]) -> list[UsageError]:
    """Every task whose ``[[verifier.judges]]`` cannot be built (for ``harness tasks check``)."""
    panel = JudgePanel([])
    problems: list[UsageError] = []
    for task in tasks:
        try:
            panel.for_task(task)
        except UsageError as exc:
            problems.append(exc)
    return problems


def build_panel(
    config: RunConfig,
    tasks: Sequence[Task],
    credentials: CredentialStore,
    environ: Mapping[str, str],
) -> JudgePanel | None:
    """The run's judges, every one checked before any trial; None when no task has one.

    Raises:
        UsageError: A bad judge table (the task's file named), an unknown judge type, or a
            judge model that is unknown or has no key.
    """
    if not config.judges and not any(task.config.verifier.judges for task in tasks):
        return None
    models = JudgeModels.load(config.models, config.tasks.paths, credentials, environ)
    panel = JudgePanel(config.judges, models)
    problems = judge_problems(tasks)
    if problems:
        raise UsageError("\n".join(map(str, problems)))
    for model in panel.models_used(tasks):
        models.spec(model)  # unknown, or without its key: exit 2 now, not in trial 1
    return panel
