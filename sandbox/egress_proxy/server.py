"""The proxy and its DNS responder on a thread of their own, for a backend to start.

:class:`ProxyServer` runs an :class:`~sandbox.egress_proxy.proxy.EgressProxy` (HTTP on
TCP) and a :class:`~sandbox.egress_proxy.dns.DnsResponder` (UDP, and TCP on the same port
number) in one event loop on a daemon thread, both bound where the backend says (an
address its sandbox can reach and nothing else should: the host side of the sandbox's
veth, a unix-socket forwarder's loopback). :meth:`ProxyServer.switch` applies a phase's
policy; :meth:`ProxyServer.events` drains the refusals for ``Sandbox.network_events()``.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from sandbox.egress_proxy.dns import DnsResponder
from sandbox.egress_proxy.proxy import EgressProxy, ProxyLimits
from sandbox.egress_proxy.resolve import Resolver
from sandbox.egress_proxy.rules import Allowlist
from sandbox.network_events import NetworkEventLog
from sandbox.network_policy import NetworkPolicy

START_SEC = 10.0
#: Tries at a free port number both UDP and TCP have (the responder's ``dns_port=0``).
_DNS_BIND_TRIES = 8


#: The ports an allowlist reaches unless told otherwise: HTTP and HTTPS.
DEFAULT_PORTS = (80, 443)


def allowlist_of(policy: NetworkPolicy, ports: Iterable[int] = DEFAULT_PORTS) -> Allowlist:
    """What a phase's policy lets through the proxy (``no-network``: nothing)."""
    if policy.mode == "public":
        return Allowlist(public=True)
    if policy.mode == "allowlist":
        return Allowlist.parse(policy.allowed_hosts, ports)
    return Allowlist(ports=frozenset())


class ProxyServer:
    """An egress proxy (HTTP) and DNS responder (UDP) serving one sandbox.

    Args:
        policy: The first phase's policy.
        phase: Its role.
        host: The address both listen on (None: neither listens on TCP or UDP; they are
            served on ``unix_path`` and ``dns_unix_path`` alone).
        port: The proxy's TCP port (0: any free one).
        dns_port: The responder's port, UDP and TCP (0: any number free for both; None: no
            responder).
        overrides: Names resolved from this table before the host's resolver.
        limits: The proxy's bounds.
        ports: The destination ports an ``allowlist`` reaches.
        unix_path: Also serve the proxy on this unix socket (mode 0600), for a forwarder
            into the sandbox's namespace as the model gateway's is.
        dns_unix_path: Serve the responder on this unix socket too (mode 0600), as on TCP:
            each query and answer preceded by its length in two bytes.
    """

    def __init__(
        self,
        policy: NetworkPolicy,
        *,
        phase: str = "agent",
        host: str | None = "127.0.0.1",
        port: int = 0,
        dns_port: int | None = 0,
        overrides: Mapping[str, Sequence[str]] | None = None,
        limits: ProxyLimits | None = None,
        ports: Iterable[int] = DEFAULT_PORTS,
        unix_path: str | None = None,
        dns_unix_path: str | None = None,
    ) -> None:
        self.log = NetworkEventLog()
        self._ports = tuple(ports)
        resolver = Resolver(overrides)
        self.proxy = EgressProxy(
            allowlist_of(policy, self._ports),
            phase=phase,
            events=self.log,
            resolver=resolver,
            limits=limits,
        )
        self._host, self._port, self._dns_port = host, port, dns_port
        self._unix_path = unix_path
        self._dns_unix_path = dns_unix_path
        self._resolver = resolver
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="egress")
        self._closers: list[Any] = []
        self.address: tuple[str, int] | None = None
        #: Where the responder answers, on UDP and on TCP.
        self.dns_address: tuple[str, int] | None = None
        self.responder: DnsResponder | None = None

    def start(self) -> ProxyServer:
        """Bind and serve; returns self (``address`` and ``dns_address`` are then set).

        Raises:
            OSError: An address could not be bound.
        """
        self._thread.start()
        future: Future[None] = asyncio.run_coroutine_threadsafe(self._bind(), self._loop)
        try:
            future.result(timeout=START_SEC)
        except BaseException:
            self.close()
            raise
        return self

    async def _bind(self) -> None:
        if self._host is not None:
            server = await self.proxy.serve(self._host, self._port)
            self._closers.append(server)
            sockname = server.sockets[0].getsockname()
            self.address = (str(sockname[0]), int(sockname[1]))
        if self._unix_path is not None:
            self._closers.append(await self.proxy.serve_unix(self._unix_path))
        if self._dns_port is not None or self._dns_unix_path is not None:
            await self._bind_dns()

    async def _bind_dns(self) -> None:
        proxy = self.proxy
        responder = DnsResponder(
            lambda: proxy.allowlist, lambda: proxy.phase, self.log, self._resolver
        )
        self.responder = responder
        if self._dns_unix_path is not None:
            path = self._dns_unix_path
            self._closers.append(await asyncio.start_unix_server(responder.serve_stream, path))
            os.chmod(path, 0o600)
        if self._host is None or self._dns_port is None:
            return
        loop = asyncio.get_running_loop()
        for attempt in range(_DNS_BIND_TRIES):
            transport, _protocol = await loop.create_datagram_endpoint(
                lambda: responder, local_addr=(self._host, self._dns_port or 0)
            )
            dns = transport.get_extra_info("sockname")
            try:
                # The same number on TCP: one port for the redirect of both to name.
                stream = await asyncio.start_server(responder.serve_stream, self._host, int(dns[1]))
            except OSError:
                transport.close()
                if self._dns_port or attempt + 1 == _DNS_BIND_TRIES:
                    raise
                continue
            self._closers += [transport, stream]
            self.dns_address = (str(dns[0]), int(dns[1]))
            return

    def switch(self, policy: NetworkPolicy, phase: str) -> None:
        """Apply ``phase``'s policy (between phases: see :meth:`EgressProxy.switch`)."""
        allowlist = allowlist_of(policy, self._ports)
        self._loop.call_soon_threadsafe(self.proxy.switch, allowlist, phase)

    def events(self) -> list[dict[str, Any]]:
        """The refusals so far, as record events (cleared)."""
        return self.log.drain()

    def close(self) -> None:
        """Stop serving and end the thread (idempotent)."""
        if not self._loop.is_closed() and self._thread.is_alive():

            async def shut() -> None:
                for closer in self._closers:
                    closer.close()
                tasks = list(self.proxy._tasks)  # our own proxy's tasks
                if self.responder is not None:
                    tasks += self.responder.tasks
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

            with_timeout = asyncio.run_coroutine_threadsafe(shut(), self._loop)
            try:
                with_timeout.result(timeout=START_SEC)
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(timeout=START_SEC)
        if not self._thread.is_alive() and not self._loop.is_closed():
            self._loop.close()

    def __enter__(self) -> ProxyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["DEFAULT_PORTS", "ProxyServer", "allowlist_of"]
