"""The DNS responder of an allowlist sandbox: listed names only, A and AAAA only.

A query (UDP, or TCP with its two-byte length before each message; one question) for a
listed name (:meth:`Allowlist.name_allowed`) of type A or AAAA is answered with the
addresses the proxy's own resolver finds, minus the forbidden ones (so a rebinding answer
never reaches the client); a listed name's other types get an empty answer (NOERROR, no
data). Any other name gets NXDOMAIN, and no query leaves the host for it: a name under no
listed domain carries nothing out (no DNS tunnelling through TXT or through the names
themselves). Nothing is forwarded upstream as the client asked it. Each refused name is a
``network_refused`` event (``protocol = "dns"``).

TCP is bounded as UDP is: a query longer than :data:`MAX_QUERY` ends the connection, as
do :data:`STREAM_IDLE_SEC` without a whole query and :data:`MAX_STREAM_QUERIES` queries;
at most :data:`MAX_STREAMS` connections are served at once (more are closed unanswered).
"""

from __future__ import annotations

import asyncio
import ipaddress
import struct
from collections.abc import Callable
from typing import Any, cast

from typing_extensions import override

from sandbox.egress_proxy.resolve import Resolver
from sandbox.egress_proxy.rules import Address, Allowlist, forbidden, host_addresses, normalize_name
from sandbox.network_events import NetworkEventLog, NetworkRefused

_A, _AAAA, _IN = 1, 28, 1
_NOERROR, _FORMERR, _SERVFAIL, _NXDOMAIN, _REFUSED = 0, 1, 2, 3, 5
#: Longest query read (a question is at most 255 + 16 bytes; more is not a plain query).
MAX_QUERY = 512
#: Most answers in one response (keeps it within 512 bytes).
MAX_ANSWERS = 8
TTL = 30
#: Queries answered at once (UDP), and TCP connections served at once.
MAX_PENDING = MAX_STREAMS = 64
#: Queries one TCP connection may ask, and how long it may take to send each.
MAX_STREAM_QUERIES = 100
STREAM_IDLE_SEC = 10.0


