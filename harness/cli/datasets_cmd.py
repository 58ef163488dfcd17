"""``harness datasets list|download|clear``: what a registry offers, fetching, the cache."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from harness.cli.display import err, out
from harness.config import DatasetsConfig
from harness.datasets import TaskCache, load_registry, repo_dataset, resolve

datasets_app = typer.Typer(
    help="Datasets by name: a registry's task sets, fetched and cached (docs/datasets.md).",
    no_args_is_help=True,
)

_REGISTRY_PATH = typer.Option("--registry-path", help="A local registry.json.")
_REGISTRY_URL = typer.Option(
    "--registry-url", help="A registry.json URL (default: $HARNESS_REGISTRY_URL, else Harbor's)."
)
_HUB_URL = typer.Option(
    "--hub-url", help="The Harbor Hub to read (default: $HARNESS_HUB_URL, else Harbor's)."
)
_REPO = typer.Option(
    "--repo", help="A git repository of task dirs: OWNER/NAME or OWNER/NAME@REF, a URL or a path."
)


@datasets_app.command("list")
def datasets_list(
    registry_path: Annotated[Path | None, _REGISTRY_PATH] = None,
    registry_url: Annotated[str | None, _REGISTRY_URL] = None,
    repo: Annotated[str | None, _REPO] = None,
) -> None:
    """Show the datasets a registry (or a repository) offers."""
    if repo is not None:
        dataset, warnings = repo_dataset(repo)
        datasets, source = [dataset], f"repo:{repo}"
        for line in warnings:
            err.print(f"[yellow]warning:[/yellow] {escape(line)}", highlight=False)
    else:
        path = str(registry_path.absolute()) if registry_path is not None else None
        registry = load_registry(path=path, url=registry_url)
        datasets, source = registry.datasets, registry.source
    table = Table(title=escape(source), title_justify="left")
    for column in ("dataset", "version", "tasks", "description"):
        table.add_column(column)
    for dataset in datasets:
        table.add_row(
            escape(dataset.name),
            escape(dataset.version),
            str(len(dataset.tasks)),
            escape(dataset.description),
        )
    out.print(table)


@datasets_app.command("download")
def datasets_download(
    datasets: Annotated[
        list[str] | None,
        typer.Argument(help="Each dataset to fetch: ORG/NAME\\[@REF] (Hub), NAME\\[@VERSION]."),
    ] = None,
    task: Annotated[
        list[str] | None,
        typer.Option(
            "--task", "-t", help="One task: ORG/NAME\\[@REF] (Hub), TASK or DATASET@VERSION/TASK."
        ),
    ] = None,
    registry_path: Annotated[Path | None, _REGISTRY_PATH] = None,
    registry_url: Annotated[str | None, _REGISTRY_URL] = None,
    repo: Annotated[str | None, _REPO] = None,
    hub_url: Annotated[str | None, _HUB_URL] = None,
) -> None:
    """Fetch datasets into the cache without running them; print where each task is."""
    config = DatasetsConfig(
        names=datasets or [],
        tasks=task or [],
        registry_path=str(registry_path.absolute()) if registry_path is not None else None,
        registry_url=registry_url,
        repo=repo,
        hub_url=hub_url,
    )
    resolved = resolve(config)
    for locked, task_dir in zip(resolved.lock.tasks, resolved.task_dirs, strict=True):
        out.print(
            f"{escape(locked.dataset)}\t{escape(locked.name)}\t"
            f"{locked.digest or locked.commit[:12]}\t"
            f"{locked.content_hash}\t{escape(str(task_dir))}",
            highlight=False,
        )
    err.print(f"{len(resolved.task_dirs)} task(s) in {escape(str(TaskCache().root))}")


@datasets_app.command("clear")
def datasets_clear() -> None:
    """Remove every cached task (they are fetched again when next used)."""
    cache = TaskCache()
    count = cache.clear()
    err.print(f"removed {count} cached task(s) from {escape(str(cache.root))}")
