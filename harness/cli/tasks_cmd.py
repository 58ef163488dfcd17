"""``harness tasks list|check``: a task set's tasks, and every problem with them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from harness.cli.display import err, out, print_task_list
from harness.errors import EXIT_USAGE
from harness.judges import judge_problems
from harness.tasks import check_tasks

tasks_app = typer.Typer(help="Inspect and validate task sets.", no_args_is_help=True)


@tasks_app.command("list")
def tasks_list(
    paths: Annotated[list[Path], typer.Argument(help="Task dirs or task-set folders.")],
) -> None:
    """List the tasks of a task set."""
    tasks, problems = check_tasks(paths)
    print_task_list(out, tasks)
    for problem in problems:
        err.print(f"[red]invalid:[/red] {escape(str(problem))}", highlight=False)
    if problems:
        raise typer.Exit(EXIT_USAGE)


@tasks_app.command("check")
def tasks_check(
    paths: Annotated[list[Path], typer.Argument(help="Task dirs or task-set folders.")],
) -> None:
    """Validate tasks; exit 2 listing every problem when any task is invalid."""
    tasks, found = check_tasks(paths)
    problems = [*found, *judge_problems(tasks)]  # [[verifier.judges]] (docs/judges.md)
    for problem in problems:
        err.print(f"[red]error:[/red] {escape(str(problem))}", highlight=False)
    for task in tasks:
        for key in task.unknown_keys:
            warning = escape(
                f"{task.path / 'task.toml'}: {key}: unknown key (ignored; a typo, or a newer "
                "Harbor key this harness does not know)"
            )
            err.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)
    if problems:
        err.print(f"{len(problems)} problem(s); {len(tasks)} valid task(s)")
        raise typer.Exit(EXIT_USAGE)
    out.print(f"{len(tasks)} task(s) OK")
