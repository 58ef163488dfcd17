"""``terminus-2``: Harbor's Terminus-2 (PyPI ``harbor``), on Debian's Python 3.13, in its tmux.

Terminus-2 needs Python >= 3.12, so it runs on Debian 13's ``python3.13``
(:mod:`.debian_runtime`), with ``harbor`` and its dependencies installed there on the host,
never on the image's Python. Harbor runs it outside the task's container and drives a tmux
session in it through ``environment.exec``; here it runs inside the sandbox: a small driver
(:data:`DRIVER`, written into the trial's HOME) gives it an environment whose ``exec`` is a
local ``/bin/sh -c`` and puts the entry's tmux wrapper (Debian's tmux, with the entry's
loader) first on ``PATH``, so its own prompts, its JSON parser and its tmux session run as
Harbor runs them, with nothing installed into the image (its tmux-install step finds tmux
and installs nothing; terminal recording with asciinema is off). litellm reaches the
gateway's OpenAI chat endpoint (``OPENAI_BASE_URL``, the trial token as the key) with the
model ``openai/<model>``; litellm's downloads are off (``LITELLM_OFFLINE_MODE``). Its
trajectory is Harbor's own ATIF (``trajectory.json``), kept as it wrote it under
``agent-logs/terminus-2/`` and converted into ``session.jsonl``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, ClassVar

from typing_extensions import override

from harness.agents.installed.debian_agent import DebianPythonAgent
from harness.records.layout import TRAJECTORY_FILENAME
from harness.tasks import Task
from sandbox.backend import Sandbox

PACKAGE = "harbor"
TRAJECTORY = TRAJECTORY_FILENAME  # Harbor names its ATIF file as the run dir does
#: The driver's path in the trial's HOME.
DRIVER_FILE = ".harness-terminus-2-driver.py"
DRIVER = '''
"""Runs Harbor's Terminus-2 inside the sandbox, on the environment it runs in.

Harbor runs the agent outside the task's container and reaches it through
``environment.exec``; here the agent runs inside the sandbox, so ``exec`` is a local
``/bin/sh -c`` and the tmux session is the entry's tmux (first on ``PATH``). Argv:
``MODEL TMUX_BIN_DIR LOGS_DIR INSTRUCTION``; the gateway is ``OPENAI_BASE_URL``. Its
trajectory is Harbor's own ATIF (``LOGS_DIR/trajectory.json``).
"""

import asyncio
import os
import sys
from pathlib import Path, PurePosixPath


def _text(data):
    return data.decode("utf-8", "replace")


class ExecResult:
    def __init__(self, stdout, stderr, return_code):
        self.stdout, self.stderr, self.return_code = stdout, stderr, return_code


class TrialPaths:
    def __init__(self, agent_dir):
        self.agent_dir = agent_dir


class LocalEnvironment:
    """What Terminus-2 and its TmuxSession use of Harbor's BaseEnvironment."""

    session_id = "harness"
    default_user = None

    def __init__(self, logs):
        self.trial_paths = TrialPaths(logs)

    async def exec(self, command, cwd=None, env=None, timeout_sec=None, user=None):
        full = {**os.environ, **(env or {})}
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", command, cwd=cwd, env=full,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout_sec)
        except asyncio.TimeoutError:
            proc.kill()
            out, err = await proc.communicate()
            return ExecResult(_text(out), _text(err), 124)
        return ExecResult(_text(out), _text(err), proc.returncode)

    async def upload_file(self, source_path, target_path):
        Path(target_path).write_bytes(Path(source_path).read_bytes())

    async def download_file(self, source_path, target_path):
        Path(target_path).write_bytes(Path(source_path).read_bytes())


async def main(model, logs, instruction):
    import harbor.models.trial.paths as paths

    paths.EnvironmentPaths.agent_dir = PurePosixPath(logs)
    from harbor.agents.terminus_2.terminus_2 import Terminus2
    from harbor.models.agent.context import AgentContext

    environment = LocalEnvironment(Path(logs))
    agent = Terminus2(
        logs_dir=Path(logs), model_name=model, api_base=os.environ.get("OPENAI_BASE_URL"),
        record_terminal_session=False,
    )
    await agent.setup(environment)
    context = AgentContext()
    await agent.run(instruction, environment, context)
    print(context.model_dump_json(), flush=True)


