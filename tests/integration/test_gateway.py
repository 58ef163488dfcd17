"""The model gateway end to end, with real parts only (docs/model-access.md §1, §2, §5).

Upstreams are real HTTP servers on loopback (``ThreadingHTTPServer`` in a thread) that
record every request and answer scripted OpenAI-compatible or Anthropic responses. Clients
reach the gateway the way a trial's supervisor does: through the trial's unix socket
(``httpx.HTTPTransport(uds=...)``, or raw bytes over ``socket.AF_UNIX``).
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.loopback import QUIET_ON_CUT, LoopbackServer, end_chunks, write_chunk

from harness.errors import UsageError
from harness.gateway import (
    NO_MORE_RESPONSES,
    Budget,
    FauxProvider,
    Gateway,
    HTTPProvider,
    TrialAccess,
    TrialUsage,
    load_faux_script,
    make_provider,
)
from harness.models.catalog import ModelSpec, Prices
from sandbox.credentials import REDACTED, CredentialStore

DOC_KEYS = {
    "seq",
    "trial_id",
    "started_at",
    "latency_ms",
    "method",
    "path",
    "api",
    "provider",
    "model",
    "requested_model",
    "status",
    "outcome",
    "reason",
    "stream",
    "request",
    "response",
    "usage",
    "cost_usd",
}
OUTCOMES = {"ok", "upstream_error", "refused", "budget", "error"}
STARTED_AT = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
MESSAGES = "/v1/messages"
#: Prices of the test model: USD per million tokens.
PRICES = Prices(input=2.0, output=8.0, cached_input=0.5)


# ---------------------------------------------------------------------------------------------
# A recording, scripted upstream
# ---------------------------------------------------------------------------------------------


@dataclass
class Seen:
    """One request as the upstream received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Reply:
    """A scripted upstream answer: a JSON body, or SSE ``events`` sent one chunk each."""

    status: int = 200
    body: Any = None
    events: list[bytes] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    #: Streams: after the first event, wait (≤ 5 s) for this before sending the rest.
    hold: threading.Event | None = None
    #: Streams: drop the connection after this many events (no terminating chunk).
    break_after: int | None = None
    delay_sec: float = 0.0


def sse(payload: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return f"{head}data: {data}\n\n".encode()


def chat_body(model: str, usage: dict[str, Any] | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-up-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "hello from upstream"},
                "finish_reason": "stop",
            }
        ],
    }
    if usage is not None:
        body["usage"] = usage
    return body


CHAT_USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def chat_stream(model: str, include_usage: bool) -> list[bytes]:
    base = {"id": "chatcmpl-up-2", "object": "chat.completion.chunk", "created": 1, "model": model}
    extra = {"usage": None} if include_usage else {}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    events = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Hel"}),
        chunk({"content": "lo"}),
        chunk({}, "stop"),
    ]
    if extra:
        events = [
            sse({**json.loads(e[6:]), **extra}) for e in events
        ]  # OpenAI sends "usage": null on every chunk but the last
        usage = {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13}
        events.append(sse({**base, "choices": [], "usage": usage}))
    events.append(b"data: [DONE]\n\n")
    return events


def responses_body(model: str) -> dict[str, Any]:
    return {
        "id": "resp_up_1",
        "object": "response",
        "status": "completed",
        "model": model,
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "hi", "annotations": []}],
            }
        ],
        "usage": {
            "input_tokens": 12,
            "output_tokens": 4,
            "total_tokens": 16,
            "input_tokens_details": {"cached_tokens": 8},
        },
    }


def responses_stream(model: str) -> list[bytes]:
    done = responses_body(model)
    return [
        sse({"type": "response.created", "response": {**done, "status": "in_progress"}}),
        sse({"type": "response.output_text.delta", "output_index": 0, "delta": "hi"}),
        sse({"type": "response.completed", "response": done}, "response.completed"),
    ]


def anthropic_body(model: str) -> dict[str, Any]:
    return {
        "id": "msg_up_1",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": "bonjour"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 20, "output_tokens": 7, "cache_read_input_tokens": 30},
    }


def anthropic_stream(model: str) -> list[bytes]:
    start = {**anthropic_body(model), "content": [], "stop_reason": None}
    start["usage"] = {"input_tokens": 21, "output_tokens": 1}
    return [
        sse({"type": "message_start", "message": start}, "message_start"),
        sse(
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
            "content_block_start",
        ),
        sse(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "b"},
            },
            "content_block_delta",
        ),
        sse({"type": "content_block_stop", "index": 0}, "content_block_stop"),
        sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 9},
            },
            "message_delta",
        ),
        sse({"type": "message_stop"}, "message_stop"),
    ]


class Upstream:
    """An OpenAI-compatible (``kind="openai"``) or Anthropic upstream on 127.0.0.1:0."""

    def __init__(self, kind: str, key: str, port: int = 0) -> None:
        self.kind = kind
        self.key = key
        self.seen: list[Seen] = []
        self.script: deque[Callable[[Seen], Reply]] = deque()
        self.lock = threading.Lock()
        #: Set by ``barrier``: every request waits there before it is answered.
        self.barrier: threading.Barrier | None = None
        # quiet on a cut connection only: the gateway cutting it is expected, nothing else
        self.loopback = LoopbackServer(
            self.handle, port=port, methods=("POST", "GET", "DELETE", "PUT"), quiet=QUIET_ON_CUT
        )
        self.port = self.loopback.port

    @property
    def base_url(self) -> str:
        root = f"http://127.0.0.1:{self.port}"
        return root + "/v1" if self.kind == "openai" else root

    def close(self) -> None:
        self.loopback.close()

    def requests(self) -> list[Seen]:
        with self.lock:
            return list(self.seen)

    # -- serving (handler threads) ---------------------------------------------------------

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("content-length") or 0)
        raw = h.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            body = {"unparsed": raw.decode("latin-1")}
        seen = Seen(h.command, h.path, {k.lower(): v for k, v in h.headers.items()}, body)
        with self.lock:
            self.seen.append(seen)
            scripted = self.script.popleft() if self.script else None
        if self.barrier is not None:
            self.barrier.wait(10)
        reply = self.auth_failure(seen) or (scripted or self.default)(seen)
        time.sleep(reply.delay_sec)
        if reply.events is None:
            data = json.dumps(reply.body).encode()
            h.send_response(reply.status)
            h.send_header("content-type", "application/json")
            h.send_header("content-length", str(len(data)))
            for name, value in reply.headers.items():
                h.send_header(name, value)
            h.end_headers()
            h.wfile.write(data)
            h.wfile.flush()
            return
        h.send_response(reply.status)
        h.send_header("content-type", "text/event-stream")
        h.send_header("transfer-encoding", "chunked")
        for name, value in reply.headers.items():
            h.send_header(name, value)
        h.end_headers()
        h.wfile.flush()
        for n, event in enumerate(reply.events):
            if reply.break_after is not None and n == reply.break_after:
                h.close_connection = True
                h.wfile.flush()
                h.connection.shutdown(socket.SHUT_RDWR)
                return
            write_chunk(h, event)
            if n == 0 and reply.hold is not None:
                reply.hold.wait(5)
        end_chunks(h)

    def auth_failure(self, seen: Seen) -> Reply | None:
        if self.kind == "openai":
            if seen.headers.get("authorization") != f"Bearer {self.key}":
                return Reply(401, {"error": {"message": "bad key", "type": "auth"}})
            return None
        if seen.headers.get("x-api-key") != self.key or "authorization" in seen.headers:
            return Reply(401, {"type": "error", "error": {"type": "authentication_error"}})
        if not seen.headers.get("anthropic-version"):
            return Reply(400, {"type": "error", "error": {"message": "anthropic-version?"}})
        return None

    def default(self, seen: Seen) -> Reply:
        body = seen.body if isinstance(seen.body, dict) else {}
        model = str(body.get("model"))
        stream = body.get("stream") is True
        if seen.path == "/v1/chat/completions":
            if stream:
                options = body.get("stream_options") or {}
                return Reply(events=chat_stream(model, bool(options.get("include_usage"))))
            return Reply(body=chat_body(model, CHAT_USAGE))
        if seen.path == "/v1/responses":
            if stream:
                return Reply(events=responses_stream(model))
            return Reply(body=responses_body(model))
        if seen.path == "/v1/messages":
            if stream:
                return Reply(events=anthropic_stream(model))
            return Reply(body=anthropic_body(model))
        return Reply(404, {"error": {"message": f"no route {seen.path}"}})


# ---------------------------------------------------------------------------------------------
# Gateway plumbing
# ---------------------------------------------------------------------------------------------


