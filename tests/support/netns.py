"""A network namespace a test makes, joined to the host by a veth pair, with servers in it.

``PublicNet`` plays "a host on the internet": an address outside every range the egress
rules forbid (a /30 of TEST-NET-3, 203.0.113.0/24, picked at random and checked unused),
an HTTP server on 80, a TLS server on 443 (a self-signed certificate; it records the SNI
each handshake named), a plain TCP and UDP listener on 8443 (each records the first bytes
it got) and a DNS server on 53, UDP and TCP, that records every query (name and type) and
answers NXDOMAIN. Every connection a server accepts and every request it reads is
appended to ``log``, so a test judges from outside whether a refused attempt ever reached
it. The servers listen on every address of the namespace: :meth:`PublicNet.route` gives
it more (a "public-like" one only a router reaches, a private one, the metadata address),
each routed from the host to the namespace. Needs root (``ip netns``); removed at exit.
"""

from __future__ import annotations

import ipaddress
import secrets
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

SERVER = r"""
import socket, ssl, sys, threading
log = open(sys.argv[1], "a", buffering=1)
cert, key = sys.argv[2], sys.argv[3]
def note(text):
    log.write(text + "\n")
def http():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 80)); s.listen(64)
    while True:
        c, peer = s.accept()
        data = c.recv(65536)
        lines = data.decode("latin-1").split("\r\n")
        host = [l.split(":", 1)[1].strip() for l in lines if l.lower().startswith("host:")]
        note("http " + repr(data[:200]))
        body = ("PUBLIC-OK host=%s" % (host[0] if host else "-")).encode()
        head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
        c.sendall(head % len(body) + body)
        c.close()
def tls():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(cert, key)
    seen = {}
    def sni(sock, name, _ctx):
        seen[id(sock)] = name
        note("sni " + str(name))
    ctx.sni_callback = sni
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 443)); s.listen(64)
    while True:
        c, peer = s.accept()
        note("tcp443")
        def serve(c=c):
            try:
                t = ctx.wrap_socket(c, server_side=True)
                t.sendall(("TLS-OK sni=%s" % seen.get(id(t), seen.get(id(c)))).encode())
                t.close()
            except Exception as exc:
                note("tls-error " + type(exc).__name__)
                c.close()
        threading.Thread(target=serve, daemon=True).start()
def plain():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 8443)); s.listen(64)
    def first(c):
        c.settimeout(2)
        try:
            data = c.recv(200)
        except OSError:
            data = b""
        note("tcp8443 " + data.decode(errors="replace").strip())
        c.close()
    while True:
        c, peer = s.accept()
        threading.Thread(target=first, args=(c,), daemon=True).start()
def datagrams():
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", 8443))
    while True:
        data, peer = u.recvfrom(4096)
        note("udp8443 " + data.decode(errors="replace").strip())
def question(data):
    # The query's name and type (a DNS message's first question), and its answer: NXDOMAIN.
    at, labels = 12, []
    while at < len(data) and data[at]:
        labels.append(data[at + 1:at + 1 + data[at]].decode(errors="replace"))
        at += 1 + data[at]
    kind = int.from_bytes(data[at + 1:at + 3], "big") if at + 3 <= len(data) else 0
    note("dns %s type %d" % (".".join(labels), kind))
    flags = 0x8183 if len(data) > 3 and data[2] & 1 else 0x8083
    return data[:2] + flags.to_bytes(2, "big") + data[4:6] + bytes(6) + data[12:at + 5]
def dns_udp():
    # Answers from the address each query was sent to (IP_PKTINFO, 8 on Linux): from any
    # other, a client behind NAT (a container) would never match its reply.
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", 53))
    u.setsockopt(socket.IPPROTO_IP, 8, 1)
    while True:
        data, ancillary, _flags, peer = u.recvmsg(4096, 256)
        info = [d for level, kind, d in ancillary if level == socket.IPPROTO_IP and kind == 8]
        local = info[0][8:12] if info else bytes(4)
        u.sendmsg([question(data)], [(socket.IPPROTO_IP, 8, bytes(4) + local + bytes(4))], 0, peer)
def dns_tcp():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 53)); s.listen(64)
    while True:
        c, peer = s.accept()
        c.settimeout(2)
        try:
            data = c.recv(4096)
            if len(data) > 2:
                answer = question(data[2:])
                c.sendall(len(answer).to_bytes(2, "big") + answer)
        except OSError:
            pass
        c.close()
for f in (http, tls, plain, datagrams, dns_udp, dns_tcp):
    threading.Thread(target=f, daemon=True).start()
note("ready")
threading.Event().wait()
"""


