"""One record as one line of ``trials.jsonl``: written whatever its strings hold, read back exactly.

The strings of a record are the agent's as much as the harness's: file names read from the
agent's tree (bytes that are not UTF-8 arrive as lone surrogates), its output, the messages
of errors its tree caused. :func:`record_line` writes every string in the escaped form of
:mod:`sandbox.pathnames` (docs/run-dir.md, "Escaped strings"), so no string can make the
write fail; :func:`parse_record` unescapes, so a record read back is the record written,
byte for byte in every name. Values JSON has no form for are made JSON first: bytes become
their escaped text (as a name's bytes do), a non-finite float becomes ``null``, anything
else its ``str``.

A record without a backslash or an unencodable character anywhere (nearly all of them) is
written and read by pydantic directly: its escaped form is itself.
"""

from __future__ import annotations

import json
import math
from datetime import date, datetime, time, timedelta
from enum import Enum
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, to_jsonable_python

from harness.records.model import TrialRecord
from sandbox.pathnames import escape, escape_name, unescape, unescape_all

#: What a JSON line holds when one of its strings holds a backslash (``\\`` in JSON).
_BACKSLASH = b"\\\\"


def record_line(record: TrialRecord) -> bytes:
    """The record as one line of UTF-8 JSON (no newline), its strings escaped.

    Args:
        record: Any record, whatever its strings hold.

    Returns:
        The line's bytes; :func:`parse_record` reads the same record back.
    """
    try:
        text = record.model_dump_json()
    except (PydanticSerializationError, ValueError, TypeError):
        text = None
    if text is not None and _BACKSLASH.decode() not in text:
        return text.encode("utf-8")
    return json_line(record)


def json_line(value: BaseModel | Any) -> bytes:
    """Any model or JSON-like value as one line of UTF-8 JSON with every string escaped."""
    data = value.model_dump(mode="python") if isinstance(value, BaseModel) else value
    text = json.dumps(_jsonable(data), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.encode("utf-8")


def parse_record(raw: bytes | str) -> TrialRecord:
    """Read one line written by :func:`record_line` (or by any earlier harness).

    Raises:
        pydantic.ValidationError: It is not a record.
        ValueError: It is not JSON.
    """
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if _BACKSLASH not in data:
        return TrialRecord.model_validate_json(data)
    return TrialRecord.model_validate(unescape_all(json.loads(data)))


def original(text: str) -> str:
    """The original of one string read from a record (a name, a message); see unescape."""
    return unescape(text)


def _leaf(value: Any) -> Any:
    """A JSON scalar for one value that is not a dict, list or tuple."""
    if isinstance(value, str):
        return escape(value)
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, bytes | bytearray | memoryview):
        return escape_name(bytes(value))
    if isinstance(value, Enum):
        return _leaf(value.value)
    if isinstance(value, datetime | date | time | timedelta):
        return to_jsonable_python(value)
    if isinstance(value, BaseModel):
        return _jsonable(value.model_dump(mode="python"))
    try:
        return escape(str(value))
    except Exception:  # a str() that fails: its type still says what it was
        return escape(f"<unprintable {type(value).__name__}>")


def _jsonable(value: Any) -> Any:
    """``value`` as JSON-ready data, every string escaped (iterative: no recursion limit)."""
    if not isinstance(value, dict | list | tuple | set | frozenset):
        return _leaf(value)
    root: list[Any] = [None]
    todo: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while todo:
        node, parent, slot = todo.pop()
        if isinstance(node, dict):
            copy: dict[str, Any] = {}
            parent[slot] = copy
            for key, item in node.items():
                name = _leaf(key)
                name = name if isinstance(name, str) else json.dumps(name)
                copy[name] = None
                todo.append((item, copy, name))
        elif isinstance(node, list | tuple | set | frozenset):
            items: list[Any] = [None] * len(node)
            parent[slot] = items
            todo.extend((item, items, index) for index, item in enumerate(node))
        else:
            parent[slot] = _leaf(node)
    return root[0]


__all__ = ["json_line", "original", "parse_record", "record_line"]
