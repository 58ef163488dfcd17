"""Name resolution the proxy does itself (a client's own answer is never trusted).

:class:`Resolver` asks the host's resolver (``getaddrinfo``), after a table of its own
(``overrides``, as ``/etc/hosts`` would: an operator pinning a mirror's address, or a test
naming a server in its network namespace). Both answers go through the same checks:
:func:`sandbox.egress_proxy.rules.forbidden` on every address before one is connected to.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Mapping, Sequence

from sandbox.egress_proxy.rules import Address, parse_ip

#: The longest a lookup may take before the destination counts as unresolvable.
RESOLVE_SEC = 10.0
#: The most addresses one name yields (a bound on what a query makes the proxy hold).
MAX_ADDRESSES = 16


class Resolver:
    """Resolve host names to addresses: ``overrides`` first, then the host's resolver."""

    def __init__(self, overrides: Mapping[str, Sequence[str]] | None = None) -> None:
        self._overrides: dict[str, list[Address]] = {}
        for name, texts in (overrides or {}).items():
            addresses = [parse_ip(text) for text in texts]
            if any(address is None for address in addresses):
                raise ValueError(f"override {name!r}: {list(texts)} are not all IP addresses")
            self._overrides[name.lower().rstrip(".")] = [a for a in addresses if a is not None]

    async def resolve(self, name: str) -> list[Address]:
        """The addresses of ``name`` (empty: none, or the lookup failed or took too long)."""
        if name in self._overrides:
            return list(self._overrides[name][:MAX_ADDRESSES])
        loop = asyncio.get_running_loop()
        try:
            infos = await asyncio.wait_for(
                loop.getaddrinfo(name, None, type=socket.SOCK_STREAM), RESOLVE_SEC
            )
        except (OSError, TimeoutError, UnicodeError):
            return []
        found: list[Address] = []
        for _family, _type, _proto, _name, sockaddr in infos:
            address = parse_ip(str(sockaddr[0]))
            if address is not None and address not in found:
                found.append(address)
        return found[:MAX_ADDRESSES]


__all__ = ["MAX_ADDRESSES", "RESOLVE_SEC", "Resolver"]
