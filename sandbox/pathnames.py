r"""One lossless, always-encodable text form for names and strings an agent controls.

A Linux file name is bytes. Read with ``surrogateescape`` (``os.fsdecode``), a byte that is
not UTF-8 becomes a lone surrogate (U+DC80..U+DCFF), which no UTF-8 writer accepts: a
record holding one cannot be written. :func:`escape` turns any ``str`` into one that always
encodes, and :func:`unescape` gives the exact original back (docs/run-dir.md, "Escaped
strings"):

- ``\`` becomes ``\\`` (so every backslash of the escaped form starts a sequence);
- a lone surrogate U+DC80..U+DCFF (a raw byte ``0xHH`` of a name) becomes ``\xHH``;
- any other lone surrogate (U+D800..U+DFFF) becomes ``\uHHHH`` (four lowercase hex digits);
- everything else, newlines and escape characters included, is kept (JSON escapes those).

A string without a backslash or a surrogate is its own escaped form. :func:`unescape` is
lenient: a backslash that starts none of the three sequences is kept as it is, so text
written before this escape existed reads back unchanged unless it held one of them.

Stdlib only (Python >= 3.9): the harness and the in-sandbox code share it.
"""

from __future__ import annotations

import re
from typing import Any

_NEEDS_ESCAPE = re.compile("[\\\\\ud800-\udfff]")
_SEQUENCE = re.compile(r"\\(\\|x[89a-f][0-9a-f]|u(?:d[89abd-f][0-9a-f]{2}|dc[0-7][0-9a-f]))")


def _escape_one(match: re.Match[str]) -> str:
    char = match.group(0)
    if char == "\\":
        return "\\\\"
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"
    return f"\\u{code:04x}"


def escape(text: str) -> str:
    """The lossless form of ``text`` that always encodes as UTF-8 (see the module doc).

    Args:
        text: Any string, lone surrogates included.

    Returns:
        ``text`` itself when it holds no backslash and no surrogate, else its escaped form.
    """
    if _NEEDS_ESCAPE.search(text) is None:
        return text
    return _NEEDS_ESCAPE.sub(_escape_one, text)


def _unescape_one(match: re.Match[str]) -> str:
    body = match.group(1)
    if body == "\\":
        return "\\"
    if body[0] == "x":
        return chr(0xDC00 + int(body[1:], 16))
    return chr(int(body[1:], 16))


def unescape(text: str) -> str:
    """The original of an :func:`escape`-d string (``unescape(escape(s)) == s`` for every s).

    Args:
        text: An escaped string.

    Returns:
        The original string; a name's raw bytes are ``os.fsencode`` of it.
    """
    if "\\" not in text:
        return text
    return _SEQUENCE.sub(_unescape_one, text)


def escape_name(raw: bytes) -> str:
    """The escaped text form of a file name's bytes (``unescape_name`` gives them back)."""
    return escape(raw.decode("utf-8", "surrogateescape"))


def unescape_name(text: str) -> bytes:
    r"""The bytes of a file name from its escaped form (see :func:`escape_name`).

    Raises:
        UnicodeEncodeError: ``text`` holds a ``\uHHHH`` surrogate, which no name has.
    """
    return unescape(text).encode("utf-8", "surrogateescape")


def escape_all(value: Any) -> Any:
    """``value`` (JSON-like: dicts, lists, strings, numbers) with every string escaped.

    Dict keys are escaped too; tuples become lists. Other values are kept as they are.
    """
    return _walk(value, escape)


def unescape_all(value: Any) -> Any:
    """The inverse of :func:`escape_all`: every string (and dict key) unescaped."""
    return _walk(value, unescape)


def _walk(value: Any, change: Any) -> Any:
    # Iterative: a deep structure must not turn into a RecursionError here.
    if isinstance(value, str):
        return change(value)
    if not isinstance(value, (dict, list, tuple)):
        return value
    root: list[Any] = [None]
    todo: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while todo:
        node, parent, slot = todo.pop()
        if isinstance(node, str):
            parent[slot] = change(node)
        elif isinstance(node, dict):
            copy: dict[Any, Any] = {}
            parent[slot] = copy
            for key, item in node.items():
                new_key = change(key) if isinstance(key, str) else key
                copy[new_key] = None
                todo.append((item, copy, new_key))
        elif isinstance(node, (list, tuple)):
            items: list[Any] = [None] * len(node)
            parent[slot] = items
            todo.extend((item, items, index) for index, item in enumerate(node))
        else:
            parent[slot] = node
    return root[0]


__all__ = ["escape", "escape_all", "escape_name", "unescape", "unescape_all", "unescape_name"]
