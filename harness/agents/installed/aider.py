"""``aider`` (PyPI ``aider-chat``), through the gateway with litellm.

It runs on the harness's own Python (:mod:`.python_runtime`), never the image's:
``python -I -m aider --message INSTRUCTION --model PROVIDER/MODEL ...`` (an instruction
that starts with ``/`` or ``!`` is given a leading space: aider would run it as a command).
The gateway is its model's API base: litellm, which aider calls, reads ``OPENAI_BASE_URL`` /
``ANTHROPIC_BASE_URL`` (the gateway's loopback address, known only inside the sandbox)
and the trial token as ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY`` from the environment,
never from the command line. Every question is answered yes
(``--yes-always``), except running shell commands, which aider asks explicitly and so
never does; no git (``--no-git``: nothing to commit), no analytics, no update or model
warnings check, no browser, no URL detection, plain output. Its config comes from the
harness's file in the trial's HOME (``--config``, ``--env-file``): a workspace's
``.aider.conf.yml`` or ``.env`` does not reconfigure it. aider's ``AIDER_*`` variables
outrank a config file, so the task's own (its image's ``ENV``, ``[environment].env``) do:
the task's author's choice, never the agent's. Its chat history (markdown) and
LLM history are kept under ``agent-logs/aider/``; the chat history is converted into
``session.jsonl``, each applied edit a tool call ``edit`` with the file's path.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from typing_extensions import override

from harness.agents.installed.python_agent import PythonInstalledAgent
from harness.tasks import Task
from sandbox.backend import Sandbox

PACKAGE = "aider-chat"
CHAT_HISTORY = "chat-history.md"
LLM_HISTORY = "llm-history.txt"
CONFIG_FILE = ".harness-aider.conf.yml"
ENV_FILE = ".harness-aider.env"
#: aider's own settings (every value a flag would give; the gateway's base comes at run time).
CONFIG = """\
# Written by the harness: aider's only config (a workspace's .aider.conf.yml is not read).
yes-always: true
git: false
auto-commits: false
dirty-commits: false
gitignore: false
analytics-disable: true
check-update: false
show-release-notes: false
show-model-warnings: false
check-model-accepts-settings: false
detect-urls: false
suggest-shell-commands: false
pretty: false
stream: false
fancy-input: false
notifications: false
restore-chat-history: false
map-tokens: 0
auto-lint: false
auto-test: false
"""
_APPLIED = re.compile(r"^Applied edit to (.+?)\s*$")
_ERROR = re.compile(r"(litellm\.\w*(Error|Exception)\b.*|.*\b\w+Error: .*)")


class Aider(PythonInstalledAgent):
    """aider (PyPI aider-chat): edits files from its model's replies, through the gateway."""

    name = "aider"
    default_version: ClassVar[str] = "0.86.2"
    api: ClassVar[str] = "openai-chat"
    providers: ClassVar[tuple[str, ...]] = ("openai", "anthropic", "faux")
    pypi_package: ClassVar[str] = PACKAGE
    log_file: ClassVar[str] = CHAT_HISTORY

    @override
    def home_files(self, task: Task, sandbox: Sandbox) -> Mapping[str, str]:
        return {CONFIG_FILE: CONFIG, ENV_FILE: "# Written by the harness: no variables.\n"}

    @override
    def cli_argv(self, task: Task, sandbox: Sandbox) -> list[str]:
        assert self.model is not None
        provider = "anthropic" if self.model.provider == "anthropic" else "openai"
        home = sandbox.paths.home
        logs = self.log_dir(sandbox, self.step_name(task))  # a step's own: never appended to
        return [
            *self.python(),
            "-m",
            "aider",
            "--config",
            f"{home}/{CONFIG_FILE}",
            "--env-file",
            f"{home}/{ENV_FILE}",
            "--model",
            f"{provider}/{self.model.upstream}",
            "--edit-format",
            "whole",
            "--chat-history-file",
            f"{logs}/{CHAT_HISTORY}",
            "--llm-history-file",
            f"{logs}/{LLM_HISTORY}",
            "--input-history-file",
            f"{logs}/input-history",
            "--message",
            as_message(task.instruction),
        ]

    @override
    def cli_env(self, sandbox: Sandbox) -> Mapping[str, str]:
        return {
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no cost map download at import
            "AIDER_ANALYTICS": "false",
            "NO_COLOR": "1",
            "TERM": "dumb",
        }

    @override
    def convert(self, log: list[str]) -> Iterable[dict[str, Any]]:
        return convert_chat_history(log, model=self.model_id)


