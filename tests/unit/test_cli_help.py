"""Every help text of the CLI reads as written: no ``[word]`` lost to rich markup.

Typer renders help as rich markup, where ``[ray]`` or ``[tasks]`` is a style tag and
disappears (``pip install 'harness'``). A help text that means the brackets escapes them
(``\\[ray]``); this walks every command and option and fails on one that does not.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import typer.main

from harness.cli.app import app

#: What rich's markup parser takes for a tag (rich.markup.RE_TAGS): ``\\[`` escapes it.
TAG = re.compile(r"(\\*)\[([a-z#/@][^[]*?)]")


def _help_texts(command: Any, path: str) -> Iterator[tuple[str, str]]:
    # Duck-typed: typer ships its own copy of click, whose classes are not click's.
    yield path, command.help or ""
    for param in command.params:
        yield f"{path} {param.name}", getattr(param, "help", None) or ""
    for name, sub in (getattr(command, "commands", None) or {}).items():
        yield from _help_texts(sub, f"{path} {name}")


def test_no_help_text_loses_a_bracketed_word_to_markup() -> None:
    texts = list(_help_texts(typer.main.get_command(app), "harness"))
    assert len(texts) > 100  # not vacuous: every command and option is walked
    lost = [
        f"{where}: {match.group(0)!r} in {text!r}"
        for where, text in texts
        for match in TAG.finditer(text)
        if not match.group(1)
    ]
    assert not lost, (
        "rich would render these as markup and drop the bracketed word:\n  "
        + "\n  ".join(lost)
        + "\nFix: escape the bracket (\\\\[word] in the Python string)."
    )


def test_the_ray_executor_names_its_extra() -> None:
    option = next(
        p for p in typer.main.get_command(app).commands["run"].params if p.name == "executor"
    )
    assert "harness\\[ray]" in (option.help or "")  # pyproject's optional-dependencies.ray
