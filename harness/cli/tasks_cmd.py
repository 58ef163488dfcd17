"""``harness tasks list|check|migrate``: a task set's tasks, its problems, TB1 conversion."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from harness.cli.display import err, out, print_task_list
from harness.errors import EXIT_USAGE
from harness.judges import judge_problems
from harness.runner.task_check import check_against_engine
from harness.tasks import check_tasks
from harness.tasks.migrate_tb1 import migrate_tasks

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
    sandbox: Annotated[
        str,
        typer.Option(
            "--sandbox",
            help="Also check each task against this backend's engine (CPUs, memory, GPUs), "
            "when it answers; `none`: the static checks only.",
        ),
    ] = "docker",
    runtime: Annotated[
        str | None, typer.Option("--runtime", help="The docker backend's runtime (runsc).")
    ] = None,
) -> None:
    """Validate tasks; exit 2 listing every problem when any task is invalid."""
    tasks, found = check_tasks(paths)
    problems: list[object] = [*found, *judge_problems(tasks)]  # [[verifier.judges]]
    checked = check_against_engine(tasks, sandbox, runtime)
    out.print(escape(checked.said), highlight=False)
    problems += checked.problems
    tasks = [task for task in tasks if task.key not in checked.refused]
    for problem in problems:
        err.print(f"[red]error:[/red] {escape(str(problem))}", highlight=False)
    for task in tasks:
        for key in task.unknown_keys:
            warning = escape(
                f"{task.path / 'task.toml'}: {key}: unknown key (ignored; a typo, or a newer "
                "Harbor key this harness does not know)"
            )
            err.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)
        if task.config.environment.docker_image and task.dockerfile is not None:
            note = escape(
                f"{task.path / 'task.toml'}: docker_image and environment/Dockerfile: the "
                "image is pulled; --force-build builds it"
            )
            err.print(f"[cyan]note:[/cyan] {note}", highlight=False)
    if problems:
        err.print(f"{len(problems)} problem(s); {len(tasks)} valid task(s)")
        raise typer.Exit(EXIT_USAGE)
    out.print(f"{len(tasks)} task(s) OK")


@tasks_app.command("migrate")
def tasks_migrate(
    sources: Annotated[
        list[Path], typer.Argument(help="Terminal-Bench 1 task dirs or dirs of them.")
    ],
    dest: Annotated[Path, typer.Option("--output", "-o", help="Where the Harbor task dirs go.")],
    allow_internet: Annotated[
        bool,
        typer.Option(
            "--allow-internet",
            # \\[: help is rich markup, where [environment] would vanish as a style tag.
            help="Write \\[environment] allow_internet = true (TB1 tasks ran with the network).",
        ),
    ] = False,
) -> None:
    """Convert Terminal-Bench 1 tasks into Harbor task dirs; exit 2 if any failed."""
    results, problems = migrate_tasks(sources, dest, allow_internet=allow_internet)
    for problem in problems:
        err.print(f"[red]error:[/red] {escape(problem)}", highlight=False)
    failed = 0
    for result in results:
        if result.error is not None:
            failed += 1
            err.print(f"[red]failed:[/red] {escape(result.source.name)}: {escape(result.error)}")
            continue
        for note in result.notes:
            err.print(f"[yellow]note:[/yellow] {escape(result.source.name)}: {escape(note)}")
    out.print(f"{len(results) - failed} task(s) migrated into {escape(str(dest))}; {failed} failed")
    if failed or problems:
        raise typer.Exit(EXIT_USAGE)
