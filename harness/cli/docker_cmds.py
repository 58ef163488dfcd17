"""Docker-facing commands: ``images``, ``sandbox cleanup`` and ``doctor`` (display only)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from harness.backends import upkeep
from harness.cli.display import err, out
from harness.tasks import load_tasks
from sandbox.docker import admin

images_app = typer.Typer(help="Build, list and prune task images.", no_args_is_help=True)
sandbox_app = typer.Typer(help="Sandbox backends and maintenance.", no_args_is_help=True)


def _table(*columns: str, header: bool = True) -> Table:
    table = Table(show_header=header)
    for column in columns:
        table.add_column(column)
    return table


@images_app.command("build")
def images_build(
    paths: Annotated[list[Path], typer.Argument(help="Task dirs or task-set folders.")],
    base_alias: Annotated[
        list[str] | None, typer.Option("--base-alias", help="FROM=LOCAL (repeatable).")
    ] = None,
    force_build: Annotated[
        bool,
        typer.Option(
            "--force-build", help="Build environment/Dockerfile even when docker_image is set."
        ),
    ] = False,
) -> None:
    """Build (or reuse) the content-addressed image of every task with a Dockerfile."""
    report = admin.build_images(
        [task.facts() for task in load_tasks(paths)],
        base_alias or [],
        force_build=force_build,
        progress=lambda text: err.print(text, markup=False, highlight=False),
    )
    for result in report.results:
        if result.error is None:
            out.print(f"{result.task}: {result.image} ({result.source})", markup=False)
        else:
            err.print(f"[red]{escape(result.task)}: {escape(result.error)}[/red]")
    for warning in report.warnings:
        err.print(f"[yellow]warning:[/yellow] {escape(warning)}")
    raise typer.Exit(1 if any(r.error for r in report.results) else 0)


@images_app.command("list")
def images_list(
    plain: Annotated[
        bool,
        typer.Option(
            "--plain", help="One tab-separated line per image: tag, id, size MB, content hash."
        ),
    ] = False,
) -> None:
    """List task images built by the harness (whole tags), and the base image."""
    rows, has_base = admin.list_images()
    if not has_base:
        err.print(f"base image {admin.DEFAULT_IMAGE} is missing: `bash images/bootstrap-base.sh`")
    if plain:
        for row in rows:
            out.print(
                f"{row.tag}\t{row.short_id}\t{row.size_mb:.0f}\t{row.content_hash}",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
        return
    table = _table("image", "id", "size MB", "content hash")
    table.columns[0].overflow = "fold"  # a tag is never cut: its hash tells images apart
    table.columns[0].min_width = 20
    for column in table.columns[1:]:
        column.no_wrap = True
    for row in rows:
        table.add_row(row.tag, row.short_id, f"{row.size_mb:.0f}", row.content_hash)
    out.print(table)


@images_app.command("prune")
def images_prune(
    untagged: Annotated[
        bool,
        typer.Option(
            "--untagged", help="Only the untagged layers failed builds left; keep task images."
        ),
    ] = False,
) -> None:
    """Remove every image the harness built and the layers its failed builds left."""
    removed, kept = admin.prune_images(untagged_only=untagged)
    for line in kept:
        err.print(f"[yellow]{escape(line)}[/yellow]")
    out.print(f"removed {removed} image(s)")


@sandbox_app.command("cleanup")
def sandbox_cleanup(
    temp: Annotated[
        bool,
        typer.Option(
            "--temp/--no-temp",
            help="Also remove harness temp dirs (only when no harness run is active).",
        ),
    ] = True,
    run: Annotated[
        str | None,
        typer.Option(
            "--run",
            help="Remove only the objects of this run (its name); other runs are untouched.",
        ),
    ] = None,
) -> None:
    """Remove every container, volume, network and local trial cgroup the harness left."""
    report = upkeep.cleanup(run=run, temp=temp)
    counts = [f"{len(names)} {kind}(s)" for kind, names in report.removed.items()]
    out.print("removed " + ", ".join([*counts, f"{len(report.temp_dirs)} temp dir(s)"]))
    for note in report.notes:
        out.print(escape(note))
    for error in report.errors:
        err.print(f"[red]error:[/red] {escape(error)}")
    raise typer.Exit(1 if report.errors else 0)


def doctor(
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the checks, guarantees and problems as JSON.")
    ] = False,
) -> None:
    """Check the engine and say which guarantee holds on it, and how; exit 1 with fixes."""
    report = upkeep.doctor()
    if as_json:
        print(
            json.dumps(
                {
                    "checks": dict(report.checks),
                    "guarantees": [asdict(row) for row in report.guarantees],
                    "problems": report.problems,
                },
                indent=2,
            )
        )
        raise typer.Exit(1 if report.problems else 0)
    table = _table("check", "result", header=False)
    for check, result in report.checks:
        table.add_row(check, escape(result))
    out.print(table)
    if report.guarantees:
        rows = _table("guarantee", "holds", "how")
        for row in report.guarantees:
            holds = "[green]yes[/green]" if row.holds else "[yellow]no[/yellow]"
            rows.add_row(row.name, holds, escape(row.how))
        out.print(rows)
    for problem in report.problems:
        err.print(f"[red]problem:[/red] {escape(problem)}")
    raise typer.Exit(1 if report.problems else 0)
