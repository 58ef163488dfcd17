"""What a faux script's ``when`` sees of a request: its tools and its last message.

A scripted turn may say which requests it answers (docs/model-access.md §5): only those
carrying tools, or a given tool, or whose last message matches a pattern. Read here from
the body of any API the gateway serves (chat completions, responses, messages, and the
Gemini ``contents``/``functionDeclarations`` shape), so that background calls of a CLI
(title generation, summaries) do not consume the script.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.errors import UsageError

_WHEN_KEYS = {"tools", "tool", "last_message"}


@dataclass(frozen=True)
class When:
    """Which requests a scripted turn answers; every condition given must hold.

    Attributes:
        tools: True: only requests carrying tools; False: only requests carrying none.
        tool: Only requests offering a tool of this name.
        last_message: A regular expression searched in the text of the request's last
            message (or input item).
    """

    tools: bool | None = None
    tool: str | None = None
    last_message: re.Pattern[str] | None = None

    def why_not(self, body: Mapping[str, Any]) -> str | None:
        """Why a request with ``body`` is not answered by this turn (None: it is)."""
        names = tool_names(body)
        if self.tools is True and not names:
            return "the request carries no tools"
        if self.tools is False and names:
            return "the request carries tools"
        if self.tool is not None and self.tool not in names:
            return f"the request does not offer the tool {self.tool!r}"
        if self.last_message is not None and not self.last_message.search(last_message(body)):
            return f"its last message does not match {self.last_message.pattern!r}"
        return None


def parse_when(where: str, raw: Any) -> When:
    """A ``when`` object of a script.

    Raises:
        UsageError: Not an object, an unknown key, a wrong type or a bad pattern.
    """
    if not isinstance(raw, dict):
        raise UsageError(f"{where} must be an object with tools, tool or last_message")
    unknown = sorted(set(raw) - _WHEN_KEYS)
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(unknown)}")
    tools = raw.get("tools")
    if tools is not None and not isinstance(tools, bool):
        raise UsageError(f"{where}.tools must be true or false")
    tool = raw.get("tool")
    if tool is not None and not isinstance(tool, str):
        raise UsageError(f"{where}.tool must be a tool name (a string)")
    pattern = raw.get("last_message")
    compiled = None
    if pattern is not None:
        if not isinstance(pattern, str):
            raise UsageError(f"{where}.last_message must be a regular expression (a string)")
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise UsageError(f"{where}.last_message is not a regular expression: {exc}") from None
    return When(tools, tool, compiled)


def tool_names(body: Mapping[str, Any]) -> set[str]:
    """Names of the tools a request offers, in any API's shape.

    Tools without a name (e.g. Responses ``web_search``) count by their ``type``.
    """
    names: set[str] = set()
    tools = body.get("tools")
    if not isinstance(tools, list):
        return names
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        for inner in (tool, tool.get("function"), tool.get("custom")):
            if isinstance(inner, dict) and isinstance(inner.get("name"), str):
                names.add(inner["name"])
                break
        else:
            declared = tool.get("functionDeclarations", tool.get("function_declarations"))
            if isinstance(declared, list):
                names.update(
                    d["name"]
                    for d in declared
                    if isinstance(d, dict) and isinstance(d.get("name"), str)
                )
            elif isinstance(tool.get("type"), str):
                names.add(tool["type"])
    return names


def last_message(body: Mapping[str, Any]) -> str:
    """The text of a request's last message (``messages``, ``input`` or ``contents``)."""
    for key in ("messages", "input", "contents"):
        value = body.get(key)
        if isinstance(value, str):
            return value
        if isinstance(value, list) and value:
            return "\n".join(_strings(value[-1]))
    return ""


def _strings(value: Any) -> list[str]:
    """Every string inside ``value`` except keys and type tags, in order (no recursion)."""
    out: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, list):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            stack.extend(v for k, v in reversed(item.items()) if k not in ("type", "role", "id"))
    return out


__all__ = ["When", "last_message", "parse_when", "tool_names"]
