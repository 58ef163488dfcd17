"""The ``harness`` command line: parsing and display over the library (typer).

Every command calls the library and shows what it returns. An error of the library
(:class:`~harness.errors.HarnessError`) is printed as ``error: ...`` and ends the process
with the code :func:`~harness.errors.exit_code_for` maps it to, here and nowhere else.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from harness._version import __version__
from harness.cli.datasets_cmd import datasets_app
from harness.cli.display import print_error
from harness.cli.docker_cmds import doctor, images_app, sandbox_app
from harness.cli.experiment_cmd import experiment
from harness.cli.export_cmd import export
from harness.cli.models_cmd import models_app
from harness.cli.plugins_cmd import agents_app, executors_app, sandbox_list
from harness.cli.regrade_cmd import regrade_cmd
from harness.cli.report_cmd import report, view
from harness.cli.run_cmd import run
from harness.cli.tasks_cmd import tasks_app
from harness.cli.trials_cmd import aggregate_cmd, trials
from harness.errors import HarnessError, exit_code_for

app = typer.Typer(
    name="harness",
    help="Evaluate AI agents on tasks in isolated sandboxes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"harness {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Evaluate AI agents on tasks in isolated sandboxes."""


app.command()(run)
app.command("trials")(trials)
app.command("aggregate")(aggregate_cmd)
app.command("experiment")(experiment)
app.command("regrade")(regrade_cmd)
app.command("export")(export)
app.command("doctor")(doctor)
app.command("report")(report)
app.command("view")(view)
app.add_typer(tasks_app, name="tasks")
app.add_typer(datasets_app, name="datasets")
app.add_typer(agents_app, name="agents")
app.add_typer(executors_app, name="executors")
app.add_typer(models_app, name="models")
app.add_typer(images_app, name="images")
app.add_typer(sandbox_app, name="sandbox")
sandbox_app.command("list")(sandbox_list)


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except HarnessError as exc:
        print_error(str(exc))
        sys.exit(exit_code_for(exc))
