"""Host-side canaries for network attacks: listeners that record what reaches them.

The listeners bind every address of the host (``0.0.0.0``, and ``::`` when asked), as a
careless service would; an attack test asserts from outside what they received.
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct
import threading
from typing import Any


class Listener:
    """TCP+UDP listeners on the host (0.0.0.0, and TCP on :: with ``ipv6``), recording peers."""

    def __init__(self, *, ipv6: bool = False) -> None:
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.tcp.bind(("0.0.0.0", 0))
        self.tcp.listen(16)
        self.tcp.settimeout(0.2)
        self.port = self.tcp.getsockname()[1]
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("0.0.0.0", self.port))
        self.udp.settimeout(0.2)
        self.tcp6: socket.socket | None = None
        if ipv6 and socket.has_ipv6:
            self.tcp6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            self.tcp6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            self.tcp6.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.tcp6.bind(("::", self.port))
            self.tcp6.listen(16)
            self.tcp6.settimeout(0.2)
        self.received: list[tuple[str, str, bytes]] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._accept, args=(self.tcp,), daemon=True),
            threading.Thread(target=self._datagrams, daemon=True),
        ]
        if self.tcp6 is not None:
            self._threads.append(
                threading.Thread(target=self._accept, args=(self.tcp6,), daemon=True)
            )

    def __enter__(self) -> Listener:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        for sock in (self.tcp, self.udp, self.tcp6):
            if sock is not None:
                sock.close()

    def _accept(self, listener: socket.socket) -> None:
        kind = "tcp6" if listener.family == socket.AF_INET6 else "tcp"
        while not self._stop.is_set():
            try:
                conn, peer = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(2)
            try:
                data = conn.recv(4096)
            except OSError:
                data = b""
            conn.close()
            self.received.append((kind, peer[0], data))

    def _datagrams(self) -> None:
        while not self._stop.is_set():
            try:
                data, peer = self.udp.recvfrom(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            self.received.append(("udp", peer[0], data))


def interface_ipv4(name: str) -> str | None:
    """The IPv4 address of the host's interface ``name`` (None if it has none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:  # SIOCGIFADDR: the interface's IPv4 address
            packed = fcntl.ioctl(probe.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def bridge_gateway(client: Any) -> str:
    """The host's address on docker's default bridge, as a container on it sees the host.

    A freshly started engine may report no ``IPAM.Config[].Gateway``, so the bridge
    interface's own address is read first; the subnet's first host is the last resort.
    """
    attrs = client.networks.get("bridge").attrs
    iface = (attrs.get("Options") or {}).get("com.docker.network.bridge.name", "docker0")
    own = interface_ipv4(iface)
    if own is not None:
        return own
    configs = (attrs.get("IPAM") or {}).get("Config") or []
    for config in configs:
        if config.get("Gateway"):
            return str(config["Gateway"])
    for config in configs:
        if config.get("Subnet"):
            return str(next(ipaddress.ip_network(config["Subnet"]).hosts()))
    raise AssertionError(f"cannot find docker's bridge gateway: {attrs.get('IPAM')}")


def primary_addresses() -> dict[str, str]:
    """The host's own source addresses toward the outside (``ipv4``, ``ipv6`` when routed).

    A connected UDP socket sends nothing: the kernel only picks the route's source address.
    """
    found = {}
    for key, family, target in (
        ("ipv4", socket.AF_INET, "192.0.2.123"),
        ("ipv6", socket.AF_INET6, "2001:db8::123"),
    ):
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            try:
                probe.connect((target, 9))
            except OSError:
                continue
            address = str(probe.getsockname()[0])
        if not ipaddress.ip_address(address).is_loopback:
            found[key] = address
    return found
