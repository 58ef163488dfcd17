"""The worker's end of the link to the driver: the gateway relay and the control channel.

On a worker node the trial gets a gateway socket of its own, as on the driver: a unix socket
in a root-only dir that the sandbox's supervisor relays loopback connections to. Behind it,
:class:`RelayedGateway` forwards each connection to the driver's bridge, which splices it to
the real gateway. The worker process holds the trial's token and the attempt's ticket,
never a provider key.

:class:`Watch` keeps the attempt's control channel open: phases go to the driver's live
status, ``cancel``/``abort`` come back, and a driver that goes away aborts the trial.
"""

from __future__ import annotations

import shutil
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.executors.ray.jobs import BridgeAddress
from harness.executors.ray.wire import LineReader, WireError, send_json, splice
from harness.gateway import TrialAccess, TrialUsage
from harness.gateway.sockets import make_socket_root, make_trial_socket
from harness.models.catalog import ModelSpec
from sandbox.network_policy import NetworkPolicy

CONNECT_TIMEOUT_SEC = 10.0


class DriverLink:
    """Opens connections to the driver's bridge for one attempt."""

    def __init__(self, bridge: BridgeAddress, trial_id: str) -> None:
        self.bridge = bridge
        self.trial_id = trial_id

    def open(self, op: str, **fields: Any) -> socket.socket:
        """A connection to the bridge that has sent its header line."""
        sock = socket.create_connection(
            (self.bridge.host, self.bridge.port), timeout=CONNECT_TIMEOUT_SEC
        )
        sock.settimeout(None)
        try:
            header = {"op": op, "trial": self.trial_id, "ticket": self.bridge.ticket}
            send_json(sock, {**header, **fields})
        except OSError:
            sock.close()
            raise
        return sock

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """One request, one JSON reply.

        Raises:
            WireError: The bridge closed without answering (a withdrawn ticket).
        """
        with self.open(op, **fields) as sock:
            reply = LineReader(sock).read()
        if reply is None:
            raise WireError(f"the driver's bridge did not answer {op!r}")
        return reply


class RelayedGateway:
    """The driver's gateway as a worker's trial sees it (a :class:`TrialGateway`).

    Args:
        link: The attempt's link to the driver.
        model: The run's model.
        token: The trial's gateway token (issued by the driver for this attempt).
    """

    def __init__(self, link: DriverLink, model: ModelSpec, token: str) -> None:
        self.link = link
        self.model = model
        self._token = token
        self._server: socket.socket | None = None
        self._root: Path | None = None
        self._revoked = False

    def open_trial(
        self,
        trial_id: str,
        task_name: str,
        record_path: Path,
        *,
        network: NetworkPolicy | None = None,
    ) -> TrialAccess:
        """Start the trial's local socket; the calls are recorded on the driver.

        ``network`` is not sent: the driver holds the trial's calls to the policy it opened
        the access with (the narrowest of the trial's agent phases).
        """
        self._root = make_socket_root()
        path = make_trial_socket(self._root)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(path))
        path.chmod(0o600)
        server.listen(64)
        self._server = server
        threading.Thread(target=self._accept, name=f"relay-{trial_id}", daemon=True).start()
        return TrialAccess(trial_id=trial_id, socket_path=path, model=self.model, token=self._token)

    def _accept(self) -> None:
        assert self._server is not None
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(conn,), daemon=True).start()

    def _relay(self, conn: socket.socket) -> None:
        try:
            upstream = self.link.open("pipe")
        except OSError:
            conn.close()
            return
        splice(conn, upstream)

    def revoke(self, trial_id: str) -> TrialUsage | None:
        """Stop relaying and end the trial's access on the driver; its usage totals."""
        self._stop()
        if self._revoked:
            return None
        self._revoked = True
        try:
            usage = self.link.request("revoke").get("usage")
        except (OSError, WireError):
            return None  # the driver revokes the token itself when the attempt ends
        return TrialUsage(**usage) if isinstance(usage, dict) else None

    def set_network(self, trial_id: str, network: NetworkPolicy, step: str | None = None) -> None:
        """Nothing: the driver's access keeps the narrowest policy of the trial's steps."""

    def network_events(self, trial_id: str) -> list[dict[str, Any]]:
        """None here: the driver adds its gateway's events to the trial's record."""
        return []

    def call(self, trial_id: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        """A trusted in-process agent's model call, made by the driver's gateway."""
        reply = self.link.request("call", path=path, body=body)
        return int(reply.get("status", 502)), reply.get("body")

    def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    def close(self) -> None:
        """Stop relaying (the driver revokes the token itself when the attempt ends)."""
        self._stop()


class Watch:
    """The attempt's control channel (see :mod:`.wire`).

    Args:
        link: The attempt's link to the driver.
        on_signal: Called with ``cancel`` or ``abort`` (from its own thread); a channel
            that breaks before :meth:`close` counts as ``abort``.
    """

    def __init__(self, link: DriverLink, on_signal: Callable[[str], None]) -> None:
        self.link = link
        self.on_signal = on_signal
        self._sock: socket.socket | None = None
        self._closing = threading.Event()
        self._send_lock = threading.Lock()

    def open(self, node: str) -> None:
        """Connect and say where the attempt runs."""
        self._sock = self.link.open("watch")
        send_json(self._sock, {"node": node})
        threading.Thread(target=self._listen, name="watch", daemon=True).start()

    def phase(self, trial_id: str, phase: str) -> None:
        """Report a phase (best effort: the status is live state, not a record)."""
        if self._sock is None:
            return
        with self._send_lock:
            try:
                send_json(self._sock, {"phase": phase})
            except OSError:
                pass

    def _listen(self) -> None:
        assert self._sock is not None
        reader = LineReader(self._sock)
        try:
            while (message := reader.read()) is not None:
                signal = message.get("signal")
                if signal in ("cancel", "abort"):
                    self.on_signal(str(signal))
        except (OSError, WireError):
            pass
        if not self._closing.is_set():
            self.on_signal("abort")  # the driver is gone: nobody would take the record

    def close(self) -> None:
        """Close the channel (the attempt is over)."""
        self._closing.set()
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()


__all__ = ["DriverLink", "RelayedGateway", "Watch"]
