"""Attacks on the docker egress filter (``sandbox/docker/egress.py``), under runc and gVisor.

Real servers made by the test: a listener on every address of the host (``0.0.0.0`` and
``::``, TCP and UDP), and a network namespace behind a veth pair holding a "private"
address (10.x), a "public-like" one outside every blocked range (198.51.100.7, routed to
it) and 169.254.169.254. Two trials run side by side on real containers:

- ``A``: a ``public`` agent attacks the host on each of its addresses (the filtered
  bridge's gateway, docker0, the primary IPv4 and IPv6, the gateway's link-local IPv6),
  the metadata address, the private address and the second trial's container, and
  reaches the public-like server. Between its phases, raw IPv6 frames leave its network
  namespace (what an agent would need a raw socket for: the container has no IPv6) to
  the host's IPv6 addresses. Its ``no-network`` verifier then reaches nothing, and floods
  300 distinct private and CGNAT addresses.
- ``C``: a ``no-network`` agent listens (A's target), tries the public-like server and the
  Debian mirror, and leaves a process behind that keeps trying; its ``public`` verifier
  reaches both.

The verdict is what the servers received (from outside), the trials' security events
(the filter's counters, and the exact destinations its log kept: each attack's address and
port, bounded under the flood, IPv6 counted for A and not for C) and the chains left on
the host after the run.
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.egress_runtime import egress_runtime
from support.net import Listener, interface_ipv4, link_local, primary_addresses, send_raw6

from sandbox.backend import PhaseRequest, Sandbox, SandboxSpec
from sandbox.docker.nflog import MAX_DESTINATIONS
from sandbox.environment import FIXED_PATH
from sandbox.network_policy import NetworkPolicy

pytestmark = [pytest.mark.docker, pytest.mark.root]

PUBLIC = NetworkPolicy(mode="public")
CLOSED = NetworkPolicy(mode="no-network")
PUBLIC_LIKE = "198.51.100.7"
METADATA = "169.254.169.254"
MIRROR = "http://deb.debian.org/debian/dists/bookworm/Release"

#: A server in the namespace: TCP and UDP on one port, one line per peer and payload.
SERVER = r"""
import socket, sys, threading
port, log = int(sys.argv[1]), sys.argv[2]
def record(kind, peer, data):
    with open(log, "a") as fh:
        fh.write("%s %s %s\n" % (kind, peer, data.decode(errors="replace").strip()))
tcp = socket.socket(); tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
tcp.bind(("0.0.0.0", port)); tcp.listen(64)
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); udp.bind(("0.0.0.0", port))
def datagrams():
    while True:
        data, peer = udp.recvfrom(4096)
        record("udp", peer[0], data)
threading.Thread(target=datagrams, daemon=True).start()
open(log, "a").close()
while True:
    conn, peer = tcp.accept()
    conn.settimeout(3)
    try:
        data = conn.recv(4096)
    except OSError:
        data = b""
    record("tcp", peer[0], data)
    conn.close()
"""

#: Connects to every ``host:port`` of $TARGETS (in parallel), sending ``$TOKEN <target>``
#: by TCP and UDP, retrying until $DEADLINE seconds passed; prints what happened as JSON.
PROBE = r"""
import json, os, socket, threading, time, urllib.request
token, out = os.environ["TOKEN"], {}
deadline = time.monotonic() + float(os.environ.get("DEADLINE", "0"))
def attack(target):
    host, _, port = target.rpartition(":")
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    while True:
        try:
            address = socket.getaddrinfo(host, int(port), family, socket.SOCK_STREAM)[0][4]
            s = socket.socket(family, socket.SOCK_STREAM); s.settimeout(1.5)
            s.connect(address); s.sendall(("%s %s\n" % (token, target)).encode()); s.close()
            out[target] = "CONNECTED"
            return
        except OSError as exc:
            out[target] = "%s: %s" % (type(exc).__name__, exc)
        try:
            u = socket.socket(family, socket.SOCK_DGRAM)
            u.sendto(("%s %s udp\n" % (token, target)).encode(), address); u.close()
        except (OSError, NameError):
            pass
        if time.monotonic() > deadline:
            return
        time.sleep(0.3)
