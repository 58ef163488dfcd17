"""``harness export``: write a run's trials as trajectories (ATIF)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from harness.cli.display import out, print_error
from harness.errors import exit_code_for
from harness.export import SUPPORTED_FORMATS, export_run
from harness.records.layout import TRIALS_DIRNAME

__all__ = ["export"]


def export(
    run_dir: Annotated[Path, typer.Argument(help="The run directory (holding trials.jsonl).")],
    fmt: Annotated[
        str,
        typer.Option("--format", help=f"Export format: {', '.join(SUPPORTED_FORMATS)}."),
    ] = "atif",
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Write <OUTPUT>/<trial-id>/trajectory.json instead of "
            "<RUN_DIR>/trials/<trial-id>/agent/trajectory.json.",
        ),
    ] = None,
) -> None:
    """Export every trial of a run as a trajectory file (latest record per trial)."""
    try:
        paths = export_run(run_dir, fmt, output)
    except OSError as exc:
        print_error(f"cannot write trajectories: {exc}")
        raise typer.Exit(exit_code_for(exc)) from None
    where = output if output is not None else Path(run_dir) / TRIALS_DIRNAME
    out.print(f"wrote {len(paths)} {fmt} trajectories under {where}", markup=False)
