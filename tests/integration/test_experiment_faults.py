"""A run that a fault of the machine stops (a full disk, an engine away) ends trials and
experiments in order: no later run starts, nothing is summarized over a run cut short, and
the exit code is the stopped run's (74, 75).

Real runs on the local sandbox; only the stop itself is staged: the first run's outcome is
what ``harness.run`` returns once a full run dir has stopped it (docs/running.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.workers import uid_base

import harness
from harness import AgentConfig, RunConfig, SandboxConfig, TasksConfig
from harness.errors import EXIT_DISK_FULL
from harness.experiments import load_design, run_experiment, run_trials
from harness.experiments.trials import SUMMARY_FILENAME
from harness.runner import RunOutcome
from harness.tasks import Task

UID_BASE = uid_base(62500)
STOPPED = "stopped: the run dir's filesystem is full; 1 of 1 trial(s) are recorded; ..."


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[RunOutcome]:
    """Every ``harness.run`` made; the first one comes back stopped, as on a full disk."""
    made: list[RunOutcome] = []
    real = harness.run

    def run(config: RunConfig, **kwargs: Any) -> RunOutcome:
        outcome = real(config, **kwargs)
        if not made:
            outcome = dataclasses.replace(outcome, stopped=STOPPED, exit_code=EXIT_DISK_FULL)
        made.append(outcome)
        return outcome

    monkeypatch.setattr(harness.api, "run", run)  # the experiments call it as api.run
    return made


@pytest.mark.root
def test_trials_stop_after_a_stopped_run_without_a_summary(
    tmp_path: Path, make_task: Callable[..., Task], runs: list[RunOutcome]
) -> None:
    task = make_task()
    config = RunConfig(
        tasks=TasksConfig(paths=[str(task.path)]),
        agent=AgentConfig(name="nop"),
        sandbox=SandboxConfig(uid=UID_BASE, gid=UID_BASE),
        output_dir=str(tmp_path / "runs"),
    )
    outcome = run_trials(config, 3, out_dir=tmp_path / "trials")
    assert len(runs) == 1 and outcome.outcomes == runs  # no later run started
    assert (outcome.stopped, outcome.exit_code) == (STOPPED, EXIT_DISK_FULL)
    assert outcome.summary is None and not (tmp_path / "trials" / SUMMARY_FILENAME).exists()


@pytest.mark.root
def test_an_experiment_stops_after_a_stopped_run_without_a_report(
    tmp_path: Path, make_task: Callable[..., Task], runs: list[RunOutcome]
) -> None:
    task = make_task()
    design_file = tmp_path / "exp.toml"
    design_file.write_text(
        f'[run]\ntasks.paths = ["{task.path}"]\nsandbox.uid = {UID_BASE}\n'
        f"sandbox.gid = {UID_BASE}\n"
        '[variants.a]\nagent.name = "nop"\n'
        '[variants.b]\nagent.name = "command"\nagent.cmd = "true"\n'
    )
    outcome = run_experiment(load_design(design_file), out_dir=tmp_path / "exp")
    assert len(runs) == 1
    assert (outcome.stopped, outcome.exit_code, outcome.report) == (STOPPED, EXIT_DISK_FULL, None)