if __name__ == "__main__":
    model, tmux_bin, logs, instruction = sys.argv[1:5]
    os.environ["PATH"] = tmux_bin + ":" + os.environ.get("PATH", "/usr/bin:/bin")
    os.makedirs(logs, exist_ok=True)
    asyncio.run(main(model, logs, instruction))
'''


class Terminus2(DebianPythonAgent):
    """Harbor's Terminus-2, its tmux session through the entry's tmux, litellm to the gateway."""

    name = "terminus-2"
    default_version: ClassVar[str] = "0.26.0"
    api: ClassVar[str] = "openai-chat"
    providers: ClassVar[tuple[str, ...]] = ("openai", "faux")
    pypi_package: ClassVar[str] = PACKAGE
    log_file: ClassVar[str] = TRAJECTORY

    driver_file: ClassVar[str] = DRIVER_FILE
    driver: ClassVar[str] = DRIVER

    @override
    def log_arg(self, task: Task, sandbox: Sandbox) -> str:
        return self.log_dir(sandbox, self.step_name(task))  # Harbor writes into a dir

    @override
    def convert(self, log: list[str]) -> Iterable[dict[str, Any]]:
        return convert_atif("\n".join(log), model=self.model_id)


def convert_atif(text: str, *, model: str | None) -> list[dict[str, Any]]:
    """Harbor's ATIF trajectory as ``session.jsonl`` lines.

    The first user step (Terminus-2's prompt around the instruction) is dropped: the
    harness opens the session with the instruction. Each agent step is an assistant
    message (its text, its tool calls: ``bash_command`` keystrokes and
    ``mark_task_complete``) followed by its observations as tool results; the last step
    marking the task complete ends it ``ok``.
    """
    try:
        data = json.loads(text)
    except ValueError:
        return []
    if not isinstance(data, dict) or not isinstance(data.get("steps"), list):
        return []
    agent: dict[str, Any] = data["agent"] if isinstance(data.get("agent"), dict) else {}
    lines: list[dict[str, Any]] = [
        {
            "type": "session",
            "version": 1,
            "agent": "terminus-2",
            "api": "openai-chat",
            "model": model,
            "tools": ["bash_command", "mark_task_complete"],
            "cli_version": agent.get("version"),
        }
    ]
    completed = False
    for step in data["steps"]:
        if not isinstance(step, dict) or step.get("source") != "agent":
            continue
        listed = step.get("tool_calls")
        calls = [c for c in listed if isinstance(c, dict)] if isinstance(listed, list) else []
        metrics: dict[str, Any] = step["metrics"] if isinstance(step.get("metrics"), dict) else {}
        message: dict[str, Any] = {
            "type": "message",
            "role": "assistant",
            "content": str(step.get("message") or ""),
            "stop_reason": "tool_use" if calls else "stop",
            "usage": {
                "input_tokens": metrics.get("prompt_tokens"),
                "output_tokens": metrics.get("completion_tokens"),
            },
        }
        if calls:
            message["tool_calls"] = [
                {
                    "id": str(c.get("tool_call_id", "")),
                    "name": str(c.get("function_name", "")),
                    "arguments": c.get("arguments"),
                }
                for c in calls
            ]
        lines.append(message)
        names = {str(c.get("tool_call_id", "")): str(c.get("function_name", "")) for c in calls}
        observation = step.get("observation")
        results = observation.get("results") if isinstance(observation, dict) else None
        for result in results if isinstance(results, list) else []:
            if not isinstance(result, dict):
                continue
            call_id = str(
                result.get("source_call_id") or (calls[-1].get("tool_call_id") if calls else "")
            )
            lines.append(
                {
                    "type": "tool_result",
                    "tool_call_id": call_id,
                    "name": names.get(call_id, "bash_command"),
                    "content": str(result.get("content") or ""),
                    "is_error": False,
                }
            )
        completed = any(c.get("function_name") == "mark_task_complete" for c in calls)
    lines.append({"type": "end", "ok": completed, "error": None if completed else "not completed"})
    return lines


__all__ = ["DRIVER", "PACKAGE", "Terminus2", "convert_atif"]
