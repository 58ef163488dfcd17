"""The server name (SNI) of a TLS ClientHello, read before anything is forwarded.

Only as much of the TLS record layer is parsed as finding ``server_name`` needs: handshake
records (content type 22) holding a ClientHello (handshake type 1), possibly fragmented
over several records, at most :data:`MAX_HELLO` bytes. Anything else is not TLS, and the
proxy refuses it (a CONNECT tunnel carries TLS only: a tunnel could otherwise carry any
protocol to a listed host's port).
"""

from __future__ import annotations

import asyncio

from sandbox.errors import SandboxError

#: The most ClientHello bytes read before giving up (a large post-quantum hello is ~2 KiB).
MAX_HELLO = 64 * 1024


class NotTls(SandboxError):
    """The bytes are not a TLS ClientHello (or one this reader cannot parse)."""


async def read_client_hello(reader: asyncio.StreamReader) -> tuple[bytes, str | None]:
    """Read the client's first TLS records until the ClientHello is whole.

    Returns:
        The raw bytes read (to forward upstream unchanged) and the SNI host name, or None
        when the hello names no server.

    Raises:
        NotTls: Not a TLS handshake, or a malformed or oversized ClientHello.
        asyncio.IncompleteReadError: The client closed before the hello was whole.
    """
    raw = bytearray()
    handshake = bytearray()
    needed: int | None = None
    while needed is None or len(handshake) < needed:
        header = await reader.readexactly(5)
        if header[0] != 22 or header[1] != 3:
            raise NotTls("not a TLS handshake record")
        length = int.from_bytes(header[3:5], "big")
        if length == 0 or len(raw) + 5 + length > MAX_HELLO:
            raise NotTls("an empty or oversized TLS record")
        body = await reader.readexactly(length)
        raw += header + body
        handshake += body
        if needed is None and len(handshake) >= 4:
            if handshake[0] != 1:
                raise NotTls("the first handshake message is not a ClientHello")
            needed = 4 + int.from_bytes(handshake[1:4], "big")
            if needed > MAX_HELLO:
                raise NotTls("an oversized ClientHello")
    return bytes(raw), server_name(bytes(handshake[4:needed]))


def server_name(hello: bytes) -> str | None:
    """The ``host_name`` of a ClientHello body's ``server_name`` extension (None: absent).

    Raises:
        NotTls: The body is malformed, or names more than one host.
    """
    try:
        at = 2 + 32  # client_version, random
        at += 1 + hello[at]  # session_id
        at += 2 + int.from_bytes(hello[at : at + 2], "big")  # cipher_suites
        at += 1 + hello[at]  # compression_methods
        if at == len(hello):
            return None  # no extensions
        end = at + 2 + int.from_bytes(hello[at : at + 2], "big")
        if end > len(hello):
            raise NotTls("extensions run past the ClientHello")
        at += 2
        names: list[str] = []
        while at + 4 <= end:
            kind = int.from_bytes(hello[at : at + 2], "big")
            size = int.from_bytes(hello[at + 2 : at + 4], "big")
            data = hello[at + 4 : at + 4 + size]
            if len(data) != size:
                raise NotTls("an extension runs past the ClientHello")
            at += 4 + size
            if kind == 0:
                names.extend(_names(data))
        if len(names) > 1:
            raise NotTls("a ClientHello naming several servers")
        return names[0] if names else None
    except IndexError:
        raise NotTls("a truncated ClientHello") from None


def _names(data: bytes) -> list[str]:
    """The host names of a ``server_name`` extension's list."""
    found = []
    end = 2 + int.from_bytes(data[:2], "big")
    at = 2
    while at + 3 <= min(end, len(data)):
        kind, size = data[at], int.from_bytes(data[at + 1 : at + 3], "big")
        name = data[at + 3 : at + 3 + size]
        at += 3 + size
        if kind == 0:
            try:
                found.append(name.decode("ascii"))
            except UnicodeDecodeError:
                raise NotTls("a server name that is not ASCII") from None
    return found


__all__ = ["MAX_HELLO", "NotTls", "read_client_hello", "server_name"]
