"""The run options are declared once (harness/cli/options.py) and everything follows from it.

``harness run``, ``trials`` and ``experiment`` take exactly the options of the table, each in
a ``--help`` panel; ``harness run --help`` reads at 80 columns in at most 120 lines; every
option's config key is a real key of :class:`RunConfig`, and every config key either has an
option or is listed as config-only; the option table of docs/configuration.md is the one
the table makes.
"""

from __future__ import annotations

import os
import re
import typing
from pathlib import Path
from typing import Any

import pydantic
import typer.main
from support.cli import harness

from harness.cli.app import app
from harness.cli.options import (
    COMMANDS,
    CONFIG_ONLY,
    OPTIONS,
    PANELS,
    options_markdown,
    options_of,
    run_options,
)
from harness.config import RunConfig, resolve_config

REPO = Path(__file__).resolve().parents[2]
CONFIGURATION_MD = REPO / "docs" / "configuration.md"
#: The typed help of a command at 80 columns, as a user with an 80-column terminal sees it.
NARROW = {"COLUMNS": "80", "TERMINAL_WIDTH": "80"}


def _command(name: str) -> Any:
    return typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]


def test_run_help_at_80_columns_is_grouped_in_at_most_120_lines() -> None:
    done = harness("run", "--help", env=NARROW)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) <= 120, f"harness run --help is {len(lines)} lines at 80 columns"
    assert max(len(line) for line in lines) <= 80
    titles = re.findall(r"╭─ (.+?) ─", done.stdout)
    assert titles == ["Arguments", *PANELS], titles


def test_every_option_of_the_run_commands_is_in_a_panel_of_the_table() -> None:
    for name in COMMANDS:
        for param in _command(name).params:
            if param.param_type_name == "argument" or param.name == "help":
                continue
            assert param.rich_help_panel in PANELS, (name, param.name, param.rich_help_panel)


def test_the_commands_take_exactly_the_options_of_the_table() -> None:
    for name in COMMANDS:
        taken = {p.name: tuple([*p.opts, *p.secondary_opts]) for p in _command(name).params}
        declared = {
            o.name: tuple(part for flag in o.flags for part in flag.split("/"))
            or (o.metavar or o.name,)
            for o in options_of(name)
        }
        arguments = {p.name for p in _command(name).params if p.param_type_name == "argument"}
        for argument in arguments:  # click names an argument by its metavar or name
            taken[argument] = declared[argument]
        assert taken == declared, name


def _field_at(key: str) -> pydantic.fields.FieldInfo | None:
    """The config field at a dotted key; None when the key reaches into a free-form dict."""
    model: Any = RunConfig
    field = None
    for part in key.split("."):
        assert isinstance(model, type) and issubclass(model, pydantic.BaseModel), key
        assert part in model.model_fields, f"{key}: {model.__name__} has no field {part!r}"
        field = model.model_fields[part]
        annotation = field.annotation
        if typing.get_origin(annotation) is dict:
            return None  # agent.kwargs.max_turns: a key of the agent's own options
        model = annotation
    return field


def test_each_option_sets_a_real_config_key_of_its_shape() -> None:
    keyed = [option for option in OPTIONS if option.key is not None]
    assert len(keyed) > 40
    for option in keyed:
        assert option.key is not None
        field = _field_at(option.key)
        if field is None:
            continue
        is_list = typing.get_origin(option.kind) is list
        assert (typing.get_origin(field.annotation) is list) == is_list, option.key


def _leaf_keys(model: type[pydantic.BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
            keys += _leaf_keys(annotation, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return keys


def test_every_config_key_has_an_option_or_is_listed_as_config_only() -> None:
    option_keys = {option.key for option in OPTIONS if option.key is not None}
    for key in CONFIG_ONLY:
        _field_at(key)  # a real key (or section)
        assert key not in option_keys, f"{key} has an option and is listed as config-only"
    missing = [
        key
        for key in _leaf_keys(RunConfig)
        if key not in option_keys
        and not any(key == only or key.startswith(f"{only}.") for only in CONFIG_ONLY)
    ]
    assert not missing, (
        f"config keys with no option and not in CONFIG_ONLY: {missing}; declare an option "
        "for each in harness/cli/options.py, or list it in CONFIG_ONLY"
    )


def test_every_flag_the_config_model_names_is_an_option() -> None:
    text = (REPO / "harness" / "config" / "model.py").read_text(encoding="utf-8")
    named = set(re.findall(r"``(--[a-z][a-z0-9-]*)", text))
    flags = {part for option in OPTIONS for flag in option.flags for part in flag.split("/")}
    assert named, "harness/config/model.py names no flag: this test would be vacuous"
    assert not named - flags, f"the config's docstrings name unknown flags: {named - flags}"


def test_given_options_land_at_their_keys_with_paths_made_absolute(tmp_path: Path) -> None:
    (tmp_path / "tasks").mkdir()
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        layer = run_options(
            {
                "paths": [Path("tasks")],
                "max_turns": 5,
                "agent_root": "isolated",
                "judge": ['{type = "tool-call", tool = "write"}'],
                "output_dir": Path("out"),
                "task_name": [],  # an empty repeatable option was not given
                "resume": Path("elsewhere"),  # the command's own: no config key
            }
        )
    finally:
        os.chdir(here)
    assert layer == {
        "tasks": {"paths": [str(tmp_path / "tasks")]},
        "agent": {"kwargs": {"max_turns": 5}},
        "sandbox": {"agent_root": "isolated"},
        "judges": [{"type": "tool-call", "tool": "write"}],
        "output_dir": str(tmp_path / "out"),
    }
    config = resolve_config(options=layer)
    assert config.agent.kwargs == {"max_turns": 5}
    assert config.sandbox.agent_root == "isolated"
    assert config.tasks.paths == [str(tmp_path / "tasks")]


def test_the_option_table_of_the_docs_is_the_one_the_spec_makes() -> None:
    text = CONFIGURATION_MD.read_text(encoding="utf-8")
    found = re.search(r"<!-- options:begin -->\n(.*?)<!-- options:end -->", text, flags=re.S)
    assert found, "docs/configuration.md has no <!-- options:begin/end --> block"
    expected = options_markdown()
    assert found.group(1) == expected, (
        "docs/configuration.md's option table differs from harness/cli/options.py; replace "
        "the block between <!-- options:begin --> and <!-- options:end --> with:\n" + expected
    )
