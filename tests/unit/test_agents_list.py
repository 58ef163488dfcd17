"""``harness agents list`` reads well in an 80-column terminal.

The real CLI, in a subprocess whose terminal is 80 columns wide (``COLUMNS``): every line
fits, and every installed agent's name and pinned version stand whole in their cells.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest
from rich.console import Console

from harness.agents.registry import AGENTS
from harness.cli import plugins_cmd
from harness.registry import Plugin, PluginInfo

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def agents_list(columns: int) -> list[str]:
    """The lines ``harness agents list`` prints in a terminal ``columns`` wide."""
    env = {**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1", "TERM": "dumb"}
    env.pop("LINES", None)
    done = subprocess.run(
        [sys.executable, "-m", "harness", "agents", "list"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def first_cells(lines: list[str]) -> dict[str, list[str]]:
    """Each table row's cells by the text of its first cell (rows with a name only)."""
    rows: dict[str, list[str]] = {}
    for line in lines:
        if not line.startswith("│"):
            continue
        cells = [cell.strip() for cell in line.strip("│").split("│")]
        if cells[0]:
            rows[cells[0]] = cells
    return rows


@pytest.mark.parametrize("columns", [80, 200])
def test_every_line_fits_and_every_agent_is_named_whole(columns: int) -> None:
    lines = agents_list(columns)
    assert lines, "nothing listed"
    too_wide = [line for line in lines if len(line) > columns]
    assert too_wide == [], "\n".join(too_wide)
    rows = first_cells(lines)
    for info in AGENTS.describe():
        name = info.plugin.name
        assert name in rows, (name, "\n".join(lines))
        version = getattr(info.loaded, "default_version", "") or "-"
        # The name and the pinned version are never wrapped, folded or cut short.
        assert rows[name][1] == version, (name, rows[name])
    assert "python:MODULE:CLASS" in rows
    # Every installed CLI's pinned version is in full (no ellipsis anywhere).
    assert not any("…" in line for line in lines)


def test_the_description_column_is_not_squeezed_at_80_columns() -> None:
    lines = agents_list(80)
    header = next(line for line in lines if "description" in line)
    widths = [len(cell) for cell in header.strip("┃").split("┃")]
    # name and version take what they need; the description gets the rest, over 40.
    assert widths[-1] > 40, header


class _Described:
    """A registry whose one entry is a plug-in named and described with brackets."""

    def describe(self) -> list[PluginInfo]:
        class Loaded:
            kind = "sandbox"
            model_use = "required"
            default_version = "1.0[rc1]"

        plugin = Plugin("my[agent]", "pkg.mod:Cls", "my-dist", "2.0")
        return [PluginInfo(plugin, summary="Runs [bold]x[/bold] as written.", loaded=Loaded)]


def test_a_plugins_name_and_description_are_shown_as_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Rich reads markup in a plain string cell: a bracketed word would vanish.
    monkeypatch.setattr(plugins_cmd, "AGENTS", _Described())
    console = Console(width=80, file=io.StringIO(), color_system=None)
    console.print(plugins_cmd.agents_table())
    text = console.file.getvalue()  # type: ignore[attr-defined]
    rows = first_cells(text.splitlines())
    assert rows["my[agent]"][1] == "1.0[rc1]", text
    assert "Runs [bold]x[/bold] as written." in text
    assert "my-dist 2.0" in text and "(pkg.mod:Cls)" in text  # a plug-in's entry point
