"""Errors and usage as data: typed causes, ``retry.on_causes``, usage precedence, the
conversation view's data (issue 25, items 5 and 6). The real CLIs are in
tests/e2e/test_agent_errors.py and tests/browser/test_report_conversation.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from harness.agents.failure import (
    classify,
    failure_fields,
    gave_up_on,
    last_model_call,
    one_line,
    recorded_error,
)
from harness.agents.installed.aider import convert_chat_history
from harness.config import RetryConfig
from harness.errors import AGENT_ERROR_CAUSES
from harness.records import Usage
from harness.report.clip import Limits
from harness.report.conversation import conversation
from harness.trial.usage_precedence import with_usage_source


@pytest.mark.parametrize(
    ("text", "cause"),
    [
        (
            'API Error: 401 {"type":"error","error":{"message":"invalid x-api-key"}}',
            "authentication",
        ),
        ("Incorrect API key provided", "authentication"),
        ("prompt is too long: 212000 tokens > 200000 maximum", "context_window"),
        ("This model's maximum context length is 128000 tokens", "context_window"),
        ("context_length_exceeded", "context_window"),
        ("API Error: 429 rate_limit_error", "rate_limit"),
        ("Overloaded", "rate_limit"),
        ("the model refused to answer (stop_reason refusal)", "refusal"),
        ("Per-trial model budget spent: 1 of 1 calls used.", "budget_spent"),
        ("segmentation fault", "unknown"),
    ],
)
def test_the_clis_text_gives_the_cause(text: str, cause: str) -> None:
    assert classify([text], None)[0] == cause
    assert cause in AGENT_ERROR_CAUSES


@pytest.mark.parametrize(
    ("call", "cause"),
    [
        ({"status": 429, "outcome": "budget"}, "budget_spent"),
        ({"status": 401, "outcome": "refused"}, "authentication"),
        ({"status": 401, "outcome": "upstream_error"}, "authentication"),
        ({"status": 429, "outcome": "upstream_error"}, "rate_limit"),
    ],
)
def test_the_gateways_last_call_wins_over_the_clis_text(
    call: dict[str, object], cause: str
) -> None:
    # The CLI says something else (a generic message): the gateway saw the status.
    assert classify(["Request failed, please retry"], call) == (cause, "gateway")
    assert classify(["prompt is too long"], call) == (cause, "gateway")


def test_a_last_call_that_succeeded_leaves_the_cause_to_the_log() -> None:
    assert classify(["prompt is too long"], {"status": 200, "outcome": "ok"}) == (
        "context_window",
        "log",
    )
    # A host refused by the gateway (403) is not an authentication failure of the model's.
    assert classify(["boom"], {"status": 403, "outcome": "refused"}) == ("unknown", None)


def test_failure_fields_read_the_gateways_record(tmp_path: Path) -> None:
    calls = tmp_path / "model_calls.jsonl"
    lines = [
        {"seq": 1, "api": "anthropic-messages", "status": 200, "outcome": "ok"},
        {"seq": 2, "api": "anthropic-messages", "status": 429, "outcome": "budget"},
        # A side request after it (no model API) says nothing of how the model answered.
        {"seq": 3, "api": None, "path": "/v1/models", "status": 200, "outcome": "ok"},
    ]
    calls.write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"torn')
    fields = failure_fields(1, "first line\n\nError: out of calls\n", calls)
    assert fields == {
        "exit_code": 1,
        "last_error": "Error: out of calls",
        "cause": "budget_spent",
        "cause_source": "gateway",
    }
    assert failure_fields(2, None, tmp_path / "absent.jsonl") == {
        "exit_code": 2,
        "last_error": None,
        "cause": "unknown",
    }


def _calls(tmp_path: Path, *lines: dict[str, object]) -> Path:
    calls = tmp_path / "model_calls.jsonl"
    calls.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return calls


# What aider 0.86.2 wrote, and the gateway recorded, when the faux model answered its only
# call 401: aider printed the error and exited 0 (its chat history's end, abridged).
AIDER_401_CHAT = """\

# aider chat started at 2026-12-05 02:10:11

> Aider v0.86.2<br>
> Model: openai/err with whole edit format<br>

