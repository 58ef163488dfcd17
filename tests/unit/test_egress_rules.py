"""The egress filter's pure parts: which runtime gets a network, what ``public`` refuses."""

from __future__ import annotations

import ipaddress
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

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


FIB_TRIE = """Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 192.0.2.0
        /24 link UNICAST
Local:
  +-- 0.0.0.0/0 3 0 5
     +-- 127.0.0.0/8 2 0 2
        +-- 127.0.0.0/31 1 0 0
           |-- 127.0.0.0
              /8 host LOCAL
           |-- 127.0.0.1
              /32 host LOCAL
     +-- 192.0.2.0/24 2 0 2
        |-- 192.0.2.2
           /32 host LOCAL
        |-- 192.0.2.9
           /32 host LOCAL
        |-- 192.0.2.255
           /32 link BROADCAST
"""


def test_the_proxy_reads_every_ipv4_address_of_the_host_not_each_interfaces_first() -> None:
    """An interface's second address is the host's too: a rebinding target to refuse."""
    from sandbox.egress_proxy.rules import local_ipv4

    found = {str(address) for address in local_ipv4(FIB_TRIE)}
    assert found == {"127.0.0.1", "192.0.2.2", "192.0.2.9"}, found


@pytest.mark.root
def test_host_addresses_names_a_second_address_of_one_interface(tmp_path: Path) -> None:
    """Real: a namespace whose loopback holds two more addresses; both are the host's.

    Each interface's first address (all the ioctl reads: 127.0.0.1 here) would miss them,
    and a listed name resolving there would then reach the host through the proxy.
    """
    ns = f"hx-addr-{secrets.token_hex(3)}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        for argv in (
            ["addr", "add", "198.51.100.21/32", "dev", "lo"],
            ["addr", "add", "198.51.100.22/32", "dev", "lo"],
            ["link", "set", "lo", "up"],
        ):
            subprocess.run(["ip", "-n", ns, *argv], check=True)
        code = "from sandbox.egress_proxy.rules import host_addresses as h; print(*map(str, h()))"
        out = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, "-c", code],
            check=True, capture_output=True, text=True, cwd=Path(__file__).parents[2],
        ).stdout.split()  # fmt: skip
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
    assert {"198.51.100.21", "198.51.100.22"} <= set(out), out
