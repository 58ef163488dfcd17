"""The gateway's caps as units: the ``[gateway]`` section, the meter, the parse estimate,
stream usage in bounded memory, and a recorder that writes any string as valid UTF-8.

The caps under attack (real sockets, real upstreams) are tested in
tests/integration/test_gateway_limits.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from harness.config import GatewayConfig, RunConfig
from harness.gateway import Limits
from harness.gateway.limits import MIB, Hold, Meter, parse_cost
from harness.gateway.recorder import CallRecorder, capped_json, dumps
from harness.gateway.usage import StreamUsage
from harness.models.catalog import ModelSpec
from harness.runner.model_access import gateway_limits

MODEL = ModelSpec("openai", "m", "m", "openai-chat")


def test_the_config_section_defaults_are_the_gateway_defaults() -> None:
    assert gateway_limits(GatewayConfig()) == Limits()
    config = RunConfig.model_validate(
        {"tasks": {"paths": ["x"]}, "gateway": {"max_connections": 4, "max_request_mb": 2}}
    )
    limits = gateway_limits(config.gateway)
    assert limits.max_connections == 4 and limits.max_request_bytes == 2 * MIB


def test_a_memory_cap_below_the_request_cap_is_a_config_error() -> None:
    with pytest.raises(ValidationError, match="max_memory_mb .* must be at least"):
        GatewayConfig(max_request_mb=64, max_memory_mb=32)
    with pytest.raises(ValidationError):
        GatewayConfig(unknown=1)  # type: ignore[call-arg]


def test_the_meter_never_holds_more_than_the_cap() -> None:
    meter = Meter(Limits(max_memory_bytes=100))
    first, second = Hold(meter), Hold(meter)
    assert first.take(60) and not second.take(41) and second.take(40)
    assert meter.held == 100 and meter.headroom() == 0
    first.close()
    assert meter.held == 40 and second.take(60)
    second.close()
    assert meter.held == 0 and meter.peak == 100


def test_parse_cost_prices_many_small_values_above_their_bytes() -> None:
    prose = b'{"messages": [{"role": "user", "content": "' + b"a" * 100_000 + b'"}]}'
    objects = b"[" + b",".join([b"{}"] * 100_000) + b"]"
    assert parse_cost(prose) < 3 * len(prose)
    assert parse_cost(objects) > 30 * len(objects)


def test_stream_usage_keeps_only_the_usage_events_and_no_endless_event() -> None:
    usage = StreamUsage("openai-chat")
    piece = b'data: {"choices": [{"delta": {"content": "abcd"}}], "usage": null}\n\n'
    for _ in range(20_000):
        usage.feed(piece)
    assert usage._kept == {}  # 20 000 events mentioned usage: none is kept
    usage.feed(b"data: " + b"x" * (3 * MIB))  # no end in sight: counted, not buffered
    assert len(usage._pending) <= MIB
    final = usage.final(complete=True)
    assert final is not None and final.estimated
    assert final.output_tokens is not None and final.output_tokens >= 20_000


def test_the_recorder_writes_lone_surrogates_and_any_bytes_as_valid_utf8(
    tmp_path: Path,
) -> None:
    path = tmp_path / "model_calls.jsonl"
    recorder = CallRecorder(path, "t", MODEL)
    request = {"content": "a\ud800é"}
    recorder.refusal("POST", "/v1/chat/completions", 400, "why \udcff", request)
    recorder.refusal("POST", "/v1/x", 400, "bytes", capped_json(b"\xff\x00junk"))
    recorder.close()
    text = path.read_bytes().decode("utf-8")  # strict
    first, second = (json.loads(line) for line in text.splitlines())
    assert first["request"] == request and first["reason"] == "why \udcff"
    assert second["request"] == {"bytes": 6, "base64": "/wBqdW5r"}
    assert dumps({"é": 1}) == '{"é": 1}'  # readable when it can be
