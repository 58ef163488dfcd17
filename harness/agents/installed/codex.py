"""``codex``: OpenAI's Codex CLI (npm ``@openai/codex``), through the gateway's Responses API.

The npm package ships a static (musl) executable per CPU as an optional dependency
(``@openai/codex-linux-x64`` ...); the harness installs it with npm and runs it directly, so
the sandbox needs no Node. Its config (``$CODEX_HOME/config.toml``, in the trial's HOME)
names the gateway as the model provider (``wire_api = "responses"``, the trial token read
from ``OPENAI_API_KEY``), with analytics, update checks, feedback and the provider's hosted
web search off. The gateway's loopback port is known only inside the sandbox, so the CLI is
started by ``/bin/sh`` (which Codex needs anyway: its tools run shell commands), passing
the provider's ``base_url`` as a ``-c`` override from ``$OPENAI_BASE_URL``; the
instruction travels as a positional parameter, never through the shell's parser. ``codex
exec --json`` events (stdout, kept as ``agent.log``) are converted into ``session.jsonl``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from typing_extensions import override

from harness.agents.installed.base import InstalledAgent
from harness.agents.installed.cache import Platform
from harness.tasks import Task
from sandbox.backend import Sandbox

PACKAGE = "@openai/codex"
PROVIDER = "harness-gateway"

CONFIG = f"""\
# Written by the harness: the trial's model gateway is the only provider.
model_provider = "{PROVIDER}"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false
# Its hosted web search runs at the provider, outside the sandbox: the gateway refuses it
# unless the phase is public, and Codex asks for it on every call unless it is off.
web_search = "disabled"

[analytics]
enabled = false

[feedback]
enabled = false

[history]
persistence = "none"

[model_providers.{PROVIDER}]
name = "harness gateway"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
"""

#: Where prepare() leaves the config (root-owned); the launcher copies it into an
#: agent-owned ``$CODEX_HOME``, which Codex must be able to write.
CONFIG_FILE = ".harness-codex-config.toml"

#: Runs in the sandbox: "$0" is the codex executable, "$1" the model, "$2" the instruction.
LAUNCH = (
    'mkdir -p "$CODEX_HOME" && cp "$HOME/' + CONFIG_FILE + '" "$CODEX_HOME/config.toml" && '
    'exec "$0" exec --json --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox '
    f'-c "model_providers.{PROVIDER}.base_url=\\"$OPENAI_BASE_URL\\"" -m "$1" -- "$2" '
    "< /dev/null"
)


class Codex(InstalledAgent):
    """Codex CLI (npm @openai/codex), through the gateway's Responses API."""

    name = "codex"
    default_version: ClassVar[str] = "0.171.0"
    api: ClassVar[str] = "openai-responses"
    providers: ClassVar[tuple[str, ...]] = ("openai", "faux")
    npm_package: ClassVar[str] = PACKAGE

    @override
    def programs(self) -> tuple[str, ...]:
        return (self.executable(),)

    def executable(self) -> str:
        """The static executable of the host's CPU, inside the sandbox."""
        plat = self.install_spec().platform
        triple = f"{plat.arch}-unknown-linux-musl"
        return self.bin_path(f"npm/node_modules/{native_package(plat)}/vendor/{triple}/bin/codex")

    @override
    def home_files(self, task: Task, sandbox: Sandbox) -> Mapping[str, str]:
        return {CONFIG_FILE: CONFIG}

    @override
    def cli_argv(self, task: Task, sandbox: Sandbox) -> list[str]:
        assert self.model is not None
        return ["/bin/sh", "-c", LAUNCH, self.executable(), self.model.upstream, task.instruction]

    @override
    def cli_env(self, sandbox: Sandbox) -> Mapping[str, str]:
        return {
            "CODEX_HOME": f"{sandbox.paths.home}/.codex",
            "CODEX_NON_INTERACTIVE": "1",
            "NO_COLOR": "1",
        }

    def log_dirs(self, sandbox: Sandbox) -> Mapping[str, str]:
        """Its rollout JSONL files (``$CODEX_HOME/sessions``)."""
        return {"codex-sessions": f"{sandbox.paths.home}/.codex/sessions"}

    @override
    def convert(self, log: list[str]) -> Iterable[dict[str, Any]]:
        return convert_exec_json(log, model=self.model_id)


def native_package(plat: Platform) -> str:
    """The optional dependency holding the executable for ``plat``'s CPU."""
    return f"{PACKAGE}-linux-{plat.npm_cpu}"


def convert_exec_json(log: Iterable[str], *, model: str | None) -> list[dict[str, Any]]:
    """``codex exec --json`` events as ``session.jsonl`` lines.

    ``thread.started`` opens the session; a completed ``agent_message`` item is an assistant
    message; a ``command_execution`` (or other tool) item is an assistant tool call
    followed by its result; ``turn.completed`` ends it well, ``turn.failed``/``error``
    with the error. Lines that are not JSON objects are skipped.
    """
    lines: list[dict[str, Any]] = []
    ended = False
    for raw in log:
        try:
            event = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        kind = event.get("type")
        item = event.get("item") if isinstance(event.get("item"), dict) else None
        if kind == "thread.started":
            lines.append(
                {
                    "type": "session",
                    "version": 1,
                    "agent": "codex",
                    "api": "openai-responses",
                    "model": model,
                    "tools": [],
                    "cli_session_id": event.get("thread_id"),
                }
            )
        elif kind == "item.completed" and item is not None:
            lines.extend(_item(item))
        elif kind == "turn.completed":
            usage = event.get("usage") if isinstance(event.get("usage"), dict) else {}
            lines.append({"type": "end", "ok": True, "error": None, "usage": usage})
            ended = True
        elif kind in ("turn.failed", "error") and not ended:
            error = event.get("error") if isinstance(event.get("error"), dict) else event
            message = str(error.get("message") or kind) if isinstance(error, dict) else kind
            lines.append({"type": "end", "ok": False, "error": message})
            ended = True
    return lines


def _item(item: Mapping[str, Any]) -> list[dict[str, Any]]:
    kind = item.get("type")
    call_id = str(item.get("id", ""))
    if kind == "agent_message":
        text = str(item.get("text", ""))
        return [{"type": "message", "role": "assistant", "content": text, "stop_reason": "stop"}]
    if kind == "command_execution":
        exit_code = item.get("exit_code")
        return [
            _call(call_id, "shell", {"command": item.get("command")}),
            {
                "type": "tool_result",
                "tool_call_id": call_id,
                "name": "shell",
                "content": str(item.get("aggregated_output", "")),
                "is_error": exit_code not in (0, None) or item.get("status") == "failed",
            },
        ]
    if kind == "file_change":
        return [
            _call(call_id, "apply_patch", {"changes": item.get("changes")}),
            {
                "type": "tool_result",
                "tool_call_id": call_id,
                "name": "apply_patch",
                "content": str(item.get("status", "")),
                "is_error": item.get("status") == "failed",
            },
        ]
    if kind == "mcp_tool_call":
        name = f"{item.get('server')}.{item.get('tool')}"
        return [
            _call(call_id, name, item.get("arguments") or {}),
            {
                "type": "tool_result",
                "tool_call_id": call_id,
                "name": name,
                "content": json.dumps(item.get("result")),
                "is_error": item.get("status") == "failed",
            },
        ]
    return []


def _call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "content": "",
        "stop_reason": "tool_use",
        "tool_calls": [{"id": call_id, "name": name, "arguments": arguments}],
    }


__all__ = ["PACKAGE", "Codex", "convert_exec_json", "native_package"]
