"""The run configuration: validated once, saved as ``config.toml`` in the run dir."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

SandboxName = Literal["local", "docker"]


class RunConfig(BaseModel):
    """Everything that decides what a run does. Never holds a secret."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    paths: list[str] = Field(min_length=1)
    agent: str = "oracle"
    agent_cmd: str | None = None
    model: str | None = None
    sandbox: SandboxName = "local"
    runtime: str | None = None
    rollouts: int = Field(default=1, ge=1)
    concurrency: int = Field(default=1, ge=1, le=256)
    num_tasks: int | None = Field(default=None, ge=1)
    shuffle: bool = False
    seed: int = 0
    output_dir: str = "runs"
    fail_under: float | None = None
    threshold: float = 1.0
    base_aliases: list[str] = Field(default_factory=list)
    sandbox_uid: int = Field(default=65532, gt=0)
    sandbox_gid: int = Field(default=65532, gt=0)

    @field_validator("fail_under", "threshold")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot write {value} to TOML")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a valid TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def to_toml(data: Mapping[str, Any]) -> str:
    """Serialize a nested mapping of scalars and lists to TOML (None values are omitted)."""
    lines: list[str] = []
    tables: list[tuple[str, Mapping[str, Any]]] = []
    for key, value in data.items():
        if value is None:
            continue
        if isinstance(value, Mapping):
            tables.append((key, value))
        else:
            lines.append(f"{json.dumps(key)} = {_toml_value(value)}")

    def emit(prefix: str, table: Mapping[str, Any]) -> None:
        lines.append("")
        lines.append(f"[{prefix}]")
        nested = []
        for key, value in table.items():
            if value is None:
                continue
            if isinstance(value, Mapping):
                nested.append((f"{prefix}.{json.dumps(key)}", value))
            else:
                lines.append(f"{json.dumps(key)} = {_toml_value(value)}")
        for name, sub in nested:
            emit(name, sub)

    for key, table in tables:
        emit(json.dumps(key), table)
    return "\n".join(lines).lstrip("\n") + "\n"


def save_config(config: RunConfig, path: Path, *, extra: Mapping[str, Any] | None = None) -> None:
    """Write the resolved config (plus facts such as versions) as TOML."""
    data: dict[str, Any] = {"run": config.model_dump(mode="json")}
    if extra:
        data.update(extra)
    path.write_text(to_toml(data))
