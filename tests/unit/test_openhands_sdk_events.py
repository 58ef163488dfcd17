"""OpenHands' conversation events (the SDK writes them) as session.jsonl lines.

tests/fixtures/openhands-sdk/events.jsonl holds the events openhands-sdk 1.58.2 wrote in
a real trial through the faux model (its long fields cut): the user's instruction, a
file-editor call with its thought, two terminal calls of one response (one failing), a call
of an unknown tool (OpenHands answers with an ``AgentErrorEvent``), a final text message,
and the driver's status line. The e2e test (tests/e2e/test_agent_openhands_sdk.py) converts
a whole one. The file is in the agent's reach: hostile shapes give fewer lines, never an
exception.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.agents.installed.openhands_sdk import DRIVER, STATUS_KIND, convert_events

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "openhands-sdk"

EVENTS = (FIXTURES / "events.jsonl").read_text().strip().splitlines()


def test_actions_become_tool_calls_one_message_a_response_and_an_ok_end() -> None:
    lines = convert_events(EVENTS, model="faux/m")
    assert lines[0]["type"] == "session" and lines[0]["agent"] == "openhands-sdk"
    assert "terminal" in lines[0]["tools"] and "file_editor" in lines[0]["tools"]
    kinds = [(line["type"], line.get("role")) for line in lines[1:]]
    assert kinds == [
        ("message", "assistant"), ("tool_result", None),
        ("message", "assistant"), ("tool_result", None), ("tool_result", None),
        ("message", "assistant"), ("tool_result", None),
        ("message", "assistant"), ("end", None),
    ]  # fmt: skip
    edit = lines[1]
    assert edit["content"] == "Let me write." and edit["stop_reason"] == "tool_use"
    assert edit["tool_calls"] == [
        {
            "id": "call_faux_1_0",
            "name": "file_editor",
            "arguments": {"command": "create", "path": "/trial/workspace/notes.txt",
                          "file_text": "x\n"},
        }
    ]  # fmt: skip
    # One model response, two calls: one message; the failing command's result an error.
    assert [c["arguments"]["command"] for c in lines[3]["tool_calls"]] == ["false", "echo two"]
    assert (lines[4]["tool_call_id"], lines[4]["is_error"]) == ("call_faux_2_0", True)
    assert (lines[5]["content"], lines[5]["is_error"]) == ("two", False)
    assert lines[7]["is_error"] is True and "not found" in lines[7]["content"]
    assert lines[8] == {
        "type": "message", "role": "assistant",
        "content": "All done: hello.txt is not needed.", "stop_reason": "stop",
    }  # fmt: skip
    assert lines[-1] == {"type": "end", "ok": True, "error": None, "status": "finished"}


def test_the_instruction_is_not_repeated_but_a_later_user_message_is_kept() -> None:
    user = next(line for line in EVENTS if '"source": "user"' in line)
    later = json.loads(user)
    later["llm_message"]["content"][0]["text"] = "and also this"
    lines = convert_events([*EVENTS[:-1], json.dumps(later), EVENTS[-1]], model=None)
    users = [line for line in lines if line.get("role") == "user"]
    assert users == [{"type": "message", "role": "user", "content": "and also this"}]


def test_a_run_cut_short_or_not_finished_ends_not_ok() -> None:
    cut = convert_events(EVENTS[:-1], model=None)[-1]
    assert cut["ok"] is False and "cut short" in cut["error"]
    stuck = json.dumps({"kind": STATUS_KIND, "execution_status": "stuck"})
    end = convert_events([*EVENTS[:-1], stuck], model=None)[-1]
    assert end == {"type": "end", "ok": False, "error": "conversation stuck", "status": "stuck"}


@pytest.mark.parametrize(
    "line",
    [
        "not json",
        "[]",
        "null",
        '{"kind": "ActionEvent", "source": "agent", "tool_call": [1], "thought": "x"}',
        '{"kind": "ActionEvent", "source": "agent", "tool_call": {"arguments": "{bad"}}',
        '{"kind": "ObservationEvent", "observation": {"content": 5, "exit_code": "x"}}',
        '{"kind": "MessageEvent", "source": "agent", "llm_message": {"content": [1, {"type": 2}]}}',
        '{"kind": "HarnessDriverStatus", "execution_status": {"x": 1}}',
        '{"kind": "AgentErrorEvent", "error": null}',
    ],
)
def test_hostile_lines_give_fewer_lines_never_an_exception(line: str) -> None:
    lines = convert_events([line], model=None)
    assert lines[0]["type"] == "session" and lines[-1]["type"] == "end"
    assert lines[-1]["ok"] is False


def test_the_driver_compiles_and_writes_the_status_line_the_converter_reads() -> None:
    compile(DRIVER, "driver.py", "exec")
    assert f'STATUS_KIND = "{STATUS_KIND}"' in DRIVER