@dataclass
class Trial:
    """One open trial and how to reach its socket."""

    access: TrialAccess
    records: Path
    clients: list[httpx.Client] = field(default_factory=list)

    @property
    def token(self) -> str:
        return self.access.token

    def client(self, *, auth: str = "bearer", token: str | None = None) -> httpx.Client:
        token = self.token if token is None else token
        headers = {"authorization": f"Bearer {token}"} if auth == "bearer" else {}
        if auth == "x-api-key":
            headers = {"x-api-key": token}
        client = httpx.Client(
            transport=httpx.HTTPTransport(uds=str(self.access.socket_path)),
            base_url="http://127.0.0.1",
            headers=headers,
            timeout=15.0,
        )
        self.clients.append(client)
        return client

    def lines(self) -> list[dict[str, Any]]:
        if not self.records.exists():
            return []
        text = self.records.read_text()
        assert text == "" or text.endswith("\n"), "a torn last line"
        return [json.loads(line) for line in text.splitlines()]


class Harness:
    """Builds gateways and trials; closes everything at teardown."""

    def __init__(self, tmp_path: Path, key: str) -> None:
        self.tmp_path = tmp_path
        self.key = key
        self.store = CredentialStore()
        self.store.set("OPENAI_API_KEY", key)
        self.store.set("ANTHROPIC_API_KEY", key)
        self.gateways: list[Gateway] = []
        self.trials: list[Trial] = []

    def gateway(self, spec: ModelSpec, budget: Budget | None = None) -> Gateway:
        if spec.provider == "faux":
            provider = make_provider(spec, self.store)
        else:
            provider = HTTPProvider(spec, self.key)
        gw = Gateway(spec, provider, budget=budget, redact=self.store.redact)
        gw.start()
        self.gateways.append(gw)
        return gw

    def trial(self, gw: Gateway, trial_id: str, task: str = "demo") -> Trial:
        records = self.tmp_path / "evidence" / trial_id / "model_calls.jsonl"
        trial = Trial(gw.open_trial(trial_id, task, records), records)
        self.trials.append(trial)
        return trial

    def close(self) -> None:
        for trial in self.trials:
            for client in trial.clients:
                client.close()
        for gw in self.gateways:
            gw.close()


def openai_spec(base_url: str, prices: Prices = PRICES, api: str = "openai-chat") -> ModelSpec:
    return ModelSpec(
        provider="openai",
        name="gpt-test",
        upstream="gpt-upstream-v1",
        api=api,  # type: ignore[arg-type]
        base_url=base_url,
        api_key_env="OPENAI_API_KEY",
        prices=prices,
        source="test",
    )


def anthropic_spec(base_url: str) -> ModelSpec:
    return ModelSpec(
        provider="anthropic",
        name="claude-test",
        upstream="claude-upstream-v1",
        api="anthropic-messages",
        base_url=base_url,
        api_key_env="ANTHROPIC_API_KEY",
        prices=Prices(input=3.0, output=15.0, cached_input=0.3),
        source="test",
    )


def faux_spec(script: Path) -> ModelSpec:
    return ModelSpec(
        provider="faux", name="demo", upstream="demo", api="openai-chat", script=script
    )


def sse_data(raw: bytes) -> list[str]:
    """The ``data:`` payloads of an event stream, ``[DONE]`` included, in order."""
    out = []
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = [line[5:].strip() for line in block.split(b"\n") if line.startswith(b"data:")]
        if data:
            out.append(b"\n".join(data).decode())
    return out


def assert_doc_line(line: dict[str, Any]) -> None:
    """The shape docs/model-access.md §2 fixes for every line."""
    # Optional: "via" (in-process calls), "faux" (which scripted turn answered, §5).
    assert set(line) - {"via", "faux"} == DOC_KEYS, sorted(set(line) ^ DOC_KEYS)
    assert isinstance(line["seq"], int) and line["seq"] >= 1
    assert isinstance(line["trial_id"], str)
    assert STARTED_AT.match(line["started_at"]), line["started_at"]
    assert isinstance(line["latency_ms"], float) and line["latency_ms"] >= 0
    assert line["outcome"] in OUTCOMES
    assert isinstance(line["status"], int)
    assert isinstance(line["stream"], bool)
    assert line["reason"] is None or isinstance(line["reason"], str)
    if line["outcome"] in ("refused", "budget", "error"):
        assert line["reason"], line
    usage = line["usage"]
    assert usage is None or set(usage) - {"estimated"} == {
        "input_tokens",
        "output_tokens",
        "cached_tokens",
    }
    assert usage is None or usage.get("estimated", True) is True  # present only when true
    assert line["cost_usd"] is None or isinstance(line["cost_usd"], float)


def raw_exchange(path: Path, data: bytes, timeout: float = 5.0) -> bytes:
    """Send raw bytes over a unix socket; return one whole response (content-length framed)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))
        sock.sendall(data)
        return read_response(sock)


def read_response(sock: socket.socket) -> bytes:
    buf = b""
    while b"\r\n\r\n" not in buf:
        part = sock.recv(65536)
        if not part:
            return buf
        buf += part
    head, _, rest = buf.partition(b"\r\n\r\n")
    match = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    length = int(match.group(1)) if match else 0
    while len(rest) < length:
        part = sock.recv(65536)
        if not part:
            break
        rest += part
    return head + b"\r\n\r\n" + rest


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# ---------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def real_key() -> str:
    return "sk-canary-REAL-KEY-" + secrets.token_hex(16)


@pytest.fixture
def h(tmp_path: Path, real_key: str) -> Iterator[Harness]:
    harness = Harness(tmp_path, real_key)
    yield harness
    harness.close()


@pytest.fixture
def oa(real_key: str) -> Iterator[Upstream]:
    upstream = Upstream("openai", real_key)
    yield upstream
    upstream.close()


@pytest.fixture
def an(real_key: str) -> Iterator[Upstream]:
    upstream = Upstream("anthropic", real_key)
    yield upstream
    upstream.close()


def no_secret_leak(trial: Trial, key: str, *texts: str) -> None:
    """The real key is in none of the texts, nor in the trial's records."""
    for text in texts:
        assert key not in text
    if trial.records.exists():
        assert key not in trial.records.read_text()


def upstream_never_saw_tokens(upstream: Upstream, *tokens: str) -> None:
    for seen in upstream.requests():
        blob = json.dumps([seen.headers, seen.body, seen.path])
        for token in tokens:
            assert token not in blob


def totals(usage: TrialUsage | None) -> dict[str, Any]:
    """A trial's usage totals, the cost rounded (float sums)."""
    assert usage is not None
    cost = None if usage.cost_usd is None else round(usage.cost_usd, 12)
    return {
        "calls": usage.calls,
        "refused": usage.refused,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cached_tokens": usage.cached_tokens,
        "cost_usd": cost,
    }


def expect(
    calls: int = 0,
    refused: int = 0,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    cached_tokens: int | None = None,
    cost_usd: float | None = None,
) -> dict[str, Any]:
    return totals(TrialUsage(calls, refused, input_tokens, output_tokens, cached_tokens, cost_usd))


# ---------------------------------------------------------------------------------------------
# Forwarding: OpenAI-compatible upstream
# ---------------------------------------------------------------------------------------------


def test_chat_call_forwards_with_real_key_rewrites_model_and_records_doc_line(
    h: Harness, oa: Upstream, real_key: str
) -> None:
    gw = h.gateway(openai_spec(oa.base_url))
    trial = h.trial(gw, "trial-a")
    oa.script.append(
        lambda seen: Reply(body=chat_body("gpt-upstream-v1", CHAT_USAGE), delay_sec=0.05)
    )
    request = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    resp = trial.client().post(CHAT, json=request)

    assert resp.status_code == 200, resp.text
    assert resp.headers["x-harness-gateway"] == "1"
    body = resp.json()
    assert body["choices"][0]["message"]["content"] == "hello from upstream"
    [seen] = oa.requests()
    assert seen.method == "POST" and seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == f"Bearer {real_key}"
    assert seen.body == {**request, "model": "gpt-upstream-v1"}
    upstream_never_saw_tokens(oa, trial.token)
    no_secret_leak(trial, real_key, resp.text, json.dumps(dict(resp.headers)))

    [line] = trial.lines()
    assert_doc_line(line)
    assert line["latency_ms"] >= 50.0
    cost = (10 * 2.0 + 5 * 8.0) / 1_000_000
    assert line == {
        **line,
        "seq": 1,
        "trial_id": "trial-a",
        "method": "POST",
        "path": CHAT,
        "api": "openai-chat",
        "provider": "openai",
        "model": "gpt-test",
        "requested_model": "gpt-4o-mini",
        "status": 200,
        "outcome": "ok",
        "reason": None,
        "stream": False,
        "request": {**request, "model": "gpt-upstream-v1"},
        "response": body,
        "usage": {"input_tokens": 10, "output_tokens": 5, "cached_tokens": None},
    }
    assert line["cost_usd"] == pytest.approx(cost)
    assert "via" not in line
    assert totals(gw.usage("trial-a")) == expect(
        calls=1, input_tokens=10, output_tokens=5, cost_usd=cost
    )


