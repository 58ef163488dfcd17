"""Internet phases on Ray workers, behind the docker egress filter of the worker's host.

A real Ray cluster on this machine (a head with no CPUs at 127.0.0.2, a worker node at
127.0.0.3, and a node with no CPUs on a public-like address, all as root) runs, with
``--executor ray --sandbox docker``, Terminal-Bench 2's shape: a ``no-network`` agent and a
``public`` verifier. Both phases attack the same targets: a "public-like" server in a
network namespace (an address outside every blocked range, tests/support/netns.py), a
listener on all of the host's addresses, and every port the cluster's processes listen on
(the head's GCS port among them), at each of the host's own addresses a container could
route to (the filtered bridge's gateway, docker0, the primary IPv4) and at the public-like
node's address. That node stands for a cluster node on a public address, which neither the
private ranges nor (on another machine) the host's own addresses would cover: the filter
refuses the cluster's node addresses themselves, as the worker learns them from Ray, ahead
of every other rule (here the address is the host's too, so the test tells the two rules
apart by which one counted the packets). Judged from outside: what the servers received,
the record's posture and the filter's counters and logged destinations in its security
events.

Then a worker node that cannot install the filter (no ``iptables`` on its PATH) takes the
same task and one that leaves its policies unstated (Harbor's ``public``): both trials are
refused before any phase runs, saying why; the unstated one keeps the driver's plan rather
than quietly running without the network on that node.
"""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import make_task_dir, read_run_dir, start_cli
from support.docker import docker_client, require_image
from support.net import Listener, interface_ipv4, primary_addresses
from support.netns import PublicNet
from support.ray_cluster import RayCluster
from support.sampler import Sampler

pytestmark = [pytest.mark.docker, pytest.mark.root]

WORKER_IP = "127.0.0.3"


def _free_public_like() -> str:
    """An address of TEST-NET-2's 198.51.100.200-249 that no route or address uses here."""
    used = subprocess.run(["ip", "-4", "addr"], capture_output=True, text=True).stdout
    used += subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
    free = [n for n in range(200, 250) if f"198.51.100.{n}/" not in used
            and f"198.51.100.{n} " not in used]  # fmt: skip
    return f"198.51.100.{free[secrets.randbelow(len(free))]}"


#: A node of the cluster on a public-like address (TEST-NET-2): an address of this host,
#: in no range the filter refuses but the host's own.
PUBLIC_NODE_IP = _free_public_like()

#: Connects to every ``host:port`` given, sending ``<token> <target>``; prints JSON.
PROBE = r"""
import json, socket, struct, sys, threading
token, targets, out = sys.argv[1], sys.argv[2:], {}
def gateway():
    for line in open("/proc/net/route").read().splitlines()[1:]:
        fields = line.split()
        if fields[1] == "00000000":
            return socket.inet_ntoa(struct.pack("<L", int(fields[2], 16)))
    return "0.0.0.0"
def attack(target):
    host, _, port = target.rpartition(":")
    host = gateway() if host == "GW" else host
    try:
        s = socket.create_connection((host, int(port)), timeout=3)
        s.sendall(("%s %s\r\n\r\n" % (token, target)).encode())
        try:
            s.settimeout(3); s.recv(200)
        except OSError:
            pass
        s.close()
        out[target] = "CONNECTED"
    except OSError as exc:
        out[target] = "%s: %s" % (type(exc).__name__, exc)
threads = [threading.Thread(target=attack, args=(t,)) for t in targets]
for t in threads: t.start()
for t in threads: t.join()
print("PROBE " + json.dumps(out))
"""

TASK_TOML = """[task]
name = "e2e/raynet"
[agent]
timeout_sec = 60
[environment]
network_mode = "no-network"
[verifier]
network_mode = "public"
"""

#: Harbor's default: no network_mode stated, so public (where the backend enforces it).
UNSTATED_TOML = """[task]
name = "e2e/{name}"
[agent]
timeout_sec = 60
"""

