"""``harness report`` and ``harness view``: see runs in a browser."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from harness.cli.display import out, print_error
from harness.errors import exit_code_for
from harness.experiments.runs import expand_run_dirs
from harness.report import make_server, write_report

__all__ = ["report", "view"]

RunDirs = Annotated[
    list[Path],
    typer.Argument(
        help="Run directories (runs/<name>); two or more are compared. A trials parent or an "
        "experiment dir stands for every run dir below it."
    ),
]


def report(
    run_dirs: RunDirs,
    output: Annotated[Path, typer.Option("--output", "-o", help="The HTML file to write.")] = Path(
        "report.html"
    ),
) -> None:
    """Write one self-contained HTML report of the runs (no network, works from file://)."""
    try:
        size = write_report(expand_run_dirs(run_dirs), output)
    except OSError as exc:
        print_error(f"cannot write {output}: {exc}")
        raise typer.Exit(exit_code_for(exc)) from None
    out.print(f"wrote {output} ({size / 1024:,.0f} KiB)", markup=False)


def view(
    run_dirs: RunDirs,
    port: Annotated[
        int, typer.Option("--port", "-p", help="Port on 127.0.0.1 (0 picks a free one).")
    ] = 8765,
) -> None:
    """Serve the report's pages on 127.0.0.1, following runs in progress live."""
    try:
        server = make_server(expand_run_dirs(run_dirs), port=port)
    except OSError as exc:
        print_error(f"cannot listen on 127.0.0.1:{port}: {exc} (try --port 0)")
        raise typer.Exit(exit_code_for(exc)) from None
    out.print(f"serving {server.url} (Ctrl-C to stop)", markup=False)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
