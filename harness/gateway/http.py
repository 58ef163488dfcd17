"""The gateway's HTTP side: HTTP/1.1 on a trial's unix socket (h11), answers, stream relay.

Nothing here decides what a call may do: :func:`serve` reads requests and hands each to
the gateway's handler; :func:`send` answers; :func:`relay_stream` passes a provider's
stream on, line by line, redacted. What :func:`serve` does decide is how much of a request
it takes in: a body over the trial's size cap (its ``Content-Length`` checked before any of
it is read, a chunked one counted as it comes) or over the trial's memory cap is answered
413/503 there and its connection closed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import h11

from harness.errors import ProviderError
from harness.gateway.limits import Hold, Meter
from harness.gateway.providers import ProviderReply
from harness.gateway.recorder import MAX_RECORDED_BYTES, StreamCopy

#: A stream line longer than MAX_RECORDED_BYTES is relayed in pieces; this much of it is held
#: back each time, so a secret (far shorter) is never split across two pieces unredacted.
_HELD_BACK_BYTES = 16 << 10

Handler = Callable[
    [h11.Connection, asyncio.StreamWriter, h11.Request, bytes, Hold], Awaitable[None]
]
"""``handle(conn, writer, request, body, hold)``: answer one request (``hold`` holds the
memory the request takes; the handler may take more, it is all given back after)."""

Refusal = Callable[[str, str, int, str], None]
"""``refused(method, path, status, reason)``: record a request refused while it was read."""

_REASONS = {400: "Bad Request", 413: "Content Too Large", 503: "Service Unavailable"}


@dataclass(frozen=True)
class _Cut:
    """A request refused while its body was read: answered, then its connection closed."""

    status: int
    reason: str


def error_body(api: str | None, kind: str, message: str) -> bytes:
    """An error answer in the shape the agent's API client expects."""
    if api == "anthropic-messages":
        payload: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
    else:
        payload = {"error": {"type": kind, "message": message}}
    return json.dumps(payload).encode()


def headers_of(request: h11.Request) -> dict[str, str]:
    """A request's headers, names lower-cased."""
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in request.headers}


async def _next_event(conn: h11.Connection, reader: asyncio.StreamReader) -> Any:
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(65536))
            continue
        if event is h11.PAUSED:
            return None
        return event


def _declared_length(request: h11.Request) -> int | None:
    """The request's ``Content-Length`` (h11 has checked it is one decimal number)."""
    for name, value in request.headers:
        if name.lower() == b"content-length":
            return int(value)
    return None


async def _read_body(
    conn: h11.Connection, reader: asyncio.StreamReader, hold: Hold, max_bytes: int
) -> bytes | _Cut | None:
    """The request's body; a :class:`_Cut` once over a cap; None if the client went away.

    Each chunk is counted before it is kept: a chunked body is cut at ``max_bytes``, and
    every byte kept is held against the trial's memory cap.
    """
    parts: list[bytes] = []
    size = 0
    while True:
        part = await _next_event(conn, reader)
        if isinstance(part, h11.Data):
            size += len(part.data)
            if size > max_bytes:
                return _Cut(413, f"request body over {max_bytes} bytes (gateway.max_request_mb)")
            if not hold.take(len(part.data)):
                return _Cut(503, hold.meter.memory_reason("request body"))
            parts.append(part.data)
        elif isinstance(part, h11.EndOfMessage):
            if len(parts) < 2:
                return parts[0] if parts else b""
            if not hold.take(size):  # the joined copy, while the parts still live
                return _Cut(503, hold.meter.memory_reason("request body"))
            body = b"".join(parts)
            parts.clear()
            hold.give_back(size)
            return body
        else:
            return None


async def _discard(reader: asyncio.StreamReader, limit: int) -> None:
    """Read and drop what the client still sends (up to ``limit`` bytes), then let it go.

    A client sends its whole body before it reads the answer; closing on a body still
    coming would reset the connection before the client has read why. Nothing is kept.
    """
    dropped = 0
    while dropped < limit:
        data = await reader.read(65536)
        if not data:
            return
        dropped += len(data)


def _path_of(request: h11.Request) -> str:
    return request.target.decode("latin-1").split("?", 1)[0]


async def serve(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    handle: Handler,
    refused: Refusal,
    meter: Meter,
) -> None:
    """Serve one connection: requests in turn (keep-alive), each answered by ``handle``.

    A request over the trial's size or memory cap, or a malformed one, is reported to
    ``refused``, answered (413, 503 or 400) and its connection closed.
    """
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=64 << 10)
    max_bytes = meter.limits.max_request_bytes
    hold = Hold(meter)
    try:
        while True:
            event = await _next_event(conn, reader)
            if not isinstance(event, h11.Request):
                break
            method = event.method.decode("ascii", "replace")
            declared = _declared_length(event)
            read: bytes | _Cut | None
            if declared is not None and declared > max_bytes:
                # Refused before a byte of it is read.
                read = _Cut(
                    413,
                    f"request body of {declared} bytes over {max_bytes} bytes "
                    "(gateway.max_request_mb)",
                )
            else:
                read = await _read_body(conn, reader, hold, max_bytes)
            if read is None:
                return
            if isinstance(read, _Cut):
                hold.close()
                refused(method, _path_of(event), read.status, read.reason)
                body = error_body(None, "gateway_refused", read.reason)
                head = event.method == b"HEAD"
                await send(
                    conn, writer, read.status, "application/json", body, close=True, head=head
                )
                await _discard(reader, max_bytes)
                break
            try:
                await handle(conn, writer, event, read, hold)
            finally:
                del read
                hold.close()
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                break
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:
                break
    except asyncio.CancelledError:
        pass
    except (h11.RemoteProtocolError, ConnectionError, asyncio.IncompleteReadError) as exc:
        if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            refused("?", "?", 400, f"malformed HTTP: {exc}")
            try:
                body = error_body(None, "bad_request", "malformed HTTP request")
                await send(conn, writer, 400, "application/json", body)
            except Exception:
                pass
    finally:
        hold.close()
        writer.close()


