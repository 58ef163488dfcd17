"""The harness network's teardown: an endpoint whose container is gone does not keep it.

The engine can keep the endpoint of a container removed while it was being connected; the
network then cannot be removed ("has active endpoints"). Such an endpoint is disconnected
by force, by its container's name; a live container's endpoint keeps the network; one the
engine is removing is waited for. A removal the engine refuses for a moment is tried again,
and one it keeps refusing is an error that says what to run. The engine's answers are
played by a small stand-in with the SDK's shape: a stale endpoint, or an endpoint released
a moment late, cannot be made on demand on a real engine.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from sandbox.docker import egress
from sandbox.docker.egress import _only_stale_endpoints, _remove_network
from sandbox.errors import SandboxError

#: No deadline to speak of: a decision is made on the first look.
NOW = 0.0


class Api:
    def __init__(self, alive: set[str], removing: dict[str, int] | None = None) -> None:
        self.alive = alive
        #: Containers the engine is removing, and how many more looks they last.
        self.removing = dict(removing or {})
        self.disconnected: list[tuple[str, str, bool]] = []
        self.looks = 0

    def inspect_container(self, container_id: str) -> dict[str, Any]:
        self.looks += 1
        if self.removing.get(container_id, 0) > 0:
            self.removing[container_id] -= 1
            return {"Id": container_id, "State": {"Status": "removing"}}
        if container_id not in self.alive:
            raise docker.errors.NotFound(f"No such container: {container_id}")
        return {"Id": container_id, "State": {"Status": "running"}}

    def disconnect_container_from_network(self, name: str, net: str, force: bool) -> None:
        self.disconnected.append((name, net, force))


class Client:
    def __init__(self, alive: set[str], removing: dict[str, int] | None = None) -> None:
        self.api = Api(alive, removing)


class Network:
    id = "n" * 64

    def __init__(self, containers: dict[str, Any], refusals: int = 0) -> None:
        self.attrs = {"Containers": containers}
        #: How many removals the engine refuses before it takes one.
        self.refusals = refusals
        self.removed = False
        self.asked = 0

    def reload(self) -> None:
        pass

    def remove(self) -> None:
        self.asked += 1
        if self.refusals > 0:
            self.refusals -= 1
            raise docker.errors.APIError(f"error while removing network: network {self.id} "
                                         "has active endpoints")  # fmt: skip
        self.removed = True


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Looks a millisecond apart, a settling time of a second, a state dir of its own."""
    monkeypatch.setattr(egress, "_SETTLE_POLL_SEC", 0.001)
    monkeypatch.setattr(egress, "SETTLE_SEC", 1.0)
    monkeypatch.setattr(egress, "STATE_DIR", tmp_path / "egress-state")


def test_stale_endpoints_are_disconnected_by_force_by_name() -> None:
    client = Client(alive=set())
    network = Network({"a" * 64: {"Name": "harness-run-t1"}, "ep-" + "b" * 60: {"Name": "x"}})
    assert _only_stale_endpoints(client, network, NOW) is True
    assert client.api.disconnected == [
        ("harness-run-t1", network.id, True),
        ("x", network.id, True),
    ]


def test_a_live_containers_endpoint_keeps_the_network() -> None:
    client = Client(alive={"c" * 64})
    network = Network({"c" * 64: {"Name": "harness-run-live"}})
    assert _only_stale_endpoints(client, network, NOW) is False
    assert client.api.disconnected == []


def test_no_endpoint_nothing_to_do() -> None:
    client = Client(alive=set())
    assert _only_stale_endpoints(client, Network({}), NOW) is True
    assert client.api.disconnected == []


def test_a_container_the_engine_is_removing_is_waited_for() -> None:
    client = Client(alive=set(), removing={"d" * 64: 3})
    network = Network({"d" * 64: {"Name": "harness-run-going"}})
    assert _only_stale_endpoints(client, network, time.monotonic() + 1) is True
    assert client.api.removing == {"d" * 64: 0}


def test_one_still_removing_at_the_deadline_keeps_the_network() -> None:
    client = Client(alive=set(), removing={"d" * 64: 10**9})
    network = Network({"d" * 64: {"Name": "harness-run-stuck"}})
    assert _only_stale_endpoints(client, network, time.monotonic() + 0.05) is False
    assert client.api.disconnected == []