#### Create a file named `hello.txt`<br>
> litellm.AuthenticationError: AuthenticationError: OpenAIException - Incorrect API key provided<br>
> The API provider is not able to authenticate you. Check your API key.<br>
""".replace("<br>", "  ")
AIDER_401_CALL = {
    "seq": 1, "method": "POST", "path": "/v1/chat/completions", "api": "openai-chat",
    "provider": "faux", "status": 401, "outcome": "upstream_error", "reason": None,
    "response": {"error": {"message": "Incorrect API key provided", "type": "faux_error"}},
    "faux": {"turn": 1},
}  # fmt: skip


def test_a_cli_that_exited_0_after_a_provider_error_gets_the_gateways_cause(
    tmp_path: Path,
) -> None:
    calls = _calls(tmp_path, AIDER_401_CALL)
    call = gave_up_on(calls)
    assert call is not None and recorded_error(call) == "Incorrect API key provided"
    [end] = [line for line in convert_chat_history(AIDER_401_CHAT.splitlines(), model=None)
             if line["type"] == "end"]  # fmt: skip
    assert end["ok"] is False and "AuthenticationError" in end["error"]
    assert failure_fields(0, end["error"], calls) == {
        "exit_code": 0,
        "last_error": end["error"],
        "cause": "authentication",
        "cause_source": "gateway",
    }


@pytest.mark.parametrize(
    ("last", "failed"),
    [
        ({"status": 200, "outcome": "ok"}, False),
        # The gateway refused it (a host, a path, a bad token): no provider error.
        ({"status": 403, "outcome": "refused"}, False),
        ({"status": 429, "outcome": "upstream_error"}, True),
        ({"status": 502, "outcome": "error", "reason": "connection refused"}, True),
        ({"status": 429, "outcome": "budget"}, True),
        ({"status": 200, "outcome": "budget", "reason": "stream cut"}, True),
    ],
)
def test_only_a_failed_last_model_call_is_given_up_on(
    tmp_path: Path, last: dict[str, object], failed: bool
) -> None:
    ok = {"api": "openai-chat", "status": 200, "outcome": "ok"}
    side = {"api": None, "path": "/v1/models", "status": 200, "outcome": "ok"}
    calls = _calls(tmp_path, ok, {"api": "openai-chat", **last}, side)
    assert last_model_call(calls) == {"api": "openai-chat", **last}
    assert (gave_up_on(calls) is not None) is failed


def test_the_providers_recorded_words_give_the_cause_when_its_status_does_not() -> None:
    # A 400 is any bad request; the provider's message (as the gateway recorded it, in
    # each API's shape) says the context is full, whatever the CLI made of it.
    for response in (
        {"type": "error", "error": {"type": "invalid_request_error",
                                    "message": "prompt is too long: 212000 tokens > 200000"}},
        {"error": {"message": "Your input exceeds what it takes",
                   "code": "context_length_exceeded"}},
        {"error": {"code": 400, "message": "The input token count (1200000) exceeds the "
                   "maximum number of tokens allowed (1048576).", "status": "INVALID_ARGUMENT"}},
    ):  # fmt: skip
        call = {"api": "x", "status": 400, "outcome": "upstream_error", "response": response}
        assert classify(["Bad request"], call) == ("context_window", "gateway"), response
    # Gemini's 429 names its status RESOURCE_EXHAUSTED; an overloaded 529 is a rate limit.
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    call = {"api": "x", "status": 529, "outcome": "upstream_error", "response": overloaded}
    assert classify(["boom"], call) == ("rate_limit", "gateway")
    # The gateway's own reasons are not the provider's words ("connection refused").
    unreachable = {"api": "x", "status": 502, "outcome": "error", "reason": "connection refused"}
    assert classify(["boom"], unreachable) == ("unknown", None)
    assert recorded_error(unreachable) == "connection refused"


def test_a_huge_last_error_is_capped_to_one_line() -> None:
    line = one_line("x" * 100_000)
    assert line is not None and len(line) <= 2001 and "\n" not in line


def test_retry_on_causes_selects_agent_errors_by_cause() -> None:
    retry = RetryConfig(on_causes=["rate_limit"])
    assert retry.retryable("agent_error", ["AgentRunError"], ["rate_limit"])
    assert not retry.retryable("agent_error", ["AgentRunError"], ["authentication"])
    assert not retry.retryable("agent_error", ["AgentRunError"], [])
    # Exclude still wins; the old rules are unchanged.
    assert not RetryConfig(on_causes=["rate_limit"], exclude=["AgentRunError"]).retryable(
        "agent_error", ["AgentRunError"], ["rate_limit"]
    )
    assert RetryConfig().retryable("environment_error", [], [])
    assert not RetryConfig().retryable("agent_error", ["AgentRunError"], ["rate_limit"])
    assert not retry.retryable("completed", [], ["rate_limit"])


def test_an_unknown_cause_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValidationError) as raised:
        RetryConfig(on_causes=["flaky"])
    assert "rate_limit" in str(raised.value) and "flaky" in str(raised.value)


def _session(tmp_path: Path, lines: list[object]) -> Path:
    (tmp_path / "session.jsonl").write_text(
        "".join((json.dumps(line) if not isinstance(line, str) else line) + "\n" for line in lines)
    )
    return tmp_path


def test_usage_is_the_gateways_and_says_where_the_log_disagrees(tmp_path: Path) -> None:
    evidence = _session(
        tmp_path,
        [
            {
                "type": "message",
                "role": "assistant",
                "usage": {"input_tokens": 10, "output_tokens": 2},
            },
            {
                "type": "message",
                "role": "assistant",
                "usage": {"input_tokens": 10, "output_tokens": 3},
            },
            {"type": "message", "role": "assistant", "usage": {"input_tokens": True}},
        ],
    )
    gateway = Usage(input_tokens=25, output_tokens=5, calls=2)
    usage = with_usage_source(gateway, evidence).model_dump(mode="json")
    assert usage["input_tokens"] == 25 and usage["source"] == "gateway"
    assert usage["agent_log"] == {"input_tokens": 20, "output_tokens": 5}
    agreeing = with_usage_source(Usage(input_tokens=20, output_tokens=5, calls=2), evidence)
    assert "agent_log" not in agreeing.model_dump() and agreeing.model_dump()["source"] == "gateway"
    # No gateway: nothing measured, nothing claimed.
    assert "source" not in with_usage_source(Usage(), evidence).model_dump()


def test_the_conversation_pairs_calls_with_results_and_clips(tmp_path: Path) -> None:
    hostile = "<script>window.__xss=1</script>\x1b[31mRED\x1b[0m"
    evidence = _session(
        tmp_path,
        [
            {"type": "session", "agent": "claude-code", "model": "faux/x", "cli_version": "2"},
            {"type": "message", "role": "user", "content": "do it"},
            {
                "type": "message",
                "role": "assistant",
                "content": "",
                "stop_reason": "tool_use",
                "usage": {"input_tokens": 5, "output_tokens": 1},
                "tool_calls": [{"id": "t1", "name": "Bash", "arguments": {"command": "ls"}}],
            },
            {"type": "tool_result", "tool_call_id": "t1", "name": "Bash", "content": hostile},
            {"type": "tool_result", "tool_call_id": "nobody", "name": "x", "content": "orphan"},
            "not json",
            {"type": "end", "ok": True, "error": None, "turns": 2},
            {"type": "message", "role": "assistant", "content": "y" * 500},
        ],
    )
    view = conversation(evidence, Limits(string=100))
    kinds = [entry["kind"] for entry in view["entries"]]
    assert kinds == ["session", "user", "assistant", "tool_result", "end", "assistant"]
    call = view["entries"][2]["tool_calls"][0]
    assert call["arguments"] == {"command": "ls"}
    assert call["result"] == {"content": hostile, "is_error": False}  # kept as data, verbatim
    assert view["entries"][3]["content"] == "orphan"
    assert view["unreadable"] == 1 and view["usage"] == {"input_tokens": 5, "output_tokens": 1}
    assert view["entries"][5]["content"] == {"$clip": "y" * 100, "total": 500, "unit": "chars"}
    limited = conversation(evidence, Limits(events=2))
    assert len(limited["entries"]) == 2 and limited["omitted"] == 4


def test_a_session_reached_through_a_link_is_not_read(tmp_path: Path) -> None:
    outside = tmp_path / "outside.jsonl"
    outside.write_text(json.dumps({"type": "message", "role": "user", "content": "secret"}) + "\n")
    evidence = tmp_path / "trial"
    evidence.mkdir()
    (evidence / "session.jsonl").symlink_to(outside)
    assert conversation(evidence, Limits())["exists"] is False


def test_claude_codes_safeguard_notice_marks_the_refused_turn() -> None:
    from harness.agents.installed.claude_code import convert_stream_json

    log = [
        json.dumps({"type": "system", "subtype": "init", "tools": []}),
        json.dumps(
            {
                "type": "assistant",
                "message": {"content": [{"type": "text", "text": "I can't."}], "stop_reason": None},
            }
        ),
        json.dumps(
            {
                "type": "system",
                "subtype": "informational",
                "content": "m's safeguards stopped the response above · continuing once",
            }
        ),
    ]
    [_session, turn] = convert_stream_json(log, model="faux/x")
    assert turn["stop_reason"] == "refusal"
