"""The netfilter log of the egress filter: which exact destinations its rules refused.

The filter's counters (:mod:`sandbox.docker.egress`) say how many packets each rule
dropped; an ``NFLOG`` rule before each ``DROP`` copies the head of some of those packets
(rate-limited by the rule) to a netlink group of the run's own, and :class:`PacketLog`
reads them there: a socket ``AF_NETLINK``/``NETLINK_NETFILTER`` bound to that group through
``nfnetlink_log``, read by a thread of the run. Each message names its rule (the log
prefix: the trial's chain and the rule's comment) and carries the packet's first bytes,
whose IP header gives the destination address, the protocol and, for TCP, UDP, SCTP and
UDP-Lite, the port.

Everything here is bounded: the kernel sends at most what the rules' ``limit`` lets
through, the socket's buffer drops the rest (counted, not read), each message is parsed
within its own length, and a trial keeps at most :data:`MAX_DESTINATIONS` distinct
destinations (:class:`Destinations`), the packets to any other summed in one count. The
packets are the agent's: nothing in them is trusted beyond the bytes read.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import select
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass

#: Distinct (phase, rule, address, protocol, port) one trial lists; the rest are summed.
MAX_DESTINATIONS = 100
#: What a logged packet's rule lets through to the log: per rule, per second and burst.
RATE = "50/second"
BURST = "100"
#: Bytes of each packet copied (an IPv4 header with options and the ports fit).
COPY_BYTES = 128
#: Where the run's groups are looked for: a hash of the run picks the first one tried.
GROUP_BASE, GROUP_SPAN = 0x4800, 0x800

_NETLINK_NETFILTER = 12
_NFNL_SUBSYS_ULOG = 4
_MSG_PACKET, _MSG_CONFIG = 0, 1
_CFG_CMD, _CFG_MODE, _CFG_NLBUFSIZ, _CFG_QTHRESH = 1, 2, 3, 5
_CMD_BIND, _CMD_UNBIND = 1, 2
_COPY_PACKET = 2
_ATTR_PAYLOAD, _ATTR_PREFIX = 9, 10
_NLM_F_REQUEST, _NLM_F_ACK = 0x1, 0x4
_NLMSG_ERROR = 2
_RCVBUF = 1 << 20
_PROTOCOLS = {1: "icmp", 6: "tcp", 17: "udp", 58: "icmpv6", 132: "sctp", 136: "udplite"}
_PORTED = {6, 17, 132, 136}
#: IPv6 extension headers walked to reach the transport header (each ``8 * (len + 1)``).
_V6_EXTENSIONS = {0, 43, 60}
_V6_FRAGMENT = 44


@dataclass(frozen=True)
class LoggedPacket:
    """One packet a rule refused and logged.

    Attributes:
        prefix: The rule's log prefix (``<chain> <comment>``).
        ip: The destination address.
        protocol: ``tcp``, ``udp``, ``icmp``, ``icmpv6``, ``sctp``, ``udplite`` or
            ``ip-proto-<n>``.
        port: The destination port (TCP, UDP, SCTP, UDP-Lite; None for the rest and for a
            fragment past the first).
    """

    prefix: str
    ip: str
    protocol: str
    port: int | None


def destination(payload: bytes) -> tuple[str, str, int | None] | None:
    """The destination address, protocol and port of an IP packet's head (None: not one).

    Args:
        payload: The packet's first bytes, from its IP header on (the agent wrote them).
    """
    if not payload:
        return None
    version = payload[0] >> 4
    if version == 4 and len(payload) >= 20:
        header = (payload[0] & 0x0F) * 4
        proto = payload[9]
        ip = str(ipaddress.IPv4Address(payload[16:20]))
        first = struct.unpack("!H", payload[6:8])[0] & 0x1FFF == 0
        return ip, _name(proto), _port(payload, header, proto) if first and header >= 20 else None
    if version == 6 and len(payload) >= 40:
        ip = str(ipaddress.IPv6Address(payload[24:40]))
        proto, at, first = payload[6], 40, True
        for _hop in range(4):  # a few extension headers; more are not walked
            if proto in _V6_EXTENSIONS and at + 2 <= len(payload):
                proto, at = payload[at], at + 8 * (payload[at + 1] + 1)
            elif proto == _V6_FRAGMENT and at + 8 <= len(payload):
                first = struct.unpack("!H", payload[at + 2 : at + 4])[0] & 0xFFF8 == 0
                proto, at = payload[at], at + 8
            else:
                break
        return ip, _name(proto), _port(payload, at, proto) if first else None
    return None


def _name(proto: int) -> str:
    return _PROTOCOLS.get(proto, f"ip-proto-{proto}")


def _port(payload: bytes, at: int, proto: int) -> int | None:
    if proto not in _PORTED or at + 4 > len(payload):
        return None
    return int(struct.unpack("!H", payload[at + 2 : at + 4])[0])


def parse(data: bytes) -> Iterator[LoggedPacket]:
    """The logged packets in one read of the netlink socket (malformed parts skipped)."""
    at = 0
    while at + 16 <= len(data):
        length, kind = struct.unpack("=IH", data[at : at + 6])
        if length < 16 or at + length > len(data):
            return
        if kind == (_NFNL_SUBSYS_ULOG << 8) | _MSG_PACKET and length >= 20:
            packet = _packet(data[at + 20 : at + length])
            if packet is not None:
                yield packet
        at += (length + 3) & ~3


def _packet(attributes: bytes) -> LoggedPacket | None:
    prefix, payload = None, None
    at = 0
    while at + 4 <= len(attributes):
        size, kind = struct.unpack("=HH", attributes[at : at + 4])
        if size < 4 or at + size > len(attributes):
            break
        value = attributes[at + 4 : at + size]
        kind &= 0x3FFF  # the nested and byte-order flags
        if kind == _ATTR_PREFIX:
            prefix = value.split(b"\0", 1)[0].decode("ascii", "replace")
        elif kind == _ATTR_PAYLOAD:
            payload = value
        at += (size + 3) & ~3
    if prefix is None or payload is None:
        return None
    found = destination(payload)
    if found is None:
        return None
    return LoggedPacket(prefix, *found)


#: A listed destination: the rule's comment, the address, the protocol and the port.
Key = tuple[str, str, str, int | None]


class Destinations:
    """One trial's logged refusals, by destination, bounded (thread-safe).

    At most ``limit`` distinct keys over the trial's life; a packet to any other adds to
    :attr:`other` (per drain), so an agent sending to a million addresses costs the same
    as one sending to a hundred.
    """

    def __init__(self, limit: int = MAX_DESTINATIONS) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._pending: dict[Key, int] = {}
        self._seen: set[Key] = set()
        self._other: dict[str, int] = {}

    def add(self, rule: str, packet: LoggedPacket) -> None:
        """Count one logged packet refused by ``rule`` (its comment)."""
        key = (rule, packet.ip, packet.protocol, packet.port)
        with self._lock:
            if key in self._pending:
                self._pending[key] += 1
            elif key in self._seen or len(self._seen) < self._limit:
                self._seen.add(key)
                self._pending[key] = 1
            else:
                self._other[rule] = self._other.get(rule, 0) + 1

    def drain(self) -> tuple[dict[Key, int], dict[str, int]]:
        """Packets since the last drain: by :data:`Key`, and the rest by rule."""
        with self._lock:
            pending, other = self._pending, self._other
            self._pending, self._other = {}, {}
        return pending, other


class PacketLog:
    """The run's netlink log group, read by a thread, dispatched to trials by chain.

    Args:
        group: The ``nfnetlink_log`` group (``NFLOG --nflog-group``).
        sock: The socket bound to it (:func:`open_log` makes both).
    """

    def __init__(self, group: int, sock: socket.socket) -> None:
        self.group = group
        self._sock = sock
        self._lock = threading.Lock()
        self._trials: dict[str, Destinations] = {}
        self._stop = threading.Event()
        # Written by close() so the thread's wait ends at once, not at its next timeout.
        self._wake_r, self._wake_w = os.pipe()
        #: Packets the kernel could not queue for us (the socket's buffer was full).
        self.lost = 0
        self._thread = threading.Thread(target=self._loop, daemon=True, name="egress-nflog")
        self._thread.start()

    def register(self, chain: str) -> Destinations:
        """Where the packets logged by ``chain``'s rules go (made on the first call)."""
        with self._lock:
            return self._trials.setdefault(chain, Destinations())

    def unregister(self, chain: str) -> None:
        """Stop keeping ``chain``'s packets (its trial is over)."""
        with self._lock:
            self._trials.pop(chain, None)

    def flush(self) -> None:
        """Read whatever the kernel has queued (called before a trial's log is drained).

        Bounded by what the socket's buffer can hold, which the kernel never overfills.
        """
        with self._lock:
            while not self._read_all():
                pass

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                ready, _w, _x = select.select([self._sock.fileno(), self._wake_r], [], [], 0.5)
            except (OSError, ValueError):
                return  # closed
            if self._wake_r in ready:
                return
            if ready:
                with self._lock:
                    self._read_all()

    def _read_all(self) -> bool:
        """Read up to 256 messages; whether the queue is empty (or the socket gone)."""
        # Called with the lock held; the socket is non-blocking. A batch at a time, so a
        # flood never holds the lock long against a trial's flush.
        for _batch in range(256):
            try:
                data = self._sock.recv(1 << 16)
            except BlockingIOError:
                return True
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:
                    self.lost += 1  # an overrun: some messages were dropped by the kernel
                    continue
                return True
            for packet in parse(data):
                chain, _, rule = packet.prefix.partition(" ")
                trial = self._trials.get(chain)
                if trial is not None and rule:
                    trial.add(rule, packet)
        return False

    def close(self) -> None:
        """Unbind the group and end the thread (idempotent)."""
        if self._stop.is_set():
            return
        self._stop.set()
        os.write(self._wake_w, b"x")
        self._thread.join(timeout=5)
        os.close(self._wake_w)
        if not self._thread.is_alive():
            os.close(self._wake_r)
        with self._lock:
            if self._sock.fileno() >= 0:
                try:
                    _config(self._sock, self.group, _attr(_CFG_CMD, bytes([_CMD_UNBIND])))
                except OSError:
                    pass
                self._sock.close()