targets = [t for t in os.environ["TARGETS"].split(",") if t]
threads = [threading.Thread(target=attack, args=(t,)) for t in targets]
for t in threads: t.start()
for t in threads: t.join()
if os.environ.get("MIRROR"):
    try:
        body = urllib.request.urlopen(os.environ["MIRROR"], timeout=10).read(200).decode()
        out["mirror"] = body.splitlines()[0]
    except Exception as exc:
        out["mirror"] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps(out))
"""

#: Sends one UDP datagram to each of 150 addresses under each prefix of $FLOOD_NETS.
FLOOD = r"""
import os, socket
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for prefix in os.environ["FLOOD_NETS"].split(","):
    for n in range(150):
        try:
            u.sendto(b"flood", ("%s.%d.%d" % (prefix, n // 100, n % 100 + 1), 9))
        except OSError:
            pass
"""

#: C's agent: a listener (A's target) and a process left behind that keeps trying out.
LISTEN_AND_LEAVE = r"""
export TOKEN_LEFT=@LEFTOVER@ TARGETS_LEFT=@PUBLIC@
setsid bash -c 'while :; do TOKEN=$TOKEN_LEFT TARGETS=$TARGETS_LEFT python3 -c "$PROBE"
  sleep 0.2; done' </dev/null >/dev/null 2>&1 &
python3 - <<'PY' &
import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", @CPORT@)); s.listen(8); s.settimeout(0.5)
end, peers = time.monotonic() + 10, []
while time.monotonic() < end:
    try:
        conn, peer = s.accept()
        peers.append(peer[0]); conn.close()
    except OSError:
        pass
print("PEERS", peers)
PY
listener=$!
sleep 1
TARGETS=127.0.0.1:@CPORT@,@PUBLIC@ MIRROR=@MIRROR@ python3 -c "$PROBE"
wait $listener
"""


def _sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=30)


@pytest.fixture
def netns(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A namespace with a private, a public-like and the metadata address, and a server."""
    if os.geteuid() != 0:
        pytest.fail("the egress attacks need root (network namespaces, host routes)")
    tag = secrets.token_hex(3)
    ns, host_end, ns_end = f"hxe-{tag}", f"hxeh{tag}", f"hxen{tag}"
    octet = int(tag[:2], 16)
    private = f"10.201.{octet}.2"
    port = 20000 + secrets.randbelow(20000)
    log = tmp_path / "netns-server.log"
    routes: list[str] = []
    _sh("ip", "netns", "add", ns)
    server: subprocess.Popen[str] | None = None
    try:
        _sh("ip", "link", "add", host_end, "type", "veth", "peer", "name", ns_end)
        _sh("ip", "link", "set", ns_end, "netns", ns)
        _sh("ip", "addr", "add", f"10.201.{octet}.1/30", "dev", host_end)
        _sh("ip", "link", "set", host_end, "up")
        for argv in (
            ("addr", "add", f"{private}/30", "dev", ns_end),
            ("link", "set", ns_end, "up"),
            ("link", "set", "lo", "up"),
            ("addr", "add", f"{PUBLIC_LIKE}/32", "dev", "lo"),
            ("addr", "add", f"{METADATA}/32", "dev", "lo"),
            ("route", "add", "default", "via", f"10.201.{octet}.1"),
        ):
            _sh("ip", "-n", ns, *argv)
        for address in (PUBLIC_LIKE, METADATA):
            _sh("ip", "route", "add", f"{address}/32", "via", private)
            routes.append(address)
        server = subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-c", SERVER, str(port), str(log)],
            text=True,
        )
        yield {"private": private, "port": port, "log": log}
    finally:
        if server is not None:
            server.send_signal(signal.SIGKILL)
            server.wait(timeout=10)
        for address in routes:
            subprocess.run(["ip", "route", "del", f"{address}/32"], check=False)
        subprocess.run(["ip", "link", "del", host_end], check=False)
        subprocess.run(["ip", "netns", "del", ns], check=False)


@pytest.fixture(params=[None, "runsc"], ids=["runc", "runsc"])
def docker_runtime(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A DockerRuntime under runc, and under gVisor (its ``runsc-net`` sibling)."""
    with egress_runtime(request.param, "egress") as runtime:
        yield runtime


def _phase(sandbox: Sandbox, role: str, script: str, env: dict[str, str]) -> dict[str, Any]:
    full = {"PATH": FIXED_PATH, "PROBE": PROBE, "FLOOD": FLOOD, **env}
    result = sandbox.run_phase(
        PhaseRequest(role=role, argv=["bash", "-c", script], env=full, timeout_sec=60)  # type: ignore[arg-type]
    )
    data, _event = sandbox.read_file(f"{sandbox.paths.logs}/{role}.stdout", max_bytes=1 << 16)
    text = (data or b"").decode()
    lines = [line for line in text.splitlines() if line.startswith("{")]
    assert result.exit_code == 0 and lines, (result, text)
    report: dict[str, Any] = json.loads(lines[-1])
    report["_stdout"] = text
    report["_survivors"] = result.survivor_count
    return report


def _address(sandbox: Any, network: str) -> str:
    sandbox._container.reload()
    return str(sandbox._container.attrs["NetworkSettings"]["Networks"][network]["IPAddress"])


def _chains() -> str:
    return _ipt("-S").stdout


def test_public_keeps_host_private_and_metadata_out_and_phases_switch(
    docker_runtime: Any, netns: dict[str, Any]
) -> None:
    from sandbox.docker.backend import DockerSandbox
    from sandbox.docker.egress import NETWORK

    port, cport = netns["port"], 20000 + secrets.randbelow(20000)
    public = f"{PUBLIC_LIKE}:{port}"
    token = {k: f"{k}-{secrets.token_hex(6)}" for k in ("A", "A6", "AV", "C", "CL", "CV")}
    made: list[Any] = []

    def start(name: str, agent: NetworkPolicy, verifier: NetworkPolicy) -> Any:
        spec = SandboxSpec(
            trial_id=f"egress-{name}-{secrets.token_hex(3)}",
            allow_internet=True,
            networks={"agent": agent, "verifier": verifier},
        )
        sandbox = DockerSandbox(spec, docker_runtime)
        made.append(sandbox)
        sandbox.start()
        return sandbox

    with Listener(ipv6=True) as host:
        try:
            a = start("a", PUBLIC, CLOSED)
            c = start("c", CLOSED, PUBLIC)
            assert a.describe()["network"] == NETWORK == c.describe()["network"]
            gateway = interface_ipv4(docker_runtime.egress.bridge)
            assert gateway is not None
            local6 = link_local(docker_runtime.egress.bridge)
            own = primary_addresses()
            host_targets = [gateway, interface_ipv4("docker0") or "172.17.0.1", own["ipv4"]]
            v6_targets = [f"[{own['ipv6']}]"] if "ipv6" in own else []
            v6_targets += [f"[{local6}%eth0]"] if local6 else []
            targets = [
                *(f"{h}:{host.port}" for h in host_targets),
                *(f"{h}:{host.port}" for h in v6_targets),
                f"{METADATA}:{port}",
                f"{netns['private']}:{port}",
                f"{_address(c, NETWORK)}:{cport}",
                public,
            ]
            c_script = (
                LISTEN_AND_LEAVE.replace("@LEFTOVER@", token["CL"])
                .replace("@PUBLIC@", public)
                .replace("@CPORT@", str(cport))
                .replace("@MIRROR@", MIRROR)
            )
            c_agent: dict[str, Any] = {}
            thread = threading.Thread(
                target=lambda: c_agent.update(_phase(c, "agent", c_script, {"TOKEN": token["C"]}))
            )
            thread.start()
            a_agent = _phase(
                a,
                "agent",
                'python3 -c "$PROBE"',
                {"TOKEN": token["A"], "TARGETS": ",".join(targets), "DEADLINE": "6"},
            )
            thread.join(timeout=120)
            c_address = _address(c, NETWORK)
            raw6 = [f"{local6}/{host.port}"] if local6 else []
            raw6 += [f"{own['ipv6']}/{host.port}"] if "ipv6" in own else []
            assert raw6, "the host has no IPv6 address on the filtered bridge to attack"
            send_raw6(a._container, NETWORK, docker_runtime.egress.bridge, token["A6"], raw6)
            a_verifier = _phase(
                a, "verifier", 'python3 -c "$PROBE" && python3 -c "$FLOOD"',
                {"TOKEN": token["AV"], "TARGETS": public, "MIRROR": MIRROR,
                 "FLOOD_NETS": "10.203,100.64"},
            )  # fmt: skip
            c_verifier = _phase(
                c, "verifier", 'python3 -c "$PROBE"',
                {"TOKEN": token["CV"], "TARGETS": public, "MIRROR": MIRROR},
            )  # fmt: skip
            a_events, c_events = a.network_events(), c.network_events()
            chains = [a.describe()["egress_chain"], c.describe()["egress_chain"]]
        finally:
            for sandbox in made:
                sandbox.stop()
    # What the servers received, from outside.
    seen = netns["log"].read_text()
    host_got = b"\n".join(data for _kind, _peer, data in host.received).decode()
    assert f"{token['A']} {public}" in seen, (seen, a_agent)  # control: public-like reached
    assert a_agent[public] == "CONNECTED", a_agent
    assert f"{token['A']} {METADATA}" not in seen and f"{token['A']} {netns['private']}" not in seen
    assert token["A"] not in host_got, f"a public agent reached the host: {host_got!r}"
    for target in targets[:-1]:
        assert a_agent[target] != "CONNECTED", (target, a_agent)
    # C's listener was up (its own loopback connected) and never saw A.
    assert "PEERS ['127.0.0.1']" in c_agent["_stdout"], c_agent
    # C's no-network agent: loopback works, nothing else; its leftover died with it.
    assert c_agent[f"127.0.0.1:{cport}"] == "CONNECTED", c_agent
    assert c_agent[public] != "CONNECTED" and not c_agent["mirror"].startswith("Origin"), c_agent
    assert c_agent["_survivors"] >= 1, c_agent  # the leftover was alive when the phase ended
    assert token["C"] not in seen and token["CL"] not in seen, seen
    assert token["A6"] not in host_got, host_got
    # Phases switch: A's verifier is closed, C's reaches the public-like server and the mirror.
    assert token["AV"] not in seen and not a_verifier["mirror"].startswith("Origin"), a_verifier
    assert f"{token['CV']} {public}" in seen and c_verifier["mirror"].startswith("Origin: Debian")
    # The filter's counters, as security events.
    refused = {(e["phase"], e["refused"]) for e in a_events}
    assert {("agent", "host"), ("agent", "metadata"), ("agent", "private")} <= refused, a_events
    assert ("verifier", "closed") in refused, a_events
    assert ("agent", "closed") in {(e["phase"], e["refused"]) for e in c_events}, c_events
    assert all(e["packets"] > 0 and e["destination"] for e in a_events + c_events)
    # The log: each refused connection with its exact destination (address, protocol, port).
    logged = {
        (e["phase"], e["protocol"], e["ip"], e.get("port"), e["refused"])
        for e in a_events + c_events
        if e.get("logged")
    }
    for protocol, ip, dport, refused in [
        ("tcp", METADATA, port, "metadata"),
        ("udp", METADATA, port, "metadata"),
        ("tcp", netns["private"], port, "private"),
        ("tcp", gateway, host.port, "host"),
        ("tcp", own["ipv4"], host.port, "host"),
        ("tcp", c_address, cport, "private"),
    ]:
        assert ("agent", protocol, ip, dport, refused) in logged, (ip, dport, sorted(logged))
    # C's no-network agent: its refused attempts are listed too, by the closed rule.
    assert ("agent", "tcp", PUBLIC_LIKE, port, "closed") in logged, sorted(logged)
    # The flood (A's closed verifier): the counters count every datagram; the list stays
    # bounded, the rest summed.
    closed = [e for e in a_events if e["refused"] == "closed" and not e.get("logged")]
    assert sum(e["packets"] for e in closed if e["phase"] == "verifier") >= 300, closed
    listed = [e for e in a_events if e.get("logged") and e["ip"] != "other"]
    other = [e for e in a_events if e.get("ip") == "other"]
    assert len(listed) <= MAX_DESTINATIONS and other, (len(listed), other)
    assert len(a_events) <= MAX_DESTINATIONS + 40, len(a_events)
    # IPv6: counted (and logged) for A, whose namespace sent it, and not for C.
    v6 = [e for e in a_events if e["refused"] == "ipv6"]
    assert sum(e["packets"] for e in v6 if not e.get("logged")) >= len(raw6), v6
    sent = {(str(ipaddress.ip_address(t.rpartition("/")[0])), host.port) for t in raw6}
    assert sent <= {(e["ip"], e.get("port")) for e in v6 if e.get("logged")}, v6
    assert not [e for e in c_events if e["refused"] == "ipv6"], c_events
    assert a.describe()["egress_log"].startswith("nflog group"), a.describe()
    listing = _chains()
    assert not [chain for chain in chains if chain in listing], listing


def test_a_killed_run_leaves_nothing_cleanup_cannot_remove() -> None:
    """A run killed with -9 after its trial chain was installed: cleanup removes the chain."""
    from support.docker import docker_client

    from sandbox.docker import egress
    from sandbox.docker.engine import remove_leaks

    if os.geteuid() != 0:
        pytest.fail("the egress filter needs root")
    label = f"egress-kill-{secrets.token_hex(4)}"
    key = f"harness-gone-{secrets.token_hex(4)}"
    script = (
        "import os, docker\n"
        "from sandbox.docker import egress\n"
        f"run = egress.EgressRun(docker.from_env(), {label!r}); run.ensure()\n"
        f"egress.TrialFilter(kind='E', key={key!r}, source='172.31.254.9').install()\n"
        "os.kill(os.getpid(), 9)\n"
    )
    killed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    chain = egress.chain_name("E", key)
    assert chain in _chains()
    report = remove_leaks(docker_client(), run=label)
    assert chain not in _chains() and not report.errors, report


def test_a_sweep_never_flushes_the_chain_of_a_trial_being_set_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another run's trial installs its chain while a sweep runs: the chain stays whole.

    A sweep (a run's start, ``harness sandbox cleanup``) reads the live claims first and
    the chains last. A trial that claimed and made its chain in between was judged dead:
    its chain was flushed (its dispatch rule then led to an empty chain, through which
    every packet passes) and its deletion failed with "Device or resource busy". The
    trial's install is started at the worst moment, between the two reads.
    """
    from support.docker import docker_client

    from sandbox.docker import egress

    if os.geteuid() != 0:
        pytest.fail("the egress filter needs root")
    client = docker_client()
    run = egress.EgressRun(client, f"egress-race-{secrets.token_hex(4)}")
    run.ensure()
    flt = egress.TrialFilter(kind="E", key=f"harness-race-{secrets.token_hex(4)}",
                             bridge=run.bridge, source="172.31.254.7")  # fmt: skip
    installing = threading.Thread(target=flt.install)
    listed = egress._trial_chains

    def between_the_reads(tool: str = "iptables") -> list[str]:
        if installing.ident is None:
            installing.start()
            installing.join(timeout=5)  # the install, unless the sweep holds it back
        return listed(tool)

    monkeypatch.setattr(egress, "_trial_chains", between_the_reads)
    try:
        swept = egress.sweep(client, run=run.run_label)
        monkeypatch.undo()
        installing.join()
        assert flt.chain not in swept.chains and not swept.errors, swept
        rules = _ipt("-S", flt.chain).stdout
        assert "closed" in rules and "-j DROP" in rules, rules
        assert flt.present
    finally:
        monkeypatch.undo()
        if installing.ident is not None:
            installing.join()
        flt.remove()
        run.close()


def test_a_run_whose_filter_failed_halfway_still_gives_it_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The filter's rules fail after the run took its hold: closing the run lets go of it.

    ``ensure`` writes the run's holder and makes the network before it loads the rules;
    when those failed, ``close`` took the run for one that never held the filter and kept
    its holder: the network and the rules could not go while the process lived.
    """
    from support.docker import docker_client

    from sandbox.docker import egress
    from sandbox.errors import SandboxError

    def refuse(bridge: str) -> None:
        raise SandboxError(f"iptables refused the hooks of {bridge} (the test's stand-in)")

    run = egress.EgressRun(docker_client(), f"egress-half-{secrets.token_hex(4)}")
    monkeypatch.setattr(egress, "_install_hooks", refuse)
    with pytest.raises(SandboxError, match="the test's stand-in"):
        run.ensure()
    assert run._holder.exists()
    monkeypatch.undo()
    run.close()
    assert not run._holder.exists()
    assert run.close() == []  # given back once


def test_without_a_free_log_group_the_filter_counts_only_and_says_so() -> None:
    """Every log group the run would try is held by another socket: counters only.

    The filter then works as before: its chains get no ``NFLOG`` rule, the record's
    ``egress_log`` says why once.
    """
    from support.docker import docker_client

    from sandbox.docker import egress, nflog

    if os.geteuid() != 0:
        pytest.fail("the egress filter needs root")
    run = egress.EgressRun(docker_client(), f"egress-nolog-{secrets.token_hex(4)}")
    held: list[nflog.PacketLog] = []
    try:
        for step in range(32):  # each binds the first free group from its start
            opened = nflog.open_log(run._first_group + step)
            assert not isinstance(opened, str), opened
            held.append(opened)
        run.ensure()
        assert run.log is None, run.log
        assert run.log_status().startswith("counters only, no destinations: no nfnetlink_log")
        key = f"harness-nolog-{secrets.token_hex(4)}"
        flt = egress.TrialFilter(
            kind="E", key=key, bridge=run.bridge, source="172.31.254.8", log=run.log
        )
        flt.install()
        try:
            listing = _ipt("-S", flt.chain).stdout
            assert "-j DROP" in listing and "NFLOG" not in listing, listing
        finally:
            flt.remove()
    finally:
        for log in held:
            log.close()
        run.close()


@pytest.mark.serial  # the filter is torn down only when no run of any engine holds it
def test_a_gone_engines_hooks_never_keep_the_filter_from_going() -> None:
    """The last run removes the dispatch chain even where an engine that is gone left hooks.

    An engine replaced or stopped while a run held its bridge leaves its jumps into the
    dispatch chain; the chain could then never be deleted (EBUSY) and every later run's
    teardown failed. With no live run of any engine, every such jump is stale and goes.
    """
    from support.docker import docker_client

    from sandbox.docker import egress

    run = egress.EgressRun(docker_client(), f"egress-stale-{secrets.token_hex(4)}")
    run.ensure()
    gone = f"hxe{secrets.token_hex(5)}0"  # the bridge of an engine that no longer exists
    stale = [
        ("FORWARD", ["-i", gone, "-m", "comment", "--comment", "harness-egress:from-egress"]),
        ("INPUT", ["-i", gone, "-m", "comment", "--comment", "harness-egress:to-host-judged"]),
    ]
    for chain, match in stale:
        _ipt("-I", chain, "1", *match, "-j", egress.DISPATCH)
    try:
        removed = run.close()
        assert f"iptables {egress.DISPATCH}" in removed, removed
        assert egress.DISPATCH not in _chains()
        for chain, match in stale:
            assert _ipt("-C", chain, *match, "-j", egress.DISPATCH).returncode != 0
    finally:
        for chain, match in stale:
            while _ipt("-C", chain, *match, "-j", egress.DISPATCH).returncode == 0:
                _ipt("-D", chain, *match, "-j", egress.DISPATCH)


@pytest.mark.serial  # a run removes what an older release left only when no other run lives
def test_what_a_release_before_the_move_to_mangle_left_in_filter_goes() -> None:
    """A killed run of an older release left its hooks and chains in ``filter``: they go.

    Its hooks would send the bridge's packets to its old dispatch chain, whose last rule
    drops them, whatever the new chains say. A run that finds no other live run removes
    them at its start; nothing in ``filter`` of the harness's is left.
    """
    from support.docker import docker_client

    from sandbox.docker import egress

    run = egress.EgressRun(docker_client(), f"egress-legacy-{secrets.token_hex(4)}")
    old = egress.chain_name("E", f"legacy-{secrets.token_hex(4)}")
    comment = ["-m", "comment", "--comment"]
    made = [
        ["-N", egress.DISPATCH],
        ["-A", egress.DISPATCH, *comment, "harness-egress:closed", "-j", "DROP"],
        ["-N", old],
        ["-A", old, *comment, "harness-egress:closed", "-j", "DROP"],
        ["-I", egress.DISPATCH, "1", "-s", "172.31.254.6/32", "-g", old],
        ["-I", "DOCKER-USER", "1", "-i", run.bridge, *comment, "harness-egress:from-egress",
         "-j", egress.DISPATCH],
        ["-I", "INPUT", "1", "-i", run.bridge, *comment, "harness-egress:to-host-judged",
         "-j", egress.DISPATCH],
    ]  # fmt: skip
    for args in made:
        assert _ipt("-t", "filter", *args).returncode == 0, args
    try:
        run.ensure()
        legacy = _ipt("-t", "filter", "-S").stdout
        assert "harness-egress" not in legacy and old not in legacy, legacy
        assert egress.DISPATCH in _chains()  # the filter itself, in mangle
    finally:
        run.close()
        for chain in ("DOCKER-USER", "INPUT"):
            for line in _ipt("-t", "filter", "-S", chain).stdout.splitlines():
                if "harness-egress" in line:
                    _ipt("-t", "filter", "-D", *line.split()[1:])
        for chain in (old, egress.DISPATCH):
            _ipt("-t", "filter", "-F", chain)
            _ipt("-t", "filter", "-X", chain)


def _ipt(*args: str) -> subprocess.CompletedProcess[str]:
    """``iptables`` on the harness's table (``-t`` names another)."""
    from sandbox.docker import netfilter

    return netfilter.run("iptables", *args)


#: Runs in the trial: UDP datagrams to the public-like server, one every millisecond,
#: numbered, for ``SECONDS``.
DATAGRAMS = r"""
import os, socket, time
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
end, n = time.time() + float(os.environ["SECONDS"]), 0
while time.time() < end:
    try:
        u.sendto(b"WINDOW-%d" % n, (os.environ["TARGET"], 8443))
    except OSError:
        pass
    n += 1
    time.sleep(0.001)
print(n)
"""


@pytest.mark.parametrize("runtime", ["runc", "runsc"])
def test_networks_the_engine_makes_meanwhile_never_open_a_closed_phase(
    tmp_path: Path, runtime: str
) -> None:
    """A ``no-network`` phase floods a public-like server while the engine makes networks.

    The engine re-arranges its ``FORWARD`` rules each time it makes a network: it deletes
    its jump into ``DOCKER-USER`` and inserts it again on top. Hooks in ``DOCKER-USER``
    judge nothing between the two, and every packet of a filtered trial met the engine's
    own ``ACCEPT`` for its bridge: a closed phase's datagrams reached the internet. The
    server, outside, must see none of them.
    """
    from support.docker import docker_client
    from support.netns import PublicNet

    from sandbox.docker.backend import DockerSandbox

    client = docker_client()
    with (
        PublicNet(tmp_path) as net,
        egress_runtime(None if runtime == "runc" else "runsc", "egress-window") as made,
    ):
        target = net.route()
        spec = SandboxSpec(
            trial_id=f"window-{secrets.token_hex(3)}",
            allow_internet=True,
            networks={"agent": CLOSED, "verifier": PUBLIC},
        )
        sandbox = DockerSandbox(spec, made)
        sandbox.start()
        stop = threading.Event()
        made_networks: list[str] = []

        def churn() -> None:
            while not stop.is_set():
                network = client.networks.create(f"hx-window-{secrets.token_hex(4)}")
                made_networks.append(str(network.name))
                network.remove()

        churning = threading.Thread(target=churn)
        try:
            churning.start()
            env = {"PATH": FIXED_PATH, "DATAGRAMS": DATAGRAMS, "TARGET": target, "SECONDS": "8"}
            result = sandbox.run_phase(PhaseRequest(
                role="agent", argv=["bash", "-c", 'python3 -c "$DATAGRAMS"'], env=env,
                timeout_sec=120,
            ))  # fmt: skip
        finally:
            stop.set()
            churning.join()
            sandbox.stop()
        assert result.exit_code == 0, result
        assert len(made_networks) >= 3, made_networks  # the engine re-arranged its rules
        time.sleep(0.5)  # the server's thread logs what it received
        leaked = [line for line in net.seen().splitlines() if "WINDOW" in line]
        assert leaked == [], f"{len(leaked)} datagrams of a closed phase got out: {leaked[:5]}"
