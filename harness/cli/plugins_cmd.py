"""``harness agents list``, ``harness sandbox list``, ``harness executors list``: plug-ins."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from harness.agents.registry import AGENTS, build_agent
from harness.backends.registry import SANDBOXES
from harness.cli.display import out
from harness.config import AgentConfig
from harness.errors import AgentConfigError
from harness.executors.registry import EXECUTORS
from harness.registry import PluginInfo, Registry

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
    """List installed agents: name, kind, model use, pinned version, package, description."""
    table = _table("name", "kind", "model", "version", "from", "description")
    for info in AGENTS.describe():
        kind = getattr(info.loaded, "kind", "-")
        model = getattr(info.loaded, "model_use", "-")
        summary = info.error or info.summary
        # An installed CLI's pinned version (agent.version overrides it); "-" for the others.
        pinned = getattr(info.loaded, "default_version", "") or "-"
        table.add_row(info.plugin.name, kind, model, pinned, _source(info), summary)
    table.add_row(
        "python:MODULE:CLASS",
        "harness",
        "optional",
        "-",
        "your code",
        "Trusted Python run in the "
        "harness: its run(context) acts through context.exec and context.chat",
    )
    out.print(table)


@agents_app.command("install")
def agents_install(
    names: Annotated[
        list[str] | None, typer.Argument(help="Installed agent CLIs (default: all of them).")
    ] = None,
    version: Annotated[
        str | None, typer.Option(help="The version to fetch instead of the pinned one.")
    ] = None,
) -> None:
    """Fetch agent CLIs into the host's cache now (runs fetch them on first use anyway)."""
    from harness.agents.installed import InstalledAgent  # the listing needs none of it

    if not names:
        names = [
            info.plugin.name
            for info in AGENTS.describe()
            if isinstance(info.loaded, type) and issubclass(info.loaded, InstalledAgent)
        ]
    for name in names:
        agent = build_agent(AgentConfig(name=name, version=version))
        if not isinstance(agent, InstalledAgent):
            raise AgentConfigError(f"{name} is not an installed agent CLI; nothing to fetch")
        entry = agent.install()
        out.print(f"{name} {agent.version}: {entry.path}")


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
