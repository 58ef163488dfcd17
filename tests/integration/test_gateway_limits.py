"""The gateway bounds what one trial makes the harness hold, and counts every stream.

Attacks on the gateway as a trial would make them (docs/security.md, "The model gateway"):
floods of connections, huge and slow bodies, streams that hide their usage, bytes that are
not UTF-8 or JSON. Everything is real: the gateway on its asyncio loop, clients on the
trial's unix socket (raw ``socket.AF_UNIX`` or ``httpx``), upstreams that are real HTTP
servers on 127.0.0.1. Effects are judged from outside the gateway's code: this process's
``VmRSS`` sampled from ``/proc/self/status`` by a thread, the ``model_calls.jsonl`` file,
what the upstream received and what the client got.
"""

from __future__ import annotations

import base64
import json
import secrets
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.loopback import QUIET_ALWAYS, LoopbackServer, end_chunks, write_chunk

from harness.gateway import Budget, Gateway, HTTPProvider, Limits, TrialAccess
from harness.gateway.limits import MIB
from harness.models.catalog import ModelSpec, Prices

CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"
KEY = "sk-limits-" + secrets.token_hex(8)


# ---------------------------------------------------------------------------------------------
# A loopback upstream: scripted answers, every request it received kept
# ---------------------------------------------------------------------------------------------


@dataclass
class Answer:
    """An upstream answer: raw ``body`` bytes, or SSE ``events`` sent one chunk each."""

    status: int = 200
    body: bytes = b""
    events: list[bytes] | None = None
    content_type: str = "application/json"


@dataclass
class Received:
    """One request as the upstream received it: the path, the raw body and its JSON."""

    path: str
    raw: bytes
    body: Any


class Upstream:
    """An OpenAI-compatible upstream on 127.0.0.1:0 answering with ``answer(received)``."""

    def __init__(self, answer: Callable[[Received], Answer]) -> None:
        self.answer = answer
        self.received: list[Received] = []
        # quiet: the gateway cutting a stream is what some tests do
        self.loopback = LoopbackServer(self.serve, quiet=QUIET_ALWAYS)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.loopback.port}/v1"

    def serve(self, h: BaseHTTPRequestHandler) -> None:
        raw = h.rfile.read(int(h.headers.get("content-length") or 0))
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        received = Received(h.path, raw, body)
        self.received.append(received)
        answer = self.answer(received)
        h.send_response(answer.status)
        if answer.events is None:
            h.send_header("content-type", answer.content_type)
            h.send_header("content-length", str(len(answer.body)))
            h.end_headers()
            h.wfile.write(answer.body)
            return
        h.send_header("content-type", "text/event-stream")
        h.send_header("transfer-encoding", "chunked")
        h.end_headers()
        for event in answer.events:
            write_chunk(h, event)
        end_chunks(h)

    def close(self) -> None:
        self.loopback.close()


def sse(payload: Any) -> bytes:
    return b"data: " + (payload if isinstance(payload, bytes) else json.dumps(payload).encode())


def event(payload: Any) -> bytes:
    return sse(payload) + b"\n\n"


def chunk(text: str, finish: str | None = None) -> bytes:
    return event(
        {
            "id": "c1",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}],
        }
    )


def chat_answer(text: str = "fine", usage: dict[str, int] | None = None) -> Answer:
    body: dict[str, Any] = {
        "id": "c0",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
    }
    if usage is not None:
        body["usage"] = usage
    return Answer(body=json.dumps(body).encode())


def chat_stream(texts: list[str], usage: dict[str, int] | None) -> Answer:
    """A chat stream; its usage chunk only when ``usage`` is given (include_usage honoured)."""
    events = [chunk(t) for t in texts] + [chunk("", "stop")]
    if usage is not None:
        events.append(event({"id": "c1", "object": "chat.completion.chunk", "choices": [],
                             "usage": usage}))  # fmt: skip
    return Answer(events=[*events, b"data: [DONE]\n\n"])


