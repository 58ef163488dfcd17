"""The Python agents' own logs as session.jsonl: mini-swe-agent's trajectory, aider's chat.

The logs here are written in each CLI's format (mini-swe-agent's ``mini-swe-agent-1.1``
trajectory JSON, aider's chat history markdown), as the real CLIs write them; the e2e tests
(tests/e2e/test_agent_*.py) convert the real CLIs' logs.
"""

from __future__ import annotations

import json

from harness.agents.installed.aider import convert_chat_history
from harness.agents.installed.mini_swe_agent import convert_trajectory


def _call(call_id: str, command: str) -> dict[str, object]:
    arguments = json.dumps({"command": command})
    return {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": arguments}}


def test_a_trajectory_becomes_bash_tool_calls_and_their_results() -> None:
    rejected = {"choices": [{"message": {"role": "assistant", "content": "thinking"}}]}
    trajectory = {
        "info": {"mini_version": "2.4.6", "exit_status": "Submitted"},
        "trajectory_format": "mini-swe-agent-1.1",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant"},
            {"role": "user", "content": "Please solve this issue: make hello.txt"},
            {
                "role": "user",
                "content": "Please always call a tool",
                "extra": {"response": rejected},
            },
            {
                "role": "assistant",
                "content": "Writing it.",
                "tool_calls": [_call("c1", "printf hi > hello.txt")],
                "extra": {"response": {"usage": {"prompt_tokens": 7, "completion_tokens": 3}}},
            },
            {
                "role": "tool",
                "tool_call_id": "c1",
                "content": "<returncode>0</returncode>\n<output>\n</output>",
            },
            {"role": "assistant", "content": "", "tool_calls": [_call("c2", "false")]},
            {"role": "tool", "tool_call_id": "c2", "content": "<returncode>1</returncode>"},
            {
                "role": "exit",
                "content": "",
                "extra": {"exit_status": "Submitted", "submission": ""},
            },
        ],
    }
    lines = convert_trajectory(json.dumps(trajectory), model="faux/x")
    assert lines[0]["type"] == "session" and lines[0]["cli_version"] == "2.4.6"
    # The system message and the rendered task are dropped; a format error's rejected
    # answer is the assistant's text, and the error the user's next message.
    assert lines[1] == {
        "type": "message", "role": "assistant", "content": "thinking",
        "stop_reason": "stop", "usage": None,
    }  # fmt: skip
    assert lines[2]["role"] == "user" and lines[2]["content"] == "Please always call a tool"
    write = lines[3]
    assert write["tool_calls"] == [
        {"id": "c1", "name": "bash", "arguments": {"command": "printf hi > hello.txt"}}
    ]
    assert write["stop_reason"] == "tool_use"
    assert write["usage"] == {"input_tokens": 7, "output_tokens": 3}
    assert lines[4]["type"] == "tool_result" and lines[4]["is_error"] is False
    assert lines[6]["type"] == "tool_result" and lines[6]["is_error"] is True
    assert lines[-1] == {"type": "end", "ok": True, "error": None, "exit_status": "Submitted"}


def test_a_trajectory_that_did_not_submit_ends_with_its_exit_status() -> None:
    trajectory = {
        "messages": [
            {"role": "exit", "content": "boom", "extra": {"exit_status": "RateLimitError"}}
        ]
    }
    [_session, end] = convert_trajectory(json.dumps(trajectory), model=None)
    assert end["ok"] is False and end["error"] == "RateLimitError: boom"


def test_what_is_not_a_trajectory_converts_to_nothing() -> None:
    assert convert_trajectory("This is mini-swe-agent version 2.4.6.", model=None) == []
    assert convert_trajectory("[1, 2]", model=None) == []


#: aider ends its own lines with a markdown line break (two spaces), shown here as "<br>".
CHAT_MD = """\

# aider chat started at 2026-12-01 23:53:25

> Detected dumb terminal, disabling fancy input and pretty output.<br>
> aider/__main__.py --model openai/x --message Create a file named `hello.txt`
containing exactly Hello.<br>
> Aider v0.86.2<br>

#### Create a file named `hello.txt`<br>
#### containing exactly Hello.<br>

I will create hello.txt.

hello.txt
```
Hello, world!
```

> Applied edit to hello.txt<br>

#### and now?<br>

Nothing more.
"""
CHAT = CHAT_MD.replace("<br>", "  ")


def test_a_chat_history_becomes_messages_and_edit_calls() -> None:
    lines = convert_chat_history(CHAT.splitlines(), model="faux/x")
    kinds = [(line["type"], line.get("role")) for line in lines]
    assert kinds == [
        ("session", None),
        ("message", "assistant"),
        ("message", "assistant"),
        ("tool_result", None),
        ("message", "user"),
        ("message", "assistant"),
        ("end", None),
    ]
    assert lines[1]["content"].startswith("I will create hello.txt.")
    [call] = lines[2]["tool_calls"]
    assert call["name"] == "edit"
    assert call["arguments"] == {"path": "hello.txt", "content": "Hello, world!\n"}
    assert (
        lines[3]["tool_call_id"] == call["id"]
        and lines[3]["content"] == "Applied edit to hello.txt"
    )
    assert lines[4]["content"] == "and now?"
    assert lines[-1] == {"type": "end", "ok": True, "error": None}


def test_a_chat_history_with_a_model_error_ends_with_it() -> None:
    chat = "#### do it\n\n> litellm.AuthenticationError: invalid token  \n"
    lines = convert_chat_history(chat.splitlines(), model=None)
    assert lines[-1] == {
        "type": "end", "ok": False, "error": "litellm.AuthenticationError: invalid token"
    }  # fmt: skip