def test_a_removal_refused_for_a_moment_is_tried_again() -> None:
    network = Network({}, refusals=3)
    assert _remove_network(Client(alive=set()), network) is True
    assert network.removed


def test_a_removal_refused_past_the_settling_time_says_what_to_run() -> None:
    # An endpoint the engine keeps listing though its container is gone (disconnected in
    # vain): the plain advice.
    network = Network({"a" * 64: {"Name": "harness-run-t1"}}, refusals=10**9)
    with pytest.raises(SandboxError, match="has active endpoints.*harness sandbox cleanup") as info:
        _remove_network(Client(alive=set()), network)
    assert "restart" not in str(info.value)
    assert not network.removed


def test_a_removal_refused_with_no_container_attached_says_the_engine_needs_a_restart() -> None:
    """The engine counts an endpoint it lists nowhere: only its restart clears the count."""
    network = Network({}, refusals=10**9)
    with pytest.raises(SandboxError) as info:
        _remove_network(Client(alive=set()), network)
    message = str(info.value)
    assert "has active endpoints" in message and "no container is attached" in message
    assert "restart the docker engine, then run `harness sandbox cleanup`" in message
    assert not network.removed


def test_a_live_container_keeps_the_network_without_a_wait() -> None:
    client = Client(alive={"c" * 64})
    network = Network({"c" * 64: {"Name": "harness-run-live"}})
    assert _remove_network(client, network) is False
    assert not network.removed and client.api.looks == 1


def test_at_a_runs_end_an_endpoint_no_container_has_is_left_after_a_short_grace() -> None:
    """A run's end does not wait out the settling time for what only a restart mends."""
    network = Network({}, refusals=10**9)
    started = time.monotonic()
    with pytest.raises(egress.StaleEndpoint, match="restart the docker engine"):
        _remove_network(Client(alive=set()), network, stale_grace=0.05)
    assert time.monotonic() - started < egress.SETTLE_SEC  # the grace, not the settling
    assert not network.removed


def test_at_a_runs_end_an_endpoint_released_a_moment_late_still_goes() -> None:
    network = Network({}, refusals=3)
    assert _remove_network(Client(alive=set()), network, stale_grace=0.5) is True
    assert network.removed


def test_at_a_runs_end_an_attached_endpoint_is_not_taken_for_a_stale_one() -> None:
    """An endpoint the engine lists (a container it is removing) gets the settling time."""
    network = Network({"a" * 64: {"Name": "harness-run-t1"}}, refusals=10**9)
    with pytest.raises(SandboxError) as info:
        _remove_network(Client(alive=set()), network, stale_grace=0.0)
    assert not isinstance(info.value, egress.StaleEndpoint)


def test_a_network_found_stale_is_asked_once_at_later_runs_ends_never_waited_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What only a restart mends is remembered: the next runs' ends do not wait for it."""
    monkeypatch.setattr(egress, "KNOWN_STALE_GRACE_SEC", 0.0)  # one ask, to count it
    network = Network({}, refusals=10**9)
    with pytest.raises(egress.StaleEndpoint):
        _remove_network(Client(alive=set()), network, stale_grace=0.2)
    assert network.asked > 1  # the first time, the grace: it may be released late
    network.asked = 0
    started = time.monotonic()
    with pytest.raises(egress.StaleEndpoint):
        _remove_network(Client(alive=set()), network, stale_grace=0.2)
    assert network.asked == 1 and time.monotonic() - started < 0.2
    # `harness sandbox cleanup` (no grace), the command run after the engine's restart,
    # still gets the settling time: a restarted engine may release the endpoint late.
    network.asked = 0
    with pytest.raises(egress.StaleEndpoint):
        _remove_network(Client(alive=set()), network)
    assert network.asked > 1


def test_a_network_found_stale_goes_once_the_engine_takes_its_removal_and_is_forgotten() -> None:
    """After the engine's restart the removal succeeds; the ID is no longer remembered."""
    network = Network({}, refusals=10**9)
    with pytest.raises(egress.StaleEndpoint):
        _remove_network(Client(alive=set()), network, stale_grace=0.05)
    assert network.id in egress._stale_networks()
    network.refusals = 0  # the engine restarted
    assert _remove_network(Client(alive=set()), network, stale_grace=0.05) is True
    assert network.removed and egress._stale_networks() == set()
