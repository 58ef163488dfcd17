"""The harness network's teardown: an endpoint whose container is gone does not keep it.

The engine can keep the endpoint of a container removed while it was being connected; the
network then cannot be removed ("has active endpoints"). Such an endpoint is disconnected
by force, by its container's name; a live container's endpoint keeps the network. The
engine's answers are played by a small stand-in with the SDK's shape: a stale endpoint
cannot be made on demand on a real engine.
"""

from __future__ import annotations

from typing import Any

import docker.errors

from sandbox.docker.egress import _only_stale_endpoints


class Api:
    def __init__(self, alive: set[str]) -> None:
        self.alive = alive
        self.disconnected: list[tuple[str, str, bool]] = []

    def inspect_container(self, container_id: str) -> dict[str, Any]:
        if container_id not in self.alive:
            raise docker.errors.NotFound(f"No such container: {container_id}")
        return {"Id": container_id}

    def disconnect_container_from_network(self, name: str, net: str, force: bool) -> None:
        self.disconnected.append((name, net, force))


class Client:
    def __init__(self, alive: set[str]) -> None:
        self.api = Api(alive)


class Network:
    id = "n" * 64

    def __init__(self, containers: dict[str, Any]) -> None:
        self.attrs = {"Containers": containers}


def test_stale_endpoints_are_disconnected_by_force_by_name() -> None:
    client = Client(alive=set())
    network = Network({"a" * 64: {"Name": "harness-run-t1"}, "ep-" + "b" * 60: {"Name": "x"}})
    assert _only_stale_endpoints(client, network) is True
    assert client.api.disconnected == [
        ("harness-run-t1", network.id, True),
        ("x", network.id, True),
    ]


def test_a_live_containers_endpoint_keeps_the_network() -> None:
    client = Client(alive={"c" * 64})
    network = Network({"c" * 64: {"Name": "harness-run-live"}})
    assert _only_stale_endpoints(client, network) is False
    assert client.api.disconnected == []


def test_no_endpoint_nothing_to_do() -> None:
    client = Client(alive=set())
    assert _only_stale_endpoints(client, Network({})) is True
    assert client.api.disconnected == []
