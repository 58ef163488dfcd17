"""The driver's end of the link to Ray workers: one TCP listener for the run.

The model gateway, and with it the real provider key, stays in the driver process. A trial
on a worker node reaches it through this bridge: the worker relays each of its sandbox's
gateway connections here (``pipe``), and the bridge splices it to that trial's gateway
socket, where the gateway checks the trial's token as for a local trial. The bridge also
carries each attempt's control channel (``watch``: phases in, cancel and abort out).

Every connection names its attempt by trial id and ticket, a random secret issued per attempt
and withdrawn when the attempt ends; anything else is dropped unanswered. What crosses the
bridge: the sandbox's HTTP requests and the provider's responses (the trial's token
included), never the provider key. It is not encrypted: the cluster's network must be
private, as Ray's own traffic requires (docs/scale-out.md).
"""

from __future__ import annotations

import hmac
import secrets
import socket
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.executors.ray.jobs import BridgeAddress
from harness.executors.ray.wire import LineReader, WireError, send_json, splice
from harness.gateway import TrialAccess, TrialGateway

HEADER_TIMEOUT_SEC = 10.0
"""A connection that sends no header line within this is dropped."""


@dataclass
class Attempt:
    """One attempt in flight: its ticket, gateway access and control channels."""

    trial_id: str
    secret: str = field(repr=False)
    access: TrialAccess | None
    on_phase: Callable[[str, str], None] | None = None
    started: threading.Event = field(default_factory=threading.Event)
    node: str = ""
    signal: str | None = None
    watches: list[socket.socket] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def send_signal(self, signal: str) -> None:
        """Tell the attempt's worker to ``cancel`` or ``abort`` (and any that connects later)."""
        with self.lock:
            self.signal = signal
            watches = list(self.watches)
        for watch in watches:
            try:
                send_json(watch, {"signal": signal})
            except OSError:
                pass


class Bridge:
    """The run's bridge: ``start`` it, ``issue`` a ticket per attempt, ``close`` at the end.

    Args:
        host: The address workers reach the driver at (the driver node's Ray address).
        gateway: The run's gateway (None when no model was selected).
    """

    def __init__(self, host: str, gateway: TrialGateway | None) -> None:
        self.host = host
        self.gateway = gateway
        self._attempts: dict[str, Attempt] = {}
        self._lock = threading.Lock()
        self._server: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()

    def start(self) -> None:
        """Listen on an ephemeral port of ``host``."""
        server = socket.create_server((self.host, 0), backlog=256)
        self._server = server
        self._thread = threading.Thread(target=self._accept, name="ray-bridge", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        """The port it listens on."""
        assert self._server is not None
        return int(self._server.getsockname()[1])

    def issue(
        self,
        trial_id: str,
        access: TrialAccess | None,
        on_phase: Callable[[str, str], None] | None = None,
    ) -> tuple[Attempt, BridgeAddress]:
        """Register an attempt; its address (with a fresh ticket) goes to the worker."""
        attempt = Attempt(trial_id, secrets.token_hex(32), access, on_phase)
        with self._lock:
            self._attempts[trial_id] = attempt
        return attempt, BridgeAddress(self.host, self.port, attempt.secret)

    def withdraw(self, attempt: Attempt) -> None:
        """The attempt is over: its ticket stops working, its channels close."""
        with self._lock:
            if self._attempts.get(attempt.trial_id) is attempt:
                del self._attempts[attempt.trial_id]
        with attempt.lock:
            watches, attempt.watches = attempt.watches, []
        for watch in watches:
            _close(watch)

    def signal_all(self, signal: str) -> None:
        """Send ``cancel`` or ``abort`` to every attempt in flight."""
        with self._lock:
            attempts = list(self._attempts.values())
        for attempt in attempts:
            attempt.send_signal(signal)

    def close(self) -> None:
        """Stop listening and drop every attempt."""
        self._closed.set()
        if self._server is not None:
            _close(self._server)
        with self._lock:
            attempts = list(self._attempts.values())
        for attempt in attempts:
            self.withdraw(attempt)

    # -- connections -------------------------------------------------------------------------

    def _accept(self) -> None:
        assert self._server is not None
        while not self._closed.is_set():
            try:
                conn, _peer = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _lookup(self, header: dict[str, Any]) -> Attempt | None:
        trial_id, ticket = header.get("trial"), header.get("ticket")
        if not isinstance(trial_id, str) or not isinstance(ticket, str):
            return None
        with self._lock:
            attempt = self._attempts.get(trial_id)
        if attempt is None or not hmac.compare_digest(attempt.secret, ticket):
            return None
        return attempt

    def _serve(self, conn: socket.socket) -> None:
        reader = LineReader(conn)
        try:
            conn.settimeout(HEADER_TIMEOUT_SEC)
            header = reader.read()
            conn.settimeout(None)
        except (OSError, WireError):
            _close(conn)
            return
        attempt = self._lookup(header or {})
        if attempt is None:
            _close(conn)  # unknown or withdrawn ticket: nothing is said
            return
        op = (header or {}).get("op")
        try:
            if op == "watch":
                self._watch(attempt, conn, reader)
            elif op == "pipe":
                self._pipe(attempt, conn, reader)
            elif op == "revoke":
                send_json(conn, self._revoke(attempt))
            elif op == "call":
                send_json(conn, self._call(attempt, header or {}))
        except (OSError, WireError):
            pass
        finally:
            if op != "pipe":
                _close(conn)

    def _watch(self, attempt: Attempt, conn: socket.socket, reader: LineReader) -> None:
        with attempt.lock:
            attempt.watches.append(conn)
            signal = attempt.signal
        if signal is not None:
            send_json(conn, {"signal": signal})
        while (message := reader.read()) is not None:
            if "node" in message:
                attempt.node = str(message["node"])
                attempt.started.set()
            phase = message.get("phase")
            if isinstance(phase, str) and attempt.on_phase is not None:
                attempt.on_phase(attempt.trial_id, phase)
        with attempt.lock:
            if conn in attempt.watches:
                attempt.watches.remove(conn)

    def _pipe(self, attempt: Attempt, conn: socket.socket, reader: LineReader) -> None:
        if attempt.access is None:
            _close(conn)
            return
        gateway = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            gateway.connect(str(attempt.access.socket_path))
        except OSError:
            _close(gateway)
            _close(conn)
            return
        splice(conn, gateway, head=reader.rest())

    def _revoke(self, attempt: Attempt) -> dict[str, Any]:
        if self.gateway is None or attempt.access is None:
            return {"usage": None}
        usage = self.gateway.revoke(attempt.trial_id)
        return {"usage": None if usage is None else asdict(usage)}

    def _call(self, attempt: Attempt, header: dict[str, Any]) -> dict[str, Any]:
        path, body = header.get("path"), header.get("body")
        if self.gateway is None or not isinstance(path, str) or not isinstance(body, dict):
            return {"status": 400, "body": {"error": "no gateway, or a malformed call"}}
        try:
            status, reply = self.gateway.call(attempt.trial_id, path, body)
        except KeyError:
            return {"status": 403, "body": {"error": "the trial's model access has ended"}}
        return {"status": status, "body": reply}


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


__all__ = ["Attempt", "Bridge"]