def test_x_api_key_header_is_accepted_and_never_forwarded(
    h: Harness, oa: Upstream, real_key: str
) -> None:
    gw = h.gateway(openai_spec(oa.base_url))
    trial = h.trial(gw, "t")
    resp = trial.client(auth="x-api-key").post(CHAT, json={"messages": []})
    assert resp.status_code == 200, resp.text
    [seen] = oa.requests()
    assert "x-api-key" not in seen.headers
    assert seen.headers["authorization"] == f"Bearer {real_key}"
    upstream_never_saw_tokens(oa, trial.token)
    [line] = trial.lines()
    assert line["requested_model"] is None  # the agent named no model
    assert line["request"]["model"] == "gpt-upstream-v1"


def test_client_headers_other_than_the_passthrough_ones_stay_home(h: Harness, oa: Upstream) -> None:
    gw = h.gateway(openai_spec(oa.base_url))
    trial = h.trial(gw, "t")
    resp = trial.client().post(
        CHAT,
        json={"messages": []},
        headers={"openai-beta": "assistants=v2", "x-secret-thing": "sandbox-data", "cookie": "a=b"},
    )
    assert resp.status_code == 200
    [seen] = oa.requests()
    assert seen.headers["openai-beta"] == "assistants=v2"
    assert "x-secret-thing" not in seen.headers and "cookie" not in seen.headers


