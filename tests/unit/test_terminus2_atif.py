"""Terminus-2's own ATIF trajectory (Harbor writes it) as session.jsonl lines.

The trajectory here is shaped as Harbor 0.26's Terminus-2 writes it (``ATIF-v1.8``: a user
step with its prompt, agent steps whose tool calls are ``bash_command`` keystrokes and
``mark_task_complete``, their observations as results); the e2e test
(tests/e2e/test_agent_terminus2.py) converts a real one. The file is the agent's: hostile
shapes give fewer lines, never an exception.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from harness.agents.installed.terminus2 import convert_atif


def _step(step_id: int, calls: list[dict[str, Any]], output: str) -> dict[str, Any]:
    return {
        "step_id": step_id,
        "source": "agent",
        "model_name": "m",
        "message": "Analysis: a\nPlan: b",
        "tool_calls": calls,
        "observation": {
            "results": [{"source_call_id": c["tool_call_id"], "content": output} for c in calls]
        },
        "metrics": {"prompt_tokens": 10, "completion_tokens": 5},
    }


def _trajectory() -> dict[str, Any]:
    write = {
        "tool_call_id": "call_0_1",
        "function_name": "bash_command",
        "arguments": {"keystrokes": "printf hi > hello.txt\n", "duration": 0.5},
    }
    done = {"tool_call_id": "call_1_task_complete", "function_name": "mark_task_complete",
            "arguments": {}}  # fmt: skip
    return {
        "schema_version": "ATIF-v1.8",
        "session_id": "s",
        "agent": {"name": "terminus-2", "version": "2.0.0", "model_name": "openai/m"},
        "steps": [
            {"step_id": 1, "source": "user", "message": "You are an AI assistant ... make it"},
            _step(2, [write], "$ printf hi > hello.txt"),
            _step(3, [done], "Current terminal state: ..."),
        ],
    }


def test_agent_steps_become_tool_calls_their_results_and_an_ok_end() -> None:
    lines = convert_atif(json.dumps(_trajectory()), model="faux/m")
    assert lines[0]["type"] == "session" and lines[0]["cli_version"] == "2.0.0"
    kinds = [(line["type"], line.get("role")) for line in lines[1:]]
    assert kinds == [
        ("message", "assistant"), ("tool_result", None),
        ("message", "assistant"), ("tool_result", None), ("end", None),
    ]  # fmt: skip
    first = lines[1]
    assert first["tool_calls"][0]["name"] == "bash_command"
    assert first["tool_calls"][0]["arguments"]["keystrokes"] == "printf hi > hello.txt\n"
    assert first["usage"] == {"input_tokens": 10, "output_tokens": 5}
    assert lines[2]["tool_call_id"] == "call_0_1" and "hello.txt" in lines[2]["content"]
    assert lines[-1] == {"type": "end", "ok": True, "error": None}


def test_a_run_that_never_marked_completion_ends_not_ok() -> None:
    data = _trajectory()
    data["steps"].pop()
    assert convert_atif(json.dumps(data), model=None)[-1]["ok"] is False


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        json.dumps({"steps": "x"}),
        json.dumps({"agent": 3, "steps": [1, None, {"source": "agent", "tool_calls": 7}]}),
        json.dumps(
            {
                "steps": [
                    {
                        "source": "agent",
                        "tool_calls": [1, {"x": []}],
                        "observation": 3,
                        "metrics": "m",
                        "message": ["part"],
                    }
                ]
            }  # fmt: skip
        ),
        json.dumps({"steps": [{"source": "agent", "observation": {"results": [5, {}]}}]}),
    ],
)
def test_hostile_shapes_give_lines_never_an_exception(text: str) -> None:
    lines = convert_atif(text, model=None)
    assert all(isinstance(line, dict) for line in lines)
