"""The gateway's policy and recorder as units: tokens, targets, calls, budgets, totals.

The whole gateway (real sockets, real upstreams) is tested in
tests/integration/test_gateway.py; here each part answers on its own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.gateway.policy import (
    Allowance,
    Budget,
    Refused,
    Tokens,
    TrialUsage,
    check_call,
    check_target,
    token_of,
)
from harness.gateway.recorder import CallRecorder
from harness.gateway.usage import CallUsage
from harness.models.catalog import ModelSpec, Prices
from harness.records.transcript import usage_from_model_calls

MODEL = ModelSpec("openai", "m", "m", "openai-chat", prices=Prices(input=1.0, output=2.0))


def test_only_the_trials_own_live_token_passes() -> None:
    tokens = Tokens()
    mine, other = tokens.issue("t1"), tokens.issue("t2")
    tokens.check(mine, mine, revoked=False)
    for given, revoked, reason in [
        ("", False, "missing token"),
        (mine, True, "revoked token: the trial's model access has ended"),
        (other, False, "foreign token: it belongs to another trial"),
        ("hgw-made-up", False, "unknown token"),
    ]:
        with pytest.raises(Refused) as info:
            tokens.check(given, mine, revoked=revoked)
        assert (info.value.status, info.value.reason) == (401, reason)
    tokens.revoke(other)
    with pytest.raises(Refused, match="^revoked token$"):
        tokens.check(other, mine, revoked=False)
    assert token_of({"authorization": "Bearer abc "}) == "abc"
    assert token_of({"x-api-key": "k", "authorization": "Bearer abc"}) == "k"


def test_targets_are_the_gateway_itself() -> None:
    assert check_target("/v1/messages?beta=1", {"host": "127.0.0.1:8080"}) == "/v1/messages"
    assert check_target("/v1/models", {"host": "[::1]:9"}) == "/v1/models"
    with pytest.raises(Refused, match="proxy-style target") as info:
        check_target("http://evil.example/v1/x", {"host": "127.0.0.1"})
    assert info.value.status == 400
    with pytest.raises(Refused, match="host 'evil.example' refused") as info:
        check_target("/v1/messages", {"host": "evil.example"})
    assert info.value.status == 403


@pytest.mark.parametrize(
    ("method", "path", "api", "body", "status"),
    [
        ("POST", "/v1/files", None, b"{}", 404),
        ("GET", "/v1/chat/completions", "openai-chat", b"", 405),
        ("POST", "/v1/messages", "anthropic-messages", b"{}", 404),
        ("POST", "/v1/chat/completions", "openai-chat", b"[1]", 400),
        # Not JSON the upstream could take: NaN, bytes that are not UTF-8, too deep, too long.
        ("POST", "/v1/chat/completions", "openai-chat", b'{"t": NaN}', 400),
        ("POST", "/v1/chat/completions", "openai-chat", b'{"t": "\xff\xfe"}', 400),
        ("POST", "/v1/chat/completions", "openai-chat", b"[" * 100000 + b"]" * 100000, 400),
        ("POST", "/v1/chat/completions", "openai-chat", b'{"n": ' + b"9" * 5000 + b"}", 400),
    ],
)
def test_only_model_calls_the_model_speaks_pass(
    method: str, path: str, api: str | None, body: bytes, status: int
) -> None:
    with pytest.raises(Refused) as info:
        check_call(method, path, api, body, model=MODEL, apis={"openai-chat"})
    assert info.value.status == status
    ok = check_call(
        "POST", "/v1/chat/completions", "openai-chat", b'{"a": 1}',
        model=MODEL, apis={"openai-chat"},
    )  # fmt: skip
    assert ok == {"a": 1}


def test_budgets_count_calls_in_flight_and_reported_tokens() -> None:
    usage = TrialUsage()
    calls = Allowance(Budget(max_calls=2), usage)
    with calls.reserved():
        calls.check()  # one in flight, one left
        with calls.reserved(), pytest.raises(Refused, match="2 of 2 calls used") as info:
            calls.check()
    assert info.value.status == 429 and info.value.outcome == "budget"
    tokens = Allowance(Budget(max_tokens=10), usage)
    usage.add(CallUsage(input_tokens=12, output_tokens=None), None)
    with pytest.raises(Refused, match="12 of 10 tokens used"):
        tokens.check()  # only one side reported: still counted against the budget


def test_totals_are_none_unless_measured_exactly_as_the_transcript_says(tmp_path: Path) -> None:
    path = tmp_path / "model_calls.jsonl"
    recorder = CallRecorder(path, "t1", MODEL)
    for usage in (CallUsage(10, None), CallUsage(5, None)):
        line = recorder.line("POST", "/v1/chat/completions")
        recorder.finished(line, 200, 0.0, usage)
    recorder.refusal("POST", "/v1/x", 404, "not a model endpoint", {"a": 1})
    recorder.close()
    gateway = recorder.usage
    transcript = usage_from_model_calls(json.loads(x) for x in path.read_text().splitlines())
    assert gateway.input_tokens == transcript.input_tokens == 15
    assert gateway.output_tokens is None and transcript.output_tokens is None
    assert gateway.total_tokens is None and transcript.total_tokens is None
    assert gateway.cost_usd is None or gateway.cost_usd == transcript.cost_usd
    assert (gateway.calls, gateway.refused) == (2, 1)
    assert (transcript.calls, transcript.refused_calls) == (3, 1)
