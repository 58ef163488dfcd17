"""The egress filter's pure parts: which runtime gets a network, what ``public`` refuses."""

from __future__ import annotations

import ipaddress

from sandbox.docker.egress import BLOCKED_V4, blocked_ranges
from sandbox.docker.runtime import network_runtime_of

NONE = {"runtimeArgs": ["--network=none", "--host-uds=open"]}
HOST = {"runtimeArgs": ["--network=host", "--host-uds=open"]}


def test_the_networked_runtime_is_the_runtime_itself_or_its_net_sibling() -> None:
    assert network_runtime_of(None, {"runc": {}}) == "runc"
    assert network_runtime_of(None, {}) == "runc"
    assert network_runtime_of("runsc", {"runsc": NONE, "runsc-net": HOST}) == "runsc-net"
    assert network_runtime_of("runsc", {"runsc": HOST}) == "runsc"
    assert network_runtime_of("runsc", {"runsc": NONE}) is None
    assert network_runtime_of("runsc", {"runsc": NONE, "runsc-net": NONE}) is None


def test_public_refuses_private_metadata_and_host_ranges_but_not_the_internet() -> None:
    ranges = blocked_ranges()
    assert ranges[0] == ("169.254.169.254/32", "metadata")  # named before link-local
    nets = [ipaddress.IPv4Network(cidr) for cidr, _ in ranges]

    def blocked(address: str) -> bool:
        return any(ipaddress.IPv4Address(address) in net for net in nets)

    refused = ("10.1.2.3", "172.17.0.1", "192.168.1.1", "100.64.0.1", "127.0.0.1")
    refused += ("169.254.169.254", "169.254.1.1", "0.0.0.0", "224.0.0.1", "240.0.0.1")
    for address in refused:
        assert blocked(address), address
    # The internet, the documentation ranges included (a mirror may resolve into one);
    # only the static list: this host's own on-link subnets are refused too.
    static = [ipaddress.IPv4Network(cidr) for cidr, _ in BLOCKED_V4]
    for address in ("1.1.1.1", "151.101.2.132", "203.0.113.80", "198.51.100.7"):
        assert not any(ipaddress.IPv4Address(address) in net for net in static), address
    assert len({cidr for cidr, _ in BLOCKED_V4}) == len(BLOCKED_V4)
