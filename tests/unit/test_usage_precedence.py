"""The gateway's count wins, and the record says so: for each installed CLI's own log format.

Each test hands a log written in one CLI's format (hand-written, in the shape the pinned CLI
writes it) to that agent's real ``collect``, which converts it into ``session.jsonl`` as a
trial does, then gives the record's usage the gateway's count. The CLIs carry their usage
differently: Claude Code and mini-swe-agent on each assistant message, Codex, Gemini CLI and
OpenCode only as the run's total on the ``end`` line, aider not at all. Where the log's
figures differ from the gateway's, they are kept as ``usage.agent_log`` and the gateway's
count stays the record's; where they agree, or the log has none, nothing is added.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.agents.installed.aider import Aider
from harness.agents.installed.base import InstalledAgent
from harness.agents.installed.claude_code import ClaudeCode
from harness.agents.installed.cline import Cline
from harness.agents.installed.codex import Codex
from harness.agents.installed.gemini_cli import GeminiCli
from harness.agents.installed.mini_swe_agent import MiniSweAgent
from harness.agents.installed.opencode import OpenCode
from harness.agents.installed.qwen_code import QwenCode
from harness.records import Usage
from harness.trial.usage_precedence import agent_logged_usage, with_usage_source


def _jsonl(*events: object) -> str:
    return "".join(json.dumps(event) + "\n" for event in events)


# Claude Code's stream-json: each assistant message with the usage it logged.
CLAUDE_CODE = _jsonl(
    {"type": "system", "subtype": "init", "session_id": "s-1", "tools": ["Bash"]},
    {
        "type": "assistant",
        "message": {
            "content": [{"type": "tool_use", "id": "tu1", "name": "Bash", "input": {}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 900, "output_tokens": 1},
        },
    },
    {
        "type": "user",
        "message": {"content": [{"type": "tool_result", "tool_use_id": "tu1", "content": "ok"}]},
    },
    {
        "type": "assistant",
        "message": {
            "content": [{"type": "text", "text": "Done."}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 950, "output_tokens": 2},
        },
    },
    # Its result line's totals are not converted: the messages' count once, not twice.
    {"type": "result", "subtype": "success", "is_error": False, "num_turns": 2},
)
# Codex's exec --json: the turn's usage only on turn.completed.
CODEX = _jsonl(
    {"type": "thread.started", "thread_id": "t-1"},
    {"type": "turn.started"},
    {"type": "item.completed", "item": {"id": "i1", "type": "agent_message", "text": "Done."}},
    {
        "type": "turn.completed",
        "usage": {"input_tokens": 1850, "cached_input_tokens": 0, "output_tokens": 3},
    },
)
# Gemini CLI's stream-json: the session's totals only in the result's stats.
GEMINI_CLI = _jsonl(
    {"type": "init", "session_id": "g-1", "model": "m"},
    {"type": "message", "role": "assistant", "content": "Done.", "delta": True},
    {
        "type": "result",
        "status": "success",
        "stats": {"total_tokens": 1853, "input_tokens": 1850, "output_tokens": 3, "cached": 0},
    },
)
# OpenCode's JSON events: each step's tokens on step_finish, summed into the end line.
OPENCODE = _jsonl(
    {"type": "step_start", "sessionID": "ses_1", "part": {"type": "step-start"}},
    {"type": "text", "sessionID": "ses_1", "part": {"type": "text", "text": "Done."}},
    {
        "type": "step_finish",
        "sessionID": "ses_1",
        "part": {
            "type": "step-finish",
            "tokens": {"input": 1000, "output": 2, "reasoning": 1, "cache": {"read": 850}},
        },
    },
)
# Qwen Code's stream-json (Claude Code's format): usage on each assistant message.
QWEN_CODE = _jsonl(
    {"type": "system", "subtype": "init", "session_id": "s1", "model": "m"},
    {
        "type": "assistant",
        "message": {
            "role": "assistant",
            "content": [{"type": "text", "text": "Done."}],
            "usage": {"input_tokens": 1850, "output_tokens": 3},
        },
    },
    {"type": "result", "subtype": "success", "is_error": False, "num_turns": 1},
)
# Cline's --json events: the run's total on run_result only (its usage events are deltas).
CLINE = _jsonl(
    {"type": "hook_event", "hookEventName": "agent_start", "taskId": "conv_1"},
    {"type": "agent_event", "event": {"type": "usage", "inputTokens": 1850, "outputTokens": 3}},
    {
        "type": "agent_event",
        "event": {"type": "content_end", "contentType": "text", "text": "Done."},
    },
    {
        "type": "run_result",
        "finishReason": "completed",
        "usage": {"inputTokens": 1850, "outputTokens": 3, "cacheReadTokens": 0},
        "aggregateUsage": {"inputTokens": 1850, "outputTokens": 3, "cacheReadTokens": 0},
    },
)
# mini-swe-agent's trajectory: each assistant message's response with litellm's usage.
MINI_SWE_AGENT = json.dumps(
    {
        "info": {"mini_version": "2.4.6", "exit_status": "Submitted"},
        "trajectory_format": "mini-swe-agent-1.1",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant"},
            {"role": "user", "content": "make hello.txt"},
            {
                "role": "assistant",
                "content": "Done.",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "bash", "arguments": '{"command": "true"}'},
                    }
                ],
                "extra": {"response": {"usage": {"prompt_tokens": 1850, "completion_tokens": 3}}},
            },
            {"role": "tool", "tool_call_id": "c1", "content": "<returncode>0</returncode>"},
            {"role": "exit", "content": "", "extra": {"exit_status": "Submitted"}},
        ],
    }
)
# aider's chat history: no token counts at all.
AIDER = """\

