"""``harness agents list``, ``harness sandbox list``, ``harness executors list``: plug-ins."""

from __future__ import annotations

import typer
from rich.table import Table

from harness.cli.display import out
from harness.plugins import AGENTS, EXECUTORS, SANDBOXES, PluginInfo, Registry

agents_app = typer.Typer(help="Agents under evaluation (installed plug-ins).", no_args_is_help=True)
executors_app = typer.Typer(
    help="Where trials run: local, ray (installed plug-ins).", no_args_is_help=True
)


def _table(*columns: str) -> Table:
    table = Table()
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def _source(info: PluginInfo) -> str:
    plugin = info.plugin
    where = plugin.distribution or "in-process"
    version = f" {plugin.version}" if plugin.version else ""
    return f"{where}{version} ({plugin.target})"


@agents_app.command("list")
def agents_list() -> None:
    """List installed agents: name, kind, model use, package, description."""
    table = _table("name", "kind", "model", "from", "description")
    for info in AGENTS.describe():
        kind = getattr(info.loaded, "kind", "-")
        model = getattr(info.loaded, "model_use", "-")
        table.add_row(info.plugin.name, kind, model, _source(info), info.error or info.summary)
    table.add_row(
        "python:MODULE:CLASS",
        "harness",
        "optional",
        "your code",
        "Trusted Python run in the "
        "harness: its run(context) acts through context.exec and context.chat",
    )
    out.print(table)


def _list(registry: Registry[type]) -> None:
    table = _table("name", "from", "description")
    for info in registry.describe():
        table.add_row(info.plugin.name, _source(info), info.error or info.summary)
    out.print(table)


def sandbox_list() -> None:
    """List installed sandbox backends: name, package, description."""
    _list(SANDBOXES)


@executors_app.command("list")
def executors_list() -> None:
    """List installed trial executors: name, package, description."""
    _list(EXECUTORS)