TEST_SH = """#!/bin/bash
python3 /opt/probe.py {token} {targets} | tee "$HARNESS_VERIFIER_DIR/probe.txt"
grep -q '"{public}": "CONNECTED"' "$HARNESS_VERIFIER_DIR/probe.txt" && r=1 || r=0
echo $r > "$HARNESS_VERIFIER_DIR/reward.txt"
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    ray_cluster = RayCluster()
    subprocess.run(["ip", "addr", "add", f"{PUBLIC_NODE_IP}/32", "dev", "lo"], check=True)
    try:
        ray_cluster.add_node(0)  # the head: the driver's node, no room for trials
        ray_cluster.add_node(2)  # the worker node
        ray_cluster.add_node(0, ip=PUBLIC_NODE_IP)  # a node on a public address, no trials
        yield ray_cluster
    finally:
        ray_cluster.stop()
        subprocess.run(["ip", "addr", "del", f"{PUBLIC_NODE_IP}/32", "dev", "lo"], check=False)


def ray_ports(cluster: RayCluster) -> set[int]:
    """Every TCP port a process of the cluster listens on (GCS, raylets, workers...)."""
    pids = {proc.pid for node in cluster.nodes for proc in node.processes()}
    ports = set()
    for conn in psutil.net_connections(kind="tcp"):
        if conn.pid in pids and conn.status == psutil.CONN_LISTEN and conn.laddr:
            ports.add(int(conn.laddr.port))
    return ports


def reachable_from_host(address: str, port: int) -> bool:
    try:
        socket.create_connection((address, port), timeout=2).close()
        return True
    except OSError:
        return False


def make_task(
    parent: Path, token: str, targets: list[str], public: str, name: str = "raynet"
) -> Path:
    test_sh = TEST_SH.format(token=token, targets=" ".join(targets), public=public)
    toml = TASK_TOML if name == "raynet" else UNSTATED_TOML.format(name=name)
    task = make_task_dir(parent, name, toml=toml, test_sh=test_sh)
    (task / "environment").mkdir()
    (task / "environment" / "probe.py").write_text(PROBE)
    (task / "environment" / "Dockerfile").write_text(
        "FROM harness/base:bookworm\nCOPY probe.py /opt/probe.py\n"
    )
    return task


def run(cluster: RayCluster, tasks: Path, out: Path, name: str, agent: str) -> tuple[int, str]:
    running = start_cli(
        "run", tasks, "--agent", "command", "-j", "2", "--agent-cmd", agent, "--sandbox", "docker",
        "-o", out, "--run-name", name, "--executor", "ray",
        "--ray-address", str(cluster.address), "--display", "plain",
        env=cluster.env(),
    )  # fmt: skip
    result = running.wait(600)
    return result.code, result.stdout + result.stderr


def test_a_public_verifier_on_a_worker_reaches_the_internet_and_nothing_of_the_cluster(
    cluster: RayCluster, tmp_path: Path
) -> None:
    from sandbox.docker.egress import bridge_of

    require_image(docker_client())
    assert cluster.address is not None
    gcs = int(cluster.address.rsplit(":", 1)[1])
    ports = ray_ports(cluster)
    assert gcs in ports, (gcs, ports)
    own = [interface_ipv4("docker0") or "172.17.0.1", primary_addresses()["ipv4"]]
    # Control: Ray listens on the host's own addresses, not only on its nodes' loopback ones,
    # and the public node's ports answer at its address.
    exposed = sorted(p for p in ports if reachable_from_host(own[1], p))
    assert gcs in exposed, f"the GCS port is not open on {own[1]}: the attack would be moot"
    on_node = sorted(p for p in ports if reachable_from_host(PUBLIC_NODE_IP, p))
    assert len(on_node) > len(exposed), (on_node, exposed)  # its own node's ports too
    token = {role: f"{role}-{secrets.token_hex(6)}" for role in ("agent", "verifier")}
    with Listener(ipv6=True) as host, PublicNet(tmp_path) as public_net:
        public = f"{public_net.route()}:80"
        # GW: the container's default gateway (the filtered bridge's, made by the run).
        addresses = [*own, "GW"]
        node = [f"{PUBLIC_NODE_IP}:{p}" for p in [host.port, *on_node]]
        targets = [
            public,
            *(f"{a}:{host.port}" for a in addresses),
            *(f"{a}:{p}" for a in addresses for p in exposed),
            *node,
        ]
        task = make_task(tmp_path / "tasks", token["verifier"], targets, public)
        agent = f"python3 /opt/probe.py {token['agent']} {' '.join(targets)}"
        out = tmp_path / "runs"
        # Watched while the run lives: once it ends, the last run on the engine removes the
        # filtered network (another test's run may do so at any moment after).
        bridge, made = bridge_of(docker_client()), []
        with Sampler(lambda: made.append(interface_ipv4(bridge) is not None), interval=0.1):
            code, output = run(cluster, task, out, "raynet", agent)
        seen = public_net.seen()
        host_got = b"\n".join(data for _kind, _peer, data in host.received).decode()
    assert code == 0, output
    assert any(made), "the egress filter's bridge was not made"
    (record,) = read_run_dir(out / "raynet").records
    assert record["sandbox"]["node"] == WORKER_IP, record["sandbox"]
    assert record["status"] == "completed" and record["reward"] == 1.0, record
    # From outside: the verifier reached the public-like server, the agent did not.
    assert f"{token['verifier']} {public}" in seen, seen
    assert token["agent"] not in seen, seen
    # Neither phase reached the host's listener.
    assert token["agent"] not in host_got and token["verifier"] not in host_got, host_got
    # The record's posture says which policy each phase had.
    assert record["posture"]["network"]["mode"] == "no-network", record["posture"]
    assert record["verifier_posture"]["network"]["mode"] == "public", record["verifier_posture"]
    # The probes' own view: nothing of the cluster or the host, from either phase.
    evidence = out / "raynet" / "trials" / record["id"]
    verifier_probe = _probe((evidence / "verifier" / "probe.txt").read_text())
    agent_probe = _probe(_agent_output(evidence, token["agent"]))
    assert verifier_probe[public] == "CONNECTED" and agent_probe[public] != "CONNECTED"
    for probe in (agent_probe, verifier_probe):
        leaked = [t for t, r in probe.items() if r == "CONNECTED" and t != public]
        assert leaked == [], f"reached from a trial on the worker: {leaked}"
        assert len(probe) == len(targets), probe
    # The filter's counters, as the record's security events: the verifier was refused the
    # host (the Ray ports among its targets) and the agent everything off its loopback.
    refused = {(e.get("phase"), e.get("refused")) for e in record["events"] if "refused" in e}
    assert ("verifier", "host") in refused, record["events"]
    assert ("agent", "closed") in refused, record["events"]
    # The public node's address: refused as the cluster's, by the rule the worker made from
    # Ray's node list, before the host rule would have: its counter (every packet, the
    # count of record) and the destinations its log kept (a trial lists at most 100).
    verifier = [e for e in record["events"] if e.get("phase") == "verifier"]
    counted = [e for e in verifier if e.get("refused") == "cluster" and not e.get("logged")]
    assert [e["destination"] for e in counted] == [f"{PUBLIC_NODE_IP}/32"], verifier
    assert counted[0]["packets"] >= len(node), counted
    logged = {(e["ip"], e["refused"]) for e in verifier if e.get("logged")}
    assert [r for ip, r in logged if ip == PUBLIC_NODE_IP and r != "cluster"] == [], logged


def test_a_worker_that_cannot_filter_on_its_host_filters_in_the_trials_namespace(
    cluster: RayCluster, tmp_path: Path
) -> None:
    """The driver's host can filter; the worker's cannot (no iptables on its PATH).

    The worker's trial then gets its public verifier through the trial's own network
    namespace (sandbox/docker/netns_holder.py), whose rules refuse the cluster's nodes too.
    """
    require_image(docker_client())
    cluster.nodes[1].kill()  # the worker node
    bare = f"127.0.0.{2 + len(cluster.nodes)}"
    cluster.add_node(2, env={"PATH": "/usr/local/bin:/usr/bin:/bin"})  # alive once it returns
    token = {role: f"{role}-{secrets.token_hex(6)}" for role in ("agent", "verifier")}
    with Listener(ipv6=True) as host, PublicNet(tmp_path) as public_net:
        public = f"{public_net.route()}:80"
        own = [interface_ipv4("docker0") or "172.17.0.1", primary_addresses()["ipv4"]]
        node = [f"{PUBLIC_NODE_IP}:{host.port}"]
        targets = [public, *(f"{a}:{host.port}" for a in [*own, "GW"]), *node]
        task = make_task(tmp_path / "tasks", token["verifier"], targets, public)
        agent = f"python3 /opt/probe.py {token['agent']} {' '.join(targets)}"
        out = tmp_path / "runs"
        code, output = run(cluster, task, out, "raynetns", agent)
        seen = public_net.seen()
        host_got = b"\n".join(data for _kind, _peer, data in host.received).decode()
    assert code == 0, output
    (record,) = read_run_dir(out / "raynetns").records
    assert record["sandbox"]["node"] == bare, record["sandbox"]
    assert record["sandbox"]["egress"] == "namespace", record["sandbox"]
    assert record["status"] == "completed" and record["reward"] == 1.0, record
    assert f"{token['verifier']} {public}" in seen, seen
    assert token["agent"] not in seen, seen
    assert token["agent"] not in host_got and token["verifier"] not in host_got, host_got
    evidence = out / "raynetns" / "trials" / record["id"]
    verifier_probe = _probe((evidence / "verifier" / "probe.txt").read_text())
    leaked = [t for t, r in verifier_probe.items() if r == "CONNECTED" and t != public]
    assert leaked == [], f"reached from a trial on the worker: {leaked}"
    refused = {(e.get("phase"), e.get("refused")) for e in record["events"] if "refused" in e}
    assert ("verifier", "cluster") in refused, record["events"]
    assert not record.get("previous_attempts"), record


def _probe(text: str) -> dict[str, str]:
    lines = [line for line in text.splitlines() if line.startswith("PROBE ")]
    assert lines, text
    result: dict[str, str] = json.loads(lines[-1][len("PROBE ") :])
    return result


def _agent_output(evidence: Path, token: str) -> str:
    """The agent's stdout (wherever the command agent keeps it), found by its probe line."""
    for path in sorted(evidence.rglob("*")):
        if path.is_file() and "verifier" not in path.relative_to(evidence).parts:
            text = path.read_text(errors="replace")
            if "PROBE {" in text:
                return text
    raise AssertionError(f"no agent probe output under {evidence}: {list(evidence.rglob('*'))}")


def test_the_refusal_names_the_modes_the_backend_enforces_and_where_internet_runs() -> None:
    """Only a mode the run's backend declares no filter for is refused, saying so."""
    from harness.executors.ray.driver import network_refusal

    docker = frozenset({"no-network", "public"})
    assert network_refusal("verifier", "public", docker) is None
    assert network_refusal("agent", "no-network", None) is None
    why = network_refusal("agent", "allowlist", docker)
    assert why is not None and "(it enforces: no-network, public)" in why, why
    assert "internet phases run on Ray workers where the backend enforces the filter" in why
    undeclared = network_refusal("verifier", "public", None)
    assert undeclared is not None and "(it enforces: none declared)" in undeclared