def test_chat_stream_is_relayed_intact_incrementally_with_usage_injected_and_parsed(
    h: Harness, oa: Upstream, real_key: str
) -> None:
    gw = h.gateway(openai_spec(oa.base_url))
    trial = h.trial(gw, "t")
    released = threading.Event()
    sent: list[bytes] = []

    def scripted(seen: Seen) -> Reply:
        events = chat_stream("gpt-upstream-v1", include_usage=True)
        sent.extend(events)
        return Reply(events=events, hold=released)

    oa.script.append(scripted)
    request = {"model": "whatever", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    received = b""
    with trial.client().stream("POST", CHAT, json=request) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        for chunk in resp.iter_raw():
            received += chunk
            if not released.is_set() and b"\n\n" in received:
                # The first event arrived while the upstream still holds the rest:
                # the gateway relays as it goes, it does not buffer the stream.
                assert received == sent[0]
                released.set()
    assert released.is_set()
    assert received == b"".join(sent)
    payloads = sse_data(received)
    assert payloads[-1] == "[DONE]"
    assert [json.loads(p)["object"] for p in payloads[:-1]] == ["chat.completion.chunk"] * 5

    [seen] = oa.requests()
    assert seen.body["stream_options"] == {"include_usage": True}
    assert seen.body["model"] == "gpt-upstream-v1"
    # The line is written before the client sees the end of the stream.
    [line] = trial.lines()
    assert_doc_line(line)
    assert line["stream"] is True and line["outcome"] == "ok" and line["status"] == 200
    assert line["requested_model"] == "whatever"
    assert line["request"]["stream_options"] == {"include_usage": True}
    assert line["response"] == [json.loads(p) for p in payloads[:-1]]
    assert line["usage"] == {"input_tokens": 11, "output_tokens": 2, "cached_tokens": None}
    assert line["cost_usd"] == pytest.approx((11 * 2.0 + 2 * 8.0) / 1e6)
    no_secret_leak(trial, real_key, received.decode())


def test_stream_usage_is_always_asked_for_other_stream_options_are_kept(
    h: Harness, oa: Upstream
) -> None:
    gw = h.gateway(openai_spec(oa.base_url))
    trial = h.trial(gw, "t")
    client = trial.client()
    opts = {"include_usage": False, "other": 1}
    client.post(CHAT, json={"stream": True, "messages": [], "stream_options": opts}).read()
    client.post(CHAT, json={"stream": False, "messages": []})
    first, second = oa.requests()
    # include_usage=false would hide the stream's usage from the budget and the record.
    assert first.body["stream_options"] == {"include_usage": True, "other": 1}
    assert "stream_options" not in second.body  # never added to a non-streamed call
    lines = trial.lines()
    assert lines[0]["usage"] == {"input_tokens": 11, "output_tokens": 2, "cached_tokens": None}
    assert lines[1]["usage"] == {"input_tokens": 10, "output_tokens": 5, "cached_tokens": None}


def test_responses_api_forwarded_streamed_and_not_with_cached_token_pricing(
    h: Harness, oa: Upstream
) -> None:
    gw = h.gateway(openai_spec(oa.base_url, api="openai-responses"))
    trial = h.trial(gw, "t")
    client = trial.client()
    plain = client.post(RESPONSES, json={"model": "m", "input": "hello"})
    assert plain.status_code == 200
    assert plain.json()["output"][0]["type"] == "message"
    streamed = client.post(RESPONSES, json={"model": "m", "input": "hello", "stream": True})
    assert streamed.status_code == 200
    assert streamed.content == b"".join(responses_stream("gpt-upstream-v1"))
    first, second = oa.requests()
    assert first.path == second.path == "/v1/responses"
    assert "stream_options" not in second.body  # only chat streams need it
    cost = ((12 - 8) * 2.0 + 8 * 0.5 + 4 * 8.0) / 1e6
    for line in trial.lines():
        assert_doc_line(line)
        assert line["api"] == "openai-responses"
        assert line["usage"] == {"input_tokens": 12, "output_tokens": 4, "cached_tokens": 8}
        assert line["cost_usd"] == pytest.approx(cost)
    assert trial.lines()[1]["stream"] is True


def test_upstream_error_echoing_the_key_is_redacted_for_client_and_record(
    h: Harness, oa: Upstream, real_key: str
) -> None:
    gw = h.gateway(openai_spec(oa.base_url))
    trial = h.trial(gw, "t")

    def echo(seen: Seen) -> Reply:
        auth = seen.headers["authorization"]
        return Reply(
            400,
            {"error": {"message": f"Invalid request with header Authorization: {auth}"}},
            headers={"x-echo-authorization": auth},
        )

    oa.script.append(echo)
    resp = trial.client().post(CHAT, json={"model": "x", "messages": []})
    assert resp.status_code == 400
    assert real_key not in resp.text
    assert REDACTED in resp.json()["error"]["message"]
    assert all(real_key not in v for v in resp.headers.values())  # upstream headers stay home
    [line] = trial.lines()
    assert_doc_line(line)
    assert line["outcome"] == "upstream_error" and line["status"] == 400
    assert line["reason"] is None
    assert line["usage"] is None and line["cost_usd"] is None
    assert REDACTED in line["response"]["error"]["message"]
    no_secret_leak(trial, real_key, resp.text)
    assert totals(gw.usage("t")) == expect(calls=1)


def test_key_echoed_inside_a_stream_is_redacted_too(
    h: Harness, oa: Upstream, real_key: str
) -> None:
    gw = h.gateway(openai_spec(oa.base_url))
    trial = h.trial(gw, "t")

    def echo(seen: Seen) -> Reply:
        auth = seen.headers["authorization"]
        message = sse({"error": {"message": f"upstream saw {auth}", "type": "server_error"}})
        # Split the echo across two writes: redaction must not depend on chunk boundaries.
        cut = message.index(b"REAL-KEY") + 3
        return Reply(events=[sse({"choices": []}), message[:cut], message[cut:]])

    oa.script.append(echo)
    with trial.client().stream("POST", CHAT, json={"stream": True, "messages": []}) as resp:
        received = resp.read()
    assert resp.status_code == 200
    assert real_key not in received.decode()
    assert f"upstream saw Bearer {REDACTED}".encode() in received
    no_secret_leak(trial, real_key)
    [line] = trial.lines()
    assert line["response"][1]["error"]["message"] == f"upstream saw Bearer {REDACTED}"


def test_key_echoed_across_the_pieces_of_a_huge_stream_line_is_redacted(
    h: Harness, oa: Upstream, real_key: str
) -> None:
    gw = h.gateway(openai_spec(oa.base_url))
    trial = h.trial(gw, "t")
    released = threading.Event()

    def echo(seen: Seen) -> Reply:
        line = b'data: {"echo": "' + b"p" * (1 << 20) + seen.headers["authorization"].encode()
        line += b'"}\n\n'
        cut = line.index(b"REAL-KEY")  # the gateway gets the line in two parts, split here
        return Reply(events=[line[:cut], line[cut:]], hold=released)

    oa.script.append(echo)
    received = b""
    with trial.client().stream("POST", CHAT, json={"stream": True, "messages": []}) as resp:
        for chunk in resp.iter_raw():
            received += chunk
            if len(received) > 1 << 19:  # the gateway relays before the line is whole
                released.set()
    assert released.is_set()
    assert b"Bearer sk-canary" not in received and real_key.encode() not in received
    assert received.endswith(f'Bearer {REDACTED}"}}\n\n'.encode())
    assert len(received) == len(b'data: {"echo": ""}\n\n') + (1 << 20) + len(f"Bearer {REDACTED}")
    no_secret_leak(trial, real_key)


def test_usage_is_null_when_the_upstream_omits_it_never_zero_streams_estimated(
    h: Harness, oa: Upstream
) -> None:
    gw = h.gateway(openai_spec(oa.base_url))
    trial = h.trial(gw, "t")
    oa.script.append(lambda seen: Reply(body=chat_body("m", None)))
    oa.script.append(lambda seen: Reply(body=chat_body("m", {"prompt_tokens": 7})))
    oa.script.append(lambda seen: Reply(events=chat_stream("m", include_usage=False)))
    client = trial.client()
    client.post(CHAT, json={"messages": []})
    client.post(CHAT, json={"messages": []})
    client.post(CHAT, json={"messages": [], "stream": True})
    none, partial, stream = trial.lines()
    assert none["usage"] is None and none["cost_usd"] is None
    assert partial["usage"] == {"input_tokens": 7, "output_tokens": None, "cached_tokens": None}
    assert partial["cost_usd"] is None  # a cost from half the counts would be made up
    # A stream whose upstream reported nothing is counted by the gateway, and says so:
    # "Hello" is 5 characters, ceil(5 / 4) = 2 tokens; the request had no text.
    est = {"input_tokens": 0, "output_tokens": 2, "cached_tokens": None, "estimated": True}
    assert stream["usage"] == est
    assert stream["cost_usd"] == pytest.approx(2 * 8.0 / 1e6)
    assert totals(gw.usage("t")) == expect(
        calls=3, input_tokens=7, output_tokens=2, cost_usd=2 * 8.0 / 1e6
    )


def test_cost_is_null_when_the_model_has_no_prices(h: Harness, oa: Upstream) -> None:
    gw = h.gateway(openai_spec(oa.base_url, prices=Prices()))
    trial = h.trial(gw, "t")
    assert trial.client().post(CHAT, json={"messages": []}).status_code == 200
    [line] = trial.lines()
    assert line["usage"] == {"input_tokens": 10, "output_tokens": 5, "cached_tokens": None}
    assert line["cost_usd"] is None


def test_bodies_over_the_record_cap_are_truncated_in_the_record_but_usage_is_kept(
    h: Harness, oa: Upstream
) -> None:
    gw = h.gateway(openai_spec(oa.base_url))
    trial = h.trial(gw, "t")
    big = chat_body("m", CHAT_USAGE)
    big["choices"][0]["message"]["content"] = "x" * (1 << 20)
    oa.script.append(lambda seen: Reply(body=big))
    base = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    piece = sse({**base, "choices": [{"index": 0, "delta": {"content": "y" * 1000}}]})
    usage = {"prompt_tokens": 3, "completion_tokens": 1200, "total_tokens": 1203}
    events = [piece] * 1200 + [sse({**base, "choices": [], "usage": usage}), b"data: [DONE]\n\n"]
    oa.script.append(lambda seen: Reply(events=events))
    client = trial.client()
    huge = {"messages": [{"role": "user", "content": "z" * (1 << 20)}]}
    plain = client.post(CHAT, json=huge)
    assert plain.json() == big  # the client gets all of it
    assert oa.requests()[0].body == {**huge, "model": "gpt-upstream-v1"}  # so does the upstream
    streamed = client.post(CHAT, json={"messages": [], "stream": True})
    assert streamed.content == b"".join(events)
    plain_line, stream_line = trial.lines()
    assert plain_line["request"]["truncated"] is True
    assert plain_line["request"]["bytes"] > 1 << 20
    assert plain_line["request"]["head"].startswith('{"messages": [{"role": "user"')
    assert plain_line["response"]["truncated"] is True
    assert plain_line["response"]["head"].startswith('{"id": "chatcmpl-up-1"')
    assert plain_line["usage"] == {"input_tokens": 10, "output_tokens": 5, "cached_tokens": None}
    assert stream_line["response"]["truncated"] is True
    assert 900 < len(stream_line["response"]["events"]) < 1200
    assert stream_line["usage"] == {"input_tokens": 3, "output_tokens": 1200, "cached_tokens": None}
    assert totals(gw.usage("t")) == expect(
        calls=2,
        input_tokens=13,
        output_tokens=1205,
        cost_usd=(13 * 2.0 + 1205 * 8.0) / 1e6,
    )


def test_models_endpoint_answers_the_one_model_locally(h: Harness, oa: Upstream) -> None:
    gw = h.gateway(openai_spec(oa.base_url))
    trial = h.trial(gw, "t")
    resp = trial.client().get("/v1/models")
    assert resp.status_code == 200
    assert [m["id"] for m in resp.json()["data"]] == ["gpt-upstream-v1"]
    assert oa.requests() == []
    [line] = trial.lines()
    assert_doc_line(line)
    assert line["outcome"] == "ok" and line["method"] == "GET"


def test_stream_broken_off_by_the_upstream_is_an_error_and_the_client_sees_it(
    h: Harness, oa: Upstream
) -> None:
    gw = h.gateway(openai_spec(oa.base_url))
    trial = h.trial(gw, "t")
    oa.script.append(lambda seen: Reply(events=chat_stream("m", include_usage=True), break_after=2))
    client = trial.client()
    with (
        pytest.raises(httpx.RemoteProtocolError),
        client.stream("POST", CHAT, json={"stream": True, "messages": []}) as resp,
    ):
        resp.read()
    [line] = trial.lines()
    assert_doc_line(line)
    assert line["outcome"] == "error" and line["stream"] is True
    assert "broke off" in line["reason"]
    # The gateway goes on serving.
    assert client.post(CHAT, json={"messages": []}).status_code == 200
    assert [x["seq"] for x in trial.lines()] == [1, 2]


# ---------------------------------------------------------------------------------------------
# Forwarding: Anthropic upstream
# ---------------------------------------------------------------------------------------------


def test_anthropic_messages_get_x_api_key_and_version_and_stream_usage(
    h: Harness, an: Upstream, real_key: str
) -> None:
    gw = h.gateway(anthropic_spec(an.base_url))
    trial = h.trial(gw, "t")
    client = trial.client(auth="x-api-key")
    request = {
        "model": "claude-x",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hi"}],
    }
    plain = client.post(MESSAGES, json=request, headers={"anthropic-version": "2023-06-01"})
    assert plain.status_code == 200, plain.text
    assert plain.json()["content"] == [{"type": "text", "text": "bonjour"}]
    streamed = client.post(MESSAGES, json={**request, "stream": True})  # no version: default
    assert streamed.status_code == 200, streamed.text
    assert streamed.content == b"".join(anthropic_stream("claude-upstream-v1"))

    first, second = an.requests()
    for seen in (first, second):
        assert seen.path == "/v1/messages"
        assert seen.headers["x-api-key"] == real_key
        assert seen.headers["anthropic-version"] == "2023-06-01"
        assert "authorization" not in seen.headers
        assert seen.body["model"] == "claude-upstream-v1"
        assert "stream_options" not in seen.body
    upstream_never_saw_tokens(an, trial.token)

    plain_line, stream_line = trial.lines()
    for line in (plain_line, stream_line):
        assert_doc_line(line)
        assert line["provider"] == "anthropic" and line["model"] == "claude-test"
        assert line["api"] == "anthropic-messages" and line["requested_model"] == "claude-x"
    # input = base + cache reads; cached = cache reads
    assert plain_line["usage"] == {"input_tokens": 50, "output_tokens": 7, "cached_tokens": 30}
    assert plain_line["cost_usd"] == pytest.approx((20 * 3.0 + 30 * 0.3 + 7 * 15.0) / 1e6)
    assert stream_line["usage"] == {"input_tokens": 21, "output_tokens": 9, "cached_tokens": None}
    assert stream_line["cost_usd"] == pytest.approx((21 * 3.0 + 9 * 15.0) / 1e6)
    no_secret_leak(trial, real_key, plain.text, streamed.text)


def test_anthropic_gateway_refuses_openai_paths(h: Harness, an: Upstream) -> None:
    gw = h.gateway(anthropic_spec(an.base_url))
    trial = h.trial(gw, "t")
    resp = trial.client().post(CHAT, json={"messages": []})
    assert resp.status_code == 404
    assert an.requests() == []
    [line] = trial.lines()
    assert line["outcome"] == "refused" and "claude-test" in line["reason"]


# ---------------------------------------------------------------------------------------------
# Refusals
# ---------------------------------------------------------------------------------------------


def _refused(trial: Trial, status: int, reason_part: str) -> dict[str, Any]:
    line = trial.lines()[-1]
    assert_doc_line(line)
    assert line["outcome"] == "refused", line
    assert line["status"] == status, line
    assert reason_part in line["reason"], line
    assert line["usage"] is None and line["cost_usd"] is None
    return line


def test_token_refusals_missing_unknown_foreign_revoked(
    h: Harness, oa: Upstream, real_key: str
) -> None:
    gw = h.gateway(openai_spec(oa.base_url))
    a = h.trial(gw, "a")
    b = h.trial(gw, "b")
    c = h.trial(gw, "c")
    gw.revoke("c")
    body: dict[str, Any] = {"messages": []}

    cases = [
        (a.client(auth="none"), "missing token"),
        (a.client(token="hgw-" + secrets.token_urlsafe(32)), "unknown token"),
        (a.client(token=real_key), "unknown token"),
        (a.client(token=b.token), "foreign token"),
        (a.client(auth="x-api-key", token=b.token), "foreign token"),
        (a.client(token=c.token), "revoked token"),
    ]
    for client, reason in cases:
        resp = client.post(CHAT, json=body)
        assert resp.status_code == 401, (reason, resp.text)
        assert resp.json()["error"]["type"] == "gateway_refused"
        _refused(a, 401, reason)
        assert a.token not in resp.text and b.token not in resp.text
    assert oa.requests() == []
    assert [line["seq"] for line in a.lines()] == list(range(1, len(cases) + 1))
    assert totals(gw.usage("a")) == expect(calls=0, refused=len(cases))
    assert b.lines() == []
    assert real_key not in a.records.read_text()
    # b's own token still works on b's socket.
    assert b.client().post(CHAT, json=body).status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "status", "reason"),
    [
        ("POST", "/v1/files", 404, "not a model endpoint"),
        ("POST", "/v1/chat/completions/", 404, "not a model endpoint"),
        ("POST", "/v1/../v1/files", 404, "not a model endpoint"),
        ("GET", CHAT, 405, "take POST"),
        ("DELETE", CHAT, 405, "take POST"),
        ("PUT", RESPONSES, 405, "take POST"),
        ("POST", MESSAGES, 404, "not served for openai/gpt-test"),
    ],
)
def test_path_and_method_refusals(
    h: Harness, oa: Upstream, method: str, path: str, status: int, reason: str
) -> None:
    gw = h.gateway(openai_spec(oa.base_url))
    trial = h.trial(gw, "t")
    resp = trial.client().request(method, path, json={"messages": []})
    assert resp.status_code == status, resp.text
    line = _refused(trial, status, reason)
    assert line["method"] == method
    assert oa.requests() == []


