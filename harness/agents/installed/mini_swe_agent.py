"""``mini-swe-agent`` (PyPI ``mini-swe-agent``), through the gateway with litellm.

It runs on the harness's own Python (:mod:`.python_runtime`), never the image's:
``python -I -m minisweagent.run.mini -m PROVIDER/MODEL -t INSTRUCTION --yolo
--exit-immediately -o TRAJECTORY``. litellm reaches the gateway through
``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL`` with the trial token as the key (set for every
sandbox agent); the first-run setup prompt, litellm's downloads (``LITELLM_OFFLINE_MODE``:
its cost map, Anthropic beta-header config, tokenizers) and cost tracking of unknown models
are off. Its model calls the ``bash`` tool; each action runs in a shell of its own, the
image's ``/bin/sh -c`` (its local environment runs it with Python's ``shell=True``, so not
bash, and no shell state such as ``cd`` or variables carries over);
``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` ends the run. Its
trajectory (``mini-swe-agent-1.1`` JSON: the chat messages with their tool calls) is kept
under ``agent-logs/mini-swe-agent/`` and converted into ``session.jsonl``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from typing_extensions import override

from harness.agents.installed.python_agent import PythonInstalledAgent
from harness.tasks import Task
from sandbox.backend import Sandbox

PACKAGE = "mini-swe-agent"
TRAJECTORY = "trajectory.json"
_RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>|\"returncode\":\s*(-?\d+)")


class MiniSweAgent(PythonInstalledAgent):
    """mini-swe-agent (PyPI mini-swe-agent), its bash tool through litellm and the gateway."""

    name = "mini-swe-agent"
    default_version: ClassVar[str] = "2.4.6"
    api: ClassVar[str] = "openai-chat"
    providers: ClassVar[tuple[str, ...]] = ("openai", "anthropic", "faux")
    pypi_package: ClassVar[str] = PACKAGE
    log_file: ClassVar[str] = TRAJECTORY

    def litellm_model(self) -> str:
        """The model as litellm names it: its provider (the gateway's API) and name."""
        assert self.model is not None
        prefix = "anthropic" if self.model.provider == "anthropic" else "openai"
        return f"{prefix}/{self.model.upstream}"

    @override
    def cli_argv(self, task: Task, sandbox: Sandbox) -> list[str]:
        return [
            *self.python(),
            "-m",
            "minisweagent.run.mini",
            "--model",
            self.litellm_model(),
            "--task",
            task.instruction,
            "--yolo",
            "--exit-immediately",
            "--cost-limit",
            "0",
            "--output",
            self.log_path(sandbox, self.step_name(task)),
        ]

    @override
    def cli_env(self, sandbox: Sandbox) -> Mapping[str, str]:
        home = sandbox.paths.home
        return {
            "MSWEA_CONFIGURED": "true",  # no first-run setup prompt
            "MSWEA_GLOBAL_CONFIG_DIR": f"{home}/.config/mini-swe-agent",
            "MSWEA_COST_TRACKING": "ignore_errors",  # the gateway's count is the usage
            "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "2",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no cost map download at import
            "LITELLM_TELEMETRY": "False",
            # litellm's own fetches (its cost map, Anthropic beta-header config from GitHub,
            # tokenizers from Hugging Face) use their bundled copies, or are skipped.
            "LITELLM_OFFLINE_MODE": "true",
            "NO_COLOR": "1",
            "TERM": "dumb",
        }

    @override
    def convert(self, log: list[str]) -> Iterable[dict[str, Any]]:
        return convert_trajectory("\n".join(log), model=self.model_id)


def convert_trajectory(text: str, *, model: str | None) -> list[dict[str, Any]]:
    """A mini-swe-agent trajectory (JSON) as ``session.jsonl`` lines.

    The system message and the first user message (its rendering of the task) are
    dropped: the harness opens the session with the instruction itself. An assistant
    message's ``bash`` tool calls become tool calls (their JSON arguments parsed), a
    ``tool`` message their result (an error when its return code is not 0), a format
    error's rejected response the assistant's text, and the ``exit`` message the end:
    ``ok`` when the agent submitted.
    """
    try:
        data = json.loads(text)
    except ValueError:
        return []
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        return []
    lines: list[dict[str, Any]] = [
        {
            "type": "session",
            "version": 1,
            "agent": "mini-swe-agent",
            "api": "openai-chat",
            "model": model,
            "tools": ["bash"],
            "cli_version": (data.get("info") or {}).get("mini_version"),
        }
    ]
    names: dict[str, str] = {}
    users = 0
    for message in data["messages"]:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        extra: dict[str, Any] = message["extra"] if isinstance(message.get("extra"), dict) else {}
        if role == "assistant":
            lines.append(_assistant(message, extra, names))
        elif role == "tool":
            call_id = str(message.get("tool_call_id", ""))
            content = _text(message.get("content"))
            code = _RETURNCODE.search(content)
            failed = code is not None and int(code.group(1) or code.group(2)) != 0
            lines.append(
                {
                    "type": "tool_result",
                    "tool_call_id": call_id,
                    "name": names.get(call_id, "bash"),
                    "content": content,
                    "is_error": failed,
                }
            )
        elif role == "user":
            users += 1
            response = extra.get("response")
            if isinstance(response, dict):  # a format error keeps the rejected answer
                lines.append(_assistant(_first_message(response), {"response": response}, names))
            if users > 1:
                lines.append(
                    {"type": "message", "role": "user", "content": _text(message.get("content"))}
                )
        elif role == "exit":
            status = str(extra.get("exit_status", ""))
            ok = status == "Submitted"
            error = None if ok else f"{status}: {_text(message.get('content'))}".strip(": ")
            lines.append({"type": "end", "ok": ok, "error": error, "exit_status": status})
    return lines


def _assistant(
    message: Mapping[str, Any], extra: Mapping[str, Any], names: dict[str, str]
) -> dict[str, Any]:
    calls = []
    for call in message.get("tool_calls") or []:
        if not isinstance(call, dict):
            continue
        function: dict[str, Any] = (
            call["function"] if isinstance(call.get("function"), dict) else {}
        )
        name = str(function.get("name", ""))
        raw = function.get("arguments")
        try:
            arguments = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            arguments = raw
        call_id = str(call.get("id", ""))
        names[call_id] = name
        calls.append({"id": call_id, "name": name, "arguments": arguments})
    line: dict[str, Any] = {
        "type": "message",
        "role": "assistant",
        "content": _text(message.get("content")),
        "stop_reason": "tool_use" if calls else "stop",
        "usage": _usage(extra.get("response")),
    }
    if calls:
        line["tool_calls"] = calls
    return line


def _first_message(response: Mapping[str, Any]) -> Mapping[str, Any]:
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message")
        if isinstance(message, dict):
            return message
    return {}


def _usage(response: Any) -> dict[str, Any] | None:
    usage = response.get("usage") if isinstance(response, dict) else None
    if not isinstance(usage, dict):
        return None
    return {
        "input_tokens": usage.get("prompt_tokens"),
        "output_tokens": usage.get("completion_tokens"),
    }


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


__all__ = ["PACKAGE", "MiniSweAgent", "convert_trajectory"]
