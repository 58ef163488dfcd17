"""A judge as a config declares it: ``[[verifier.judges]]`` in task.toml, ``[[judges]]`` in a run.

A judge scores a trial's evidence after the verifier (see ``harness.judges``). Every judge
has a ``type`` (``structured-output``, ``tool-call``, ``llm`` or an installed plug-in), a
``name`` (the key its score gets in the record's ``rewards``; default: the type) and a
``threshold``: None (the default, and what TOML expresses by leaving the key out) makes the
score data only; a number makes the judge a gate, and a trial whose score is below it gets
the main reward 0. The other keys are the type's own options, checked by the judge type.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harness.errors import ConfigError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: Names a judge may not take: the verifier's main reward keeps its key.
RESERVED_NAMES = frozenset({"reward"})


class JudgeSpec(BaseModel):
    """One judge: its type, name, threshold, and the type's options (the other keys).

    Attributes:
        type: The judge type (``structured-output``, ``tool-call``, ``llm``, a plug-in).
        name: The key of its score in ``rewards`` (default: the type).
        threshold: None: the score is data. A number: the trial's main reward is 0 when
            the score is below it.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    type: str = Field(min_length=1)
    name: str | None = None
    threshold: float | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not _NAME.match(value):
            raise ValueError(
                "must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
            )
        if value in RESERVED_NAMES:
            raise ValueError(f"{value!r} is the verifier's main reward; pick another name")
        return value

    @field_validator("threshold")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("must be a finite number (leave it out for none)")
        return value

    @property
    def key(self) -> str:
        """The judge's name, or its type when it has none."""
        return self.name or self.type

    @property
    def options(self) -> dict[str, Any]:
        """The type's own options (every key but ``type``, ``name`` and ``threshold``)."""
        return dict(self.model_extra or {})


def parse_judge_option(text: str) -> dict[str, Any]:
    """Parse a ``--judge`` value: a JSON object or a TOML inline table.

    Examples: ``'{"type": "tool-call", "tool": "write", "threshold": null}'`` or
    ``'{type = "tool-call", tool = "write", arguments = {path = "hello.txt"}}'``.

    Raises:
        ConfigError: Neither, or not a table.
    """
    try:
        value: Any = json.loads(text)
    except json.JSONDecodeError:
        try:
            value = tomllib.loads(f"judge = {text.strip()}")["judge"]
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(
                f"--judge {text!r}: not a JSON object or TOML inline table ({exc}); e.g. "
                '--judge \'{type = "tool-call", tool = "write"}\''
            ) from None
    if not isinstance(value, dict):
        raise ConfigError(f"--judge {text!r}: expected a table of the judge's keys")
    return value


def judge_spec(data: Any, where: str) -> JudgeSpec:
    """Validate one judge table.

    Args:
        data: The table as read.
        where: Where it was read (for the message), e.g. ``verifier.judges[0]``.

    Raises:
        ConfigError: Naming ``where`` and every problem.
    """
    try:
        return JudgeSpec.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in item['loc']) or 'judge'}: {item['msg']}"
            for item in exc.errors(include_url=False)
        )
        raise ConfigError(f"{where}: {problems}") from None


__all__ = ["RESERVED_NAMES", "JudgeSpec", "judge_spec", "parse_judge_option"]
