"""A trial's network namespace, owned by a holder container, filters it with no host rule.

The holder (:mod:`sandbox.docker.netns_holder`) is made through the engine's API alone and
writes the trial's rules (:mod:`sandbox.docker.netns_rules`) in the namespace the trial's
container joins; nothing is written to the host's firewall. Attacked on the rootful engine
under runc and gVisor (``runsc-net``), and on the rootless engine (Debian's rootlesskit and
slirp4netns) under runc, from a container with no capability, judged from outside:

- in a ``public`` phase: a host listener on ``0.0.0.0`` and ``::`` through the namespace's
  gateway, docker0 and the host's primary address, a private address and (rootful) the
  metadata address routed into a network namespace the test makes, and another trial's
  listening container, by TCP and UDP: none reached, each refusal counted; the namespace's
  public-like address answers (the control);
- a process left sending across the switch to ``no-network`` reaches nothing after it;
- none of the namespace's chains is in the host's own firewall.
"""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from support.docker import docker_client, require_image
from support.net import Listener, primary_addresses
from support.netns import PublicNet
from support.users import rootless_engine

import docker
from sandbox.docker.netns_holder import NetnsHolder
from sandbox.docker.netns_rules import CHAINS, NetFacts, NetPlan
from sandbox.network_policy import NetworkPolicy

pytestmark = pytest.mark.docker

IMAGE = "harness/base:bookworm"
LABELS = {"org.harness.test": "netns-filter"}
PLAN = NetPlan({("agent", None): NetworkPolicy("public"), ("verifier", None): NetworkPolicy()})
PROBE = r"""
import json, socket, sys
token = sys.argv[1]
out = {}
for name, host, port in json.loads(sys.argv[2]):
    got = []
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect((host, port)); s.sendall(token.encode()); got.append("tcp")
    except OSError as exc:
        got.append("tcp:" + type(exc).__name__)
    finally:
        s.close()
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        u.sendto(token.encode(), (host, port)); got.append("udp-sent")
    except OSError as exc:
        got.append("udp:" + type(exc).__name__)
    out[name] = got
print(json.dumps(out))
"""
SENDER = r"""
import socket, sys, time
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
n = 0
while True:
    n += 1
    try:
        u.sendto(("%s-%d" % (sys.argv[1], n)).encode(), (sys.argv[2], 8443))
    except OSError:
        pass
    print(n, flush=True)
    time.sleep(0.02)
"""
LISTENER = r"""
import socket, sys, threading
t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind(("0.0.0.0", 8080)); t.listen(8)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", 8080))
def udp():
    while True:
        data, _ = u.recvfrom(4096); print("udp", data.decode(errors="replace"), flush=True)
threading.Thread(target=udp, daemon=True).start()
while True:
    c, _ = t.accept(); print("tcp", c.recv(4096).decode(errors="replace"), flush=True); c.close()
"""


def _host_firewall() -> str:
    """The host's own rules, both families (other tests may change them meanwhile)."""
    return "".join(
        subprocess.run([tool], capture_output=True, text=True).stdout
        for tool in ("iptables-save", "ip6tables-save")
    )


def _host_addresses() -> tuple[str, ...]:
    return tuple(
        a.address
        for addresses in psutil.net_if_addrs().values()
        for a in addresses
        if a.family == socket.AF_INET
    )


@pytest.fixture
def public_net(tmp_path: Path) -> Iterator[PublicNet]:
    with PublicNet(tmp_path) as net:
        yield net


def _client(engine: str) -> Any:
    if engine == "rootless":
        return docker.DockerClient(base_url=rootless_engine(), timeout=120)
    client = docker_client()
    require_image(client)
    return client


def _holder(client: Any) -> NetnsHolder:
    name = f"hx-nstest-{secrets.token_hex(4)}"
    return NetnsHolder.start(client, IMAGE, name=name, network="bridge", labels=LABELS)


def _gone(*things: Any) -> None:
    for thing in things:
        if isinstance(thing, NetnsHolder):
            thing.remove()
        else:
            thing.remove(force=True)


