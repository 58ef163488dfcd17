"""Host-side canaries for network attacks: listeners that record what reaches them.

The listeners bind every address of the host (``0.0.0.0``, and ``::`` when asked), as a
careless service would; an attack test asserts from outside what they received.
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any


class Listener:
    """TCP+UDP listeners on the host (0.0.0.0, and :: with ``ipv6``), recording peers."""

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
        self.udp6: socket.socket | None = None
        if ipv6 and socket.has_ipv6:
            self.tcp6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            self.tcp6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            self.tcp6.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.tcp6.bind(("::", self.port))
            self.tcp6.listen(16)
            self.tcp6.settimeout(0.2)
            self.udp6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
            self.udp6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            self.udp6.bind(("::", self.port))
            self.udp6.settimeout(0.2)
        self.received: list[tuple[str, str, bytes]] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._accept, args=(self.tcp,), daemon=True),
            threading.Thread(target=self._datagrams, args=(self.udp,), daemon=True),
        ]
        if self.tcp6 is not None and self.udp6 is not None:
            self._threads += [
                threading.Thread(target=self._accept, args=(self.tcp6,), daemon=True),
                threading.Thread(target=self._datagrams, args=(self.udp6,), daemon=True),
            ]

    def __enter__(self) -> Listener:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        for sock in (self.tcp, self.udp, self.tcp6, self.udp6):
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

    def _datagrams(self, listener: socket.socket) -> None:
        kind = "udp6" if listener.family == socket.AF_INET6 else "udp"
        while not self._stop.is_set():
            try:
                data, peer = listener.recvfrom(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            self.received.append((kind, peer[0], data))


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


#: Run in a trial's network namespace by the test (root, a raw socket): one IPv6/UDP
#: frame from the container's MAC to the host's bridge per ``address/port`` argument.
RAW6 = r"""
import socket, struct, sys
iface, src_mac, dst_mac, token, *targets = sys.argv[1:]
def mac(text):
    return bytes.fromhex(text.replace(":", ""))
def checksum(data):
    data += b"\0" * (len(data) % 2)
    total = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return (~total & 0xFFFF) or 0xFFFF
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((iface, 0))
src = socket.inet_pton(socket.AF_INET6, "fe80::a:b:c:d")
for target in targets:
    address, port = target.rsplit("/", 1)
    dst = socket.inet_pton(socket.AF_INET6, address)
    payload = ("%s %s" % (token, address)).encode()
    size = 8 + len(payload)
    pseudo = src + dst + struct.pack("!I3xB", size, 17)
    udp = struct.pack("!HHHH", 40000, int(port), size, 0) + payload
    udp = udp[:6] + struct.pack("!H", checksum(pseudo + udp)) + udp[8:]
    header = struct.pack("!IHBB", 6 << 28, size, 17, 64) + src + dst
    s.send(mac(dst_mac) + mac(src_mac) + b"\x86\xdd" + header + udp)
"""


def send_raw6(container: Any, network: str, bridge: str, token: str, targets: list[str]) -> None:
    """Send :data:`RAW6` frames from ``container``'s network namespace (entered by its pid).

    What an agent would need ``CAP_NET_RAW`` for (which it never has): IPv6 out of a
    container that has no IPv6 address, to each ``address/port`` of ``targets``.
    """
    container.reload()
    attrs = container.attrs
    pid, mac = attrs["State"]["Pid"], attrs["NetworkSettings"]["Networks"][network]["MacAddress"]
    bridge_mac = Path(f"/sys/class/net/{bridge}/address").read_text().strip()
    subprocess.run(
        ["nsenter", "-t", str(pid), "-n", sys.executable, "-c", RAW6, "eth0", mac, bridge_mac,
         token, *targets],
        check=True, capture_output=True, text=True, timeout=30,
    )  # fmt: skip


def link_local(interface: str) -> str | None:
    """The host's link-local IPv6 address on ``interface`` (None if it has none)."""
    try:
        lines = Path("/proc/net/if_inet6").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if fields[-1] == interface and fields[0].startswith("fe80"):
            return socket.inet_ntop(socket.AF_INET6, bytes.fromhex(fields[0]))
    return None
