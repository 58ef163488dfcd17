"""``harness trials`` and ``harness aggregate``: repeated runs and their spread.

``harness trials`` takes the options of ``harness run`` but those of a single run
(``--resume``, ``--rerun-status``, ``--run-name``), plus the number of runs, ``--out-dir``,
``--summary-out`` and ``--retry-failed``; all are declared in :mod:`harness.cli.options`.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from harness.cli.display import err, out
from harness.cli.options import run_options, takes_options
from harness.cli.progress import make_display
from harness.cli.run_cmd import check_display
from harness.config import RunConfig, resolve_config
from harness.errors import EXIT_INTERRUPTED, UsageError
from harness.experiments.retry import default_retry_dir, plan_retry, retry_config
from harness.experiments.text import trials_text
from harness.experiments.trials import (
    SUMMARY_FILENAME,
    TrialsSummary,
    aggregate,
    exit_code,
    run_trials,
    write_summary,
)

__all__ = ["aggregate_cmd", "trials"]


def _warn(text: str) -> None:
    err.print(f"warning: {text}", markup=False, highlight=False)


def _show(summary: TrialsSummary, path: Path | None, *, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(summary.model_dump(mode="json"), sort_keys=True) + "\n")
        err.print(f"wrote {path}", markup=False)
    else:
        out.print(trials_text(summary, path=str(path)), markup=False, highlight=False, end="")


def _config(values: dict[str, Any], base: RunConfig | None) -> RunConfig:
    return resolve_config(
        base=None if base is None else base.model_dump(mode="json"),
        file=values.pop("config_file"),
        options=run_options(values),
        sets=values.pop("set_items") or [],
    )


@takes_options("trials")
def trials(**values: Any) -> None:
    """Run the same config N times (sequentially) and summarize the spread of every metric.

    Exit 0 when no trial failed; 1 when counts.failed.mean > 0 or --fail-under is not met;
    2 on bad usage; 3 when --retry-failed finds nothing to retry; 130 when interrupted;
    74 or 75 when a fault of the machine stopped a run (no later run, no summary).
    """
    n: int = values.pop("n")
    retry_source: Path | None = values.pop("retry_failed")
    out_dir: Path | None = values.pop("out_dir")
    summary_out: Path | None = values.pop("summary_out")
    as_json: bool = values.pop("as_json")
    display = check_display(values.pop("display"))
    retry_of = None
    if retry_source is not None:
        if n != 1:
            raise UsageError("--retry-failed reruns each failed trial once: give 1 as N")
        plan = plan_retry(retry_source, warn=_warn)
        config = retry_config(plan, _config(values, plan.config))
        retry_of = plan.describe()
        out_dir = out_dir or default_retry_dir(retry_source)
        err.print(
            f"retrying {len(plan.failures)} failed trial(s) of {len(plan.run_dirs)} run(s)",
            markup=False,
        )
    else:
        config = _config(values, None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # from here on, Ctrl-C is the runs' to handle

    def events(index: int) -> Any:
        if not as_json:
            err.print(f"=== run {index}/{n} ===", markup=False)
        return make_display(display, err, as_json=as_json)

    outcome = run_trials(
        config,
        n,
        out_dir=out_dir,
        summary_out=summary_out,
        events=events,
        warn=_warn,
        retry_of=retry_of,
        prefix="retry" if retry_of else "trials",
    )
    if outcome.stopped is not None:
        err.print(
            f"{outcome.stopped}\nno summary: once the run is resumed, "
            f"`harness aggregate {outcome.parent}` makes it",
            markup=False,
        )
    if outcome.summary is not None:
        _show(outcome.summary, outcome.summary_path, as_json=as_json)
    if outcome.interrupted:
        err.print(f"interrupted; the runs made so far are in {outcome.parent}", markup=False)
        raise typer.Exit(EXIT_INTERRUPTED)
    raise typer.Exit(outcome.exit_code)


def aggregate_cmd(
    dirs: Annotated[
        list[Path], typer.Argument(help="Dirs holding run dirs (searched recursively).")
    ],
    summary_out: Annotated[
        Path | None,
        typer.Option(
            "--summary-out",
            help=f"Where the summary goes (default with one DIR: DIR/{SUMMARY_FILENAME}; "
            "required with several).",
        ),
    ] = None,
    fail_under: Annotated[
        float | None,
        typer.Option("--fail-under", help="Exit 1 when the mean of mean reward is below this."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the summary as JSON on stdout.")
    ] = False,
) -> None:
    """Merge the runs found below DIRS (e.g. separate CI jobs) into one trials summary.

    Mixed models, harness versions or task sets are warned about, not refused: such results
    must not be used for regression conclusions. Exit codes as for `harness trials`.
    """
    if summary_out is None and len(dirs) > 1:
        raise UsageError(
            "give --summary-out FILE when aggregating several dirs (no dir's own summary is "
            "overwritten by the merge)"
        )
    summary = aggregate(dirs, warn=_warn)
    path = summary_out or Path(dirs[0]) / SUMMARY_FILENAME
    write_summary(summary, path)
    _show(summary, path, as_json=as_json)
    raise typer.Exit(exit_code(summary, fail_under))
