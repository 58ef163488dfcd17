"""``openhands-sdk``: OpenHands' agent (PyPI ``openhands-sdk``), on Debian's Python 3.13.

The OpenHands SDK needs Python >= 3.12, so it runs on Debian 13's ``python3.13``
(:mod:`.debian_runtime`), with ``openhands-sdk`` and ``openhands-tools`` installed there on
the host, never on the image's Python. A small driver (:data:`DRIVER`, written into the
trial's HOME) runs it as Harbor's ``openhands-sdk`` agent does: the SDK's ``Agent`` with
OpenHands' terminal, file-editor and task-tracker tools, in a local ``Conversation`` whose
workspace is the sandbox's start dir, so every command runs in this sandbox (OpenHands'
in-process local workspace: no agent server, no docker). Its terminal is a tmux pane
running the image's ``/bin/bash``: the SDK's default where ``tmux`` is on ``PATH`` (the
entry's, through a shim first on the driver's ``PATH`` that runs it with the sandbox's
``PATH``, which tmux gives the panes). litellm reaches the
gateway's OpenAI chat endpoint (``OPENAI_BASE_URL``, the trial token as the key,
``api_mode="chat"``) with the model ``openai/<model>``; litellm's downloads are off
(``LITELLM_OFFLINE_MODE``). Each event of the conversation (OpenHands' own JSON) is one
line of ``events.jsonl``, written as it happens, kept under ``agent-logs/openhands-sdk/``
and converted into ``session.jsonl``.

``openhands-tools`` is installed without its declared dependencies (``pip --no-deps``): it
declares ``browser-use`` and ``tom-swe`` (its browser and theory-of-mind tools, imported
only when used, and not given here) and ``func-timeout`` (no wheel on PyPI: the harness
never builds a package; its glob and grep tools need it, also not given). What the three
tools it runs import is installed with its dependencies.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from typing_extensions import override

from harness.agents.installed.debian_agent import DebianPythonAgent
from harness.agents.installed.debian_runtime import (
    DebianPythonSpec,
    debian_python_spec,
)

PACKAGE = "openhands-sdk"
TOOLS_PACKAGE = "openhands-tools"
#: What the terminal, file-editor and task-tracker tools import (``openhands-tools``'s
#: dependencies less ``browser-use``, ``tom-swe`` and ``func-timeout``).
TOOLS_DEPENDENCIES = (
    "binaryornot>=0.6.0",
    "cachetools",
    "filelock>=3.20.1",
    "libtmux>=0.53.0",
    "tree-sitter>=0.24",
    "tree-sitter-bash>=0.23",
)
EVENTS = "events.jsonl"
#: The ``kind`` of the driver's last line of :data:`EVENTS`: the final execution status.
STATUS_KIND = "HarnessDriverStatus"
#: The driver's path in the trial's HOME.
DRIVER_FILE = ".harness-openhands-sdk-driver.py"
#: The tools the driver gives the agent (OpenHands' names), and the SDK's own ``finish``.
TOOLS = ("terminal", "file_editor", "task_tracker", "finish", "think")
DRIVER = '''
"""Runs the OpenHands SDK's agent inside the sandbox, its tools on this machine.