#: Docker's default address pools: where a container's packets come from.
DOCKER_POOLS = ("172.16.0.0/12", "192.168.0.0/16")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _free_subnet() -> ipaddress.IPv4Network:
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
    for _ in range(50):
        subnet = ipaddress.ip_network(f"203.0.113.{secrets.randbelow(64) * 4}/30")
        if str(subnet.network_address) not in routes:
            return subnet
    raise RuntimeError("no free /30 in 203.0.113.0/24 on this host")


class PublicNet:
    """The namespace, its veth pair and its servers (a context manager)."""

    def __init__(self, workdir: Path) -> None:
        tag = secrets.token_hex(4)
        self.name = f"hx-pub-{tag}"
        self.host_if, self.ns_if = f"hxh{tag}", f"hxn{tag}"
        subnet = _free_subnet()
        first, second = list(subnet.hosts())
        self.host_ip, self.ip = str(first), str(second)
        self.prefix = subnet.prefixlen
        self.workdir = workdir
        self.log = workdir / "public-net.log"
        self._server: subprocess.Popen[bytes] | None = None
        #: Addresses routed from the host into the namespace (:meth:`route`), and the
        #: policy rules (and their table) of those routed for containers only.
        self._routes: list[str] = []
        self._rules: list[list[str]] = []
        self._table = str(20000 + secrets.randbelow(10000))

    def __enter__(self) -> PublicNet:
        _ip("netns", "add", self.name)
        try:
            _ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
            _ip("link", "set", self.ns_if, "netns", self.name)
            _ip("addr", "add", f"{self.host_ip}/{self.prefix}", "dev", self.host_if)
            _ip("link", "set", self.host_if, "up")
            ns = ("netns", "exec", self.name, "ip")
            _ip(*ns, "addr", "add", f"{self.ip}/{self.prefix}", "dev", self.ns_if)
            _ip(*ns, "link", "set", self.ns_if, "up")
            _ip(*ns, "link", "set", "lo", "up")
            cert, key = self.workdir / "cert.pem", self.workdir / "key.pem"
            subprocess.run(
                ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                 "-subj", "/CN=pub.test", "-keyout", str(key), "-out", str(cert)],
                check=True, capture_output=True,
            )  # fmt: skip
            script = self.workdir / "public_server.py"
            script.write_text(SERVER)
            self._server = subprocess.Popen(
                ["ip", "netns", "exec", self.name, sys.executable, str(script), str(self.log),
                 str(cert), str(key)],
                stdin=subprocess.DEVNULL,
            )  # fmt: skip
            for _ in range(200):
                if self.log.exists() and "ready" in self.log.read_text():
                    break
                time.sleep(0.05)
            else:
                raise RuntimeError("the namespace's servers did not start")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def seen(self) -> str:
        """Everything the servers logged so far."""
        return self.log.read_text() if self.log.exists() else ""

    def route(self, address: str | None = None, *, containers_only: bool = False) -> str:
        """One more address of the namespace (its servers answer there), routed from the host.

        Not on-link: the host reaches it through the namespace's veth end, as a router
        would, so the filter judges it by its own range (the namespace's /30 is a subnet
        on a link of the host, which ``public`` refuses). None: a free "public-like"
        address of TEST-NET-2 (198.51.100.8-199; the rest is test_ray_network's), outside
        every range ``public`` refuses.

        ``containers_only``: routed only for packets from docker's address pools (a policy
        rule and a table of the namespace's own), so the host's own processes keep their
        route there: for 169.254.169.254, which the host's cloud agents ask.
        """
        if address is None:
            routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
            free = [n for n in range(8, 200) if f"198.51.100.{n} " not in routes]
            address = f"198.51.100.{free[secrets.randbelow(len(free))]}"
        if not self._routes and not self._rules:
            _ip("-n", self.name, "route", "add", "default", "via", self.host_ip)
        _ip("-n", self.name, "addr", "add", f"{address}/32", "dev", "lo")
        if containers_only:
            _ip("route", "add", f"{address}/32", "via", self.ip, "table", self._table)
            for pool in DOCKER_POOLS:
                rule = ["from", pool, "to", f"{address}/32", "lookup", self._table]
                _ip("rule", "add", *rule)
                self._rules.append(rule)
        else:
            _ip("route", "add", f"{address}/32", "via", self.ip)
            self._routes.append(address)
        return address

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._server is not None:
            self._server.kill()
            self._server.wait(timeout=10)
        for address in self._routes:
            subprocess.run(["ip", "route", "del", f"{address}/32"], capture_output=True)
        for rule in self._rules:
            subprocess.run(["ip", "rule", "del", *rule], capture_output=True)
        subprocess.run(["ip", "route", "flush", "table", self._table], capture_output=True)
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
