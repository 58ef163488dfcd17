"""``harness experiment``: a paired with/without experiment (docs/experiments.md)."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

import typer

from harness.cli.display import err, out
from harness.cli.options import takes_options
from harness.cli.progress import make_display
from harness.cli.run_cmd import check_display
from harness.errors import EXIT_INTERRUPTED, UsageError
from harness.experiments.design import load_design
from harness.experiments.experiment import (
    REPORT_JSON,
    ExperimentReport,
    exit_code,
    report_experiment,
    run_experiment,
)
from harness.experiments.text import experiment_text
from harness.runner import RunEvents

__all__ = ["experiment"]


def _show(report: ExperimentReport, directory: Path, *, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(report.model_dump(mode="json"), sort_keys=True) + "\n")
    else:
        out.print(experiment_text(report), markup=False, highlight=False, end="")
    err.print(f"Artifacts: {directory}", markup=False)


@takes_options("experiment")
def experiment(**values: Any) -> None:
    """Run a paired experiment: variants interleaved, pairs per task, model and repetition.

    Writes experiment_report.json and .txt. Exit 0 when every headline is published; 1 when
    a pair is blocked (the headline is withheld) or there is none; 2 on bad usage; 130 when
    interrupted.
    """
    report: Path | None = values["report"]
    config_file: Path | None = values["config_file"]
    as_json: bool = values["as_json"]
    if report is not None:
        made = report_experiment(report)
        _show(made, report, as_json=as_json)
        raise typer.Exit(exit_code(made))
    if config_file is None:
        raise UsageError("give the experiment file with -c FILE (or --report DIR)")
    shown = check_display(values["display"])
    design = load_design(
        config_file,
        sets=values["set_items"] or [],
        runs_per_variant=values["runs_per_variant"],
    )
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # from here on, Ctrl-C is the runs' to handle

    def events(index: int, total: int, planned: dict[str, Any]) -> RunEvents:
        if not as_json:
            err.print(
                f"[{index}/{total}] {design.name} | {planned['variant']} | {planned['model']} "
                f"| run {planned['repetition']}",
                markup=False,
            )
        return make_display(shown, err, as_json=as_json)

    outcome = run_experiment(design, out_dir=values["out_dir"], events=events)
    if outcome.report is None:
        err.print(
            f"{outcome.stopped}\nno report: once the run is resumed, "
            f"`harness experiment --report {outcome.directory}` makes it",
            markup=False,
        )
        raise typer.Exit(outcome.exit_code)
    _show(outcome.report, outcome.directory, as_json=as_json)
    err.print(f"wrote {outcome.directory / REPORT_JSON}", markup=False)
    if outcome.interrupted:
        err.print("interrupted: the report covers the runs made so far", markup=False)
        raise typer.Exit(EXIT_INTERRUPTED)
    raise typer.Exit(outcome.exit_code)
