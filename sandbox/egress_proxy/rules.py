"""What the allowlist proxy lets through: the listed destinations, never the forbidden ranges.

An :class:`Allowlist` holds an ``allowlist`` policy's ``allowed_hosts`` (normalised by the
harness: lower-case names, ``*.`` wildcards, IPs, CIDRs). A NAME is allowed when it is
listed or under a listed wildcard (``*.example.com`` matches ``a.example.com`` and
``a.b.example.com``, not ``example.com``). An IP literal is allowed only when the IP itself
is listed or inside a listed CIDR: listing a name never lets a client reach an address by
typing it, since the client could type any address.

Whatever the list says, :func:`forbidden` addresses are never connected to: loopback, the
private, link-local, CGNAT, multicast and reserved ranges, the metadata address, IPv4
mapped and translated IPv6 forms of them, and every address of the host itself. This is
checked on the address the proxy connects to, after it resolved the name itself: a listed
name whose DNS answers 127.0.0.1 (DNS rebinding) is refused, and the connection goes to
the address that was checked, never to one resolved again.
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Never a destination, whatever a policy lists.
FORBIDDEN_NETWORKS: tuple[Network, ...] = tuple(
    ipaddress.ip_network(text)
    for text in (
        "0.0.0.0/8",  # "this network"
        "10.0.0.0/8",
        "100.64.0.0/10",  # CGNAT
        "127.0.0.0/8",
        "169.254.0.0/16",  # link-local, 169.254.169.254 (cloud metadata) among them
        "172.16.0.0/12",
        "192.0.0.0/24",  # IETF protocol assignments
        "192.168.0.0/16",
        "198.18.0.0/15",  # benchmarking
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, broadcast
        "::/128",
        "::1/128",
        "fc00::/7",  # unique local
        "fe80::/10",  # link-local
        "fec0::/10",  # site-local (deprecated, still routed by some)
        "ff00::/8",  # multicast
        "100::/64",  # discard
        "fd00:ec2::254/128",  # AWS's IPv6 metadata (inside fc00::/7; named for the reader)
    )
)


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped ``::ffff:a.b.c.d``, NAT64, 6to4, compat)."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    packed = address.packed
    if packed[:12] == bytes(12) and packed[12:] not in (bytes(4), b"\0\0\0\1"):
        return ipaddress.IPv4Address(packed[12:])  # IPv4-compatible ::a.b.c.d
    if address in ipaddress.ip_network("64:ff9b::/96"):  # NAT64's well-known prefix
        return ipaddress.IPv4Address(packed[12:])
    return None


def local_ipv4(fib_trie: str) -> set[Address]:
    """Every IPv4 address of the host in the kernel's ``/proc/net/fib_trie`` text.

    Each address the host owns is a ``/32 host LOCAL`` leaf of the local table, whatever
    interface holds it and however many it holds (an interface's second address too).
    """
    found: set[Address] = set()
    last: str | None = None
    for line in fib_trie.splitlines():
        text = line.strip()
        if text.startswith(("|--", "+--")):
            last = text.split()[1]
        elif text == "/32 host LOCAL" and last is not None:
            try:
                found.add(ipaddress.IPv4Address(last))
            except ValueError:
                continue
    return found


def _first_ipv4() -> set[Address]:
    """Each interface's first IPv4 address (``SIOCGIFADDR``): where ``fib_trie`` is unreadable."""
    found: set[Address] = set()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _index, name in socket.if_nameindex():
            try:
                packed = fcntl.ioctl(
                    probe.fileno(), 0x8915, struct.pack("256s", name[:15].encode())
                )
            except OSError:
                continue
            found.add(ipaddress.IPv4Address(packed[20:24]))
    return found


def host_addresses() -> frozenset[Address]:
    """Every address of this host's interfaces (its network namespace), IPv4 and IPv6.

    Read each time it is asked: an interface may come up while a run lasts (a new docker
    bridge, a trial's veth). IPv4 from the kernel's local routing table (every address of
    every interface, secondary ones included), and each interface's first address besides.
    """
    found = _first_ipv4()
    try:
        with open("/proc/net/fib_trie", encoding="ascii") as trie:
            found |= local_ipv4(trie.read())
    except OSError:
        pass  # each interface's first address only
    try:
        with open("/proc/net/if_inet6", encoding="ascii") as table:
            for line in table:
                found.add(ipaddress.IPv6Address(int(line.split()[0], 16)))
    except OSError:
        pass  # no IPv6 in this kernel
    return frozenset(found)


def forbidden(address: Address, host: Iterable[Address] = ()) -> str | None:
    """Why ``address`` is never a destination (None: it may be one)."""
    targets: list[Address] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            targets.append(embedded)
    hosts = frozenset(host)
    for target in targets:
        for network in FORBIDDEN_NETWORKS:
            if target.version == network.version and target in network:
                if target == ipaddress.IPv4Address("169.254.169.254"):
                    return "the metadata address"
                return f"a private or reserved range ({network})"
    if any(target in hosts for target in targets):
        return "an address of the host"
    return None


def parse_ip(text: str) -> Address | None:
    """``text`` as an IP literal (``[v6]`` accepted; a zone ``%eth0`` refused), else None."""
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if "%" in text:
        return None
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def normalize_name(text: str) -> str | None:
    """A host name as the proxy compares it (lower case, no trailing dot); None if invalid."""
    name = text.strip().lower().rstrip(".")
    if not name or len(name) > 253:
        return None
    for label in name.split("."):
        if not label or len(label) > 63 or label.startswith("-") or label.endswith("-"):
            return None
        if not all(ch.isalnum() or ch in "-_" for ch in label) or not label.isascii():
            return None
    return name


@dataclass(frozen=True)
class Allowlist:
    """One ``allowlist`` policy's destinations.

    Attributes:
        names: Host names listed exactly.
        suffixes: Listed wildcards, as the suffix they match (``.example.com``).
        networks: Listed IPs and CIDRs.
        ports: Destination ports allowed (HTTP and HTTPS by default).
        public: Every name and every IP (``public`` through the proxy); the forbidden
            ranges stay out all the same.
    """

    names: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()
    networks: tuple[Network, ...] = ()
    ports: frozenset[int] = field(default_factory=lambda: frozenset({80, 443}))
    public: bool = False

    @classmethod
    def parse(cls, entries: Iterable[str], ports: Iterable[int] = (80, 443)) -> Allowlist:
        """An allowlist from ``allowed_hosts`` entries.

        Raises:
            ValueError: An entry is not a name, a ``*.`` wildcard, an IP or a CIDR.
        """
        names: set[str] = set()
        suffixes: list[str] = []
        networks: list[Network] = []
        for entry in entries:
            text = entry.strip().lower()
            if "/" in text:
                networks.append(ipaddress.ip_network(text, strict=False))
                continue
            address = parse_ip(text)
            if address is not None:
                networks.append(ipaddress.ip_network(address))
                continue
            wildcard = text.startswith("*.")
            name = normalize_name(text[2:] if wildcard else text)
            if name is None:
                raise ValueError(f"{entry!r} is not a host name, '*.' wildcard, IP or CIDR")
            if wildcard:
                suffixes.append("." + name)
            else:
                names.add(name)
        return cls(frozenset(names), tuple(suffixes), tuple(networks), frozenset(ports))

    def name_allowed(self, name: str) -> bool:
        """Whether the host name ``name`` (normalised) is listed or under a wildcard."""
        if self.public:
            return True
        return name in self.names or any(name.endswith(suffix) for suffix in self.suffixes)

    def ip_listed(self, address: Address) -> bool:
        """Whether the IP literal ``address`` is listed (itself or in a listed CIDR)."""
        return self.public or any(
            address.version == network.version and address in network for network in self.networks
        )


__all__ = [
    "FORBIDDEN_NETWORKS",
    "Address",
    "Allowlist",
    "forbidden",
    "host_addresses",
    "local_ipv4",
    "normalize_name",
    "parse_ip",
]
