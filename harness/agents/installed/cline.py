"""``cline``: the Cline CLI (npm ``cline``), through the gateway's chat API.

The npm package ships one native executable per platform as an optional dependency
(``@cline/cli-linux-x64``, ``…-arm64``: Bun with the app, linked against glibc; no musl
build is published, so a musl image is refused before anything is fetched); the harness
installs it with npm and runs it directly, so the sandbox needs no Node. Its ``openai``
provider (``openai-compatible``) takes any base URL: the gateway's loopback port is known
only inside the sandbox, so ``/bin/sh`` starts it, first running ``cline auth -p openai``
with ``$OPENAI_BASE_URL`` and the trial token (``$OPENAI_API_KEY``), which writes the
provider into its data dir in the trial's HOME, then ``cline --json -P openai-compatible -m
MODEL -- INSTRUCTION`` (every tool call approved, its default), the instruction a positional
parameter never parsed by the shell. Its global settings (a root-owned file in the trial's
HOME, ``$CLINE_GLOBAL_SETTINGS_PATH``) opt out of telemetry and auto-update;
``CLINE_SESSION_BACKEND_MODE=local`` runs the session in the CLI's own process instead of a
background hub daemon it would start. Its JSON events (stdout, kept as ``agent.log``) are
converted into ``session.jsonl``; its session files and log (``~/.cline/data/sessions``,
``…/logs``) are kept under ``agent-logs/`` (not its settings: they hold the trial token).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from typing_extensions import override

from harness.agents.installed.base import InstalledAgent
from harness.agents.installed.cache import CacheEntry, InstallError, Platform
from harness.tasks import Task
from sandbox.backend import Sandbox

PACKAGE = "cline"
#: The provider ``cline auth -p openai`` configures: any OpenAI-compatible endpoint.
PROVIDER = "openai-compatible"
#: Where prepare() leaves its global settings (root-owned; ``$CLINE_GLOBAL_SETTINGS_PATH``).
SETTINGS_FILE = ".harness-cline-settings.json"
SETTINGS: dict[str, Any] = {"telemetryOptOut": True, "autoUpdateEnabled": False}
#: Runs in the sandbox: "$0" is the cline executable, "$1" the model, "$2" the instruction.
#: ``auth`` prints what it configured (never the key) to stderr, kept as the agent's.
LAUNCH = (
    '"$0" auth -p openai -k "$OPENAI_API_KEY" -m "$1" -b "$OPENAI_BASE_URL" >&2 && '
    f'exec "$0" --json -P {PROVIDER} -m "$1" -- "$2" < /dev/null'
)


class Cline(InstalledAgent):
    """Cline CLI (npm cline), through the gateway's chat API."""

    name = "cline"
    default_version: ClassVar[str] = "3.0.65"
    api: ClassVar[str] = "openai-chat"
    providers: ClassVar[tuple[str, ...]] = ("openai", "faux")
    npm_package: ClassVar[str] = PACKAGE

    def install(self) -> CacheEntry:
        """The CLI's entry; refused for a musl image before anything is fetched.

        Raises:
            InstallError: The platform's C library is musl (or it cannot be had).
        """
        if self.platform.libc == "musl":
            # Its per-CPU packages name no C library, so npm would fetch the glibc build
            # for a musl image too, where it cannot start (no glibc loader).
            raise InstallError(
                f"cannot install agent {self.name} {self.version} for {self.platform}: "
                "Cline publishes its executable for glibc only (@cline/cli-linux-x64, "
                "-arm64, linked against glibc's loader), which cannot start on a musl "
                "(Alpine) image. Use an image with glibc (without agent.kwargs.libc)."
            )
        return super().install()

    @override
    def programs(self) -> tuple[str, ...]:
        return (self.executable(),)

    def executable(self) -> str:
        """The native executable of the host's platform, inside the sandbox."""
        return self.bin_path(f"npm/node_modules/{native_package(self.platform)}/bin/cline")

    @override
    def home_files(self, task: Task, sandbox: Sandbox) -> Mapping[str, str]:
        return {SETTINGS_FILE: json.dumps(SETTINGS, indent=2) + "\n"}

    @override
    def cli_argv(self, task: Task, sandbox: Sandbox) -> list[str]:
        assert self.model is not None
        return ["/bin/sh", "-c", LAUNCH, self.executable(), self.model.upstream, task.instruction]

    @override
    def cli_env(self, sandbox: Sandbox) -> Mapping[str, str]:
        return {
            "CLINE_GLOBAL_SETTINGS_PATH": f"{sandbox.paths.home}/{SETTINGS_FILE}",
            "CLINE_SESSION_BACKEND_MODE": "local",
            "NO_COLOR": "1",
        }

    def log_dirs(self, sandbox: Sandbox) -> Mapping[str, str]:
        """Its session files and its log (``~/.cline/data/sessions``, ``…/logs``)."""
        data = f"{sandbox.paths.home}/.cline/data"
        return {"cline-sessions": f"{data}/sessions", "cline-logs": f"{data}/logs"}

    @override
    def convert(self, log: list[str]) -> Iterable[dict[str, Any]]:
        return convert_json_events(log, model=self.model_id)