def test_non_loopback_host_and_non_json_bodies_are_refused(h: Harness, oa: Upstream) -> None:
    gw = h.gateway(openai_spec(oa.base_url))
    trial = h.trial(gw, "t")
    client = trial.client()
    resp = client.post(CHAT, json={"messages": []}, headers={"host": "api.openai.com"})
    assert resp.status_code == 403
    _refused(trial, 403, "api.openai.com")
    resp = client.post(CHAT, json={"messages": []}, headers={"host": "127.0.0.1.evil.example:80"})
    assert resp.status_code == 403
    for content in (b"not json at all", b"[1, 2]", b"\xff\xfe", b""):
        resp = client.post(CHAT, content=content, headers={"content-type": "application/json"})
        assert resp.status_code == 400, content
        _refused(trial, 400, "not a JSON object")
    # localhost with a port and [::1] are the gateway itself.
    for host in ("localhost:8080", "[::1]:1234", "127.0.0.1"):
        assert client.post(CHAT, json={}, headers={"host": host}).status_code == 200, host
    assert len(oa.requests()) == 3


def test_proxy_style_targets_and_connect_are_refused_over_the_raw_socket(
    h: Harness, oa: Upstream
) -> None:
    gw = h.gateway(openai_spec(oa.base_url))
    trial = h.trial(gw, "t")
    auth = f"Authorization: Bearer {trial.token}\r\n".encode()
    sock = trial.access.socket_path

    absolute = raw_exchange(
        sock, b"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n" + auth + b"\r\n"
    )
    assert status_of(absolute) == 400, absolute
    _refused(trial, 400, "proxy-style target")
    absolute_post = raw_exchange(
        sock,
        b"POST http://127.0.0.1/v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + auth
        + b"Content-Length: 2\r\n\r\n{}",
    )
    assert status_of(absolute_post) == 400
    _refused(trial, 400, "not a proxy")
    connect = raw_exchange(
        sock, b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n" + auth + b"\r\n"
    )
    assert status_of(connect) == 400, connect
    line = _refused(trial, 400, "proxy-style target")
    assert line["method"] == "CONNECT"
    garbage = raw_exchange(sock, b"\x16\x03\x01\x02\x00 not http at all\r\n\r\n")
    assert status_of(garbage) == 400
    assert trial.lines()[-1]["outcome"] == "refused"
    assert oa.requests() == []
    assert [line["seq"] for line in trial.lines()] == [1, 2, 3, 4]


def test_revoke_removes_the_socket_and_cuts_keep_alive_connections(
    h: Harness, oa: Upstream
) -> None:
    gw = h.gateway(openai_spec(oa.base_url))
    trial = h.trial(gw, "t")
    path = trial.access.socket_path
    assert path.is_socket() and oct(path.stat().st_mode & 0o777) == "0o600"
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + f"Authorization: Bearer {trial.token}\r\n".encode()
        + b"Content-Type: application/json\r\nContent-Length: 16\r\n\r\n"
        + b'{"messages": []}'
    )
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as kept:
        kept.settimeout(5)
        kept.connect(str(path))
        kept.sendall(request)
        assert status_of(read_response(kept)) == 200  # the connection stays open
        usage = gw.revoke("t")
        assert totals(usage) == expect(calls=1, input_tokens=10, output_tokens=5, cost_usd=6e-5)
        assert not path.exists() and not path.parent.exists()
        try:
            kept.sendall(request)
            answer = read_response(kept)
        except OSError:
            answer = b""
        assert answer == b"" or status_of(answer) == 401
    with pytest.raises(OSError), socket.socket(socket.AF_UNIX) as fresh:
        fresh.connect(str(path))
    with pytest.raises(httpx.TransportError):
        trial.client().post(CHAT, json={"messages": []})
    assert len(oa.requests()) == 1
    assert gw.revoke("t") == usage  # idempotent
    assert len(trial.lines()) == 1


def test_revoke_during_a_stream_cuts_it_and_still_records_the_call(
    h: Harness, oa: Upstream
) -> None:
    gw = h.gateway(openai_spec(oa.base_url))
    trial = h.trial(gw, "t")
    released = threading.Event()
    oa.script.append(lambda seen: Reply(events=chat_stream("m", True), hold=released))
    client = trial.client()
    with (
        pytest.raises(httpx.TransportError),
        client.stream("POST", CHAT, json={"stream": True, "messages": []}) as resp,
    ):
        for _ in resp.iter_raw():
            gw.revoke("t")  # while the upstream still holds the rest of the stream
            released.set()
    released.set()
    [line] = trial.lines()
    assert_doc_line(line)
    assert line["stream"] is True and line["outcome"] == "error"
    assert "revoked" in line["reason"]
    assert line["response"] == [json.loads(chat_stream("m", True)[0][len(b"data: ") :])]
    assert not trial.access.socket_path.exists()


# ---------------------------------------------------------------------------------------------
# Budgets
# ---------------------------------------------------------------------------------------------


def _budget_refusal(trial: Trial, resp: httpx.Response, phrase: str) -> None:
    assert resp.status_code == 429, resp.text
    error = resp.json()["error"]
    assert error["type"] == "budget_exceeded"
    assert "budget" in error["message"] and phrase in error["message"]
    line = trial.lines()[-1]
    assert_doc_line(line)
    assert line["outcome"] == "budget" and line["status"] == 429
    assert phrase in line["reason"]