def _config(sock: socket.socket, group: int, attributes: bytes) -> None:
    """Send one ``nfnetlink_log`` config message for ``group`` and wait for its ack.

    Raises:
        OSError: the kernel refused it (``EBUSY``: another socket has the group).
    """
    kind = (_NFNL_SUBSYS_ULOG << 8) | _MSG_CONFIG
    body = struct.pack("!BBH", socket.AF_UNSPEC, 0, group) + attributes
    header = struct.pack("=IHHII", 16 + len(body), kind, _NLM_F_REQUEST | _NLM_F_ACK, 1, 0)
    sock.sendall(header + body)
    sock.settimeout(2.0)
    try:
        while True:
            data = sock.recv(1 << 16)
            at = 0
            while at + 16 <= len(data):
                length, msg = struct.unpack("=IH", data[at : at + 6])
                if length < 16:
                    break
                if msg == _NLMSG_ERROR and length >= 20:
                    (code,) = struct.unpack("=i", data[at + 16 : at + 20])
                    if code:
                        raise OSError(-code, f"nfnetlink_log: {errno.errorcode.get(-code, code)}")
                    return
                at += (length + 3) & ~3
    finally:
        sock.setblocking(False)


def _attr(kind: int, value: bytes) -> bytes:
    return struct.pack("=HH", 4 + len(value), kind) + value + b"\0" * (-len(value) % 4)


