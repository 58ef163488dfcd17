"""The ``harness`` command line (typer)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console

from harness.cli.display import print_summary, print_task_list, progress_line
from harness.config import RunConfig
from harness.errors import UsageError
from harness.run import EXIT_USAGE, execute_run, prepare_run
from harness.tasks import TaskSetError, check_tasks
from sandbox.credentials import CredentialStore
from sandbox.local import NOT_A_BOUNDARY, is_root

app = typer.Typer(
    name="harness",
    help="Evaluate AI agents on tasks in isolated sandboxes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
tasks_app = typer.Typer(help="Inspect and validate task sets.", no_args_is_help=True)
app.add_typer(tasks_app, name="tasks")


def _register_docker_commands() -> None:
    from harness.cli.docker_cmds import doctor, images_app, sandbox_app

    app.add_typer(images_app, name="images")
    app.add_typer(sandbox_app, name="sandbox")
    app.command("doctor")(doctor)


_register_docker_commands()


def _register_export_command() -> None:
    from harness.cli.export_cmd import export

    app.command("export")(export)


_register_export_command()


def _register_models_command() -> None:
    from harness.cli.models_cmd import models_app

    app.add_typer(models_app, name="models")


_register_models_command()

err = Console(stderr=True, highlight=False, soft_wrap=True)
out = Console(highlight=False, soft_wrap=True)


def _fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    for line in message.splitlines() or [message]:
        err.print(f"[red]error:[/red] {line}", markup=True, highlight=False)
    return typer.Exit(code)


def _validation_message(exc: ValidationError) -> str:
    lines = []
    for item in exc.errors():
        where = ".".join(str(p) for p in item["loc"]) or "config"
        lines.append(f"{where}: {item['msg']}")
    return "\n".join(lines)


@app.command()
def run(
    paths: Annotated[list[Path], typer.Argument(help="Task dirs or task-set folders.")],
    agent: Annotated[str, typer.Option("--agent", "-a", help="oracle, nop or command.")] = "oracle",
    agent_cmd: Annotated[
        str | None,
        typer.Option(
            "--agent-cmd",
            help="Command for --agent command; {instruction_file} and {workspace} are filled "
            "in, and the instruction is also on stdin.",
        ),
    ] = None,
    sandbox: Annotated[str, typer.Option("--sandbox", help="local or docker.")] = "local",
    runtime: Annotated[
        str | None,
        typer.Option("--runtime", help="Container runtime for --sandbox docker (e.g. runsc)."),
    ] = None,
    base_alias: Annotated[
        list[str] | None,
        typer.Option(
            "--base-alias",
            help="FROM=LOCAL: rewrite a Dockerfile FROM image at build time (repeatable).",
        ),
    ] = None,
    rollouts: Annotated[int, typer.Option("--rollouts", "-r", help="Trials per task.")] = 1,
    concurrency: Annotated[
        int, typer.Option("--concurrency", "-j", help="Trials running at once.")
    ] = 1,
    num_tasks: Annotated[
        int | None, typer.Option("--num-tasks", "-n", help="Run only the first N tasks.")
    ] = None,
    shuffle: Annotated[bool, typer.Option("--shuffle", help="Shuffle tasks (seeded).")] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed for --shuffle.")] = 0,
    output_dir: Annotated[
        Path, typer.Option("--output-dir", "-o", help="Where run dirs are created.")
    ] = Path("runs"),
    fail_under: Annotated[
        float | None,
        typer.Option("--fail-under", help="Exit 1 when the mean reward is below this."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the summary as JSON on stdout.")
    ] = False,
) -> None:
    """Run an agent on tasks and grade every trial."""
    try:
        config = RunConfig(
            paths=[str(p) for p in paths],
            agent=agent,
            agent_cmd=agent_cmd,
            sandbox=sandbox,  # type: ignore[arg-type]  # validated by pydantic
            runtime=runtime,
            base_aliases=base_alias or [],
            rollouts=rollouts,
            concurrency=concurrency,
            num_tasks=num_tasks,
            shuffle=shuffle,
            seed=seed,
            output_dir=str(output_dir),
            fail_under=fail_under,
        )
    except ValidationError as exc:
        raise _fail(_validation_message(exc)) from None
    credentials = CredentialStore()
    # Provider keys leave os.environ before any trial process can inherit them.
    credentials.hide_from_env()
    try:
        try:
            prepared = prepare_run(config)
        except (UsageError, TaskSetError) as exc:
            raise _fail(str(exc)) from None
        if config.sandbox == "local" and not is_root():
            err.print(f"[yellow]warning:[/yellow] {NOT_A_BOUNDARY}")
        if not as_json:
            err.print(
                f"running {len(prepared.plans)} trial(s) of {len(prepared.tasks)} task(s) "
                f"with agent {prepared.agent.name} in the {config.sandbox} sandbox"
            )
        outcome = execute_run(
            prepared,
            on_record=None if as_json else lambda r, n, t: err.print(progress_line(r, n, t)),
            on_interrupt=lambda message: err.print(f"[yellow]{message}[/yellow]"),
        )
    finally:
        credentials.restore_env()
    if as_json:
        data = {"run_dir": str(outcome.run_dir), **outcome.summary.model_dump(mode="json")}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        print_summary(out, outcome)
    raise typer.Exit(outcome.exit_code)


@tasks_app.command("list")
def tasks_list(
    paths: Annotated[list[Path], typer.Argument(help="Task dirs or task-set folders.")],
) -> None:
    """List the tasks of a task set."""
    tasks, problems = check_tasks(paths)
    print_task_list(out, tasks)
    for problem in problems:
        err.print(f"[red]invalid:[/red] {problem}", highlight=False)
    if problems:
        raise typer.Exit(EXIT_USAGE)


@tasks_app.command("check")
def tasks_check(
    paths: Annotated[list[Path], typer.Argument(help="Task dirs or task-set folders.")],
) -> None:
    """Validate tasks; exit 2 listing every problem when any task is invalid."""
    tasks, problems = check_tasks(paths)
    for problem in problems:
        err.print(f"[red]error:[/red] {problem}", highlight=False)
    for task in tasks:
        for key in task.unknown_keys:
            err.print(f"[yellow]note:[/yellow] {task.path / 'task.toml'}: unknown key {key} kept")
    if problems:
        err.print(f"{len(problems)} problem(s); {len(tasks)} valid task(s)")
        raise typer.Exit(EXIT_USAGE)
    out.print(f"{len(tasks)} task(s) OK")


def main() -> None:
    """Console-script entry point."""
    app()