def test_max_calls_budget(h: Harness, oa: Upstream) -> None:
    gw = h.gateway(openai_spec(oa.base_url), Budget(max_calls=2))
    trial = h.trial(gw, "t")
    other = h.trial(gw, "u")
    client = trial.client()
    for _ in range(2):
        assert client.post(CHAT, json={"messages": []}).status_code == 200
    _budget_refusal(trial, client.post(CHAT, json={"messages": []}), "2 of 2 calls used")
    _budget_refusal(trial, client.post(RESPONSES, json={"input": "x"}), "2 of 2 calls used")
    assert len(oa.requests()) == 2
    assert totals(gw.usage("t"))["calls"] == 2
    # The budget is per trial.
    assert other.client().post(CHAT, json={"messages": []}).status_code == 200


def test_concurrent_calls_cannot_overshoot_max_calls(h: Harness, oa: Upstream) -> None:
    # Three calls are held upstream (a barrier the test itself releases); two more sent
    # while they are in flight must be refused: calls in flight count against the budget.
    gw = h.gateway(openai_spec(oa.base_url), Budget(max_calls=3))
    trial = h.trial(gw, "t")
    oa.barrier = threading.Barrier(4)
    results: list[int] = []
    lock = threading.Lock()

    def call() -> None:
        status = trial.client().post(CHAT, json={"messages": []}).status_code
        with lock:
            results.append(status)

    held = [threading.Thread(target=call) for _ in range(3)]
    for thread in held:
        thread.start()
    deadline = time.monotonic() + 10
    while len(oa.requests()) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(oa.requests()) == 3
    extra = [threading.Thread(target=call) for _ in range(2)]
    for thread in extra:
        thread.start()
    for thread in extra:
        thread.join(10)
    assert results == [429, 429]  # refused while the three were still in flight
    oa.barrier.wait(10)
    for thread in held:
        thread.join(10)
    assert sorted(results) == [200, 200, 200, 429, 429]
    assert len(oa.requests()) == 3
    assert totals(gw.usage("t"))["calls"] == 3


def test_max_tokens_budget(h: Harness, oa: Upstream) -> None:
    gw = h.gateway(openai_spec(oa.base_url), Budget(max_tokens=20))
    trial = h.trial(gw, "t")
    client = trial.client()
    assert client.post(CHAT, json={"messages": []}).status_code == 200  # 15 tokens
    assert client.post(CHAT, json={"messages": []}).status_code == 200  # 30 ≥ 20 now
    _budget_refusal(trial, client.post(CHAT, json={"messages": []}), "30 of 20 tokens used")
    assert len(oa.requests()) == 2


def test_max_cost_budget(h: Harness, oa: Upstream) -> None:
    prices = Prices(input=1000.0, output=2000.0)  # 10 in + 5 out = $0.02 a call
    gw = h.gateway(openai_spec(oa.base_url, prices=prices), Budget(max_cost_usd=0.03))
    trial = h.trial(gw, "t")
    client = trial.client()
    assert client.post(CHAT, json={"messages": []}).status_code == 200
    assert client.post(CHAT, json={"messages": []}).status_code == 200
    _budget_refusal(trial, client.post(CHAT, json={"messages": []}), "$0.0400 of $0.03 spent")
    assert len(oa.requests()) == 2
    assert [line["cost_usd"] for line in trial.lines()[:2]] == [
        pytest.approx(0.02),
        pytest.approx(0.02),
    ]


# ---------------------------------------------------------------------------------------------
# Upstream failures
# ---------------------------------------------------------------------------------------------


def test_unreachable_upstream_is_a_502_error_and_the_gateway_keeps_serving(
    h: Harness, real_key: str
) -> None:
    port = closed_port()
    gw = h.gateway(openai_spec(f"http://127.0.0.1:{port}/v1"))
    trial = h.trial(gw, "t")
    client = trial.client()
    resp = client.post(CHAT, json={"messages": []})
    assert resp.status_code == 502
    assert "unreachable" in resp.json()["error"]["message"]
    [line] = trial.lines()
    assert_doc_line(line)
    assert line["outcome"] == "error" and line["status"] == 502
    assert "unreachable" in line["reason"]
    assert line["usage"] is None and line["cost_usd"] is None
    # Streams fail the same way.
    assert client.post(CHAT, json={"messages": [], "stream": True}).status_code == 502
    # The upstream comes up on that port: the very same gateway and trial now get answers.
    upstream = Upstream("openai", real_key, port=port)
    try:
        resp = client.post(CHAT, json={"messages": []})
        assert resp.status_code == 200, resp.text
    finally:
        upstream.close()
    assert [x["outcome"] for x in trial.lines()] == ["error", "error", "ok"]
    assert totals(gw.usage("t")) == expect(calls=1, input_tokens=10, output_tokens=5, cost_usd=6e-5)
    no_secret_leak(trial, real_key)


# ---------------------------------------------------------------------------------------------
# Concurrency
# ---------------------------------------------------------------------------------------------


def test_twenty_concurrent_calls_across_four_trials(h: Harness, oa: Upstream) -> None:
    gw = h.gateway(openai_spec(oa.base_url))
    trials = [h.trial(gw, f"trial-{n}") for n in range(4)]
    # Every upstream request waits until all 20 are in flight: calls must really overlap.
    oa.barrier = threading.Barrier(20)
    jobs = [(t, n) for t in trials for n in range(5)]

    def call(job: tuple[Trial, int]) -> int:
        trial, n = job
        with httpx.Client(
            transport=httpx.HTTPTransport(uds=str(trial.access.socket_path)),
            base_url="http://127.0.0.1",
            headers={"authorization": f"Bearer {trial.token}"},
            timeout=15,
        ) as client:
            stream = n % 2 == 1
            marker = f"{trial.access.trial_id}/{n}"
            resp = client.post(
                CHAT, json={"stream": stream, "messages": [{"role": "user", "content": marker}]}
            )
            resp.read()
            return resp.status_code

    with ThreadPoolExecutor(max_workers=20) as pool:
        statuses = list(pool.map(call, jobs))
    assert statuses == [200] * 20
    assert not oa.barrier.broken
    assert len(oa.requests()) == 20
    for trial in trials:
        lines = trial.lines()
        assert sorted(line["seq"] for line in lines) == [1, 2, 3, 4, 5]
        tid = trial.access.trial_id
        assert {line["trial_id"] for line in lines} == {tid}
        assert sorted(line["request"]["messages"][0]["content"] for line in lines) == [
            f"{tid}/{n}" for n in range(5)
        ]
        assert all(line["outcome"] == "ok" and line["usage"] for line in lines)
        assert totals(gw.usage(tid))["calls"] == 5


# ---------------------------------------------------------------------------------------------
# The faux provider through the gateway
# ---------------------------------------------------------------------------------------------

TOOL_ARGS = {"path": "a.txt", "content": "hi\n"}
MIXED = {
    "text": "Let me write.",
    "tool_calls": [{"name": "write", "arguments": TOOL_ARGS, "id": "call_A"}],
}
USER_TEXT = "abcdefghij"  # 10 chars: ceil(10/4) = 3 input tokens
# "Let me write." (13) + "write" (5) + '{"path": "a.txt", "content": "hi\\n"}' (36) = 54 → 14
FAUX_USAGE = {"input_tokens": 3, "output_tokens": 14, "cached_tokens": None}


def write_script(tmp_path: Path, data: Any, name: str = "script.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def faux_request(path: str, stream: bool) -> dict[str, Any]:
    if path == RESPONSES:
        return {"model": "demo", "input": USER_TEXT, "stream": stream}
    body: dict[str, Any] = {
        "model": "anything",
        "messages": [{"role": "user", "content": USER_TEXT}],
    }
    if path == MESSAGES:
        body["max_tokens"] = 100
    return {**body, "stream": stream}


def test_faux_usage_estimate_is_ceil_of_chars_over_four() -> None:
    text = json.dumps(TOOL_ARGS)
    assert len(text) == 36 and len("Let me write.") == 13
    assert math.ceil((13 + 5 + 36) / 4) == FAUX_USAGE["output_tokens"]


def test_faux_chat_completion_shape(h: Harness, tmp_path: Path) -> None:
    gw = h.gateway(faux_spec(write_script(tmp_path, {"responses": [MIXED, {"text": "done"}]})))
    trial = h.trial(gw, "t")
    client = trial.client()
    resp = client.post(CHAT, json=faux_request(CHAT, False))
    assert resp.status_code == 200
    body = resp.json()
    assert body["object"] == "chat.completion" and body["model"] == "demo"
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["role"] == "assistant" and message["content"] == "Let me write."
    [call] = message["tool_calls"]
    assert call["id"] == "call_A" and call["type"] == "function"
    assert call["function"]["name"] == "write"
    assert isinstance(call["function"]["arguments"], str)
    assert json.loads(call["function"]["arguments"]) == TOOL_ARGS
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 14, "total_tokens": 17}
    done = client.post(CHAT, json=faux_request(CHAT, False)).json()
    assert done["choices"][0]["finish_reason"] == "stop"
    assert done["choices"][0]["message"] == {"role": "assistant", "content": "done"}
    first, second = trial.lines()
    assert_doc_line(first)
    assert first["provider"] == "faux" and first["model"] == "demo"
    assert first["requested_model"] == "anything" and first["request"]["model"] == "demo"
    assert first["usage"] == FAUX_USAGE and first["cost_usd"] is None
    assert second["usage"] == {"input_tokens": 3, "output_tokens": 1, "cached_tokens": None}


