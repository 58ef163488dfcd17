"""The README shows only commands and options the CLI has, and links only into the repo.

The README once listed ``harness run``'s options by hand and drifted (``--env`` and
``--evidence`` were missing). Now it shows a few commands and points to ``--help``; these
tests keep what it does show true: every ``harness ...`` line of its code blocks names a
real command with options that command takes, every ``--option`` named in its prose exists
on some command, and every link is a file of this repository.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import typer.main

from harness.cli.app import app

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"


# Typer's commands and groups (its own copy of click's classes): a group has ``commands``.
def _cli() -> Any:
    group = typer.main.get_command(app)
    assert _is_group(group) and "run" in group.commands
    return group


def _is_group(command: Any) -> bool:
    return isinstance(getattr(command, "commands", None), dict)


def _options(command: Any) -> set[str]:
    return {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)} | {"--help"}


def _all_commands(command: Any) -> list[Any]:
    found = [command]
    if _is_group(command):
        for sub in command.commands.values():
            found.extend(_all_commands(sub))
    return found


def _readme_command_lines() -> list[str]:
    text = README.read_text(encoding="utf-8")
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            line = line.split("  #", 1)[0].strip()
            if line.startswith((".venv/bin/harness", "harness ")):
                lines.append(line)
    return lines


def test_every_command_line_of_the_readme_parses_against_the_cli() -> None:
    lines = _readme_command_lines()
    assert len(lines) >= 8, lines
    bad = []
    for line in lines:
        words = shlex.split(line)[1:]
        command = _cli()
        path = ["harness"]
        while _is_group(command) and words and not words[0].startswith("-"):
            name = words.pop(0)
            if name not in command.commands:
                bad.append(f"{line}: no command {' '.join([*path, name])}")
                break
            command = command.commands[name]
            path.append(name)
        else:
            known = _options(command)
            for word in words:
                option = word.split("=", 1)[0]
                if option.startswith("-") and option not in known:
                    bad.append(f"{line}: {' '.join(path)} has no option {option}")
    assert not bad, "README.md shows what the CLI does not have:\n  " + "\n  ".join(bad)


def test_every_option_the_readme_names_exists() -> None:
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", README.read_text(encoding="utf-8")))
    known = set().union(*(_options(c) for c in _all_commands(_cli())))
    assert named, "the README names no option: this test would be vacuous"
    assert not named - known, f"README.md names options no command has: {sorted(named - known)}"


def test_every_link_of_the_readme_is_a_file_of_the_repo() -> None:
    links = re.findall(r"\]\(([^)]+)\)", README.read_text(encoding="utf-8"))
    assert links
    outside = [link for link in links if re.match(r"[a-z]+:", link) or link.startswith("/")]
    missing = [link for link in links if not (REPO / link.split("#", 1)[0]).exists()]
    assert not outside, f"README.md links outside the repository: {outside}"
    assert not missing, f"README.md links to files that do not exist: {missing}"
