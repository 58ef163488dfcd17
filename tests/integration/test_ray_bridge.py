"""The bridge between a Ray worker and the driver's gateway, over real sockets on loopback.

The gateway side is a unix socket server standing in for one trial's gateway socket, and a
small :class:`TrialGateway` fake that counts revocations; the bridge, the worker's relay and
its control channel are the real ones.
"""

from __future__ import annotations

import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.executors.ray.bridge import Bridge
from harness.executors.ray.jobs import BridgeAddress
from harness.executors.ray.relay import DriverLink, RelayedGateway, Watch
from harness.gateway import TrialAccess, TrialUsage
from harness.models.catalog import ModelSpec

MODEL = ModelSpec(provider="faux", name="demo", upstream="demo", api="openai")


class TrialSocket:
    """A trial's gateway socket that answers every connection with what it read, upper-cased."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(8)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                data = conn.recv(1024)
                conn.sendall(data.upper())


class CountingGateway:
    """Stands in for the driver's Gateway: revocations and calls are counted."""

    def __init__(self) -> None:
        self.revoked: list[str] = []

    def open_trial(self, trial_id: str, task_name: str, record_path: Path) -> TrialAccess:
        raise AssertionError("the driver opens access itself")

    def revoke(self, trial_id: str) -> TrialUsage | None:
        self.revoked.append(trial_id)
        return TrialUsage(calls=3, input_tokens=10, output_tokens=5)

    def call(self, trial_id: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        return 200, {"trial": trial_id, "path": path, "echo": body}


@pytest.fixture
def driver() -> Iterator[tuple[Bridge, CountingGateway, TrialAccess]]:
    gateway = CountingGateway()
    bridge = Bridge("127.0.0.1", gateway)
    bridge.start()
    with tempfile.TemporaryDirectory() as tmp:
        access = TrialAccess("t1", Path(tmp) / "gw.sock", MODEL, token="hgw-token")
        trial_socket = TrialSocket(access.socket_path)
        yield bridge, gateway, access
        trial_socket.server.close()
    bridge.close()


def _talk(address: BridgeAddress, header: bytes, payload: bytes = b"") -> bytes:
    with socket.create_connection((address.host, address.port), timeout=5) as conn:
        conn.sendall(header + payload)
        conn.shutdown(socket.SHUT_WR)
        chunks = []
        while data := conn.recv(1024):
            chunks.append(data)
    return b"".join(chunks)


def test_a_connection_without_the_attempts_ticket_gets_nothing(
    driver: tuple[Bridge, CountingGateway, TrialAccess],
) -> None:
    bridge, gateway, access = driver
    attempt, address = bridge.issue("t1", access)
    for header in (
        b"not json\n",
        b'{"op": "pipe", "trial": "t1"}\n',
        b'{"op": "pipe", "trial": "t1", "ticket": "' + b"0" * 64 + b'"}\n',
        b'{"op": "revoke", "trial": "t2", "ticket": "' + address.ticket.encode() + b'"}\n',
    ):
        assert _talk(address, header, b"hello") == b""
    assert gateway.revoked == []
    # With the ticket, the bytes reach the trial's gateway socket and come back.
    good = b'{"op": "pipe", "trial": "t1", "ticket": "' + address.ticket.encode() + b'"}\n'
    assert _talk(address, good, b"hello") == b"HELLO"
    bridge.withdraw(attempt)
    assert _talk(address, good, b"hello") == b"", "a withdrawn ticket still works"


def test_the_relay_reaches_the_gateway_and_revokes_through_the_bridge(
    driver: tuple[Bridge, CountingGateway, TrialAccess],
) -> None:
    bridge, gateway, access = driver
    _attempt, address = bridge.issue("t1", access)
    relay = RelayedGateway(DriverLink(address, "t1"), MODEL, "hgw-token")
    local = relay.open_trial("t1", "task", Path("/nonexistent/model_calls.jsonl"))
    assert local.socket_path != access.socket_path and local.token == "hgw-token"
    assert oct(local.socket_path.parent.stat().st_mode & 0o777) == "0o700"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(5)
        conn.connect(str(local.socket_path))
        conn.sendall(b"ping")
        conn.shutdown(socket.SHUT_WR)
        assert conn.recv(1024) == b"PING"
    assert relay.call("t1", "/v1/chat/completions", {"x": 1}) == (
        200,
        {"trial": "t1", "path": "/v1/chat/completions", "echo": {"x": 1}},
    )
    usage = relay.revoke("t1")
    assert usage is not None and usage.calls == 3 and usage.total_tokens == 15
    assert gateway.revoked == ["t1"]
    assert not local.socket_path.exists(), "the relay's socket outlived the revocation"


def test_the_control_channel_carries_phases_and_interrupts(
    driver: tuple[Bridge, CountingGateway, TrialAccess],
) -> None:
    bridge, _gateway, access = driver
    phases: list[tuple[str, str]] = []
    attempt, address = bridge.issue(
        "t1", access, lambda trial, phase: phases.append((trial, phase))
    )
    signals: list[str] = []
    watch = Watch(DriverLink(address, "t1"), signals.append)
    watch.open("10.0.0.7")
    watch.phase("t1", "execute")
    assert attempt.started.wait(5) and attempt.node == "10.0.0.7"
    _wait(lambda: phases == [("t1", "execute")])
    bridge.signal_all("cancel")
    _wait(lambda: signals == ["cancel"])
    bridge.withdraw(attempt)  # the driver gone from the attempt: the worker aborts it
    _wait(lambda: signals == ["cancel", "abort"])
    watch.close()

    # An attempt that starts after the interrupt hears it at once.
    late, address = bridge.issue("t1", access)
    late.send_signal("cancel")
    heard: list[str] = []
    watch = Watch(DriverLink(address, "t1"), heard.append)
    watch.open("10.0.0.8")
    _wait(lambda: heard[:1] == ["cancel"])
    watch.close()


def _wait(check: Any, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