# aider chat started at 2026-12-01 23:53:25

> Aider v0.86.2

#### make hello.txt

hello.txt
```
Hello
```

> Applied edit to hello.txt
"""

#: agent -> (its log, where collect() reads it, what the log says it used)
FORMATS: dict[str, tuple[InstalledAgent, str, str, dict[str, int] | None]] = {
    "claude-code": (
        ClaudeCode(),
        CLAUDE_CODE,
        "agent.log",
        {"input_tokens": 1850, "output_tokens": 3},
    ),
    "codex": (Codex(), CODEX, "agent.log", {"input_tokens": 1850, "output_tokens": 3}),
    "gemini-cli": (
        GeminiCli(),
        GEMINI_CLI,
        "agent.log",
        {"input_tokens": 1850, "output_tokens": 3},
    ),
    "opencode": (OpenCode(), OPENCODE, "agent.log", {"input_tokens": 1850, "output_tokens": 3}),
    "qwen-code": (QwenCode(), QWEN_CODE, "agent.log", {"input_tokens": 1850, "output_tokens": 3}),
    "cline": (Cline(), CLINE, "agent.log", {"input_tokens": 1850, "output_tokens": 3}),
    "mini-swe-agent": (
        MiniSweAgent(),
        MINI_SWE_AGENT,
        "agent-logs/mini-swe-agent/trajectory.json",
        {"input_tokens": 1850, "output_tokens": 3},
    ),
    "aider": (Aider(), AIDER, "agent-logs/aider/chat-history.md", None),
}


def _collected(tmp_path: Path, cli: str) -> Path:
    """The trial's evidence after ``cli``'s collect() converted its log."""
    agent, log, where, _logged = FORMATS[cli]
    evidence = tmp_path / "trial"
    (evidence / where).parent.mkdir(parents=True, exist_ok=True)
    (evidence / where).write_text(log)
    agent.collect(None, evidence)
    assert (evidence / "session.jsonl").is_file()
    return evidence


@pytest.mark.parametrize("cli", list(FORMATS))
def test_a_disagreeing_log_is_recorded_beside_the_gateways_count(cli: str, tmp_path: Path) -> None:
    evidence = _collected(tmp_path, cli)
    logged = FORMATS[cli][3]
    assert agent_logged_usage(evidence / "session.jsonl") == logged
    # The gateway counted more: a call retried, or one the CLI does not log.
    gateway = Usage(input_tokens=2900, output_tokens=7, calls=2)
    usage = with_usage_source(gateway, evidence).model_dump(mode="json", exclude_none=True)
    assert usage["source"] == "gateway"
    assert (usage["input_tokens"], usage["output_tokens"], usage["calls"]) == (2900, 7, 2)
    if logged is None:
        assert "agent_log" not in usage  # aider logs no usage: nothing to disagree with
    else:
        assert usage["agent_log"] == logged


@pytest.mark.parametrize("cli", [cli for cli, f in FORMATS.items() if f[3] is not None])
def test_an_agreeing_log_adds_nothing(cli: str, tmp_path: Path) -> None:
    evidence = _collected(tmp_path, cli)
    gateway = Usage(input_tokens=1850, output_tokens=3, calls=2)
    usage = with_usage_source(gateway, evidence).model_dump(mode="json", exclude_none=True)
    assert usage["source"] == "gateway" and "agent_log" not in usage


def _session(tmp_path: Path, *lines: object) -> Path:
    (tmp_path / "session.jsonl").write_text(_jsonl(*lines))
    return tmp_path / "session.jsonl"


def test_each_steps_run_counts_once(tmp_path: Path) -> None:
    # A two-step task's session: one step's end carries the total (Codex), the other's
    # messages carry theirs and its end a total of the same tokens, which is not added.
    session = _session(
        tmp_path,
        {"type": "session", "agent": "x"},
        {"type": "message", "role": "user", "content": "step one"},
        {"type": "end", "ok": True, "usage": {"input_tokens": 100, "output_tokens": 10}},
        {"type": "message", "role": "user", "content": "step two"},
        {"type": "message", "role": "assistant", "usage": {"input_tokens": 40, "output_tokens": 4}},
        {"type": "message", "role": "assistant", "usage": {"input_tokens": 50, "output_tokens": 5}},
        {"type": "end", "ok": True, "usage": {"input_tokens": 90, "output_tokens": 9}},
        # A third run killed before its end line: its messages still count.
        {"type": "message", "role": "assistant", "usage": {"input_tokens": 7, "output_tokens": 1}},
    )
    assert agent_logged_usage(session) == {"input_tokens": 197, "output_tokens": 20}


def test_a_failed_runs_end_without_usage_counts_nothing(tmp_path: Path) -> None:
    session = _session(
        tmp_path,
        {"type": "end", "ok": False, "error": "HTTP 401"},
        {"type": "end", "ok": True, "usage": {"input_tokens": None, "output_tokens": True}},
    )
    assert agent_logged_usage(session) is None