Argv: ``MODEL TMUX_BIN_DIR EVENTS_FILE INSTRUCTION``; the gateway is ``OPENAI_BASE_URL``,
the key ``OPENAI_API_KEY``. Every event is one JSON line of EVENTS_FILE, as it happens; the
last line, the driver's own (``kind`` STATUS_KIND), is the conversation's final execution
status. Exits 0 when the conversation finished, 1 otherwise (its status on stderr).
"""

import json
import os
import shlex
import sys

STATUS_KIND = "HarnessDriverStatus"
SHIM_DIR = ".harness-openhands-sdk-bin"


def tmux_shim(tmux_bin, path):
    """A dir whose ``tmux`` runs the entry's with the sandbox's PATH; the dir's path.

    tmux gives a new pane the PATH of the client that made it, so the client (libtmux's
    ``tmux new-window``) must run with the sandbox's PATH, not the driver's.
    """
    shim = os.path.join(os.environ.get("HOME") or "/tmp", SHIM_DIR)
    os.makedirs(shim, exist_ok=True)
    script = os.path.join(shim, "tmux")
    with open(script, "w", encoding="utf-8") as out:
        out.write(
            "#!/bin/sh\\nPATH=" + shlex.quote(path) + "\\nexport PATH\\n"
            "exec " + shlex.quote(tmux_bin + "/tmux") + ' "$@"\\n'
        )
    os.chmod(script, 0o755)
    return shim


def main(model, events_file, instruction, path):
    from openhands.sdk import LLM, Agent, Conversation, Tool
    from openhands.tools.file_editor import FileEditorTool
    from openhands.tools.task_tracker import TaskTrackerTool
    from openhands.tools.terminal import TerminalTool

    log = open(events_file, "a", encoding="utf-8")

    def record(event):
        log.write(event.model_dump_json() + "\\n")
        log.flush()

    llm = LLM(
        model=model, base_url=os.environ["OPENAI_BASE_URL"],
        api_key=os.environ["OPENAI_API_KEY"], api_mode="chat", usage_id="agent",
        num_retries=2, retry_min_wait=1, retry_max_wait=4,
    )
    # The panes' PATH is the sandbox's: the entry's tmux is for OpenHands, not its commands.
    terminal = Tool(name=TerminalTool.name, params={"env": {"PATH": path}})
    tools = [terminal, Tool(name=FileEditorTool.name), Tool(name=TaskTrackerTool.name)]
    agent = Agent(llm=llm, tools=tools)
    conversation = Conversation(
        agent=agent, workspace=os.getcwd(), callbacks=[record], visualizer=None,
    )
    conversation.send_message(instruction)
    try:
        conversation.run()
    finally:
        status = str(conversation.state.execution_status.value)
        conversation.close()
        log.write(json.dumps({"kind": STATUS_KIND, "execution_status": status}) + "\\n")
        log.close()
    print(f"openhands-sdk: {status}", file=sys.stderr, flush=True)
    return 0 if status == "finished" else 1


if __name__ == "__main__":
    model, tmux_bin, events_file, instruction = sys.argv[1:5]
    path = os.environ.get("PATH", "/usr/bin:/bin")
    os.environ["PATH"] = tmux_shim(tmux_bin, path) + ":" + path
    os.makedirs(os.path.dirname(events_file), exist_ok=True)
    sys.exit(main(model, events_file, instruction, path))
'''


class OpenHandsSdk(DebianPythonAgent):
    """OpenHands (PyPI openhands-sdk), its own tools in the sandbox, litellm to the gateway."""

    name = "openhands-sdk"
    default_version: ClassVar[str] = "1.58.2"
    api: ClassVar[str] = "openai-chat"
    providers: ClassVar[tuple[str, ...]] = ("openai", "faux")
    pypi_package: ClassVar[str] = PACKAGE
    log_file: ClassVar[str] = EVENTS

    @override
    def install_spec(self) -> DebianPythonSpec:
        return debian_python_spec(
            self.name,
            self.version,
            (f"{PACKAGE}=={self.version}", *TOOLS_DEPENDENCIES),
            no_deps=(f"{TOOLS_PACKAGE}=={self.version}",),
        )

    driver_file: ClassVar[str] = DRIVER_FILE
    driver: ClassVar[str] = DRIVER
    extra_env: ClassVar[Mapping[str, str]] = {"OPENHANDS_SUPPRESS_BANNER": "1"}

    @override
    def convert(self, log: list[str]) -> Iterable[dict[str, Any]]:
        return convert_events(log, model=self.model_id)


def convert_events(log: Iterable[str], *, model: str | None) -> list[dict[str, Any]]:  # noqa: C901
    """OpenHands' conversation events (one JSON object a line) as ``session.jsonl`` lines.

    The user's first message (the instruction) is dropped: the harness opens the session
    with it. An agent's ``ActionEvent`` is an assistant message with its tool call (the
    events of one model response, sharing its ``llm_response_id``, make one message), an
    ``ObservationEvent`` (or an ``AgentErrorEvent`` or ``UserRejectObservation`` answering
    a call) its result, an agent ``MessageEvent`` an assistant message; the driver's last
    line (:data:`STATUS_KIND`: the conversation's final execution status) ends it, ``ok``
    when ``finished`` (like any agent's log, the file is in the agent's reach: it says what
    the agent claims, never the reward).
    """
    lines: list[dict[str, Any]] = [
        {
            "type": "session",
            "version": 1,
            "agent": "openhands-sdk",
            "api": "openai-chat",
            "model": model,
            "tools": list(TOOLS),
        }
    ]
    status: str | None = None
    error: str | None = None
    users = 0
    response: str | None = None  # the llm_response_id of the open assistant message
    for raw in log:
        try:
            event = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        kind = event.get("kind")
        source = event.get("source")
        if kind == "MessageEvent":
            response = None
            text = _message_text(event.get("llm_message"))
            if source == "user":
                users += 1
                if users > 1:
                    lines.append({"type": "message", "role": "user", "content": text})
            elif source == "agent":
                lines.append(
                    {"type": "message", "role": "assistant", "content": text, "stop_reason": "stop"}
                )
        elif kind == "ActionEvent" and source == "agent":
            call = _tool_call(event)
            if response is not None and event.get("llm_response_id") == response:
                lines[-1].setdefault("tool_calls", []).append(call)
                continue
            thought = event.get("thought")
            content = _content_text(thought) if isinstance(thought, list) else ""
            lines.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "content": content,
                    "stop_reason": "tool_use",
                    "tool_calls": [call],
                }
            )
            response = str(event.get("llm_response_id") or "") or None
        elif kind in ("ObservationEvent", "AgentErrorEvent", "UserRejectObservation"):
            response = None
            if kind == "ObservationEvent":
                content, failed = _observation(event.get("observation"))
            elif kind == "AgentErrorEvent":
                content, failed = str(event.get("error") or ""), True
            else:
                content, failed = str(event.get("rejection_reason") or "rejected"), True
            lines.append(
                {
                    "type": "tool_result",
                    "tool_call_id": str(event.get("tool_call_id") or ""),
                    "name": str(event.get("tool_name") or ""),
                    "content": content,
                    "is_error": failed,
                }
            )
        elif kind == STATUS_KIND:
            value = event.get("execution_status")
            status = value if isinstance(value, str) else None
        elif kind == "ConversationErrorEvent":
            error = f"{event.get('code') or 'error'}: {event.get('detail') or ''}".strip(": ")
    ok = status == "finished"
    if not ok and error is None:
        error = f"conversation {status}" if status else "no final status: the run was cut short"
    lines.append({"type": "end", "ok": ok, "error": None if ok else error, "status": status})
    return lines


def _tool_call(event: Mapping[str, Any]) -> dict[str, Any]:
    call: dict[str, Any] = event["tool_call"] if isinstance(event.get("tool_call"), dict) else {}
    raw = call.get("arguments")
    try:
        arguments = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        arguments = raw
    return {
        "id": str(event.get("tool_call_id") or call.get("id") or ""),
        "name": str(event.get("tool_name") or call.get("name") or ""),
        "arguments": arguments,
    }


def _observation(observation: Any) -> tuple[str, bool]:
    if not isinstance(observation, dict):
        return "", False
    content = observation.get("content")
    text = _content_text(content) if isinstance(content, list) else str(content or "")
    failed = bool(observation.get("is_error"))
    code = observation.get("exit_code")
    if isinstance(code, int) and code not in (0, -1):
        failed = True
    return text, failed


def _message_text(message: Any) -> str:
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    return _content_text(content) if isinstance(content, list) else str(content or "")


def _content_text(parts: list[Any]) -> str:
    return "".join(
        str(p.get("text", "")) for p in parts if isinstance(p, dict) and p.get("type") == "text"
    )


__all__ = ["DRIVER", "PACKAGE", "OpenHandsSdk", "convert_events"]
