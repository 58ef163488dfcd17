"""``opencode``: the OpenCode CLI (npm ``opencode-ai``), through the gateway's chat API.

The npm package ships one native executable per platform as an optional dependency
(``opencode-linux-x64``, ``…-musl``, ``…-arm64``); the harness installs it with npm and runs
it directly, so the sandbox needs no Node. Its config (``$OPENCODE_CONFIG``, a root-owned
JSON file in the trial's HOME) names one provider, the gateway, through the OpenAI-compatible
SDK bundled in the executable (``baseURL`` and ``apiKey`` read from ``OPENAI_BASE_URL`` and
the trial token in ``OPENAI_API_KEY``), with auto-update and sharing off, every permission
allowed but the web (the sandbox is disposable and has no network), and the ``title`` agent
disabled (its background title call would take a scripted turn, and costs a call). The
models.dev catalogue is never fetched (``OPENCODE_DISABLE_MODELS_FETCH``). It is run as
``opencode run --format json -m harness/MODEL INSTRUCTION`` with stdin empty; its JSON
events (stdout, kept as ``agent.log``) are converted into ``session.jsonl``; its own data
dir (``~/.local/share/opencode``: its log and session database) is kept under
``agent-logs/opencode-data``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from typing_extensions import override

from harness.agents.installed.base import InstalledAgent
from harness.agents.installed.cache import Platform
from harness.tasks import Task
from sandbox.backend import Sandbox

PACKAGE = "opencode-ai"
PROVIDER = "harness"
#: Where prepare() leaves the config (root-owned; read through ``$OPENCODE_CONFIG``).
CONFIG_FILE = ".harness-opencode.json"


def config(model: str) -> dict[str, Any]:
    """The CLI's config: the gateway as its only provider, serving ``model``."""
    return {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "model": f"{PROVIDER}/{model}",
        "small_model": f"{PROVIDER}/{model}",
        "enabled_providers": [PROVIDER],
        "permission": {"edit": "allow", "bash": "allow", "webfetch": "deny"},
        "agent": {"title": {"disable": True}},
        "provider": {
            PROVIDER: {
                "npm": "@ai-sdk/openai-compatible",
                "name": "harness gateway",
                "options": {"baseURL": "{env:OPENAI_BASE_URL}", "apiKey": "{env:OPENAI_API_KEY}"},
                "models": {model: {"name": model}},
            }
        },
    }


class OpenCode(InstalledAgent):
    """OpenCode (npm opencode-ai), through the gateway's chat API."""

    name = "opencode"
    default_version: ClassVar[str] = "1.18.33"
    api: ClassVar[str] = "openai-chat"
    providers: ClassVar[tuple[str, ...]] = ("openai", "faux")
    npm_package: ClassVar[str] = PACKAGE

    @override
    def programs(self) -> tuple[str, ...]:
        return (self.executable(),)

    def executable(self) -> str:
        """The native executable of the host's platform, inside the sandbox."""
        plat = self.install_spec().platform
        package = native_package(plat, baseline=not host_has_avx2())
        return self.bin_path(f"npm/node_modules/{package}/bin/opencode")

    @override
    def home_files(self, task: Task, sandbox: Sandbox) -> Mapping[str, str]:
        assert self.model is not None
        return {CONFIG_FILE: json.dumps(config(self.model.upstream), indent=2) + "\n"}

    @override
    def cli_argv(self, task: Task, sandbox: Sandbox) -> list[str]:
        assert self.model is not None
        return [
            self.executable(),
            "run",
            "--format",
            "json",
            "-m",
            f"{PROVIDER}/{self.model.upstream}",
            "--",
            task.instruction,
        ]

    @override
    def cli_env(self, sandbox: Sandbox) -> Mapping[str, str]:
        return {
            "OPENCODE_CONFIG": f"{sandbox.paths.home}/{CONFIG_FILE}",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_SHARE": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
            "OPENCODE_DISABLE_CLAUDE_CODE": "1",
            "NO_COLOR": "1",
        }

    def log_dirs(self, sandbox: Sandbox) -> Mapping[str, str]:
        """Its data dir: its log and session store (``~/.local/share/opencode``)."""
        return {"opencode-data": f"{sandbox.paths.home}/.local/share/opencode"}

    @override
    def convert(self, log: list[str]) -> Iterable[dict[str, Any]]:
        return convert_json_events(log, model=self.model_id)