def test_faux_chat_stream_shape(h: Harness, tmp_path: Path) -> None:
    gw = h.gateway(faux_spec(write_script(tmp_path, [MIXED])))
    trial = h.trial(gw, "t")
    resp = trial.client().post(CHAT, json=faux_request(CHAT, True))
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    payloads = sse_data(resp.content)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "Let me write."
    tools = [
        t for c in chunks if c["choices"] for t in c["choices"][0]["delta"].get("tool_calls", [])
    ]
    assert tools[0]["id"] == "call_A" and tools[0]["function"]["name"] == "write"
    arguments = "".join(t["function"]["arguments"] for t in tools)
    assert json.loads(arguments) == TOOL_ARGS
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] == "tool_calls"
    # The gateway asked for usage, so the faux stream ends with a usage chunk.
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] == 3
    [line] = trial.lines()
    assert line["stream"] is True and line["usage"] == FAUX_USAGE
    assert line["response"] == chunks


def test_faux_anthropic_messages_shape(h: Harness, tmp_path: Path) -> None:
    gw = h.gateway(faux_spec(write_script(tmp_path, [MIXED, {"text": "bye"}])))
    trial = h.trial(gw, "t")
    client = trial.client(auth="x-api-key")
    body = client.post(MESSAGES, json=faux_request(MESSAGES, False)).json()
    assert body["type"] == "message" and body["role"] == "assistant"
    assert body["stop_reason"] == "tool_use"
    text, tool = body["content"]
    assert text == {"type": "text", "text": "Let me write."}
    assert tool["type"] == "tool_use" and tool["id"] == "call_A" and tool["name"] == "write"
    assert tool["input"] == TOOL_ARGS  # an object, not a string
    assert body["usage"] == {"input_tokens": 3, "output_tokens": 14}
    bye = client.post(MESSAGES, json=faux_request(MESSAGES, False)).json()
    assert bye["stop_reason"] == "end_turn"
    assert bye["content"] == [{"type": "text", "text": "bye"}]
    first, _ = trial.lines()
    assert first["api"] == "anthropic-messages" and first["usage"] == FAUX_USAGE


def test_faux_anthropic_stream_shape(h: Harness, tmp_path: Path) -> None:
    gw = h.gateway(faux_spec(write_script(tmp_path, [MIXED])))
    trial = h.trial(gw, "t")
    resp = trial.client().post(MESSAGES, json=faux_request(MESSAGES, True))
    assert resp.status_code == 200
    events = [json.loads(p) for p in sse_data(resp.content)]
    assert [e["type"] for e in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert re.findall(rb"(?m)^event: (\S+)$", resp.content) == [e["type"].encode() for e in events]
    assert events[0]["message"]["usage"]["input_tokens"] == 3
    assert events[2]["delta"] == {"type": "text_delta", "text": "Let me write."}
    assert events[4]["content_block"]["type"] == "tool_use"
    assert json.loads(events[5]["delta"]["partial_json"]) == TOOL_ARGS
    assert events[7]["delta"]["stop_reason"] == "tool_use"
    assert events[7]["usage"] == {"output_tokens": 14}
    [line] = trial.lines()
    assert line["usage"] == FAUX_USAGE and line["stream"] is True


def test_faux_responses_shape_streamed_and_not(h: Harness, tmp_path: Path) -> None:
    gw = h.gateway(faux_spec(write_script(tmp_path, [MIXED, MIXED])))
    trial = h.trial(gw, "t")
    client = trial.client()
    body = client.post(RESPONSES, json=faux_request(RESPONSES, False)).json()
    assert body["object"] == "response" and body["status"] == "completed"
    message, call = body["output"]
    assert message["type"] == "message"
    assert message["content"][0] == {
        "type": "output_text",
        "text": "Let me write.",
        "annotations": [],
    }
    assert call["type"] == "function_call" and call["call_id"] == "call_A"
    assert call["name"] == "write" and json.loads(call["arguments"]) == TOOL_ARGS
    assert body["usage"]["input_tokens"] == 3 and body["usage"]["output_tokens"] == 14

    streamed = client.post(RESPONSES, json=faux_request(RESPONSES, True))
    events = [json.loads(p) for p in sse_data(streamed.content)]
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(1, len(events) + 1))
    assert [o["type"] for o in events[-1]["response"]["output"]] == ["message", "function_call"]
    assert "response.output_text.delta" in [e["type"] for e in events]
    for line in trial.lines():
        assert line["api"] == "openai-responses" and line["usage"] == FAUX_USAGE


def test_faux_queues_are_per_trial_and_per_task_and_run_dry_with_the_contract_message(
    h: Harness, tmp_path: Path
) -> None:
    script = {
        "responses": [{"text": "one"}, {"text": "two"}],
        "tasks": {"special": [{"text": "special"}]},
    }
    gw = h.gateway(faux_spec(write_script(tmp_path, script)))
    a = h.trial(gw, "a", task="plain")
    b = h.trial(gw, "b", task="plain")
    s = h.trial(gw, "s", task="special")

    def texts(trial: Trial, n: int) -> list[Any]:
        client = trial.client()
        out = []
        for _ in range(n):
            resp = client.post(CHAT, json={"messages": []})
            body = resp.json()
            out.append(
                body["choices"][0]["message"]["content"]
                if resp.status_code == 200
                else (resp.status_code, body["error"]["message"])
            )
        return out

    def dry(trial_id: str, task: str) -> tuple[int, str]:
        # A client error CLIs do not retry, naming the trial (tests/e2e/
        # test_gateway_with_clis.py drives it with a real CLI).
        return (410, f"{NO_MORE_RESPONSES} for trial {trial_id} (task {task})")

    def cut(out: list[Any]) -> list[Any]:
        return [x if isinstance(x, str) else (x[0], x[1].split(":")[0]) for x in out]

    assert texts(a, 1) == ["one"]
    assert cut(texts(b, 3)) == ["one", "two", dry("b", "plain")]  # b's queue is its own
    assert cut(texts(a, 2)) == ["two", dry("a", "plain")]
    assert cut(texts(s, 2)) == ["special", dry("s", "special")]
    assert NO_MORE_RESPONSES == "No more faux responses queued"
    for trial in (a, b, s):
        last = trial.lines()[-1]
        assert_doc_line(last)
        assert last["outcome"] == "error" and last["status"] == 410
        assert last["reason"].startswith("No more faux responses queued for trial")
    # A new trial of the same task starts from the top again.
    assert texts(h.trial(gw, "a2", task="plain"), 1) == ["one"]