async def refuse_connection(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    status: int,
    reason: str,
    drain_bytes: int,
) -> None:
    """Answer a connection ``status`` before reading its request, and close it.

    What the client sends meanwhile is read and dropped (up to ``drain_bytes``), so that
    it can send its request whole and then read the answer; ``drain_bytes`` 0 closes at
    once.
    """
    body = error_body(None, "gateway_refused", reason)
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Refused')}\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n"
        "x-harness-gateway: 1\r\n\r\n"
    )
    try:
        writer.write(head.encode() + body)
        if drain_bytes:
            await writer.drain()
            await _discard(reader, drain_bytes)
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()  # flushes what was written first


async def send(
    conn: h11.Connection,
    writer: asyncio.StreamWriter,
    status: int,
    content_type: str,
    body: bytes,
    *,
    close: bool = False,
    head: bool = False,
    extra: tuple[tuple[str, str], ...] = (),
) -> None:
    """Answer a request with a whole body (``close``: and say the connection ends).

    ``head``: the request was ``HEAD``, answered with the headers a ``GET`` gets (its
    ``Content-Length`` too) and no body, per HTTP; a 204 has neither. ``extra``: more
    headers (``allow``, ``x-should-retry``).
    """
    headers = [("content-type", content_type)] if status != 204 else []
    if status != 204:
        headers.append(("content-length", str(len(body))))
    headers.append(("x-harness-gateway", "1"))
    headers.extend(extra)
    if close:
        headers.append(("connection", "close"))
    writer.write(conn.send(h11.Response(status_code=status, headers=headers)) or b"")
    if body and not head and status != 204:
        writer.write(conn.send(h11.Data(data=body)) or b"")
    writer.write(conn.send(h11.EndOfMessage()) or b"")
    await writer.drain()


async def relay_stream(
    conn: h11.Connection,
    writer: asyncio.StreamWriter,
    reply: ProviderReply,
    redact: Callable[[bytes], bytes],
    copy: StreamCopy,
    over_budget: Callable[[], str | None] = lambda: None,
) -> None:
    """Relay a provider's stream as it comes, whole lines at a time, each redacted.

    A secret never spans a line, so each piece is redacted whole; a huge line goes in
    pieces with a tail held back. What was relayed is fed to ``copy``; a provider failure,
    or the trial's access being revoked (cancelled), is noted in ``copy.failure`` and the
    response is left unfinished, so the agent sees the stream break off as it did upstream.
    After each piece ``over_budget`` is asked; a reason from it cuts the stream the same
    way (``copy.outcome`` ``budget``).
    """
    assert reply.chunks is not None
    headers = [
        ("content-type", reply.content_type),
        ("cache-control", "no-cache"),
        ("x-harness-gateway", "1"),
        *reply.headers,
    ]

    async def forward(data: bytes) -> None:
        data = redact(data)
        copy.feed(data)
        writer.write(conn.send(h11.Data(data=data)) or b"")
        await writer.drain()

    writer.write(conn.send(h11.Response(status_code=reply.status, headers=headers)) or b"")
    pending = b""
    try:
        async for chunk in reply.chunks:
            pending += chunk
            cut = pending.rfind(b"\n") + 1
            if cut == 0 and len(pending) >= MAX_RECORDED_BYTES:
                # Redact all that has come, hold back a tail (a secret starting in what
                # is sent ends before the tail).
                pending = redact(pending)
                cut = len(pending) - _HELD_BACK_BYTES
            if cut:
                piece, pending = pending[:cut], pending[cut:]
                await forward(piece)
                spent = over_budget()
                if spent is not None:
                    copy.failure = f"stream cut: per-trial model budget spent: {spent}"
                    copy.outcome = "budget"
                    return
    except ProviderError as exc:
        copy.failure = redact(str(exc).encode()).decode("utf-8", "replace")
    except asyncio.CancelledError:
        copy.failure = "stream cut: the trial's model access was revoked"
        raise
    if pending:
        await forward(pending)


async def end_stream(conn: h11.Connection, writer: asyncio.StreamWriter) -> None:
    """Finish a relayed stream that ended well."""
    writer.write(conn.send(h11.EndOfMessage()) or b"")
    await writer.drain()


__all__ = [
    "Handler",
    "Refusal",
    "end_stream",
    "error_body",
    "headers_of",
    "refuse_connection",
    "relay_stream",
    "send",
    "serve",
]