def open_log(first: int) -> PacketLog | str:
    """Bind a free group, trying from ``first``; the reader, or why there is none (one line).

    Args:
        first: Where to start looking, within ``GROUP_BASE`` + ``GROUP_SPAN``.
    """
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_NETFILTER)
    except (OSError, AttributeError) as exc:
        return f"no netfilter netlink socket here ({exc})"
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RCVBUF)
        sock.bind((0, 0))
    except OSError as exc:
        sock.close()
        return f"the netfilter netlink socket cannot be bound ({exc})"
    last = ""
    for step in range(32):
        group = GROUP_BASE + (first - GROUP_BASE + step) % GROUP_SPAN
        try:
            _config(sock, group, _attr(_CFG_CMD, bytes([_CMD_BIND])))
        except OSError as exc:
            last = str(exc)
            if exc.errno in (errno.EBUSY, errno.EPERM):
                continue  # another socket's group (EPERM on current kernels)
            break
        try:
            mode = struct.pack("!IBx", COPY_BYTES, _COPY_PACKET)
            # One message per packet (the default batches 100, or a second): a trial's
            # log is complete when its phase is over, not a second later.
            config = _attr(_CFG_MODE, mode) + _attr(_CFG_QTHRESH, struct.pack("!I", 1))
            _config(sock, group, config)
        except OSError as exc:
            last = str(exc)
            break
        return PacketLog(group, sock)
    sock.close()
    return f"no nfnetlink_log group could be bound ({last or 'all busy'})"


__all__ = [
    "BURST",
    "MAX_DESTINATIONS",
    "RATE",
    "Destinations",
    "LoggedPacket",
    "PacketLog",
    "destination",
    "open_log",
    "parse",
]
