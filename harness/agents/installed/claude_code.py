"""``claude-code``: Anthropic's Claude Code CLI (npm ``@anthropic-ai/claude-code``).

Since 2.x the npm package ships one native executable per platform as an optional
dependency (``@anthropic-ai/claude-code-linux-x64`` ...); the harness installs the package
for the host's platform with npm and runs that executable directly, so the sandbox needs no
Node. It is run as ``claude -p INSTRUCTION --output-format stream-json --verbose`` with its
permission prompts off (the sandbox is disposable), against the trial's gateway
(``ANTHROPIC_BASE_URL``, the trial token as ``ANTHROPIC_API_KEY``), with telemetry, error
reporting, auto-update, non-essential traffic and the feedback survey off. Its stream-json
(stdout, kept as ``agent.log``) is converted into ``session.jsonl``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from typing_extensions import override

from harness.agents.installed.base import InstalledAgent
from harness.agents.installed.cache import Platform
from harness.tasks import Task
from sandbox.backend import Sandbox

PACKAGE = "@anthropic-ai/claude-code"
#: What its ``system``/``informational`` notice says when the model refused (2.1.x).
REFUSAL_NOTICE = re.compile(r"safeguards stopped|safety classifier", re.I)


class ClaudeCode(InstalledAgent):
    """Claude Code (npm @anthropic-ai/claude-code), through the gateway's messages API."""

    name = "claude-code"
    default_version: ClassVar[str] = "2.1.332"
    api: ClassVar[str] = "anthropic-messages"
    providers: ClassVar[tuple[str, ...]] = ("anthropic", "faux")
    npm_package: ClassVar[str] = PACKAGE

    @override
    def programs(self) -> tuple[str, ...]:
        return (self.executable(),)

    def executable(self) -> str:
        """The native executable of the host's platform, inside the sandbox."""
        return self.bin_path(f"npm/node_modules/{native_package(self.platform)}/claude")

    @override
    def cli_argv(self, task: Task, sandbox: Sandbox) -> list[str]:
        assert self.model is not None
        return [
            self.executable(),
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            # The sandbox is disposable and the agent user unprivileged: no prompts.
            "--dangerously-skip-permissions",
            "--model",
            self.model.upstream,
            # After "--": an instruction starting with "-" is the prompt, never an option.
            "--",
            task.instruction,
        ]

    @override
    def cli_env(self, sandbox: Sandbox) -> Mapping[str, str]:
        assert self.model is not None
        return {
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_BUG_COMMAND": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            # Its session-quality survey (a feedback call), which the above leaves to it.
            "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
            # Its default (10, backing off for minutes) outlasts most agent timeouts; the
            # gateway's answers are final for a trial's faux script and budget alike.
            "CLAUDE_CODE_MAX_RETRIES": "2",
            # Background ("small, fast") calls go to the trial's model too.
            "ANTHROPIC_MODEL": self.model.upstream,
            "ANTHROPIC_SMALL_FAST_MODEL": self.model.upstream,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": self.model.upstream,
            # Allows the skip-permissions flag when a task's agent user is root.
            "IS_SANDBOX": "1",
        }

    def log_dirs(self, sandbox: Sandbox) -> Mapping[str, str]:
        """Its per-session JSONL transcripts (``~/.claude/projects``)."""
        return {"claude-projects": f"{sandbox.paths.home}/.claude/projects"}

    @override
    def convert(self, log: list[str]) -> Iterable[dict[str, Any]]:
        return convert_stream_json(log, model=self.model_id)


def native_package(plat: Platform) -> str:
    """The optional dependency holding the executable for ``plat``."""
    suffix = "-musl" if plat.libc == "musl" else ""
    return f"{PACKAGE}-linux-{plat.npm_cpu}{suffix}"


def convert_stream_json(log: Iterable[str], *, model: str | None) -> list[dict[str, Any]]:
    """Claude Code's ``--output-format stream-json`` lines as ``session.jsonl`` lines.

    ``system``/``init`` opens the session; each ``assistant`` line is a message (its text,
    its ``tool_use`` blocks as tool calls); ``tool_result`` blocks of ``user`` lines are
    tool results; ``result`` ends it. Lines that are not JSON objects are skipped.
    """
    lines: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for raw in log:
        try:
            event = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        kind = event.get("type")
        if kind == "system" and event.get("subtype") == "init":
            tools = [str(t) for t in event.get("tools") or [] if isinstance(t, str)]
            lines.append(
                {
                    "type": "session",
                    "version": 1,
                    "agent": "claude-code",
                    "api": "anthropic-messages",
                    "model": model or event.get("model"),
                    "tools": tools,
                    "cli_session_id": event.get("session_id"),
                    "cli_version": event.get("claude_code_version"),
                }
            )
        elif kind == "assistant":
            lines.append(_assistant(event.get("message") or {}, names))
        elif kind == "system" and event.get("subtype") == "informational":
            # Its notice that the model's safeguards stopped the answer before: a refusal
            # (it then continues once, telling the model so).
            if REFUSAL_NOTICE.search(str(event.get("content", ""))):
                for line in reversed(lines):
                    if line.get("type") == "message" and line.get("role") == "assistant":
                        line["stop_reason"] = "refusal"
                        break
        elif kind == "user":
            lines.extend(_tool_results(event.get("message") or {}, names))
        elif kind == "result":
            failed = bool(event.get("is_error")) or event.get("subtype") != "success"
            error = None
            if failed:
                error = str(event.get("result") or event.get("subtype") or "error")
            lines.append(
                {"type": "end", "ok": not failed, "error": error, "turns": event.get("num_turns")}
            )
    return lines


def _assistant(message: Mapping[str, Any], names: dict[str, str]) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in message.get("content") or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            texts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_use":
            call_id, name = str(block.get("id", "")), str(block.get("name", ""))
            names[call_id] = name
            calls.append({"id": call_id, "name": name, "arguments": block.get("input") or {}})
    raw_usage = message.get("usage")
    usage: Mapping[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
    line: dict[str, Any] = {
        "type": "message",
        "role": "assistant",
        "content": "".join(texts),
        "stop_reason": _stop_reason(message.get("stop_reason"), calls),
        "usage": {
            "input_tokens": usage.get("input_tokens"),
            "output_tokens": usage.get("output_tokens"),
        },
    }
    if calls:
        line["tool_calls"] = calls
    return line


def _stop_reason(raw: Any, calls: list[dict[str, Any]]) -> str:
    if raw in ("end_turn", "stop_sequence"):
        return "stop"
    if raw == "tool_use" or (raw is None and calls):
        return "tool_use"
    if raw == "max_tokens":
        return "length"
    return "stop" if raw is None else str(raw)


def _tool_results(message: Mapping[str, Any], names: Mapping[str, str]) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    content = message.get("content")
    if not isinstance(content, list):
        return results
    for block in content:
        if not isinstance(block, dict) or block.get("type") != "tool_result":
            continue
        call_id = str(block.get("tool_use_id", ""))
        results.append(
            {
                "type": "tool_result",
                "tool_call_id": call_id,
                "name": names.get(call_id, ""),
                "content": _result_text(block.get("content")),
                "is_error": bool(block.get("is_error")),
            }
        )
    return results


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else json.dumps(content)


__all__ = ["PACKAGE", "ClaudeCode", "convert_stream_json", "native_package"]
