"""The allowlist egress proxy: HTTP and CONNECT to listed destinations only.

A phase whose policy is ``allowlist`` reaches the outside only through this proxy (its
sandbox has no other route out; the backend sees to that). For each client connection,
one request:

- ``CONNECT host:port``: the port must be allowed, the host listed (a name, or an IP that is
  itself listed); the proxy resolves a name itself and connects only to an address that is
  not :func:`~sandbox.egress_proxy.rules.forbidden`; then the tunnel must open with a TLS
  ClientHello whose SNI is the CONNECT host (no SNI only for a listed IP): anything else
  (another protocol, another name) is refused, and the server is connected to only after
  the hello passed.
- a plain HTTP request (absolute-form ``GET http://host/...`` as a proxy gets it, or
  origin-form with a ``Host`` header as a transparent redirect delivers it): the URL's host
  and the one ``Host`` header must agree and be listed; the request goes upstream with
  ``Connection: close`` and its declared body only, so no second request, to another
  virtual host of the same address, rides on the checked one.

Every refusal is answered (403 with the reason, or the tunnel closed) and kept as a
``network_refused`` event (:mod:`sandbox.network_events`). Bounded: connections at once,
request-head bytes and lines, time to send the head, idle time on a tunnel, connect time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from sandbox.egress_proxy.resolve import Resolver
from sandbox.egress_proxy.rules import (
    Address,
    Allowlist,
    forbidden,
    host_addresses,
    normalize_name,
    parse_ip,
)
from sandbox.egress_proxy.tls import NotTls, read_client_hello
from sandbox.errors import SandboxError
from sandbox.network_events import NetworkEventLog, NetworkRefused

_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "upgrade"}
)
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class ProxyLimits:
    """How much one client may ask of the proxy.

    Attributes:
        connections: Client connections served at once (more are answered 503).
        header_bytes: Longest request head (request line and headers).
        header_lines: Most header lines.
        head_sec: Time a client has to send its request head (and a ClientHello).
        idle_sec: A tunnel or transfer with no byte either way for this long is closed.
        connect_sec: Time to connect upstream.
    """

    connections: int = 256
    header_bytes: int = 16 * 1024
    header_lines: int = 100
    head_sec: float = 10.0
    idle_sec: float = 60.0
    connect_sec: float = 10.0


class Refused(SandboxError):
    """A destination the policy does not allow (the message is the reason)."""

    def __init__(self, reason: str, *, host: str | None = None, ip: str | None = None) -> None:
        super().__init__(reason)
        self.reason, self.host, self.ip = reason, host, ip


class Unreachable(SandboxError):
    """An allowed destination that did not answer (the message says which and why)."""


class EgressProxy:
    """One sandbox's proxy: its phase's :class:`Allowlist`, its refusals.

    Args:
        allowlist: What the current phase may reach.
        phase: The role whose policy that is (``agent`` or ``verifier``), for events.
        events: Where refusals go (a fresh bounded log by default).
        resolver: Resolves names (the host's resolver by default).
        limits: The bounds.
        hosts: The host's own addresses, asked per connection (never destinations).
    """

    def __init__(
        self,
        allowlist: Allowlist,
        *,
        phase: str = "agent",
        events: NetworkEventLog | None = None,
        resolver: Resolver | None = None,
        limits: ProxyLimits | None = None,
        hosts: Callable[[], frozenset[Address]] = host_addresses,
    ) -> None:
        self.allowlist, self.phase = allowlist, phase
        self.events = events if events is not None else NetworkEventLog()
        self.resolver = resolver or Resolver()
        self.limits = limits or ProxyLimits()
        self._hosts = hosts
        self._busy = 0
        self._tasks: set[asyncio.Task[None]] = set()

    def switch(self, allowlist: Allowlist, phase: str) -> None:
        """Apply another phase's policy to connections made from now on.

        Call it between phases, once every process of the previous phase is dead: a
        tunnel already open stays the previous phase's until it closes.
        """
        self.allowlist, self.phase = allowlist, phase

    async def serve(self, host: str = "127.0.0.1", port: int = 0) -> asyncio.Server:
        """Listen on ``host:port`` (0: any free port); the caller closes the server."""
        return await asyncio.start_server(self._client, host, port, limit=self.limits.header_bytes)

    async def serve_unix(self, path: str) -> asyncio.Server:
        """Listen on the unix socket ``path`` (for a forwarder into a sandbox's namespace).

        The socket is made mode 0600: only the host's root (the supervisor relaying for
        the sandbox) connects, never a sandbox user directly.
        """
        server = await asyncio.start_unix_server(self._client, path, limit=self.limits.header_bytes)
        os.chmod(path, 0o600)
        return server

    # -- one client ------------------------------------------------------------------------

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            if self._busy >= self.limits.connections:
                await _answer(writer, 503, "the proxy serves no more connections at once")
                # Read what the client sent (bounded), so closing does not reset the answer.
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(reader.read(self.limits.header_bytes), 1.0)
                return
            self._busy += 1
            try:
                await self._serve_one(reader, writer)
            finally:
                self._busy -= 1
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            if task is not None:
                self._tasks.discard(task)

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.limits.head_sec)
        except (asyncio.LimitOverrunError, ValueError):
            await _answer(writer, 431, "the request head is too long")
            return
        try:
            method, target, headers = _parse_head(head, self.limits.header_lines)
        except ValueError as exc:
            await _answer(writer, 400, str(exc))
            return
        if method == "CONNECT":
            await self._connect(target, reader, writer)
        else:
            await self._http(method, target, headers, head, reader, writer)

    async def _connect(
        self, target: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        host, port = _split_host_port(target, None)
        if host is None or port is None:
            await _answer(writer, 400, "CONNECT takes host:port")
            return
        try:
            addresses = await self._destinations(host, port)
        except Refused as refused:
            self._refuse("connect", refused.host, refused.ip, port, refused.reason)
            await _answer(writer, 403, refused.reason)
            return
        # The server is connected to only once the ClientHello proved the tunnel is TLS to
        # the CONNECT host: a refused tunnel never reaches it.
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        try:
            hello, sni = await asyncio.wait_for(read_client_hello(reader), self.limits.head_sec)
        except NotTls as exc:
            self._refuse("tls", host, None, port, f"not TLS in the tunnel: {exc}")
            return
        mismatch = _sni_mismatch(host, sni)
        if mismatch is not None:
            self._refuse("tls", sni or host, None, port, mismatch)
            return
        try:
            up_reader, up_writer = await self._reach(addresses, host, port)
        except Unreachable:
            return
        try:
            up_writer.write(hello)
            await up_writer.drain()
            await self._splice(reader, writer, up_reader, up_writer)
        finally:
            up_writer.close()

    async def _http(
        self,
        method: str,
        target: str,
        headers: list[tuple[str, str]],
        head: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        hosts = [value for name, value in headers if name == "host"]
        if len(hosts) != 1:
            await _answer(writer, 400, "a request needs exactly one Host header")
            return
        if any(name == "transfer-encoding" for name, _ in headers):
            await _answer(writer, 501, "request bodies with Transfer-Encoding are not relayed")
            return
        header_host, header_port = _split_host_port(hosts[0], 80)
        path = target
        if target.startswith("/"):
            host, port = header_host, header_port
        else:
            url = urlsplit(target)
            if url.scheme != "http" or not url.hostname:
                await _answer(writer, 501, "only http:// URLs here; HTTPS goes through CONNECT")
                return
            host, port = _split_host_port(url.netloc.rpartition("@")[2], 80)
            path = (url.path or "/") + (f"?{url.query}" if url.query else "")
            if (_same_host(host, header_host), port) != (True, header_port):
                self._refuse("http", hosts[0], None, port, f"Host {hosts[0]!r} is not the URL's")
                await _answer(writer, 403, "the Host header names another host than the URL")
                return
        if host is None or port is None:
            await _answer(writer, 400, "no host to send the request to")
            return
        try:
            length = _content_length(headers)
        except ValueError as exc:
            await _answer(writer, 400, str(exc))
            return
        try:
            up_reader, up_writer = await self._open(host, port, "http")
        except Refused as refused:
            await _answer(writer, 403, refused.reason)
            return
        except Unreachable as exc:
            await _answer(writer, 502, str(exc))
            return
        try:
            version = head.split(b"\r\n", 1)[0].rsplit(b" ", 1)[-1].decode("ascii")
            lines = [f"{method} {path} {version}"]
            lines += [f"{n}: {v}" for n, v in _raw_headers(head) if n.lower() not in _HOP_BY_HOP]
            lines.append("Connection: close")
            up_writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            await self._copy_exactly(reader, up_writer, length)
            await self._pipe(up_reader, writer)
        finally:
            up_writer.close()

    # -- destinations ----------------------------------------------------------------------

    async def _open(
        self, host: str, port: int, protocol: str
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Connect to ``host:port`` if the policy allows it (a refusal is logged)."""
        try:
            addresses = await self._destinations(host, port)
        except Refused as refused:
            self._refuse(protocol, refused.host, refused.ip, port, refused.reason)
            raise
        return await self._reach(addresses, host, port)

    async def _reach(
        self, addresses: list[Address], host: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Connect to the first of the checked ``addresses`` that answers."""
        last: OSError | None = None
        for address in addresses:
            try:
                return await asyncio.wait_for(
                    asyncio.open_connection(str(address), port), self.limits.connect_sec
                )
            except (OSError, TimeoutError) as exc:
                last = exc if isinstance(exc, OSError) else OSError(str(exc))
        raise Unreachable(f"cannot connect to {host}:{port}: {last}")

    async def _destinations(self, host: str, port: int) -> list[Address]:
        """The addresses ``host:port`` may be reached at (checked), or Refused."""
        allow = self.allowlist
        if port not in allow.ports and not allow.public:
            raise Refused(f"port {port} is not allowed", host=host)
        hosts = self._hosts()
        literal = parse_ip(host)
        if literal is not None:
            if not allow.ip_listed(literal):
                raise Refused("the IP is not listed (a listed name is reached by name)", ip=host)
            why = forbidden(literal, hosts)
            if why is not None:
                raise Refused(f"the IP is {why}", ip=host)
            return [literal]
        name = normalize_name(host)
        if name is None:
            raise Refused("not a host name", host=host[:255])
        if not allow.name_allowed(name):
            raise Refused("the host is not listed", host=name)
        resolved = await self.resolver.resolve(name)
        if not resolved:
            raise Refused("the host does not resolve", host=name)
        allowed = [address for address in resolved if forbidden(address, hosts) is None]
        if not allowed:
            why = forbidden(resolved[0], hosts)
            raise Refused(
                f"the host resolves to {why} only (DNS rebinding is refused)",
                host=name,
                ip=str(resolved[0]),
            )
        return allowed

    def _refuse(
        self, protocol: str, host: str | None, ip: str | None, port: int | None, reason: str
    ) -> None:
        self.events.add(NetworkRefused(self.phase, protocol, host, ip, port, reason))

    # -- bytes -----------------------------------------------------------------------------

    async def _read(self, reader: asyncio.StreamReader, size: int = _CHUNK) -> bytes:
        return await asyncio.wait_for(reader.read(size), self.limits.idle_sec)

    async def _copy_exactly(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, length: int
    ) -> None:
        left = length
        while left > 0:
            data = await self._read(reader, min(left, _CHUNK))
            if not data:
                raise ConnectionError("the client closed before its request body ended")
            left -= len(data)
            writer.write(data)
            await writer.drain()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await self._read(reader):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()

    async def _splice(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> None:
        both = [
            asyncio.ensure_future(self._pipe(reader, up_writer)),
            asyncio.ensure_future(self._pipe(up_reader, writer)),
        ]
        try:
            # Both ways to their end (a half-close is passed on), or the first failure.
            await asyncio.wait(both, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for future in both:
                future.cancel()
            await asyncio.gather(*both, return_exceptions=True)


# -- parsing ---------------------------------------------------------------------------------


def _parse_head(head: bytes, max_lines: int) -> tuple[str, str, list[tuple[str, str]]]:
    """``(method, target, [(lower-case name, value)])`` of a request head."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise ValueError("not an HTTP/1.x request line")
    headers = _raw_headers(head)
    if len(headers) > max_lines:
        raise ValueError(f"more than {max_lines} header lines")
    return parts[0].upper(), parts[1], [(name.lower(), value) for name, value in headers]


def _raw_headers(head: bytes) -> list[tuple[str, str]]:
    found = []
    for line in head.decode("latin-1").split("\r\n")[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise ValueError(f"a malformed header line {line[:40]!r}")
        found.append((name, value.strip()))
    return found


def _split_host_port(text: str, default: int | None) -> tuple[str | None, int | None]:
    """``host`` and ``port`` of ``host[:port]`` / ``[v6][:port]`` (None where invalid)."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ("" if not rest else None)
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    elif ":" in text:
        return text, None  # a bare IPv6 literal is ambiguous with a port: brackets needed
    else:
        host, port_text = text, ""
    if port_text is None or not host:
        return None, None
    if port_text == "":
        return host, default
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        return host, None
    return host, int(port_text)


def _same_host(one: str | None, other: str | None) -> bool:
    if one is None or other is None:
        return False
    return one.lower().rstrip(".") == other.lower().rstrip(".")


def _sni_mismatch(host: str, sni: str | None) -> str | None:
    """Why a tunnel to ``host`` may not carry a hello naming ``sni`` (None: it may)."""
    if sni is None:
        if parse_ip(host) is not None:
            return None  # a listed IP: TLS to an address names no server
        return f"the ClientHello names no server; the tunnel is to {host}"
    if parse_ip(host) is not None or not _same_host(host, sni):
        return f"the ClientHello names {sni!r}, the CONNECT {host!r}"
    return None


def _content_length(headers: list[tuple[str, str]]) -> int:
    values = {value for name, value in headers if name == "content-length"}
    if not values:
        return 0
    if len(values) > 1 or not next(iter(values)).isdigit():
        raise ValueError("a malformed or repeated Content-Length")
    return int(next(iter(values)))


async def _answer(writer: asyncio.StreamWriter, status: int, reason: str) -> None:
    """A short HTTP answer from the proxy itself, then the connection ends."""
    body = f"harness egress proxy: {reason}\n".encode()
    titles = {400: "Bad Request", 403: "Forbidden", 431: "Request Header Fields Too Large"}
    titles |= {501: "Not Implemented", 502: "Bad Gateway", 503: "Service Unavailable"}
    writer.write(
        f"HTTP/1.1 {status} {titles.get(status, 'Error')}\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    with contextlib.suppress(ConnectionError):
        await writer.drain()


__all__ = ["EgressProxy", "ProxyLimits", "Refused", "Unreachable"]