@pytest.mark.parametrize(
    ("engine", "runtime"),
    [("rootful", "runc"), ("rootful", "runsc-net"), ("rootless", "runc")],
)
def test_a_public_namespace_reaches_the_internet_and_nothing_of_the_host_or_other_trials(
    engine: str, runtime: str, public_net: PublicNet
) -> None:
    client = _client(engine)
    if runtime != "runc" and runtime not in (client.info().get("Runtimes") or {}):
        pytest.fail(f"{runtime} is not registered; docker/start-engine.sh registers it")
    public = public_net.route()
    private = public_net.route(f"10.231.{secrets.randbelow(250) + 2}.{secrets.randbelow(250) + 2}")
    targets: list[tuple[str, str, int]] = [("public", public, 8443), ("private", private, 8443)]
    if engine == "rootful":
        targets.append(("metadata", public_net.route("169.254.169.254", containers_only=True), 80))
    token = secrets.token_hex(8)
    holder = _holder(client)
    other = _holder(client)
    made: list[Any] = [holder, other]
    try:
        facts = holder.facts()
        holder.load(
            PLAN,
            NetFacts(
                gateway=facts.gateway,
                subnets=facts.subnets,
                host_addresses=_host_addresses(),
                resolvers=facts.resolvers,
            ),
        )
        other_facts = other.facts()
        other.load(PLAN, NetFacts(gateway=other_facts.gateway, subnets=other_facts.subnets))
        other.switch(CHAINS["public"])
        listening = client.containers.run(
            IMAGE, ["python3", "-c", LISTENER], network_mode=other.network_mode,
            cap_drop=["ALL"], detach=True, labels=LABELS,
        )  # fmt: skip
        made.append(listening)
        other_ip = client.containers.get(other.container.id).attrs["NetworkSettings"]["Networks"][
            "bridge"
        ]["IPAddress"]
        holder.switch(PLAN.chain("agent"))
        with Listener(ipv6=True) as host:
            host_targets = [("gateway", str(facts.gateway), host.port)]
            host_targets += [
                (f"host-{kind}", address, host.port)
                for kind, address in primary_addresses().items()
                if kind == "ipv4"
            ]
            if engine == "rootful":
                host_targets.append(("docker0", "172.17.0.1", host.port))
            probe = client.containers.run(
                IMAGE,
                ["python3", "-c", PROBE, token, json.dumps(
                    targets + host_targets + [("other-trial", other_ip, 8080)]
                )],
                network_mode=holder.network_mode, runtime=runtime, cap_drop=["ALL"],
                user="65534:65534", remove=True, labels=LABELS,
            )  # fmt: skip
            results = json.loads(probe.decode().strip().splitlines()[-1])
            time.sleep(1)  # let any datagram that got out land before judging
            host_got = [r for r in host.received if token.encode() in r[2]]
        seen = public_net.seen()
        # The control: the public-like address took the connection and the datagram.
        assert results["public"][0] == "tcp", results
        assert seen.count(token) >= 2, seen
        # Nothing else was reached: no server saw the token but the public one's.
        assert not host_got, host_got
        for name in ("private", "metadata"):
            if name in results:
                assert results[name][0] != "tcp", results
        assert results["other-trial"][0] != "tcp", results
        other_log = listening.logs().decode()
        assert token not in other_log, other_log
        refused = holder.refusals()
        assert refused.get("private", 0) >= 2, refused
        assert refused.get("gateway", 0) + refused.get("host", 0) >= 2, refused
        if engine == "rootful":
            assert refused.get("metadata", 0) >= 2, refused

        # A process left sending across the switch to no-network reaches nothing after it.
        late = secrets.token_hex(8)
        sender = client.containers.run(
            IMAGE, ["python3", "-u", "-c", SENDER, late, public],
            network_mode=holder.network_mode, runtime=runtime, cap_drop=["ALL"],
            user="65534:65534", detach=True, labels=LABELS,
        )  # fmt: skip
        made.append(sender)
        deadline = time.monotonic() + 60
        while public_net.seen().count(late) < 5 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert public_net.seen().count(late) >= 5, "the public phase's datagrams never arrived"
        holder.switch(PLAN.chain("verifier"))
        time.sleep(0.5)  # datagrams in flight at the switch
        at_switch = public_net.seen().count(late)
        sent_at_switch = int(sender.logs().decode().split()[-1])
        while int(sender.logs().decode().split()[-1]) < sent_at_switch + 100:
            time.sleep(0.1)
        assert public_net.seen().count(late) == at_switch
        assert holder.refusals().get("closed", 0) >= 100
    finally:
        _gone(*reversed(made))
    # Every rule was the namespace's own: none of its chains is on the host.
    assert "HXN-" not in _host_firewall()
