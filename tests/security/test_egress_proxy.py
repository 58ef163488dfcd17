"""The allowlist egress proxy, standalone, attacked with real servers (issue 24 item 3).

The proxy (``sandbox.egress_proxy``) runs on the host's loopback; "the internet" is a
network namespace the test makes (``support.netns.PublicNet``: HTTP on 80, TLS on 443, TCP
on 8443, each logging what reached it); the host's own listener on 0.0.0.0 stands for
everything the proxy must never reach. Names are pinned by the proxy's resolver table, as
an operator's would be, so "DNS" answers what each attack needs: a listed name on the
public server, one rebinding to 127.0.0.1, one on the host's own veth address, one on the
metadata address. Judged from outside: what the servers and the listener saw, the HTTP
answers, and the proxy's ``network_refused`` events.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.net import Listener
from support.netns import PublicNet

from sandbox.egress_proxy import ProxyLimits, ProxyServer
from sandbox.network_policy import NetworkPolicy

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def public(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PublicNet]:
    with PublicNet(tmp_path_factory.mktemp("public")) as net:
        yield net


def proxy_for(public: PublicNet, listener: Listener, **kw: Any) -> ProxyServer:
    hosts = ("pub.test", "*.pub.test", "rebind.test", "self.test", "meta.test", "gone.test")
    hosts += ("127.0.0.1", "::1", "::ffff:127.0.0.1", "169.254.169.254/32")
    overrides = {
        "pub.test": [public.ip],
        "www.pub.test": [public.ip],
        "rebind.test": ["127.0.0.1"],
        "self.test": [public.host_ip],
        "meta.test": ["169.254.169.254"],
        "evil.test": [public.ip],
        "gone.test": [],
    }
    # The listener's port is allowed too, so only its address can keep it out.
    ports = (80, 443, 8443, listener.port)
    policy = NetworkPolicy("allowlist", hosts)
    return ProxyServer(policy, overrides=overrides, ports=ports, **kw)


def ask(proxy: ProxyServer, data: bytes) -> bytes:
    """Send ``data`` to the proxy and read its whole answer."""
    assert proxy.address is not None
    with socket.create_connection(proxy.address, timeout=15) as conn:
        conn.sendall(data)
        return _read_all(conn)


def _read_all(conn: socket.socket) -> bytes:
    chunks = []
    while chunk := conn.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def tunnel(proxy: ProxyServer, target: str, sni: str | None) -> tuple[bytes, bytes]:
    """CONNECT ``target``, then TLS naming ``sni``: (the proxy's answer, what TLS read)."""
    assert proxy.address is not None
    conn = socket.create_connection(proxy.address, timeout=15)
    try:
        conn.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(1)
            if not chunk:
                return head, b""
            head += chunk
        if not head.startswith(b"HTTP/1.1 200"):
            return head + _read_all(conn), b""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        try:
            with context.wrap_socket(conn, server_hostname=sni) as tls:
                return head, _read_all(tls)
        except (ssl.SSLError, OSError) as exc:
            return head, f"TLS failed: {exc}".encode()
    finally:
        conn.close()


def dns_query(proxy: ProxyServer, name: str, qtype: int) -> tuple[int, list[bytes]]:
    """(rcode, answer rdata) of one UDP query to the proxy's responder."""
    assert proxy.dns_address is not None
    question = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    query = struct.pack("!HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + question
    query += struct.pack("!HH", qtype, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.settimeout(15)
        udp.sendto(query, proxy.dns_address)
        data = udp.recv(4096)
    ident, flags, _qd, answers = struct.unpack("!HHHH", data[:8])
    assert ident == 0x1234 and flags & 0x8000
    at, rdata = len(query), []
    for _ in range(answers):
        _ptr, _type, _class, _ttl, size = struct.unpack("!HHHIH", data[at : at + 12])
        rdata.append(data[at + 12 : at + 12 + size])
        at += 12 + size
    return flags & 0xF, rdata


def test_the_proxy_lets_through_exactly_the_listed_hosts(public: PublicNet) -> None:
    """Attack battery: listed OK; unlisted, raw IP, IPv6, ports, SNI/Host, rebinding, DNS."""
    with Listener(ipv6=True) as listener, proxy_for(public, listener) as proxy:
        get = "GET http://{h}/ HTTP/1.1\r\nHost: {host}\r\n\r\n"
        port = listener.port
        # Listed: plain HTTP by name (and under a wildcard), HTTPS through CONNECT + SNI.
        ok = ask(proxy, get.format(h="pub.test", host="pub.test").encode())
        assert ok.startswith(b"HTTP/1.1 200") and b"PUBLIC-OK host=pub.test" in ok, ok
        www = ask(proxy, get.format(h="www.pub.test", host="www.pub.test").encode())
        assert b"PUBLIC-OK host=www.pub.test" in www, www
        head, body = tunnel(proxy, "pub.test:443", "pub.test")
        assert head.startswith(b"HTTP/1.1 200") and body == b"TLS-OK sni=pub.test", (head, body)
        # Refused by the proxy with 403, before any connection.
        refused = {
            "unlisted": get.format(h="evil.test", host="evil.test"),
            "host-mismatch": get.format(h="pub.test", host="evil.test"),
            "origin-form-unlisted": "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n",
            "raw-ip-of-listed-name": get.format(h=public.ip, host=public.ip),
            "rebinding": get.format(h=f"rebind.test:{port}", host=f"rebind.test:{port}"),
            "host-address": get.format(h=f"self.test:{port}", host=f"self.test:{port}"),
            "metadata": get.format(h="meta.test", host="meta.test"),
            "listed-loopback-ip": get.format(h=f"127.0.0.1:{port}", host=f"127.0.0.1:{port}"),
            "two-hosts": "GET http://pub.test/ HTTP/1.1\r\nHost: pub.test\r\nHost: e.test\r\n\r\n",
        }
        for label, request in refused.items():
            answer = ask(proxy, request.encode())
            assert answer.startswith((b"HTTP/1.1 403", b"HTTP/1.1 400")), (label, answer)
        connects = {
            "unlisted": ("evil.test:443", "evil.test"),
            "unlisted-port": ("pub.test:9999", "pub.test"),
            "raw-ip-of-listed-name": (f"{public.ip}:443", None),
            "ipv6-literal": (f"[::1]:{listener.port}", None),
            "ipv4-mapped-ipv6": (f"[::ffff:127.0.0.1]:{listener.port}", None),
            "rebinding": (f"rebind.test:{listener.port}", "rebind.test"),
            "host-address": (f"self.test:{listener.port}", "self.test"),
            "metadata": ("meta.test:443", "meta.test"),
            "sni-mismatch": ("pub.test:443", "evil.test"),
            "no-sni": ("pub.test:443", None),
        }
        for label, (target, sni) in connects.items():
            head, body = tunnel(proxy, target, sni)
            assert b"TLS-OK" not in body, (label, head, body)
            if label not in ("sni-mismatch", "no-sni"):
                assert head.startswith(b"HTTP/1.1 403"), (label, head)
        # Not TLS in a tunnel to a listed host's allowed port: closed, nothing relayed.
        assert proxy.address is not None
        with socket.create_connection(proxy.address, timeout=15) as conn:
            conn.sendall(b"CONNECT pub.test:8443 HTTP/1.1\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n")
            assert b"smuggled" not in _read_all(conn)
        # DNS: listed names only, A/AAAA only, never a forbidden address.
        rcode, answers = dns_query(proxy, "pub.test", 1)
        assert (rcode, answers) == (0, [socket.inet_aton(public.ip)])
        assert dns_query(proxy, "evil.test", 1)[0] == 3  # NXDOMAIN, nothing resolved
        assert dns_query(proxy, "x7f3a9.tunnel.evil.test", 16)[0] == 3  # TXT tunnelling
        assert dns_query(proxy, "pub.test", 16) == (0, [])  # a listed name's TXT: no data
        assert dns_query(proxy, "rebind.test", 1)[0] == 3
        time.sleep(0.5)  # the servers' threads log what they accepted
        events = proxy.events()
    seen = public.seen()
    heard = b"".join(data for *_, data in listener.received)
    assert listener.received == [], f"the host's listener was reached: {listener.received}"
    assert heard == b""
    assert "evil.test" not in seen and "smuggled" not in seen and "tcp8443" not in seen, seen
    assert seen.count("sni pub.test") == 1, seen  # only the listed, matching handshake
    assert seen.count("tcp443") == 1, seen  # a refused tunnel never reached the server
    assert "host=evil" not in seen and "sni evil" not in seen, seen
    refusals = [e for e in events if e["type"] == "network_refused"]
    reasons = " | ".join(f"{e.get('host') or e.get('ip')}: {e['reason']}" for e in refusals)
    assert all(e["phase"] == "agent" for e in refusals)
    for needle in (
        "evil.test: the host is not listed",
        "pub.test: port 9999 is not allowed",
        f"{public.ip}: the IP is not listed",
        "::1: the IP is a private or reserved range",
        "::ffff:127.0.0.1: the IP is a private or reserved range (127.0.0.0/8)",
        "rebind.test: the host resolves to a private or reserved range (127.0.0.0/8) only",
        "self.test: the host resolves to an address of the host only",
        "meta.test: the host resolves to the metadata address only",
        "127.0.0.1: the IP is a private or reserved range",
        "evil.test: the ClientHello names 'evil.test', the CONNECT 'pub.test'",
        "pub.test: the ClientHello names no server",
        "pub.test: not TLS in the tunnel",
        "x7f3a9.tunnel.evil.test: the name is not listed",
    ):
        assert needle in reasons, f"{needle!r} not in {reasons}"
    assert any(e["protocol"] == "dns" and e.get("port") == 53 for e in refusals)


def test_the_proxy_is_bounded_and_switches_with_the_phase(
    public: PublicNet, tmp_path: Path
) -> None:
    """Connections at once, head size and time are capped; a phase switch changes the rules."""
    limits = ProxyLimits(connections=2, header_bytes=2048, head_sec=1.0)
    unix_path = str(tmp_path / "proxy.sock")
    with (
        Listener() as listener,
        proxy_for(public, listener, limits=limits, unix_path=unix_path) as proxy,
    ):
        assert proxy.address is not None
        huge = b"GET http://pub.test/ HTTP/1.1\r\nHost: pub.test\r\nX: " + b"a" * 4096
        huge += b"\r\n\r\n"
        assert ask(proxy, huge).startswith(b"HTTP/1.1 431")
        idle = [socket.create_connection(proxy.address, timeout=15) for _ in range(2)]
        time.sleep(0.2)
        assert ask(proxy, b"GET / HTTP/1.1\r\nHost: pub.test\r\n\r\n").startswith(b"HTTP/1.1 503")
        for conn in idle:  # a client silent past head_sec is dropped (its slot comes back)
            assert _read_all(conn) == b""
            conn.close()
        get = b"GET http://pub.test/ HTTP/1.1\r\nHost: pub.test\r\n\r\n"
        assert b"PUBLIC-OK" in ask(proxy, get)
        # The same proxy on its unix socket (a forwarder's way in), root-only.
        assert (tmp_path / "proxy.sock").stat().st_mode & 0o777 == 0o600
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as unix:
            unix.settimeout(15)
            unix.connect(str(tmp_path / "proxy.sock"))
            unix.sendall(get)
            assert b"PUBLIC-OK host=pub.test" in _read_all(unix)
        proxy.switch(NetworkPolicy("no-network"), "verifier")
        time.sleep(0.1)
        assert ask(proxy, get).startswith(b"HTTP/1.1 403")
        assert dns_query(proxy, "pub.test", 1)[0] == 3
        proxy.switch(NetworkPolicy("public"), "verifier")
        time.sleep(0.1)
        assert b"PUBLIC-OK host=evil.test" in ask(
            proxy, b"GET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n"
        )  # public: any name, any port; the forbidden ranges still out
        port = listener.port
        rebind = f"GET http://rebind.test:{port}/ HTTP/1.1\r\nHost: rebind.test:{port}\r\n\r\n"
        assert ask(proxy, rebind.encode()).startswith(b"HTTP/1.1 403")
        events = proxy.events()
    assert listener.received == []
    phases = {e["phase"] for e in events if e.get("host") == "pub.test"}
    assert phases == {"verifier"}, events
