"""``harness agents list``, ``harness sandbox list``, ``harness executors list``: plug-ins."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

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
    """List installed agents: name, pinned version, description, kind, model use, package."""
    out.print(agents_table())


#: The pseudo-agent row: trusted Python named by its module and class.
PYTHON_AGENT_ROW = (
    "python:MODULE:CLASS",
    "-",
    "Trusted Python run in the harness: its run(context) acts through context.exec and "
    "context.chat",
    "harness agent, model optional, your code",
)


def agents_table() -> Table:
    """The agents as ``harness agents list`` prints them, readable at 80 columns.

    Three columns, the name and the pinned version never wrapped (``-`` for an agent that
    installs nothing; ``agent.version`` overrides it); the description wraps, followed by
    a dim line with the agent's kind, its model use and the package it comes from (a
    plug-in's with its entry point).
    """
    table = Table()
    table.add_column("name", no_wrap=True)
    table.add_column("version", no_wrap=True)
    table.add_column("description", overflow="fold", ratio=1)
    rows = []
    for info in AGENTS.describe():
        kind = getattr(info.loaded, "kind", "-")
        model = getattr(info.loaded, "model_use", "-")
        pinned = getattr(info.loaded, "default_version", "") or "-"
        plugin = info.plugin
        # The harness's own agents are named by their package alone: their entry point
        # (a module path up to 52 characters) would fold at 80 columns, and says little.
        where = _source(info) if plugin.distribution != "harness" else f"harness {plugin.version}"
        detail = f"{kind} agent, model {model}, {where}"
        rows.append((info.plugin.name, pinned, info.error or info.summary, detail))
    rows.append(PYTHON_AGENT_ROW)
    for name, pinned, summary, detail in rows:
        # Text, not str: a plug-in's name or docstring is shown as written, never as markup.
        table.add_row(Text(name), Text(pinned), Text.assemble(summary, "\n", (detail, "dim")))
    return table


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