def as_message(instruction: str) -> str:
    """The instruction as aider's ``--message``: a prompt, never one of its commands.

    aider runs a message that starts with ``/`` as its in-chat command (``/run CMD``, or
    "Invalid command" for ``/app/x.py is broken``) and one that starts with ``!`` as a shell
    command: the model would never see it. A leading space makes it a prompt (aider tests
    only the first character), and reads the same to the model.
    """
    return " " + instruction if instruction[:1] in ("/", "!") else instruction


def convert_chat_history(log: Iterable[str], *, model: str | None) -> list[dict[str, Any]]:
    """Aider's chat history (markdown) as ``session.jsonl`` lines.

    ``#### `` lines are the user's (the first block, the instruction, is dropped: the
    harness opens the session with it; what precedes it is aider's start-up output),
    ``> `` lines aider's own output (``Applied edit
    to PATH`` an ``edit`` tool call and its result; an error line the end's error), and
    the rest the model's replies.
    """
    lines: list[dict[str, Any]] = [
        {"type": "session", "version": 1, "agent": "aider", "api": "openai-chat",
         "model": model, "tools": ["edit"]}
    ]  # fmt: skip
    text: list[str] = []
    user: list[str] = []
    users = 0
    error: str | None = None
    calls = 0
    last_reply = ""

    def flush_text() -> None:
        nonlocal last_reply
        reply = "\n".join(text).strip()
        text.clear()
        if reply:
            last_reply = reply
            lines.append(
                {"type": "message", "role": "assistant", "content": reply, "stop_reason": "stop"}
            )

    def flush_user() -> None:
        nonlocal users
        if user:
            users += 1
            if users > 1:
                lines.append({"type": "message", "role": "user", "content": "\n".join(user)})
            user.clear()

    for raw in log:
        line = raw.rstrip("\n")
        if line.startswith("# aider chat started at"):
            continue
        if line.startswith("####"):
            flush_text()
            user.append(line[4:].strip())
            continue
        flush_user()
        if line.startswith("> "):
            flush_text()
            said = line[2:].strip()
            applied = _APPLIED.match(said)
            if applied:
                calls += 1
                path = applied.group(1)
                call_id = f"edit_{calls}"
                arguments: dict[str, Any] = {"path": path}
                content = _whole_file(last_reply, path)
                if content is not None:
                    arguments["content"] = content
                call = {"id": call_id, "name": "edit", "arguments": arguments}
                lines.append(
                    {"type": "message", "role": "assistant", "content": "",
                     "stop_reason": "tool_use", "tool_calls": [call]}
                )  # fmt: skip
                lines.append(
                    {"type": "tool_result", "tool_call_id": call_id, "name": "edit",
                     "content": said, "is_error": False}
                )  # fmt: skip
            elif _ERROR.match(said):
                error = said
            continue
        if users or user:
            text.append(line)
        # else: aider's own start-up output (its command line echoed, the instruction's
        # lines unquoted after the first), never the model's
    flush_text()
    flush_user()
    lines.append({"type": "end", "ok": error is None, "error": error})
    return lines


def _whole_file(reply: str, path: str) -> str | None:
    """The file's new content in a reply in aider's ``whole`` format, if it has it."""
    match = re.search(
        rf"^{re.escape(path)}\s*\n```[^\n]*\n(.*?)^```", reply, re.MULTILINE | re.DOTALL
    )
    return match.group(1) if match else None


__all__ = ["PACKAGE", "Aider", "as_message", "convert_chat_history"]