def native_package(plat: Platform, *, baseline: bool = False) -> str:
    """The optional dependency holding the executable for ``plat``.

    Args:
        plat: The sandbox's platform.
        baseline: The x86_64 build for CPUs without AVX2 (npm installs both).
    """
    name = f"{PACKAGE.removesuffix('-ai')}-linux-{plat.npm_cpu}"
    if baseline and plat.arch == "x86_64":
        name += "-baseline"
    return name + ("-musl" if plat.libc == "musl" else "")


def host_has_avx2(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this host's CPU has AVX2 (sandboxes run on it); True when unknown."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return True
    flags = [line for line in text.splitlines() if line.startswith("flags")]
    return not flags or "avx2" in flags[0].split()


def convert_json_events(log: Iterable[str], *, model: str | None) -> list[dict[str, Any]]:
    """``opencode run --format json`` events as ``session.jsonl`` lines.

    The first event opens the session (its ``sessionID``); a ``text`` part is an assistant
    message, a completed ``tool_use`` part a tool call with its input followed by its
    output (an ``error`` state is an error result); ``step_finish`` parts add up the usage;
    an ``error`` event ends it with the error, else the last step ends it well. Lines that
    are not JSON objects are skipped.
    """
    lines: list[dict[str, Any]] = []
    usage = {"input_tokens": 0, "output_tokens": 0, "cached_tokens": 0}
    error: str | None = None
    finished = False
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
                    "agent": "opencode",
                    "api": "openai-chat",
                    "model": model,
                    "tools": [],
                    "cli_session_id": event.get("sessionID"),
                }
            )
        kind = event.get("type")
        part = _obj(event.get("part"))
        if kind == "text" and part.get("text"):
            lines.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "content": str(part["text"]),
                    "stop_reason": "stop",
                }
            )
        elif kind == "tool_use":
            lines.extend(_tool(part))
        elif kind == "step_finish":
            finished = True
            tokens = _obj(part.get("tokens"))
            cache = _obj(tokens.get("cache"))
            usage["input_tokens"] += _count(tokens.get("input")) + _count(cache.get("read"))
            usage["output_tokens"] += _count(tokens.get("output")) + _count(tokens.get("reasoning"))
            usage["cached_tokens"] += _count(cache.get("read"))
        elif kind == "error":
            detail = event.get("error")
            if isinstance(detail, dict):
                data = _obj(detail.get("data"))
                error = str(data.get("message") or detail.get("name") or "opencode error")
            else:
                error = str(detail or "opencode error")
    if lines:
        if error is not None:
            lines.append({"type": "end", "ok": False, "error": error})
        elif finished:
            lines.append({"type": "end", "ok": True, "error": None, "usage": usage})
    return lines


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _tool(part: Mapping[str, Any]) -> list[dict[str, Any]]:
    state = _obj(part.get("state"))
    call_id = str(part.get("callID", ""))
    name = str(part.get("tool", ""))
    arguments = _obj(state.get("input"))
    failed = state.get("status") == "error"
    output = state.get("error") if failed else state.get("output")
    return [
        {
            "type": "message",
            "role": "assistant",
            "content": "",
            "stop_reason": "tool_use",
            "tool_calls": [{"id": call_id, "name": name, "arguments": arguments}],
        },
        {
            "type": "tool_result",
            "tool_call_id": call_id,
            "name": name,
            "content": "" if output is None else str(output),
            "is_error": failed,
        },
    ]


def _obj(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


__all__ = ["PACKAGE", "OpenCode", "convert_json_events", "host_has_avx2", "native_package"]
