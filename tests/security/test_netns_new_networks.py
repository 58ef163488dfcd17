"""Networks the engine makes while a trial's namespace is open never open it to them.

The namespace's rules (:mod:`sandbox.docker.netns_rules`) are written once, before the
network appears. On the rootful engine and on the rootless one, a ``public`` namespace is
open when the engine makes a new network (from its own address pools, as compose projects
and other runs do) with a listening container on it; from the trial's namespace, a
container with no capability tries the new network's gateway (the engine's host, where a
listener waits on ``0.0.0.0`` and ``::``) and the new container, by TCP and UDP, first in
the ``public`` phase, then after the switch to ``no-network``. Judged from outside: the
host's listener and the new container saw nothing; every attempt was counted as a refusal.
"""

from __future__ import annotations

import json
import secrets
import socket
import time
from typing import Any

import psutil
import pytest
from support.docker import docker_client, require_image
from support.net import Listener
from support.users import rootless_engine
from test_netns_filter import LISTENER, PROBE

import docker
from sandbox.docker.netns_holder import NetnsHolder
from sandbox.docker.netns_rules import NetFacts, NetPlan
from sandbox.network_policy import NetworkPolicy

pytestmark = pytest.mark.docker

IMAGE = "harness/base:bookworm"
LABELS = {"org.harness.test": "netns-new-networks"}
PLAN = NetPlan({("agent", None): NetworkPolicy("public"), ("verifier", None): NetworkPolicy()})


def _client(engine: str) -> Any:
    if engine == "rootless":
        return docker.DockerClient(base_url=rootless_engine(), timeout=120)
    client = docker_client()
    require_image(client)
    return client


def _probe(client: Any, holder: NetnsHolder, token: str, targets: list[Any]) -> dict[str, Any]:
    output = client.containers.run(
        IMAGE, ["python3", "-c", PROBE, token, json.dumps(targets)],
        network_mode=holder.network_mode, cap_drop=["ALL"], user="65534:65534",
        remove=True, labels=LABELS,
    )  # fmt: skip
    result: dict[str, Any] = json.loads(output.decode().strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("engine", ["rootful", "rootless"])
def test_a_network_made_meanwhile_is_out_of_reach_in_every_phase(engine: str) -> None:
    client = _client(engine)
    holder = NetnsHolder.start(
        client, IMAGE, name=f"hx-nsnew-{secrets.token_hex(4)}", network="bridge", labels=LABELS
    )
    made: list[Any] = []
    try:
        facts = holder.facts()
        own = tuple(
            a.address
            for addresses in psutil.net_if_addrs().values()
            for a in addresses
            if a.family == socket.AF_INET
        )
        holder.load(
            PLAN,
            NetFacts(gateway=facts.gateway, subnets=facts.subnets, host_addresses=own,
                     resolvers=facts.resolvers),
        )  # fmt: skip
        holder.switch(PLAN.chain("agent"))
        # Made now, after the rules: a network from the engine's pools, a listener on it.
        network = client.networks.create(f"hx-nsnew-{secrets.token_hex(4)}", labels=LABELS)
        made.append(network)
        listening = client.containers.run(
            IMAGE, ["python3", "-c", LISTENER], network=network.name, cap_drop=["ALL"],
            detach=True, labels=LABELS,
        )  # fmt: skip
        made.insert(0, listening)
        listening.reload()
        address = listening.attrs["NetworkSettings"]["Networks"][network.name]["IPAddress"]
        network.reload()
        gateway = network.attrs["IPAM"]["Config"][0]["Gateway"].split("/")[0]
        holder.refusals()  # zeroed: what follows is counted alone
        results = {}
        with Listener(ipv6=True) as host:
            targets = [("new-gateway", gateway, host.port), ("new-container", address, 8080)]
            tokens = {"public": secrets.token_hex(8), "closed": secrets.token_hex(8)}
            results["public"] = _probe(client, holder, tokens["public"], targets)
            public_refusals = holder.refusals()
            holder.switch(PLAN.chain("verifier"))
            results["closed"] = _probe(client, holder, tokens["closed"], targets)
            closed_refusals = holder.refusals()
            time.sleep(0.5)  # let any datagram that got out land before judging
            host_got = [
                r for r in host.received if any(t.encode() in r[2] for t in tokens.values())
            ]
        logs = listening.logs().decode()
    finally:
        for thing in made:
            if hasattr(thing, "logs"):
                thing.remove(force=True)
            else:
                thing.remove()
        holder.remove()
    for phase, result in results.items():
        for name in ("new-gateway", "new-container"):
            assert result[name][0] != "tcp", (phase, name, result)
    assert host_got == [], host_got
    assert not any(token in logs for token in tokens.values()), logs
    # Each attempt (a SYN and a datagram to each target) was refused and counted.
    assert sum(public_refusals.values()) >= 4, public_refusals
    assert set(public_refusals) <= {"private", "host", "host-subnet", "gateway"}, public_refusals
    assert closed_refusals.get("closed", 0) >= 4, closed_refusals
