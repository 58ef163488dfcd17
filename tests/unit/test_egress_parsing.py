"""The egress proxy's parsers and rules against hostile bytes, and its bounded event log.

No network: the ClientHello reader, the DNS responder's ``respond`` and the address rules
are called directly with crafted and random input (a hostile sandbox controls every byte
of them). The proxy's behaviour on the wire is tests/security/test_egress_proxy.py.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ipaddress
import random
import ssl
import struct
from typing import Any

import pytest

from sandbox.egress_proxy.dns import DnsResponder
from sandbox.egress_proxy.resolve import Resolver
from sandbox.egress_proxy.rules import Allowlist, forbidden
from sandbox.egress_proxy.tls import NotTls, read_client_hello, server_name
from sandbox.network_events import NetworkEventLog, NetworkRefused


def _run(coro: Any) -> Any:
    """``asyncio.run`` on a thread of its own: an earlier test of the session may leave an
    event loop running in the main thread (asyncio.run refuses to nest in it)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def real_hello(sni: str | None) -> bytes:
    """The first flight of Python's own TLS client naming ``sni``."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=sni)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def read(data: bytes) -> tuple[bytes, str | None]:
    async def go() -> tuple[bytes, str | None]:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return await read_client_hello(reader)

    return _run(go())


def test_the_sni_of_a_real_hello_is_read_and_the_bytes_kept_whole() -> None:
    hello = real_hello("pypi.org")
    raw, sni = read(hello)
    assert (raw, sni) == (hello, "pypi.org")
    assert read(real_hello(None))[1] is None
    # The same hello split over two records (TLS allows fragmenting a handshake).
    body = hello[5:]
    split = b"".join(
        b"\x16\x03\x01" + struct.pack("!H", len(part)) + part for part in (body[:40], body[40:])
    )
    assert read(split)[1] == "pypi.org"


@pytest.mark.parametrize(
    "data",
    [
        b"GET / HTTP/1.1\r\n\r\n",
        b"\x17\x03\x03\x00\x05hello",  # application data, not a handshake
        b"\x16\x03\x01\x00\x00",  # an empty record
        b"\x16\x03\x01\xff\xff" + b"\x01" * 65535,  # oversized
        b"\x16\x03\x01\x00\x04\x02\x00\x00\x00",  # a ServerHello
    ],
)
def test_what_is_not_a_client_hello_is_refused(data: bytes) -> None:
    with pytest.raises((NotTls, asyncio.IncompleteReadError)):
        read(data)


def test_random_and_mutated_hellos_raise_nothing_but_not_tls() -> None:
    rng = random.Random(24)
    body = real_hello("pypi.org")[9:]
    for _ in range(3000):
        mutated = bytearray(body)
        for _ in range(rng.randint(1, 6)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        cut = bytes(mutated[: rng.randint(0, len(mutated))])
        for sample in (cut, rng.randbytes(rng.randint(0, 300))):
            try:
                name = server_name(sample)
            except NotTls:
                continue
            assert name is None or isinstance(name, str)


def responder(listed: list[str], answers: dict[str, list[str]]) -> DnsResponder:
    log = NetworkEventLog()
    allow = Allowlist.parse(listed)
    return DnsResponder(lambda: allow, lambda: "agent", log, Resolver(answers), frozenset)


def query(name: str, qtype: int, ident: int = 7) -> bytes:
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    return struct.pack("!HHHHHH", ident, 0x0100, 1, 0, 0, 0) + labels + struct.pack("!HH", qtype, 1)


def test_the_responder_answers_listed_names_only_and_survives_garbage() -> None:
    dns = responder(["pypi.org", "*.example.com"], {"pypi.org": ["151.101.0.223", "10.0.0.1"]})

    async def go() -> None:
        answer = await dns.respond(query("pypi.org", 1))
        assert answer is not None and answer[3] & 0xF == 0
        assert struct.unpack("!H", answer[6:8])[0] == 1  # the private address is left out
        assert answer.endswith(ipaddress.IPv4Address("151.101.0.223").packed)
        nx = await dns.respond(query("evil.test", 1))
        assert nx is not None and nx[3] & 0xF == 3
        assert (await dns.respond(query("example.com", 1)) or b"")[3] & 0xF == 3  # apex
        rng = random.Random(53)
        for _ in range(2000):
            data = bytearray(query("a.example.com", rng.choice([1, 16, 28, 255])))
            for _ in range(rng.randint(0, 4)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            reply = await dns.respond(bytes(data[: rng.randint(0, len(data))]))
            assert reply is None or (len(reply) >= 12 and reply[2] & 0x80)

    _run(go())


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("127.0.0.1", "127.0.0.0/8"),
        ("169.254.169.254", "the metadata address"),
        ("100.64.0.1", "100.64.0.0/10"),
        ("172.17.0.1", "172.16.0.0/12"),
        ("::1", "::1/128"),
        ("::ffff:10.0.0.1", "10.0.0.0/8"),  # IPv4-mapped
        ("64:ff9b::a9fe:a9fe", "the metadata address"),  # NAT64 of 169.254.169.254
        ("2002:7f00:1::", "127.0.0.0/8"),  # 6to4 of 127.0.0.1
        ("fe80::1", "fe80::/10"),
        ("fd00:ec2::254", "fc00::/7"),
    ],
)
def test_forbidden_ranges_in_every_spelling(address: str, why: str) -> None:
    reason = forbidden(ipaddress.ip_address(address))
    assert reason is not None and why in reason
    assert forbidden(ipaddress.ip_address("151.101.0.223")) is None
    host = ipaddress.ip_address("203.0.113.7")
    assert forbidden(host, {host}) == "an address of the host"


def test_the_event_log_is_bounded_and_counts_the_rest() -> None:
    log = NetworkEventLog(limit=3)
    for port in range(10):
        log.add(NetworkRefused("agent", "tcp", "h" * 400, "1.2.3.4", port, "not listed"))
    events = log.drain()
    assert len(events) == 4 and events[-1] == {
        "type": "network_refused",
        "dropped": 7,
        "reason": "over the cap",
    }
    assert len(events[0]["host"]) == 255 and events[0]["port"] == 0
    assert log.drain() == []


def nflog_message(prefix: bytes, payload: bytes) -> bytes:
    """One ``nfnetlink_log`` packet message as the kernel frames it."""

    def attr(kind: int, value: bytes) -> bytes:
        return struct.pack("=HH", 4 + len(value), kind) + value + b"\0" * (-len(value) % 4)

    body = struct.pack("!BBH", 2, 0, 18432) + attr(1, b"\x08\x00\x01\x00")
    body += attr(10, prefix + b"\0") + attr(9, payload)
    return struct.pack("=IHHII", 16 + len(body), 4 << 8, 0, 0, 0) + body


def ipv4(dst: str, proto: int, port: int, *, fragment: int = 0, options: int = 0) -> bytes:
    header = struct.pack(
        "!BBHHHBBH4s4s",
        0x45 + options, 0, 40, 1, fragment, 64, proto, 0,
        ipaddress.IPv4Address("172.30.0.2").packed, ipaddress.IPv4Address(dst).packed,
    )  # fmt: skip
    return header + b"\0" * (4 * options) + struct.pack("!HH", 40000, port) + b"\0" * 16


def ipv6(dst: str, proto: int, port: int, *, extension: bool = False) -> bytes:
    first = 0 if extension else proto  # a hop-by-hop header before the transport
    header = struct.pack("!IHBB16s16s", 6 << 28, 24, first, 64, bytes(16),
                         ipaddress.IPv6Address(dst).packed)  # fmt: skip
    hop = bytes([proto, 0]) + bytes(6) if extension else b""
    return header + hop + struct.pack("!HH", 40000, port) + b"\0" * 16


def test_the_log_reads_each_packets_exact_destination() -> None:
    from sandbox.docker.nflog import LoggedPacket, destination, parse

    prefix = b"HXE-0123456789ab metadata:169.254.169.254/32"
    data = nflog_message(prefix, ipv4("169.254.169.254", 6, 80))
    data += nflog_message(
        b"HXE-0123456789ab private:10.0.0.0/8", ipv4("10.1.2.3", 17, 53, options=2)
    )
    data += nflog_message(b"HXE-0123456789ab ipv6:::/0", ipv6("fe80::1", 17, 9, extension=True))
    assert list(parse(data)) == [
        LoggedPacket(prefix.decode(), "169.254.169.254", "tcp", 80),
        LoggedPacket("HXE-0123456789ab private:10.0.0.0/8", "10.1.2.3", "udp", 53),
        LoggedPacket("HXE-0123456789ab ipv6:::/0", "fe80::1", "udp", 9),
    ]
    assert destination(ipv4("10.0.0.9", 1, 0)) == ("10.0.0.9", "icmp", None)
    assert destination(ipv4("10.0.0.9", 6, 22, fragment=0x20)) == ("10.0.0.9", "tcp", None)
    assert destination(ipv4("10.0.0.9", 47, 0)) == ("10.0.0.9", "ip-proto-47", None)
    assert destination(ipv6("::1", 58, 0)) == ("::1", "icmpv6", None)


def test_hostile_log_messages_raise_nothing() -> None:
    from sandbox.docker.nflog import destination, parse

    rng = random.Random(7)
    good = nflog_message(b"HXE-0123456789ab host", ipv4("172.30.0.1", 6, 8080))
    for _ in range(3000):
        mutated = bytearray(good)
        for _ in range(rng.randint(1, 8)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        for sample in (bytes(mutated[: rng.randint(0, len(mutated))]), rng.randbytes(300)):
            for packet in parse(sample):
                assert packet.protocol and packet.ip
            destination(sample[rng.randint(0, 40) :])


def test_a_trials_destinations_are_bounded_and_the_rest_summed() -> None:
    from sandbox.docker.nflog import Destinations, LoggedPacket

    log = Destinations(limit=3)
    for n in range(1000):
        log.add("private:10.0.0.0/8", LoggedPacket("p", f"10.0.{n // 250}.{n % 250}", "udp", 9))
    log.add("private:10.0.0.0/8", LoggedPacket("p", "10.0.0.1", "udp", 9))  # listed before
    listed, other = log.drain()
    assert listed == {
        ("private:10.0.0.0/8", "10.0.0.0", "udp", 9): 1,
        ("private:10.0.0.0/8", "10.0.0.1", "udp", 9): 2,
        ("private:10.0.0.0/8", "10.0.0.2", "udp", 9): 1,
    }
    assert other == {"private:10.0.0.0/8": 997}
    # The bound is the trial's: a later phase lists only what was listed before.
    log.add("host", LoggedPacket("p", "172.30.0.1", "tcp", 22))
    log.add("private:10.0.0.0/8", LoggedPacket("p", "10.0.0.2", "udp", 9))
    assert log.drain() == ({("private:10.0.0.0/8", "10.0.0.2", "udp", 9): 1}, {"host": 1})


def test_the_responder_answers_dns_over_tcp_bounded() -> None:
    dns = responder(["pypi.org"], {"pypi.org": ["151.101.0.223"]})

    async def ask(port: int, *queries: bytes) -> list[bytes]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        answers = []
        for data in queries:
            writer.write(struct.pack("!H", len(data)) + data)
            await writer.drain()
        for _ in queries:
            try:
                size = struct.unpack("!H", await reader.readexactly(2))[0]
                answers.append(await reader.readexactly(size))
            except asyncio.IncompleteReadError:
                answers.append(b"")
        writer.close()
        return answers

    async def go() -> None:
        server = await asyncio.start_server(dns.serve_stream, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        listed, unlisted = await ask(port, query("pypi.org", 1, 1), query("evil.test", 1, 2))
        assert listed[:2] == b"\0\1" and listed[3] & 0xF == 0
        assert listed.endswith(ipaddress.IPv4Address("151.101.0.223").packed)
        assert unlisted[:2] == b"\0\2" and unlisted[3] & 0xF == 3
        # A length past the longest query ends the connection unanswered.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(struct.pack("!H", 4000) + b"x" * 4000)
        assert await reader.read() == b""
        writer.close()
        server.close()

    _run(go())
