"""Gemini CLI's stream-json and OpenCode's JSON events, as the real CLIs wrote them, converted.

The log lines below were written by the pinned CLIs (gemini-cli 0.61.0, opencode 1.18.33)
against the gateway's faux provider, abridged (ids shortened, fields the conversion does
not read dropped; opencode's failing ``read`` and its second step's token counts made up
in the same shape): a tool that fails, a tool that does not exist, a streamed answer
split in deltas, an API error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.agents.installed.cache import Platform
from harness.agents.installed.gemini_cli import convert_stream_json
from harness.agents.installed.opencode import convert_json_events, host_has_avx2, native_package

GEMINI_RUN = [
    '{"type":"init","timestamp":"2026-12-01T23:44:53.945Z","session_id":"70acc6a7","model":"m"}',
    '{"type":"message","timestamp":"2026-12-01T23:44:53.946Z","role":"user","content":"x"}',
    '{"type":"tool_use","timestamp":"2026-12-01T23:44:54.092Z","tool_name":"run_shell_command",'
    '"tool_id":"run_shell_command__1","parameters":{"command":"exit 3"}}',
    '{"type":"tool_result","timestamp":"2026-12-01T23:44:54.273Z","tool_id":"run_shell_command__1",'
    '"status":"success","output":"Command exited with code: 3"}',
    '{"type":"tool_use","timestamp":"2026-12-01T23:44:54.304Z","tool_name":"no_such_tool",'
    '"tool_id":"no_such_tool__2","parameters":{}}',
    '{"type":"tool_result","timestamp":"2026-12-01T23:44:54.308Z","tool_id":"no_such_tool__2",'
    '"status":"error","output":"Tool \\"no_such_tool\\" not found.","error":{"type":'
    '"tool_not_registered","message":"Tool \\"no_such_tool\\" not found."}}',
    '{"type":"message","timestamp":"2026-12-01T23:44:54.332Z","role":"assistant","content":"Do",'
    '"delta":true}',
    '{"type":"message","timestamp":"2026-12-01T23:44:54.333Z","role":"assistant","content":"ne.",'
    '"delta":true}',
    '{"type":"result","timestamp":"2026-12-01T23:44:54.336Z","status":"success","stats":'
    '{"total_tokens":18148,"input_tokens":18132,"output_tokens":16,"cached":0,"input":18132,'
    '"duration_ms":391,"tool_calls":2}}',
]
GEMINI_FAILED = [
    '{"type":"init","timestamp":"2026-12-01T23:43:50.512Z","session_id":"87465f72","model":"m"}',
    '{"type":"result","timestamp":"2026-12-01T23:43:50.589Z","status":"error","error":{"type":'
    '"unknown","message":"[API Error: {\\"error\\":{\\"code\\":400,\\"message\\":\\"scripted '
    'refusal\\",\\"status\\":\\"INVALID_ARGUMENT\\"}}]"},"stats":{"total_tokens":0}}',
]
OPENCODE_RUN = [
    '{"type":"step_start","timestamp":1,"sessionID":"ses_1","part":{"type":"step-start"}}',
    '{"type":"tool_use","timestamp":2,"sessionID":"ses_1","part":{"type":"tool","tool":"bash",'
    '"callID":"call_faux_1_0","state":{"status":"completed","input":{"command":"printf hi > '
    'hello.txt","description":"write"},"output":"(no output)","metadata":{"exit":0}}}}',
    '{"type":"step_finish","timestamp":3,"sessionID":"ses_1","part":{"reason":"tool-calls",'
    '"type":"step-finish","tokens":{"total":2407,"input":2387,"output":20,"reasoning":0,'
    '"cache":{"write":0,"read":0}},"cost":0}}',
    '{"type":"tool_use","timestamp":4,"sessionID":"ses_1","part":{"type":"tool","tool":"read",'
    '"callID":"call_faux_2_0","state":{"status":"error","input":{"filePath":"/nope"},"error":'
    '"File not found: /nope"}}}',
    '{"type":"text","timestamp":5,"sessionID":"ses_1","part":{"type":"text","text":"Done."}}',
    '{"type":"step_finish","timestamp":6,"sessionID":"ses_1","part":{"reason":"stop","type":'
    '"step-finish","tokens":{"total":2414,"input":2400,"output":2,"reasoning":1,"cache":'
    '{"write":0,"read":12}},"cost":0}}',
]
OPENCODE_FAILED = [
    '{"type":"error","timestamp":1796168652062,"sessionID":"ses_2","error":{"name":"APIError",'
    '"data":{"message":"scripted refusal","statusCode":400,"isRetryable":false}}}',
]


def kinds(lines: list[dict[str, Any]]) -> list[str]:
    return [str(line["type"]) for line in lines]


def test_gemini_cli_run_becomes_calls_results_and_one_joined_answer() -> None:
    lines = convert_stream_json(["not json", "[1]", *GEMINI_RUN], model="faux/m")
    assert kinds(lines) == [
        "session",
        "message",
        "tool_result",
        "message",
        "tool_result",
        "message",
        "end",
    ]
    assert lines[0]["agent"] == "gemini-cli" and lines[0]["cli_session_id"] == "70acc6a7"
    call = lines[1]["tool_calls"][0]
    assert call == {
        "id": "run_shell_command__1",
        "name": "run_shell_command",
        "arguments": {"command": "exit 3"},
    }
    assert lines[2]["tool_call_id"] == "run_shell_command__1" and lines[2]["is_error"] is False
    assert lines[2]["content"] == "Command exited with code: 3"
    assert lines[4]["name"] == "no_such_tool" and lines[4]["is_error"] is True
    # The user's message is not repeated; the streamed deltas are one message.
    assert [m["content"] for m in lines if m["type"] == "message" and m["content"]] == ["Done."]
    assert lines[-1] == {
        "type": "end",
        "ok": True,
        "error": None,
        "usage": {"input_tokens": 18132, "output_tokens": 16, "cached_tokens": 0},
    }


def test_gemini_cli_error_result_ends_with_its_message() -> None:
    end = convert_stream_json(GEMINI_FAILED, model=None)[-1]
    assert end["type"] == "end" and end["ok"] is False
    assert "scripted refusal" in end["error"]


def test_opencode_run_becomes_calls_with_results_and_summed_usage() -> None:
    lines = convert_json_events(OPENCODE_RUN, model="faux/m")
    assert kinds(lines) == ["session", "message", "tool_result", "message", "tool_result"] + [
        "message",
        "end",
    ]
    assert lines[0]["agent"] == "opencode" and lines[0]["cli_session_id"] == "ses_1"
    assert lines[1]["tool_calls"][0]["name"] == "bash"
    assert "hello.txt" in json.dumps(lines[1]["tool_calls"][0]["arguments"])
    assert lines[2]["content"] == "(no output)" and lines[2]["is_error"] is False
    assert lines[4]["is_error"] is True and lines[4]["content"] == "File not found: /nope"
    assert lines[5]["content"] == "Done."
    assert lines[-1]["ok"] is True
    assert lines[-1]["usage"] == {"input_tokens": 4799, "output_tokens": 23, "cached_tokens": 12}


def test_opencode_error_event_ends_with_its_message() -> None:
    lines = convert_json_events(OPENCODE_FAILED, model=None)
    assert kinds(lines) == ["session", "end"]
    assert lines[-1] == {"type": "end", "ok": False, "error": "scripted refusal"}


def test_opencode_picks_its_build_for_the_cpu_and_libc(tmp_path: Path) -> None:
    glibc, musl = Platform("x86_64", "glibc"), Platform("x86_64", "musl")
    assert native_package(glibc) == "opencode-linux-x64"
    assert native_package(glibc, baseline=True) == "opencode-linux-x64-baseline"
    assert native_package(musl, baseline=True) == "opencode-linux-x64-baseline-musl"
    assert native_package(Platform("aarch64", "musl"), baseline=True) == "opencode-linux-arm64-musl"
    old = tmp_path / "cpuinfo"
    old.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx\n")
    assert host_has_avx2(old) is False
    old.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx avx2\n")
    assert host_has_avx2(old) is True
    assert host_has_avx2(tmp_path / "missing") is True
