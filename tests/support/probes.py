"""In-sandbox probe code shared by the egress attack tests, as Python source strings.

A probe runs inside a trial (``python3 -c "$PROBE"``) on the image's Python, so it is
plain stdlib code kept as text; a test prepends :data:`PROXY_CLIENT` to its own probe body.
What a trial's probes saw is kept in a :class:`TrialSeen`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class TrialSeen:
    """What one attack trial saw, inside and out: each phase's probe answers (by check),
    the filter's events after each phase, and the trial's own description."""

    token: str
    agent: dict[str, Any]
    verifier: dict[str, Any]
    agent_events: list[dict[str, Any]]
    verifier_events: list[dict[str, Any]]
    facts: dict[str, Any]


#: ``get(url)`` (through the phase's proxy variables, as a tool would), ``tunnel(target,
#: sni)`` (CONNECT to ``$HTTPS_PROXY``, then TLS with ``sni``), ``raw(host, port)`` (a
#: bare TCP connect, past any proxy) and ``ask(host, port, request)`` (bytes sent as they
#: are, the answer's first line): each returns what happened as a string;
#: ``tcp_dns(server, name)``: one A query over TCP, ``[rcode, last A record or None]``; and
#: ``dns(server, name, qtype, tcp=False, port=53)``: one query, ``[rcode, answer count]``.
PROXY_CLIENT = r"""
import json, os, socket, ssl, struct, urllib.error, urllib.request
proxy = os.environ.get("HTTPS_PROXY", "")
def get(url):
    try:
        return urllib.request.urlopen(url, timeout=15).read(200).decode()
    except urllib.error.HTTPError as exc:
        return "HTTP %d" % exc.code
    except Exception as exc:
        return "%s: %s" % (type(exc).__name__, exc)
def tunnel(target, sni):
    try:
        host, _, pport = proxy.rpartition("/")[2].rpartition(":")
        s = socket.create_connection((host, int(pport)), timeout=15)
        s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(1)
            if not chunk:
                return "closed: %r" % head
            head += chunk
        if not head.startswith(b"HTTP/1.1 200"):
            return head.split(b"\r\n")[0].decode()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        return ctx.wrap_socket(s, server_hostname=sni).recv(200).decode()
    except Exception as exc:
        return "%s: %s" % (type(exc).__name__, exc)
def raw(host, p):
    try:
        socket.create_connection((host, p), timeout=3).close()
        return "CONNECTED"
    except OSError as exc:
        return "%s: %s" % (type(exc).__name__, exc)
def ask(host, p, request):
    try:
        s = socket.create_connection((host, p), timeout=10)
        s.sendall(request.encode())
        data = s.recv(200)
        s.close()
        return data.split(b"\r\n")[0].decode(errors="replace") or "closed"
    except OSError as exc:
        return "%s: %s" % (type(exc).__name__, exc)
def dns(server, name, qtype, tcp=False, port=53):
    question = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    packet = struct.pack("!HHHHHH", 9, 0x0100, 1, 0, 0, 0) + question + struct.pack("!HH", qtype, 1)
    try:
        if tcp:
            s = socket.create_connection((server, port), timeout=5)
            s.sendall(struct.pack("!H", len(packet)) + packet)
            data = s.recv(4096)[2:]
        else:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)
            s.sendto(packet, (server, port))
            data = s.recv(4096)
        s.close()
    except OSError as exc:
        return "%s: %s" % (type(exc).__name__, exc)
    if len(data) < 8:
        return "short answer %r" % data
    return [data[3] & 0xF, struct.unpack("!H", data[6:8])[0]]
def tcp_dns(server, name):
    # One A query over TCP (two-byte length framing): the rcode and the last A record.
    question = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    packet = struct.pack("!HHHHHH", 7, 0x0100, 1, 0, 0, 0) + question + b"\0\1\0\1"
    try:
        s = socket.create_connection((server, 53), timeout=10)
        s.sendall(struct.pack("!H", len(packet)) + packet)
        data = b""
        while len(data) < 2 or len(data) < 2 + struct.unpack("!H", data[:2])[0]:
            chunk = s.recv(4096)
            if not chunk:
                return "closed after %d bytes" % len(data)
            data += chunk
        s.close()
    except Exception as exc:
        return "%s: %s" % (type(exc).__name__, exc)
    body = data[2:]
    answers = struct.unpack("!H", body[6:8])[0]
    return [body[3] & 0xF, socket.inet_ntoa(body[-4:]) if answers else None]
"""