def test_faux_scripted_errors_come_back_with_their_status(h: Harness, tmp_path: Path) -> None:
    script = [
        {"error": {"status": 503, "message": "overloaded"}},
        {"error": {"status": 429, "message": "slow down"}},
        {"text": "fine"},
    ]
    gw = h.gateway(faux_spec(write_script(tmp_path, script)))
    trial = h.trial(gw, "t")
    client = trial.client()
    first = client.post(CHAT, json={"messages": []})
    assert first.status_code == 503 and first.json()["error"]["message"] == "overloaded"
    second = client.post(MESSAGES, json={"messages": [], "stream": True})
    assert second.status_code == 429
    assert second.json() == {
        "type": "error",
        "error": {"type": "faux_error", "message": "slow down"},
    }
    assert client.post(CHAT, json={"messages": []}).status_code == 200
    lines = trial.lines()
    assert [x["outcome"] for x in lines] == ["upstream_error", "upstream_error", "ok"]
    assert [x["status"] for x in lines] == [503, 429, 200]
    assert lines[0]["usage"] is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"responses": "nope"}, "{path}: responses must be a list of responses"),
        ({"responses": [1]}, "{path}: responses[0]: a response must be an object"),
        ({"responses": [{"txt": "x"}]}, "{path}: responses[0]: unknown key(s) txt"),
        ({"responses": [{"text": 3}]}, "{path}: responses[0].text must be a string"),
        (
            {"tasks": {"t": [{"text": "ok"}, {"tool_calls": [{"arguments": {}}]}]}},
            "{path}: tasks.t[1].tool_calls[0] needs a string name",
        ),
        (
            {"responses": [{"tool_calls": [{"name": "w", "arguments": "{}"}]}]},
            "{path}: responses[0].tool_calls[0].arguments must be an object",
        ),
        (
            {"responses": [{"tool_calls": [{"name": "w", "id": 7}]}]},
            "{path}: responses[0].tool_calls[0].id must be a string",
        ),
        ({"responses": [{"stop_reason": 1}]}, "{path}: responses[0].stop_reason must be a string"),
        (
            {"responses": [{"error": {"message": "x"}}]},
            "{path}: responses[0].error needs an integer status",
        ),
        (
            {"responses": [{"error": {"status": 200}}]},
            "{path}: responses[0].error.status must be an HTTP error status (400-599)",
        ),
        ({"tasks": []}, "faux script {path}: tasks must be an object of task name → list"),
        ({"tasks": {"t": {}}}, "{path}: tasks.t must be a list of responses"),
        ({"respones": []}, "faux script {path}: unknown key(s) respones"),
        ("text", "faux script {path}: expected an object or a list of responses"),
    ],
)
def test_invalid_faux_scripts_name_the_file_and_entry(
    tmp_path: Path, data: Any, message: str
) -> None:
    path = write_script(tmp_path, data)
    with pytest.raises(UsageError) as info:
        load_faux_script(path)
    assert str(info.value) == message.format(path=path)


def test_unreadable_faux_scripts(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(UsageError, match=re.escape(f"faux script {broken}: ")):
        load_faux_script(broken)
    missing = tmp_path / "missing.json"
    with pytest.raises(UsageError, match=re.escape(f"faux script {missing}: ")):
        load_faux_script(missing)


def test_valid_faux_script_defaults(tmp_path: Path) -> None:
    script = load_faux_script(
        write_script(tmp_path, {"responses": [MIXED, {"text": "x", "stop_reason": "length"}]})
    )
    first, second = script.responses
    assert first.stop == "tool_use" and second.stop == "length"
    assert first.tool_calls[0].arguments == TOOL_ARGS
    assert list(script.queue_for("unknown-task")) == list(script.responses)


# ---------------------------------------------------------------------------------------------
# In-process calls (python: agents)
# ---------------------------------------------------------------------------------------------


def test_in_process_calls_are_recorded_and_respect_budget_and_revocation(
    h: Harness, tmp_path: Path
) -> None:
    script = [{"text": "one"}, {"text": "two"}, {"text": "three"}]
    gw = h.gateway(faux_spec(write_script(tmp_path, script)), Budget(max_calls=2))
    trial = h.trial(gw, "t")
    status, body = gw.call(
        "t", CHAT, {"model": "x", "messages": [{"role": "user", "content": "hey"}]}
    )
    assert status == 200 and body["choices"][0]["message"]["content"] == "one"
    status, body = gw.call("t", MESSAGES, {"messages": [], "stream": True})  # never streamed
    assert status == 200 and body["content"] == [{"type": "text", "text": "two"}]
    status, body = gw.call("t", CHAT, {"messages": []})
    assert status == 429 and "2 of 2 calls used" in body["error"]["message"]
    status, body = gw.call("t", "/v1/files", {})
    assert status == 404

    first, second, third, fourth = trial.lines()
    for line in (first, second):
        assert_doc_line(line)
        assert line["via"] == "in-process" and line["outcome"] == "ok"
        assert line["stream"] is False and line["request"]["model"] == "demo"
    assert first["requested_model"] == "x" and first["usage"] == {
        "input_tokens": 1,
        "output_tokens": 1,
        "cached_tokens": None,
    }
    assert second["request"]["stream"] is False and second["api"] == "anthropic-messages"
    assert_doc_line(third)
    assert third["outcome"] == "budget" and third["status"] == 429
    assert_doc_line(fourth)
    assert fourth["outcome"] == "refused" and fourth["status"] == 404

    gw.revoke("t")
    status, body = gw.call("t", CHAT, {"messages": []})
    assert status == 401 and "revoked" in body["error"]["message"]
    with pytest.raises(KeyError):
        gw.call("no-such-trial", CHAT, {})


def test_in_process_wrong_api_is_a_404_and_upstream_untouched(h: Harness, oa: Upstream) -> None:
    gw = h.gateway(openai_spec(oa.base_url))
    trial = h.trial(gw, "t")
    status, body = gw.call("t", MESSAGES, {"messages": []})
    assert status == 404, body
    status, body = gw.call("t", CHAT, {"messages": []})
    assert status == 200 and body["usage"]["prompt_tokens"] == 10
    assert len(oa.requests()) == 1
    refused, ok = trial.lines()
    assert refused["outcome"] == "refused" and refused["status"] == 404
    assert ok["via"] == "in-process" and ok["cost_usd"] == pytest.approx(6e-5)


def test_in_process_unreachable_upstream(h: Harness) -> None:
    gw = h.gateway(openai_spec(f"http://127.0.0.1:{closed_port()}/v1"))
    trial = h.trial(gw, "t")
    status, body = gw.call("t", CHAT, {"messages": []})
    assert status == 502 and "unreachable" in body["error"]["message"]
    [line] = trial.lines()
    assert line["outcome"] == "error" and line["via"] == "in-process"


# ---------------------------------------------------------------------------------------------
# Access and environment
# ---------------------------------------------------------------------------------------------


def test_trial_access_environment_and_secret_env(h: Harness, oa: Upstream) -> None:
    gw = h.gateway(openai_spec(oa.base_url))
    trial = h.trial(gw, "t")
    access = trial.access
    assert access.token.startswith("hgw-") and access.token not in repr(access)
    assert access.agent_env() == {
        "OPENAI_BASE_URL": "http://127.0.0.1:{port}/v1",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:{port}",
        "GOOGLE_GEMINI_BASE_URL": "http://127.0.0.1:{port}",
        "HARNESS_MODEL": "openai/gpt-test",
        "HARNESS_PROVIDER": "openai",
        "HARNESS_MODEL_NAME": "gpt-upstream-v1",
        "HARNESS_MODEL_API": "openai-chat",
    }
    assert access.secret_env() == {
        "OPENAI_API_KEY": access.token,
        "ANTHROPIC_API_KEY": access.token,
        "GEMINI_API_KEY": access.token,
    }
    other = h.trial(gw, "u")
    assert other.token != access.token and other.access.socket_path != access.socket_path
    assert oct(access.socket_path.parent.stat().st_mode & 0o777) == "0o700"


def test_make_provider_takes_the_key_from_the_store_only(
    real_key: str, oa: Upstream, tmp_path: Path
) -> None:
    store = CredentialStore()
    store.set("OPENAI_API_KEY", real_key)
    provider = make_provider(openai_spec(oa.base_url), store)
    assert isinstance(provider, HTTPProvider)
    assert provider.url(CHAT) == oa.base_url + "/chat/completions"
    faux = make_provider(faux_spec(write_script(tmp_path, [])), store)
    assert isinstance(faux, FauxProvider)
    gw = Gateway(openai_spec(oa.base_url), provider, redact=store.redact)
    gw.start()
    try:
        trial = Trial(gw.open_trial("t", "x", tmp_path / "calls.jsonl"), tmp_path / "calls.jsonl")
        with trial.client() as client:
            assert client.post(CHAT, json={}).status_code == 200
    finally:
        gw.close()
    assert oa.requests()[0].headers["authorization"] == f"Bearer {real_key}"
    assert gw.socket_root is not None and not gw.socket_root.exists()


def test_socket_dirs_of_dead_gateways_are_removed(tmp_path: Path) -> None:
    import subprocess

    from harness.gateway.sockets import remove_stale_socket_dirs

    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f"run-{dead.pid}-abc"
    live = tmp_path / f"run-{os.getpid()}-def"
    other = tmp_path / "not-a-gateway"
    for path in (stale, live, other):
        (path / "t-1").mkdir(parents=True)
    assert remove_stale_socket_dirs(tmp_path) == [stale]
    assert not stale.exists() and live.exists() and other.exists()
