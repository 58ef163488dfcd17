"""transcript.jsonl derivation (docs/model-access.md §4) and model-call usage totals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.records.transcript import (
    ModelCallUsage,
    derive_transcript,
    read_jsonl,
    usage_from_model_calls,
    write_transcript,
)

T = "2026-11-30T05:20:"


def ts(seconds: str) -> str:
    return f"{T}{seconds}Z"


def session_lines() -> list[dict[str, Any]]:
    """A built-in agent session: two turns, a write that worked and a shell that failed."""
    return [
        {
            "type": "session",
            "version": 1,
            "agent": "builtin",
            "api": "openai-chat",
            "model": "faux/demo",
            "tools": ["read", "write", "edit", "ls", "grep", "find", "shell"],
            "max_turns": 30,
            "timestamp": ts("08.000000"),
        },
        {
            "type": "message",
            "role": "system",
            "content": "You are a careful coding agent.",
            "timestamp": ts("08.001000"),
        },
        {
            "type": "message",
            "role": "user",
            "content": "Create hello.txt containing hi.",
            "timestamp": ts("08.002000"),
        },
        {
            "type": "message",
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "name": "write",
                    "arguments": {"path": "hello.txt", "content": "hi\n"},
                },
                {"id": "call_2", "name": "shell", "arguments": {"command": "cat missing.txt"}},
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 120, "output_tokens": 40},
            "timestamp": ts("08.900000"),
        },
        {
            "type": "tool_result",
            "tool_call_id": "call_1",
            "name": "write",
            "content": "wrote 3 bytes",
            "is_error": False,
            "duration_ms": 0.4,
            "timestamp": ts("08.901000"),
        },
        {
            "type": "tool_result",
            "tool_call_id": "call_2",
            "name": "shell",
            "content": "",
            "is_error": True,
            "duration_ms": 3.1,
            "timestamp": ts("08.950000"),
        },
        {
            "type": "message",
            "role": "assistant",
            "content": "I wrote hello.txt.",
            "stop_reason": "stop",
            "usage": {"input_tokens": 180, "output_tokens": 8},
            "timestamp": ts("09.700000"),
        },
        {"type": "end", "ok": True, "error": None, "turns": 2, "timestamp": ts("09.701000")},
    ]


def model_call(seq: int, started: str, **overrides: Any) -> dict[str, Any]:
    line: dict[str, Any] = {
        "seq": seq,
        "trial_id": "hello-file__1",
        "started_at": started,
        "latency_ms": 812.4,
        "method": "POST",
        "path": "/v1/chat/completions",
        "api": "openai-chat",
        "provider": "faux",
        "model": "demo",
        "requested_model": "demo",
        "status": 200,
        "outcome": "ok",
        "reason": None,
        "stream": False,
        "request": {"messages": []},
        "response": {"choices": []},
        "usage": {"input_tokens": 120, "output_tokens": 40, "cached_tokens": None},
        "cost_usd": None,
    }
    line.update(overrides)
    return line


def model_calls() -> list[dict[str, Any]]:
    return [
        model_call(1, ts("08.003000")),
        model_call(
            2,
            ts("08.960000"),
            usage={"input_tokens": 180, "output_tokens": 8, "cached_tokens": 100},
            cost_usd=0.0007,
        ),
    ]


def write_jsonl(path: Path, lines: list[Any]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def kinds(events: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    keys = {
        "message": "role",
        "tool_call": "id",
        "tool_result": "tool_call_id",
        "model_call": "seq",
        "parse_error": "line",
    }
    return [(e["type"], e[keys[e["type"]]]) for e in events]


# ---------------------------------------------------------------------------------------------
# derive_transcript
# ---------------------------------------------------------------------------------------------


def test_derive_orders_session_and_merges_model_calls_by_time() -> None:
    events = derive_transcript(session_lines(), model_calls())
    assert kinds(events) == [
        ("message", "user"),
        ("model_call", 1),
        ("tool_call", "call_1"),
        ("tool_call", "call_2"),
        ("tool_result", "call_1"),
        ("tool_result", "call_2"),
        ("model_call", 2),
        ("message", "assistant"),
    ]


def test_derive_event_shapes_follow_the_contract() -> None:
    events = derive_transcript(session_lines(), model_calls())
    assert events[0] == {
        "type": "message",
        "role": "user",
        "content": "Create hello.txt containing hi.",
        "timestamp": ts("08.002000"),
    }
    assert events[1] == {
        "type": "model_call",
        "seq": 1,
        "status": 200,
        "outcome": "ok",
        "latency_ms": 812.4,
        "usage": {"input_tokens": 120, "output_tokens": 40, "cached_tokens": None},
        "cost_usd": None,
        "timestamp": ts("08.003000"),
    }
    assert events[2] == {
        "type": "tool_call",
        "id": "call_1",
        "name": "write",
        "arguments": {"path": "hello.txt", "content": "hi\n"},
        "timestamp": ts("08.900000"),
    }
    ok_result, failed_result = events[4], events[5]
    assert "error" not in ok_result
    assert ok_result["content"] == "wrote 3 bytes"
    # Empty content on failure: the contract's fallback message.
    assert failed_result["error"] == {"message": "Tool failed"}
    assert events[-1]["content"] == "I wrote hello.txt."


def test_failed_tool_result_error_carries_its_content() -> None:
    lines = [
        {
            "type": "tool_result",
            "tool_call_id": "c",
            "name": "read",
            "content": "no such file: a.txt",
            "is_error": True,
            "timestamp": ts("01"),
        }
    ]
    (event,) = derive_transcript(lines, [])
    assert event["error"] == {"message": "no such file: a.txt"}


def test_system_messages_and_textless_assistant_messages_are_not_events() -> None:
    lines = [
        {"type": "message", "role": "system", "content": "sys", "timestamp": ts("01")},
        {"type": "message", "role": "assistant", "content": "  \n", "timestamp": ts("02")},
        {"type": "message", "role": "assistant", "content": None, "timestamp": ts("03")},
    ]
    assert derive_transcript(lines, []) == []


def test_model_call_at_the_same_instant_follows_the_session_event() -> None:
    lines = [{"type": "message", "role": "user", "content": "go", "timestamp": ts("05")}]
    events = derive_transcript(lines, [model_call(1, ts("05"))])
    assert kinds(events) == [("message", "user"), ("model_call", 1)]


def test_model_calls_are_sorted_by_start_time_and_untimed_ones_go_last() -> None:
    lines = [
        {"type": "message", "role": "user", "content": "a", "timestamp": ts("01")},
        {"type": "message", "role": "user", "content": "b", "timestamp": ts("10")},
    ]
    calls = [
        model_call(3, None),
        model_call(2, ts("07")),
        model_call(1, ts("03")),
    ]
    events = derive_transcript(lines, calls)
    assert kinds(events) == [
        ("message", "user"),
        ("model_call", 1),
        ("model_call", 2),
        ("message", "user"),
        ("model_call", 3),
    ]


def test_session_order_is_kept_even_when_timestamps_go_backwards() -> None:
    lines = [
        {"type": "message", "role": "user", "content": "first", "timestamp": ts("09")},
        {"type": "message", "role": "user", "content": "second", "timestamp": ts("01")},
        {"type": "message", "role": "user", "content": "untimed"},
    ]
    events = derive_transcript(lines, [model_call(1, ts("05"))])
    assert [e.get("content", e["type"]) for e in events] == [
        "model_call",
        "first",
        "second",
        "untimed",
    ]


def test_junk_lines_and_fields_do_not_crash() -> None:
    lines: list[Any] = [
        {"type": "message", "role": "assistant", "content": "x", "tool_calls": "nope"},
        {"type": "message", "role": "assistant", "content": "", "tool_calls": [1, None, {}]},
        {"type": "mystery"},
        {},
        "not a dict",
    ]
    events = derive_transcript(lines, [{"seq": "x", "started_at": 5}, 7])
    assert kinds(events) == [
        ("message", "assistant"),
        ("tool_call", None),
        ("model_call", "x"),
    ]


# ---------------------------------------------------------------------------------------------
# usage_from_model_calls
# ---------------------------------------------------------------------------------------------


def test_usage_sums_reported_fields_and_counts_calls() -> None:
    usage = usage_from_model_calls(model_calls())
    assert usage == ModelCallUsage(
        input_tokens=300, output_tokens=48, cached_tokens=100, cost_usd=0.0007, calls=2
    )
    assert usage.total_tokens == 348
    as_record = usage.to_usage()
    assert (as_record.input_tokens, as_record.output_tokens, as_record.total_tokens) == (
        300,
        48,
        348,
    )
    assert as_record.calls == 2
    dumped = as_record.model_dump()
    assert (dumped["cached_tokens"], dumped["refused_calls"]) == (100, 0)


def test_usage_is_none_when_no_call_reported_it_never_zero() -> None:
    calls = [
        model_call(1, ts("01"), usage={"input_tokens": None, "output_tokens": None}),
        model_call(2, ts("02"), outcome="refused", status=401, usage=None),
    ]
    usage = usage_from_model_calls(calls)
    assert usage == ModelCallUsage(calls=2, refused_calls=1)
    assert usage.total_tokens is None
    assert usage_from_model_calls([]) == ModelCallUsage(calls=0)


def test_usage_partial_reports_sum_what_was_reported() -> None:
    calls = [
        model_call(1, ts("01"), usage={"input_tokens": 10, "output_tokens": None}),
        model_call(2, ts("02"), usage={"input_tokens": 5, "output_tokens": 2}, cost_usd=0.5),
        model_call(3, ts("03"), usage={"input_tokens": True, "output_tokens": "7"}),
    ]
    usage = usage_from_model_calls(calls)
    assert (usage.input_tokens, usage.output_tokens, usage.cost_usd, usage.calls) == (
        15,
        2,
        0.5,
        3,
    )
    assert usage.cached_tokens is None


# ---------------------------------------------------------------------------------------------
# read_jsonl / write_transcript
# ---------------------------------------------------------------------------------------------


def read_events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_write_transcript_from_both_files(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "session.jsonl", session_lines())
    write_jsonl(tmp_path / "model_calls.jsonl", model_calls())
    path = write_transcript(tmp_path)
    assert path == tmp_path / "transcript.jsonl"
    events = read_events(path)
    assert events == derive_transcript(session_lines(), model_calls())
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "model_calls.jsonl",
        "session.jsonl",
        "transcript.jsonl",
    ]


def test_write_transcript_without_any_source_writes_nothing(tmp_path: Path) -> None:
    assert write_transcript(tmp_path) is None
    assert list(tmp_path.iterdir()) == []


def test_write_transcript_with_only_model_calls(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "model_calls.jsonl", model_calls())
    path = write_transcript(tmp_path)
    assert path is not None
    assert kinds(read_events(path)) == [("model_call", 1), ("model_call", 2)]


def test_write_transcript_with_only_a_session_replaces_an_old_transcript(tmp_path: Path) -> None:
    (tmp_path / "transcript.jsonl").write_text("stale\n")
    write_jsonl(tmp_path / "session.jsonl", session_lines())
    path = write_transcript(tmp_path)
    assert path is not None
    events = read_events(path)
    assert events[0]["type"] == "message"
    assert all(e["type"] != "model_call" for e in events)


def test_malformed_middle_lines_are_skipped_and_reported(tmp_path: Path) -> None:
    good = [json.dumps(line) for line in session_lines()]
    raw = [
        *good[:3],
        '{"type": "message", "role": "user", "content": ',  # line 4: broken JSON
        "[1, 2, 3]",  # line 5: JSON, but not an object
        '{"type": "tool_result", "content": NaN}',  # line 6: not JSON
        "",  # line 7: blank, ignored
        *good[3:],
    ]
    (tmp_path / "session.jsonl").write_text("\n".join(raw) + "\n")
    calls = [json.dumps(c) for c in model_calls()]
    (tmp_path / "model_calls.jsonl").write_text(calls[0] + "\n{oops\n" + calls[1] + "\n")
    path = write_transcript(tmp_path)
    assert path is not None
    events = read_events(path)
    expected = derive_transcript(session_lines(), model_calls())
    assert events[: len(expected)] == expected
    assert events[len(expected) :] == [
        {"type": "parse_error", "file": "session.jsonl", "line": 4},
        {"type": "parse_error", "file": "session.jsonl", "line": 5},
        {"type": "parse_error", "file": "session.jsonl", "line": 6},
        {"type": "parse_error", "file": "model_calls.jsonl", "line": 2},
    ]


def test_torn_last_line_is_dropped_without_an_event(tmp_path: Path) -> None:
    text = "".join(json.dumps(line) + "\n" for line in session_lines())
    (tmp_path / "session.jsonl").write_text(text + '{"type": "message", "role": "assis')
    path = write_transcript(tmp_path)
    assert path is not None
    assert read_events(path) == derive_transcript(session_lines(), [])
    read = read_jsonl(tmp_path / "session.jsonl")
    assert read.torn_line == len(session_lines()) + 1
    assert read.errors == []


def test_unparseable_terminated_last_line_is_a_parse_error_not_torn(tmp_path: Path) -> None:
    text = "".join(json.dumps(line) + "\n" for line in session_lines())
    (tmp_path / "session.jsonl").write_text(text + "garbage\n")
    read = read_jsonl(tmp_path / "session.jsonl")
    assert read.torn_line is None
    assert read.errors == [
        {"type": "parse_error", "file": "session.jsonl", "line": len(session_lines()) + 1}
    ]


def test_unterminated_last_line_that_parses_is_kept(tmp_path: Path) -> None:
    lines = session_lines()
    text = "\n".join(json.dumps(line) for line in lines)  # no final newline
    (tmp_path / "session.jsonl").write_text(text)
    read = read_jsonl(tmp_path / "session.jsonl")
    assert read.lines == lines
    assert read.torn_line is None


@pytest.mark.parametrize("content", [b"", b"\n\n", b"\xff\xfe not utf8 \n"])
def test_degenerate_files_never_raise(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "session.jsonl").write_bytes(content)
    path = write_transcript(tmp_path)
    assert path is not None
    events = read_events(path)
    assert all(e["type"] == "parse_error" for e in events)


def test_huge_number_is_a_parse_error_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "model_calls.jsonl").write_text('{"seq": 1, "latency_ms": 1e999}\n{"seq": 2}\n')
    path = write_transcript(tmp_path)
    assert path is not None
    assert kinds(read_events(path)) == [("model_call", 2), ("parse_error", 1)]