def honours_include_usage(received: Received) -> Answer:
    """Like OpenAI: a stream carries usage only when ``stream_options.include_usage``."""
    body = received.body if isinstance(received.body, dict) else {}
    usage = {"prompt_tokens": 600, "completion_tokens": 600, "total_tokens": 1200}
    if body.get("stream") is True:
        options = body.get("stream_options") or {}
        return chat_stream(["Hel", "lo"], usage if options.get("include_usage") else None)
    return chat_answer(usage={"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4})


# ---------------------------------------------------------------------------------------------
# Gateway plumbing
# ---------------------------------------------------------------------------------------------


@dataclass
class Trial:
    access: TrialAccess
    records: Path
    clients: list[httpx.Client] = field(default_factory=list)

    @property
    def socket(self) -> str:
        return str(self.access.socket_path)

    def client(self) -> httpx.Client:
        client = httpx.Client(
            transport=httpx.HTTPTransport(uds=self.socket),
            base_url="http://127.0.0.1",
            headers={"authorization": f"Bearer {self.access.token}"},
            timeout=30.0,
        )
        self.clients.append(client)
        return client

    def lines(self) -> list[dict[str, Any]]:
        if not self.records.exists():
            return []
        raw = self.records.read_bytes()
        text = raw.decode("utf-8")  # strict: the record is always valid UTF-8
        assert text == "" or text.endswith("\n"), "a torn last line"
        return [json.loads(line) for line in text.splitlines()]


class Harness:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.gateways: list[Gateway] = []
        self.trials: list[Trial] = []
        self.upstreams: list[Upstream] = []

    def upstream(self, answer: Callable[[Received], Answer] = honours_include_usage) -> Upstream:
        upstream = Upstream(answer)
        self.upstreams.append(upstream)
        return upstream

    def gateway(
        self, upstream: Upstream, *, limits: Limits | None = None, budget: Budget | None = None
    ) -> Gateway:
        spec = ModelSpec(
            provider="openai",
            name="gpt-limits",
            upstream="gpt-upstream",
            api="openai-chat",
            base_url=upstream.base_url,
            api_key_env="OPENAI_API_KEY",
            prices=Prices(input=2.0, output=8.0),
            source="test",
        )
        gw = Gateway(spec, HTTPProvider(spec, KEY), budget=budget, limits=limits)
        gw.start()
        self.gateways.append(gw)
        return gw

    def trial(self, gw: Gateway, trial_id: str) -> Trial:
        records = self.tmp_path / trial_id / "model_calls.jsonl"
        trial = Trial(gw.open_trial(trial_id, "demo", records), records)
        self.trials.append(trial)
        return trial

    def close(self) -> None:
        for trial in self.trials:
            for client in trial.clients:
                client.close()
        for gw in self.gateways:
            gw.close()
        for upstream in self.upstreams:
            upstream.close()


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path)
    yield harness
    harness.close()


# ---------------------------------------------------------------------------------------------
# Raw HTTP on the trial's socket, and this process's memory seen from /proc
# ---------------------------------------------------------------------------------------------


def connect(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(60)
    sock.connect(path)
    return sock


def head(token: str, *, length: int | None = None, chunked: bool = False) -> bytes:
    lines = [f"POST {CHAT} HTTP/1.1", "host: 127.0.0.1", f"authorization: Bearer {token}"]
    lines.append("content-type: application/json")
    if length is not None:
        lines.append(f"content-length: {length}")
    if chunked:
        lines.append("transfer-encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_answer(sock: socket.socket) -> tuple[int, bytes]:
    """The status and body of the one answer on ``sock`` (0 if it closed without one)."""
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            part = sock.recv(65536)
            if not part:
                return 0, b""
            data += part
        top, _, body = data.partition(b"\r\n\r\n")
        status = int(top.split(b" ", 2)[1])
        length = next(
            int(line.split(b":", 1)[1])
            for line in top.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(body) < length:
            part = sock.recv(65536)
            if not part:
                break
            body += part
        return status, body
    except (ConnectionError, OSError):
        return 0, b""


def send_quietly(sock: socket.socket, data: bytes) -> bool:
    """Send, False once the gateway has closed its side (it refused the request)."""
    try:
        sock.sendall(data)
        return True
    except (BrokenPipeError, ConnectionResetError):
        return False


def vm_rss() -> int:
    """This process's resident memory in bytes (the gateway runs in it)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


class RssPeak:
    """The highest ``VmRSS`` of this process while the block runs (sampled by a thread)."""

    def __init__(self) -> None:
        self.baseline = vm_rss()
        self.peak = self.baseline
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, vm_rss())
            self._stop.wait(0.002)

    def __enter__(self) -> RssPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, vm_rss())

    @property
    def growth_mb(self) -> float:
        return (self.peak - self.baseline) / MIB


def refusals(trial: Trial, status: int, phrase: str) -> list[dict[str, Any]]:
    return [
        line
        for line in trial.lines()
        if line["status"] == status and line["outcome"] == "refused" and phrase in line["reason"]
    ]


# ---------------------------------------------------------------------------------------------
# Connections, bodies, memory
# ---------------------------------------------------------------------------------------------


def test_connections_over_the_cap_get_503_recorded_and_the_other_trial_still_calls(
    h: Harness,
) -> None:
    up = h.upstream()
    gw = h.gateway(up, limits=Limits(max_connections=4))
    flooder, other = h.trial(gw, "flooder"), h.trial(gw, "other")
    held = [connect(flooder.socket) for _ in range(4)]  # open, silent: the cap is full
    try:
        # The connections are counted once the gateway accepted them: one call shows it.
        for sock in held[:1]:
            assert send_quietly(sock, head("wrong", length=2) + b"{}")
            assert read_answer(sock)[0] == 401
        over = [connect(flooder.socket) for _ in range(20)]
        answers = [read_answer(sock) for sock in over]
        for sock in over:
            sock.close()
        assert [status for status, _ in answers] == [503] * 20
        assert all(b"gateway.max_connections" in body for _, body in answers)
        # The other trial is not touched by the flood.
        assert other.client().post(CHAT, json={"messages": []}).status_code == 200
    finally:
        for sock in held:
            sock.close()
    lines = refusals(flooder, 503, "gateway.max_connections")
    assert len(lines) == 20 and all(line["method"] == "?" for line in lines)
    # Once they are closed, the trial's own calls go through again.
    client = flooder.client()
    for _ in range(50):  # the gateway notices the closes on its loop, not at once
        response = client.post(CHAT, json={"messages": []})
        if response.status_code == 200:
            break
    assert response.status_code == 200, response.text


def test_a_huge_content_length_is_refused_413_before_any_of_it_is_read(h: Harness) -> None:
    up = h.upstream()
    gw = h.gateway(up, limits=Limits(max_request_bytes=1 * MIB, max_memory_bytes=8 * MIB))
    trial = h.trial(gw, "t")
    sock = connect(trial.socket)
    with sock, RssPeak() as rss:
        # 64 GiB announced; the answer comes after the head alone.
        sock.sendall(head(trial.access.token, length=64 << 30))
        status, body = read_answer(sock)
    assert status == 413 and b"gateway.max_request_mb" in body
    assert rss.growth_mb < 64
    [line] = refusals(trial, 413, "68719476736 bytes")
    assert line["path"] == CHAT and line["request"] is None
    assert up.received == []


def test_a_slow_chunked_body_is_cut_at_the_cap_with_413(h: Harness) -> None:
    up = h.upstream()
    gw = h.gateway(up, limits=Limits(max_request_bytes=1 * MIB, max_memory_bytes=8 * MIB))
    trial = h.trial(gw, "t")
    piece = b"x" * 4096
    sent = 0
    with connect(trial.socket) as sock:
        sock.sendall(head(trial.access.token, chunked=True))
        # Small chunks one at a time, each sent when the last was taken, never ending.
        while send_quietly(sock, f"{len(piece):x}\r\n".encode() + piece + b"\r\n"):
            sent += len(piece)
            if sent > 4 * MIB:  # the gateway drops the rest, then closes
                break
        status, body = read_answer(sock)
    assert status == 413, body
    [line] = refusals(trial, 413, "over 1048576 bytes")
    assert line["path"] == CHAT
    assert up.received == []
    assert trial.client().post(CHAT, json={"messages": []}).status_code == 200


def test_bodies_over_the_trial_memory_cap_get_503_and_the_calls_after_work(h: Harness) -> None:
    up = h.upstream()
    limits = Limits(max_connections=16, max_request_bytes=4 * MIB, max_memory_bytes=8 * MIB)
    gw = h.gateway(up, limits=limits)
    trial = h.trial(gw, "t")
    socks = [connect(trial.socket) for _ in range(8)]
    size = 3 * MIB + (512 << 10)  # each under the request cap, 8 of them far over memory
    part = b" " * (64 << 10)
    statuses: list[int] = []
    try:
        for sock in socks:
            send_quietly(sock, head("wrong-token", length=size))
        for _ in range(size // len(part)):  # all bodies grow together
            for sock in socks:
                send_quietly(sock, part)
        statuses = [read_answer(sock)[0] for sock in socks]
    finally:
        for sock in socks:
            sock.close()
    assert statuses.count(503) >= 5, statuses  # 8 MiB hold two bodies of 3.5 MiB
    assert set(statuses) <= {401, 503}, statuses
    assert len(refusals(trial, 503, "gateway.max_memory_mb")) == statuses.count(503)
    assert trial.client().post(CHAT, json={"messages": []}).status_code == 200


def test_a_flood_of_big_bodies_keeps_the_harness_bounded_and_the_other_trial_served(
    h: Harness,
) -> None:
    """The red team's finding: 64 connections of 15 MiB each grew the harness by ~1 GB."""
    up = h.upstream()
    gw = h.gateway(up)  # the defaults: 32 connections, 16 MiB a body, 128 MiB a trial
    flooder, other = h.trial(gw, "flooder"), h.trial(gw, "other")
    size = 15 * MIB
    part = b"z" * MIB
    statuses: list[int] = []
    lock = threading.Lock()

    def flood() -> None:
        with connect(flooder.socket) as sock:
            if send_quietly(sock, head("hgw-not-the-token", length=size)):
                for _ in range(size // len(part)):
                    if not send_quietly(sock, part):
                        break
            status = read_answer(sock)[0]
        with lock:
            statuses.append(status)

    threads = [threading.Thread(target=flood) for _ in range(64)]
    with RssPeak() as rss:
        for thread in threads:
            thread.start()
        other_status = other.client().post(CHAT, json={"messages": []}).status_code
        for thread in threads:
            thread.join(120)
    assert not any(thread.is_alive() for thread in threads)
    assert other_status == 200
    # Unbounded, 64 x 15 MiB = 960 MiB were held at once; the trial's cap is 128 MiB.
    assert rss.growth_mb < 256, f"the harness grew {rss.growth_mb:.0f} MB"
    assert len(statuses) == 64 and set(statuses) <= {401, 503, 0}, statuses
    lines = flooder.lines()
    assert all(line["outcome"] == "refused" for line in lines)
    assert any("gateway.max_connections" in line["reason"] for line in lines)
    assert any("gateway.max_memory_mb" in line["reason"] for line in lines)
    assert other.lines()[0]["outcome"] == "ok"


def test_an_upstream_answer_over_the_memory_headroom_is_not_taken_in(h: Harness) -> None:
    huge = chat_answer("y" * (12 * MIB))
    up = h.upstream(lambda received: huge)
    gw = h.gateway(up, limits=Limits(max_request_bytes=1 * MIB, max_memory_bytes=8 * MIB))
    trial = h.trial(gw, "t")
    response = trial.client().post(CHAT, json={"messages": []})
    assert response.status_code == 502
    [line] = trial.lines()
    assert line["outcome"] == "error" and "gateway.max_memory_mb" in line["reason"]


def test_refusals_past_the_recorded_cap_are_counted_in_one_summary_line(h: Harness) -> None:
    up = h.upstream()
    gw = h.gateway(up, limits=Limits(max_recorded_refusals=5))
    trial = h.trial(gw, "t")
    client = httpx.Client(
        transport=httpx.HTTPTransport(uds=trial.socket), base_url="http://127.0.0.1"
    )
    with client:
        for _ in range(30):
            assert client.post(CHAT, json={}, headers={"x-api-key": "nope"}).status_code == 401
    assert len(trial.lines()) == 5
    usage = gw.revoke("t")
    assert usage is not None and usage.refused == 30
    *each, summary = trial.lines()
    assert len(each) == 5
    assert summary["outcome"] == "refused" and "25 more refusals" in summary["reason"]
    assert "25 x HTTP 401" in summary["reason"]


# ---------------------------------------------------------------------------------------------
# Streams: usage always counted, budgets trip
# ---------------------------------------------------------------------------------------------


def test_include_usage_false_is_overridden_usage_recorded_and_the_token_budget_trips(
    h: Harness,
) -> None:
    up = h.upstream(honours_include_usage)
    gw = h.gateway(up, budget=Budget(max_tokens=1000))
    trial = h.trial(gw, "t")
    client = trial.client()
    body = {"stream": True, "stream_options": {"include_usage": False}, "messages": []}
    with client.stream("POST", CHAT, json=body) as response:
        streamed = response.read()
    assert response.status_code == 200 and streamed.endswith(b"data: [DONE]\n\n")
    assert up.received[0].body["stream_options"] == {"include_usage": True}
    [line] = trial.lines()
    assert line["usage"] == {"input_tokens": 600, "output_tokens": 600, "cached_tokens": None}
    assert line["cost_usd"] == pytest.approx((600 * 2.0 + 600 * 8.0) / 1e6)
    # 1200 tokens of 1000: the next call, streamed or not, is refused.
    refused = client.post(CHAT, json=body)
    assert refused.status_code == 429
    assert refused.json()["error"]["type"] == "budget_exceeded"
    assert trial.lines()[-1]["outcome"] == "budget"
    assert len(up.received) == 1


def test_a_stream_that_never_reports_usage_is_estimated_and_cut_at_the_budget(
    h: Harness,
) -> None:
    words = ["word "] * 8000  # 40 000 characters: about 10 000 tokens
    up = h.upstream(lambda received: chat_stream(words, usage=None))  # ignores include_usage
    gw = h.gateway(up, budget=Budget(max_tokens=1000))
    trial = h.trial(gw, "t")
    client = trial.client()
    got = b""
    with (
        pytest.raises(httpx.RemoteProtocolError),
        client.stream("POST", CHAT, json={"stream": True, "messages": []}) as response,
    ):
        for data in response.iter_raw():
            got += data
    assert b"[DONE]" not in got  # cut before its end
    assert got.count(b"word ") < len(words)
    [line] = trial.lines()
    assert line["outcome"] == "budget" and line["status"] == 200
    assert "stream cut: per-trial model budget spent" in line["reason"]
    usage = line["usage"]
    assert usage["estimated"] is True
    assert 1000 <= usage["output_tokens"] < 10000
    assert line["cost_usd"] is not None
    assert client.post(CHAT, json={"messages": []}).status_code == 429


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("budget", [Budget(max_tokens=1000), Budget(max_cost_usd=0.008)])
def test_concurrent_calls_cannot_all_pass_the_budget_check_before_any_is_counted(
    h: Harness, stream: bool, budget: Budget
) -> None:
    """Attack: 8 calls at once, each 900 tokens ($0.0045), under a budget of 1000 tokens or $0.008.

    Each call's cost is known only when it is answered: before, all 8 passed the check
    while none was counted (7200 tokens spent, 8 answers); sequentially 2 are answered.
    """
    usage = {"prompt_tokens": 450, "completion_tokens": 450, "total_tokens": 900}
    arrived = threading.Condition()

    def answer(received: Received) -> Answer:
        with arrived:  # answer once all 8 are here (before the fix) or after a while
            arrived.notify_all()
            arrived.wait_for(lambda: len(up.received) >= 8, timeout=1)
        if stream:
            return chat_stream(["Hel", "lo"], usage)
        return chat_answer(usage=usage)

    up = h.upstream(answer)
    gw = h.gateway(up, budget=budget)
    trial = h.trial(gw, "t")
    codes: list[int] = []

    def call() -> None:
        client = trial.client()
        body = {"stream": stream, "messages": [{"role": "user", "content": "hi"}]}
        try:
            with client.stream("POST", CHAT, json=body) as response:
                response.read()
                codes.append(response.status_code)
        except httpx.HTTPError:
            codes.append(-1)  # a stream cut by the budget

    threads = [threading.Thread(target=call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(codes) == [200, 200, *[429] * 6], codes
    assert len(up.received) == 2  # the upstream was asked (and charged) twice only
    lines = trial.lines()
    assert sum(line.get("outcome") == "budget" for line in lines) == 6
    spent = sum((line.get("usage") or {}).get("input_tokens") or 0 for line in lines)
    assert spent == 900  # 2 answered calls' input: the overshoot is one call, as in sequence


def test_a_cost_budget_trips_on_a_stream_too(h: Harness) -> None:
    words = ["word "] * 8000
    up = h.upstream(lambda received: chat_stream(words, usage=None))
    gw = h.gateway(up, budget=Budget(max_cost_usd=0.005))  # 625 output tokens at $8/M
    trial = h.trial(gw, "t")
    client = trial.client()
    with (
        pytest.raises(httpx.RemoteProtocolError),
        client.stream("POST", CHAT, json={"stream": True, "messages": []}) as response,
    ):
        response.read()
    [line] = trial.lines()
    assert line["outcome"] == "budget" and "$" in line["reason"]
    assert line["cost_usd"] >= 0.005
    assert client.post(CHAT, json={"messages": []}).status_code == 429


# ---------------------------------------------------------------------------------------------
# Bytes that are not UTF-8 or JSON, lone surrogates
# ---------------------------------------------------------------------------------------------


def test_a_lone_surrogate_in_the_request_is_forwarded_answered_and_recorded(h: Harness) -> None:
    up = h.upstream()
    gw = h.gateway(up)
    trial = h.trial(gw, "t")
    raw = b'{"messages": [{"role": "user", "content": "a\\ud800b \\u00e9"}]}'
    response = trial.client().post(CHAT, content=raw)
    assert response.status_code == 200
    # The upstream got the escape as the agent wrote it (the body is still valid UTF-8).
    assert b"\\ud800" in up.received[0].raw
    assert up.received[0].body["messages"][0]["content"] == "a\ud800b \u00e9"
    [line] = trial.lines()
    assert line["outcome"] == "ok"
    assert line["request"]["messages"][0]["content"] == "a\ud800b \u00e9"  # lossless


def test_a_lone_surrogate_in_the_answer_is_relayed_and_recorded(h: Harness) -> None:
    answer = b'{"choices": [{"message": {"role": "assistant", "content": "x\\udfff"}}]}'
    up = h.upstream(lambda received: Answer(body=answer))
    gw = h.gateway(up)
    trial = h.trial(gw, "t")
    response = trial.client().post(CHAT, json={"messages": []})
    assert response.status_code == 200 and response.content == answer
    [line] = trial.lines()
    assert line["response"]["choices"][0]["message"]["content"] == "x\udfff"


def test_an_answer_that_is_not_utf8_is_relayed_as_it_came_and_recorded_in_base64(
    h: Harness,
) -> None:
    answer = b'{"text": "\xff\xfe not utf-8 \xc3"}'
    up = h.upstream(lambda received: Answer(body=answer))
    gw = h.gateway(up)
    trial = h.trial(gw, "t")
    response = trial.client().post(CHAT, json={"messages": []})
    assert response.status_code == 200 and response.content == answer  # not "replaced"
    [line] = trial.lines()
    assert base64.b64decode(line["response"]["base64"]) == answer


def test_a_stream_with_surrogates_and_bytes_not_utf8_is_relayed_and_recorded(
    h: Harness,
) -> None:
    events = [
        event(b'{"choices": [{"index": 0, "delta": {"content": "\\ud83d"}}]}'),
        event(b'{"choices": [{"index": 0, "delta": {"content": "\xff\xfe"}}]}'),
        b"data: [DONE]\n\n",
    ]
    up = h.upstream(lambda received: Answer(events=events))
    gw = h.gateway(up)
    trial = h.trial(gw, "t")
    with trial.client().stream("POST", CHAT, json={"stream": True, "messages": []}) as response:
        assert response.read() == b"".join(events)
    [line] = trial.lines()
    assert line["outcome"] == "ok"
    first, second = line["response"]
    assert first["choices"][0]["delta"]["content"] == "\ud83d"
    assert base64.b64decode(second["base64"]) == events[1][len(b"data: ") : -2]
    assert line["usage"]["estimated"] is True  # the upstream reported none


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b'{"messages": "\xff\xfe"}', "not utf-8"),
        (b'{"messages": [], "temperature": NaN}', "NaN"),
        (b"[" * 50000 + b"]" * 50000, "nested too deep"),
        (b'{"n": ' + b"7" * 10000 + b"}", "a number too long"),
    ],
)
def test_request_bytes_the_upstream_cannot_take_are_refused_400_and_recorded_losslessly(
    h: Harness, raw: bytes, why: str
) -> None:
    up = h.upstream()
    gw = h.gateway(up)
    trial = h.trial(gw, "t")
    client = trial.client()
    response = client.post(CHAT, content=raw)
    assert response.status_code == 400, why
    [line] = trial.lines()
    assert line["outcome"] == "refused" and line["status"] == 400
    recorded = line["request"]  # the bytes as they came: text, or base64 if not UTF-8
    if "base64" in recorded:
        assert base64.b64decode(recorded["base64"]) == raw
    else:
        assert recorded["text"] == raw.decode("utf-8")
    assert up.received == []
    assert client.post(CHAT, json={"messages": []}).status_code == 200  # the gateway goes on


def test_a_request_that_would_take_too_much_memory_parsed_is_refused_413(h: Harness) -> None:
    up = h.upstream()
    gw = h.gateway(up, limits=Limits(max_request_bytes=4 * MIB, max_memory_bytes=8 * MIB))
    trial = h.trial(gw, "t")
    raw = b'{"messages": [' + b",".join([b"{}"] * (1 << 20)) + b"]}"  # 3 MiB, 1M objects
    response = trial.client().post(CHAT, content=raw)
    assert response.status_code == 413
    [line] = trial.lines()
    assert "parsed" in line["reason"] and "gateway.max_memory_mb" in line["reason"]
    assert up.received == []