def native_package(plat: Platform) -> str:
    """The optional dependency holding the executable for ``plat``'s CPU (glibc only)."""
    return f"@cline/cli-linux-{plat.npm_cpu}"


def convert_json_events(log: Iterable[str], *, model: str | None) -> list[dict[str, Any]]:
    """``cline --json`` events as ``session.jsonl`` lines.

    The first event opens the session (its ``taskId``); an ``agent_event`` whose text
    content ended is an assistant message; a tool content's start is a tool call with its
    input, its end the result (an error where a command did not succeed); ``run_result``
    ends it (ok when it finished ``completed``, with its usage); an ``error`` event, or a
    ``done`` event that did not complete, gives the end's error. Lines that are not JSON
    objects are skipped.
    """
    lines: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    error: str | None = None
    ended = False
    for raw in log:
        try:
            event = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        if not lines:
            lines.append(
                {
                    "type": "session",
                    "version": 1,
                    "agent": "cline",
                    "api": "openai-chat",
                    "model": model,
                    "tools": [],
                    "cli_session_id": event.get("taskId"),
                }
            )
        kind = event.get("type")
        inner = _obj(event.get("event"))
        if kind == "agent_event":
            step = inner.get("type")
            if step == "content_end" and inner.get("contentType") == "text" and inner.get("text"):
                lines.append(
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": str(inner["text"]),
                        "stop_reason": "stop",
                    }
                )
            elif step == "content_start" and inner.get("contentType") == "tool":
                call_id, name = str(inner.get("toolCallId", "")), str(inner.get("toolName", ""))
                names[call_id] = name
                lines.append(_call(call_id, name, inner.get("input")))
            elif step == "content_end" and inner.get("contentType") == "tool":
                call_id = str(inner.get("toolCallId", ""))
                lines.append(_result(call_id, names.get(call_id, ""), inner))
            elif step == "error" or (step == "done" and inner.get("reason") != "completed"):
                error = _message(inner) or error
        elif kind == "error":
            error = _message(event) or error
        elif kind == "run_result" and not ended:
            ended = True
            ok = event.get("finishReason") == "completed" and error is None
            usage = _obj(event.get("aggregateUsage") or event.get("usage"))
            end: dict[str, Any] = {
                "type": "end",
                "ok": ok,
                "error": None if ok else (error or _message(event) or "cline failed"),
                "usage": {
                    "input_tokens": usage.get("inputTokens"),
                    "output_tokens": usage.get("outputTokens"),
                    "cached_tokens": usage.get("cacheReadTokens"),
                },
            }
            lines.append(end)
    if lines and not ended and error is not None:
        lines.append({"type": "end", "ok": False, "error": error})
    return lines


def _call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "content": "",
        "stop_reason": "tool_use",
        "tool_calls": [
            {
                "id": call_id,
                "name": name,
                "arguments": arguments if isinstance(arguments, dict) else {},
            }
        ],
    }


def _result(call_id: str, name: str, inner: Mapping[str, Any]) -> dict[str, Any]:
    """A tool's end: its output (a list of per-command results, or any JSON) as text."""
    output = inner.get("output")
    failed = bool(inner.get("error"))
    if isinstance(output, list):
        parts = []
        for item in output:
            if isinstance(item, dict):
                failed = failed or item.get("success") is False
                text = item.get("result", item.get("error", ""))
                parts.append(text if isinstance(text, str) else json.dumps(text))
            else:
                parts.append(item if isinstance(item, str) else json.dumps(item))
        content = "\n".join(parts)
    elif isinstance(output, str):
        content = output
    else:
        content = "" if output is None else json.dumps(output)
    if failed and not content:
        content = str(_message(inner) or "")
    return {
        "type": "tool_result",
        "tool_call_id": call_id,
        "name": name,
        "content": content,
        "is_error": failed,
    }


def _message(event: Mapping[str, Any]) -> str | None:
    """An event's error message, wherever it carries one."""
    for key in ("error", "message", "text"):
        value = event.get(key)
        if isinstance(value, dict):
            value = value.get("message")
        if isinstance(value, str) and value:
            return value
    return None


def _obj(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


__all__ = ["PACKAGE", "Cline", "convert_json_events", "native_package"]