class DnsResponder(asyncio.DatagramProtocol):
    """Answers a sandbox's DNS queries on one UDP socket.

    Args:
        allowlist: Returns the current phase's allowlist (asked per query).
        phase: Returns the current phase's role, for events.
        events: Where refused names go.
        resolver: Resolves listed names.
        hosts: The host's own addresses (never answered).
    """

    def __init__(
        self,
        allowlist: Callable[[], Allowlist],
        phase: Callable[[], str],
        events: NetworkEventLog,
        resolver: Resolver,
        hosts: Callable[[], frozenset[Address]] = host_addresses,
    ) -> None:
        self._allowlist, self._phase, self._events = allowlist, phase, events
        self._resolver, self._hosts = resolver, hosts
        self._transport: asyncio.DatagramTransport | None = None
        self._pending: set[asyncio.Task[None]] = set()
        self._streams: set[asyncio.Task[Any]] = set()

    @property
    def tasks(self) -> list[asyncio.Task[Any]]:
        """The queries and TCP connections being served (cancelled when the server stops)."""
        return [*self._pending, *self._streams]

    @override
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.DatagramTransport, transport)

    @override
    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        if len(self._pending) >= MAX_PENDING:
            return  # a flood: dropped, as a busy resolver would
        task = asyncio.ensure_future(self._answer(data, addr))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _answer(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        response = await self.respond(data)
        if response is not None and self._transport is not None:
            self._transport.sendto(response, addr)

    async def serve_stream(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Answer the queries of one TCP connection (``asyncio.start_server``'s callback)."""
        task = asyncio.current_task()
        if task is None or len(self._streams) >= MAX_STREAMS:
            writer.close()
            return
        self._streams.add(task)
        try:
            for _query in range(MAX_STREAM_QUERIES):
                head = await asyncio.wait_for(reader.readexactly(2), STREAM_IDLE_SEC)
                (size,) = struct.unpack("!H", head)
                if size > MAX_QUERY:
                    return  # no plain query is that long
                data = await asyncio.wait_for(reader.readexactly(size), STREAM_IDLE_SEC)
                response = await self.respond(data)
                if response is None:
                    return
                writer.write(struct.pack("!H", len(response)) + response)
                await asyncio.wait_for(writer.drain(), STREAM_IDLE_SEC)
        except (asyncio.IncompleteReadError, TimeoutError, OSError):
            return
        finally:
            self._streams.discard(task)
            writer.close()

    async def respond(self, data: bytes) -> bytes | None:
        """The response to one query datagram (None: not a query, nothing is sent)."""
        if len(data) < 12 or len(data) > MAX_QUERY:
            return None
        ident, flags, qdcount = struct.unpack("!HHH", data[:6])
        if flags & 0x8000:
            return None  # a response, not a query
        parsed = _question(data) if qdcount == 1 and (flags >> 11) & 0xF == 0 else None
        if parsed is None:
            return _header(ident, flags, _FORMERR if qdcount != 1 else _REFUSED) + b""
        labels, qtype, qclass, end = parsed
        question = data[12:end]
        name = normalize_name(".".join(labels)) if labels else None
        if name is None or qclass != _IN or not self._allowlist().name_allowed(name):
            self._events.add(
                NetworkRefused(
                    self._phase(),
                    "dns",
                    name or ".".join(labels)[:255],
                    None,
                    53,
                    "the name is not listed",
                )  # fmt: skip
            )
            return _header(ident, flags, _NXDOMAIN, questions=1) + question
        if qtype not in (_A, _AAAA):
            return _header(ident, flags, _NOERROR, questions=1) + question
        resolved = await self._resolver.resolve(name)
        hosts = self._hosts()
        version = 4 if qtype == _A else 6
        kept = [a for a in resolved if a.version == version and forbidden(a, hosts) is None]
        if resolved and not [a for a in resolved if forbidden(a, hosts) is None]:
            self._events.add(
                NetworkRefused(
                    self._phase(),
                    "dns",
                    name,
                    str(resolved[0]),
                    53,
                    "the name resolves to a forbidden address only",
                )  # fmt: skip
            )
            return _header(ident, flags, _NXDOMAIN, questions=1) + question
        answers = b"".join(_record(qtype, a) for a in kept[:MAX_ANSWERS])
        rcode = _NOERROR if resolved else _SERVFAIL
        return _header(ident, flags, rcode, questions=1, answers=len(kept[:MAX_ANSWERS])) + (
            question + answers
        )


def _question(data: bytes) -> tuple[list[str], int, int, int] | None:
    """The labels, type, class and end offset of the question (None: malformed)."""
    labels, at = [], 12
    while True:
        if at >= len(data):
            return None
        size = data[at]
        if size == 0:
            at += 1
            break
        if size > 63 or at + 1 + size > len(data):
            return None  # a compression pointer or a long label: no plain question
        try:
            labels.append(data[at + 1 : at + 1 + size].decode("ascii"))
        except UnicodeDecodeError:
            return None
        at += 1 + size
    if at + 4 > len(data):
        return None
    qtype, qclass = struct.unpack("!HH", data[at : at + 4])
    return labels, qtype, qclass, at + 4


def _header(ident: int, flags: int, rcode: int, *, questions: int = 0, answers: int = 0) -> bytes:
    # QR=1, opcode and RD as asked, RA=1, the rcode.
    out = 0x8000 | (flags & 0x7900) | 0x0080 | rcode
    return struct.pack("!HHHHHH", ident, out, questions, answers, 0, 0)


def _record(qtype: int, address: Address) -> bytes:
    packed = ipaddress.ip_address(address).packed
    return struct.pack("!HHHIH", 0xC00C, qtype, _IN, TTL, len(packed)) + packed


__all__ = ["MAX_QUERY", "MAX_STREAMS", "DnsResponder"]
