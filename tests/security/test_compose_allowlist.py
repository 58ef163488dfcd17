"""Attacks on a compose task's ``allowlist`` and ``public`` phases (issue 24), runc and gVisor.

A compose task: a sidecar ``kv`` (an HTTP server on 8080 that answers a token only it
knows, and a UDP listener there, logging every request and datagram) and the hardened main
container on the project's network. "The internet" is a network namespace the test makes
(``support.netns.PublicNet``), with a routed public-like address, a private one and the
metadata address of its own; the trial's egress proxy, bound on the project's bridge
gateway, resolves ``pub.test`` (listed) and ``evil.test`` (not listed) to it from the
run's pinned names. A listener on every host address (``0.0.0.0`` and ``::``, TCP and UDP)
stands for the host's own services.

Two trials per runtime, side by side: both agents are ``allowlist``, the first one's
verifier ``no-network``, the second one's ``public``. Each ``allowlist`` agent attacks from
inside: the listed host by HTTP and HTTPS through the proxy its environment names; an
unlisted host, the listed host's raw IP, the host's listener and the metadata address
through the proxy; a mismatched SNI; raw TCP and UDP past the proxy; DNS straight to the
host's resolver; and the engine's embedded DNS (``127.0.0.11``, asked directly, not
``/etc/hosts``) for the sidecar's name, a listed and an unlisted one. The sidecar stays
reachable by its name, with the proxy variables set (``NO_PROXY`` names it) and by raw TCP
and UDP. The first ``no-network`` verifier then still reaches the sidecar and nothing else.
The second trial's ``public`` verifier gets the public rules and no proxy, and attacks by
TCP and UDP: the host's listener at the project's gateway, the first trial's gateway,
docker0, the host's primary IPv4 and IPv6 and the bridge's link-local IPv6; the metadata
and the private address of the namespace; the first trial's sidecar; while it reaches the
namespace's public-like address (the control). Raw IPv6 frames then leave its network
namespace for the host's IPv6 addresses. Judged from outside: what the public servers, the
host's listener and the sidecars logged, the trials' ``network_refused`` events (the
drops to the host and the IPv6 ones the trial's own, with their destinations), where the
proxy listened, and what is left on the host after the trials stopped.
"""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.egress_runtime import egress_runtime
from support.net import Listener, interface_ipv4, link_local, primary_addresses, send_raw6
from support.netns import PublicNet
from support.probes import PROXY_CLIENT, TrialSeen

from sandbox.backend import PhaseRequest, Sandbox, SandboxSpec
from sandbox.environment import FIXED_PATH
from sandbox.network_policy import NO_NETWORK, NetworkPolicy

pytestmark = [pytest.mark.docker, pytest.mark.root]

ALLOWLIST = NetworkPolicy(mode="allowlist", allowed_hosts=("pub.test", "*.pub.test"))
METADATA = "169.254.169.254"
BASE_IMAGE = "harness/base:bookworm"

#: The sidecar: answers ``SIDECAR-OK <token> <path>``; the engine keeps its request log,
#: and the line ``UDP <payload>`` of each datagram to its port 8080. When it starts, it
#: sends one datagram to the host's listener at its network's gateway (a sidecar's own
#: packets to the host: refused, and counted as the trial's).
KV = r"""
import socket, struct, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
token = sys.argv[1]
for line in open("/proc/net/route").read().splitlines()[1:]:
    fields = line.split()
    if fields[1] == "00000000":
        gateway = socket.inet_ntoa(struct.pack("<L", int(fields[2], 16)))
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.sendto(("SIDECAR-TO-HOST " + token).encode(), (gateway, int(sys.argv[2]))); u.close()
def datagrams():
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", 8080))
    while True:
        print("UDP " + u.recvfrom(4096)[0].decode(errors="replace").strip(), flush=True)
threading.Thread(target=datagrams, daemon=True).start()
class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("SIDECAR-OK %s %s" % (token, self.path)).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, fmt, *args):
        print("REQUEST " + self.requestline, flush=True)
ThreadingHTTPServer(("0.0.0.0", 8080), Handler).serve_forever()
"""

#: Runs in the main container: every attempt's outcome as one JSON line.
PROBE = (
    PROXY_CLIENT
    + r"""
import random
out, public, gateway, port = {}, os.environ["PUB"], os.environ["GW"], os.environ["HPORT"]
role = os.environ["ROLE"]
out["env"] = {k: os.environ.get(k) for k in ("HTTP_PROXY", "https_proxy", "NO_PROXY")}
def query(server, name):
    # One A query straight to a resolver (no /etc/hosts): its addresses, or why none.
    ident = random.randrange(65536)
    question = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    packet = struct.pack("!HHHHHH", ident, 0x0100, 1, 0, 0, 0) + question + b"\0\1\0\1"
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.settimeout(5)
    try:
        u.sendto(packet, (server, 53))
        data = u.recv(1024)
    except OSError as exc:
        return "%s: %s" % (type(exc).__name__, exc)
    finally:
        u.close()
    flags, count = struct.unpack("!H", data[2:4])[0], struct.unpack("!H", data[6:8])[0]
    if flags & 0xF:
        return "rcode %d" % (flags & 0xF)
    i, found = 12 + len(question) + 4, []
    for _ in range(count):
        while data[i] and data[i] < 0xC0:
            i += 1 + data[i]
        i += 2 if data[i] >= 0xC0 else 1
        kind, _cls, _ttl, size = struct.unpack("!HHIH", data[i:i + 10])
        if kind == 1:
            found.append(socket.inet_ntoa(data[i + 10:i + 14]))
        i += 10 + size
    return sorted(found)
def hit(target):
    # UDP then TCP to host:port, each carrying "<token> <target>": what reached is logged.
    host, _, p = target.rpartition(":")
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    message = ("%s %s" % (os.environ["TOKEN"], target)).encode()
    try:
        address = socket.getaddrinfo(host, int(p), family, socket.SOCK_DGRAM)[0][4]
        u = socket.socket(family, socket.SOCK_DGRAM); u.sendto(message + b" udp\n", address)
        u.close()
        s = socket.socket(family, socket.SOCK_STREAM); s.settimeout(3)
        s.connect(address); s.sendall(message + b"\n"); s.close()
        return "CONNECTED"
    except OSError as exc:
        return "%s: %s" % (type(exc).__name__, exc)
c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
c.sendto(("UDP-CONTROL-" + role).encode(), ("kv", 8080)); c.close()
checks = {
    "sidecar-http": lambda: get("http://kv:8080/canary-" + role),
    "sidecar-raw": lambda: raw("kv", 8080),
    "dns-sidecar": lambda: query("127.0.0.11", "kv"),
    "dns-listed": lambda: query("127.0.0.11", "pub.test"),
    "dns-unlisted": lambda: query("127.0.0.11", "evil.test"),
    "raw-public-80": lambda: raw(public, 80),
    "http-listed": lambda: get("http://pub.test/"),
}
if role == "agent":
    checks.update({
        "http-wildcard": lambda: get("http://www.pub.test/"),
        "https": lambda: tunnel("pub.test:443", "pub.test"),
        "http-unlisted": lambda: get("http://evil.test/"),
        "http-raw-ip": lambda: get("http://%s/" % public),
        "http-host": lambda: get("http://%s:%s/" % (gateway, port)),
        "http-metadata": lambda: get("http://%s/" % os.environ["META"]),
        "https-unlisted": lambda: tunnel("evil.test:443", "evil.test"),
        "https-sni-mismatch": lambda: tunnel("pub.test:443", "evil.test"),
        "dns-host-resolver": lambda: query(os.environ["RESOLVER"], "pub.test"),
        "tcp-dns-sidecar": lambda: tcp_dns("127.0.0.11", "kv"),
        "tcp-dns-listed": lambda: tcp_dns("127.0.0.11", "pub.test"),
        "tcp-dns-unlisted": lambda: tcp_dns("127.0.0.11", "evil.test"),
        "tcp-dns-gateway": lambda: tcp_dns(gateway, "www.pub.test"),
        "raw-public-8443": lambda: raw(public, 8443),
        "raw-host": lambda: raw(gateway, int(port)),
        "raw-metadata": lambda: raw(os.environ["META"], 80),
    })
    for host, p in ((public, 8443), (gateway, int(port))):
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.sendto(b"UDP-CANARY", (host, p)); u.close()
for target in [t for t in os.environ.get("ATTACKS", "").split(",") if t]:
    checks["hit " + target] = lambda target=target: hit(target)
# All at once: each refused attempt waits out its timeout, side by side.
from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor(len(checks)) as pool:
    futures = {label: pool.submit(check) for label, check in checks.items()}
out.update({label: future.result() for label, future in futures.items()})
print(json.dumps(out))
"""
)


@dataclass
class Outside:
    """The namespace and the addresses routed to it (its servers answer on each)."""

    net: PublicNet
    #: Outside every range ``public`` refuses, reached only through a router.
    public_like: str
    #: A private (10/8) address.
    private: str


@pytest.fixture(scope="module")
def public(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outside]:
    """The namespace, with a public-like, a private and the metadata address routed to it."""
    with PublicNet(tmp_path_factory.mktemp("public")) as net:
        # 10.202/16: test_egress_filter's namespaces take 10.201/16, and may run beside.
        private = net.route(f"10.202.{secrets.randbelow(250)}.{2 + secrets.randbelow(250)}")
        public_like = net.route()
        net.route(METADATA, containers_only=True)  # the host's own agents keep theirs
        yield Outside(net, public_like, private)


@pytest.fixture(scope="module", params=[None, "runsc"], ids=["runc", "runsc"])
def docker_runtime(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A DockerRuntime under runc, and under gVisor (its ``runsc-net`` sibling)."""
    with egress_runtime(request.param, "compose-allowlist") as runtime:
        yield runtime


def _compose_file(parent: Path, token: str, host_port: int) -> Path:
    """``environment/docker-compose.yaml`` (JSON is YAML) of a task with the ``kv`` sidecar."""
    environment = parent / "environment"
    environment.mkdir(parents=True)
    health = "import socket; socket.create_connection(('localhost', 8080), 2)"
    compose = {
        "services": {
            "main": {"depends_on": {"kv": {"condition": "service_healthy"}}},
            "kv": {
                "image": BASE_IMAGE,
                "command": ["python3", "-c", KV, token, str(host_port)],
                "healthcheck": {
                    "test": ["CMD", "python3", "-c", health],
                    "interval": "1s",
                    "timeout": "5s",
                    "retries": 30,
                },
            },
        }
    }
    path = environment / "docker-compose.yaml"
    path.write_text(json.dumps(compose, indent=2))
    return path


def _phase(sandbox: Sandbox, role: str, env: dict[str, str]) -> dict[str, Any]:
    full = {"PATH": FIXED_PATH, "PROBE": PROBE, "ROLE": role, **env}
    argv = ["bash", "-c", 'python3 -c "$PROBE"']
    result = sandbox.run_phase(PhaseRequest(role=role, argv=argv, env=full, timeout_sec=180))  # type: ignore[arg-type]
    data, _event = sandbox.read_file(f"{sandbox.paths.logs}/{role}.stdout", max_bytes=1 << 16)
    text = (data or b"").decode()
    lines = [line for line in text.splitlines() if line.startswith("{")]
    assert result.exit_code == 0 and lines, (result, text)
    report: dict[str, Any] = json.loads(lines[-1])
    return report


def _host_resolver() -> str:
    """The host's first IPv4 resolver (where the embedded DNS forwards by default)."""
    for line in Path("/etc/resolv.conf").read_text().splitlines():
        parts = line.split()
        ipv4 = len(parts) >= 2 and parts[0] == "nameserver" and "." in parts[1]
        if ipv4 and not parts[1].startswith("127."):
            return parts[1]
    return "192.0.2.53"  # none: any address past the proxy will do


def _reachable(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
    except OSError:
        return False
    return True


def _sidecar(client: Any, project: str) -> Any:
    """The ``kv`` sidecar's container."""
    found = client.containers.list(
        all=True,
        filters={"label": [f"com.docker.compose.project={project}",
                           "com.docker.compose.service=kv"]},
    )  # fmt: skip
    assert len(found) == 1, found
    return found[0]


def _iptables(*args: str) -> str:
    """``iptables`` on the harness's table (``-t`` names another)."""
    from sandbox.docker import netfilter

    return netfilter.run("iptables", *args).stdout


@dataclass
class Trial(TrialSeen):
    """What one compose trial saw, inside and out, and its project's network."""

    #: The project network's gateways, as the engine has them.
    gateways: list[str]
    sidecar_log: str
    #: The sidecar's address on its project's network.
    sidecar_ip: str = ""

    @property
    def chain(self) -> str:
        return str(self.facts["egress_chain"])

    @property
    def proxy_host(self) -> str:
        return str(self.facts["egress_proxy"]).rpartition(":")[0]


@dataclass
class Run:
    """Two compose trials side by side: the first's verifier no-network, the second's public."""

    first: Trial
    second: Trial
    #: The second trial's public verifier's token, its targets, the raw IPv6 frames sent.
    token: str
    attacks: list[str]
    raw6: list[str]
    #: ``iptables -S INPUT`` while the trials ran.
    during: str
    #: What the public servers logged while the trials ran.
    seen: str
    host_port: int
    host_received: list[Any]
    #: The first trial's events after the second one's attacks and frames.
    first_after: list[dict[str, Any]]


def _spec(task: Path, token: str, verifier: NetworkPolicy, host_port: int) -> SandboxSpec:
    return SandboxSpec(
        trial_id=f"compose-allowlist-{secrets.token_hex(3)}",
        image=BASE_IMAGE,
        task_name="compose-allowlist",
        compose_file=_compose_file(task, token, host_port),
        allow_internet=True,
        networks={"agent": ALLOWLIST, "verifier": verifier},
    )


def _env(sandbox: Any, host: Listener, public: PublicNet) -> dict[str, str]:
    return {
        "PUB": public.ip,
        "GW": sandbox.describe()["egress_proxy"].rpartition(":")[0],
        "HPORT": str(host.port),
        "META": METADATA,
        "RESOLVER": _host_resolver(),
    }


def _trial(sandbox: Any, token: str, agent: dict[str, Any], events: list[dict[str, Any]]) -> Trial:
    """What is known of a started trial once its agent ran (its verifier's come later)."""
    facts = sandbox.describe()
    compose = facts["compose"]
    network = sandbox.runtime.client.networks.get(compose["network"])
    kv = _sidecar(sandbox.runtime.client, compose["project"])
    return Trial(
        token=token, agent=agent, verifier={}, agent_events=events, verifier_events=[],
        facts=facts, gateways=[str(c.get("Gateway")) for c in network.attrs["IPAM"]["Config"]],
        sidecar_log="",
        sidecar_ip=str(kv.attrs["NetworkSettings"]["Networks"][compose["network"]]["IPAddress"]),
    )  # fmt: skip


def _first_trial(sandbox: Any, token: str, env: dict[str, str]) -> Trial:
    """The first trial's allowlist agent, then its no-network verifier."""
    trial = _trial(sandbox, token, _phase(sandbox, "agent", env), sandbox.network_events())
    trial.verifier = _phase(sandbox, "verifier", env)
    trial.verifier_events = sandbox.network_events()
    return trial


def _attacks(trial: Trial, first: Trial, outside: Outside, port: int) -> list[str]:
    """The public verifier's targets: the host's every address, metadata, private, the
    first trial's sidecar; last, the public-like address (the control)."""
    own = primary_addresses()
    local6 = link_local(trial.facts["compose"]["host_guard"]["bridge"])
    hosts = [*trial.gateways, first.gateways[0], interface_ipv4("docker0"), own["ipv4"]]
    hosts += [f"[{own['ipv6']}]"] if "ipv6" in own else []
    hosts += [f"[{local6}%eth0]"] if local6 else []
    return [
        *(f"{h}:{port}" for h in hosts if h),
        f"{METADATA}:8443",
        f"{outside.private}:8443",
        f"{first.sidecar_ip}:8080",
        f"{outside.public_like}:8443",
    ]


def _raw6(sandbox: Any, trial: Trial, token: str, port: int) -> list[str]:
    """Raw IPv6 frames from the trial's namespace to the host's IPv6 addresses; their list."""
    bridge = trial.facts["compose"]["host_guard"]["bridge"]
    own, local6 = primary_addresses(), link_local(bridge)
    targets = [f"{local6}/{port}"] if local6 else []
    targets += [f"{own['ipv6']}/{port}"] if "ipv6" in own else []
    assert targets, "the host has no IPv6 address on the project's bridge to attack"
    send_raw6(sandbox._container, trial.facts["compose"]["network"], bridge, token, targets)
    return targets


def _run(runtime: Any, outside: Outside, tasks: Path) -> Run:
    """The two trials, started together; the second's public verifier attacks last."""
    from sandbox.docker.backend import DockerSandbox

    public = outside.net
    runtime.egress.hosts = {
        "pub.test": [public.ip],
        "www.pub.test": [public.ip],
        "evil.test": [public.ip],
    }
    tokens = [f"KV-{secrets.token_hex(8)}" for _ in range(2)]
    attack_token, raw_token = f"V2-{secrets.token_hex(6)}", f"R6-{secrets.token_hex(6)}"
    before = public.seen()
    with Listener(ipv6=True) as host:
        public_verifier = NetworkPolicy(mode="public")
        one = DockerSandbox(_spec(tasks / "one", tokens[0], NO_NETWORK, host.port), runtime)
        two = DockerSandbox(_spec(tasks / "two", tokens[1], public_verifier, host.port), runtime)
        try:
            one.start()
            two.start()
            # The first trial's phases beside the second's agent (time), its sidecar kept up
            # for the second's verifier to attack.
            with ThreadPoolExecutor(1) as pool:
                running = pool.submit(_first_trial, one, tokens[0], _env(one, host, public))
                env = _env(two, host, public)
                second = _trial(two, tokens[1], _phase(two, "agent", env), two.network_events())
                first = running.result()
            attacks = _attacks(second, first, outside, host.port)
            env.update({"ATTACKS": ",".join(attacks), "TOKEN": attack_token})
            second.verifier = _phase(two, "verifier", env)
            raw6 = _raw6(two, second, raw_token, host.port)
            second.verifier_events = two.network_events()
            first_after = one.network_events()
            for trial in (first, second):
                project = trial.facts["compose"]["project"]
                trial.sidecar_log = str(_sidecar(runtime.client, project).logs().decode())
            during = _iptables("-S", "INPUT")
        finally:
            for sandbox in (one, two):
                sandbox.stop()
        time.sleep(0.5)  # the listener's and the servers' threads log what they accepted
    return Run(
        first=first, second=second, token=attack_token, attacks=attacks, raw6=raw6,
        during=during, seen=public.seen()[len(before):], host_port=host.port,
        host_received=list(host.received), first_after=first_after,
    )  # fmt: skip


@pytest.fixture(scope="module")
def run(docker_runtime: Any, public: Outside, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _run(docker_runtime, public, tmp_path_factory.mktemp("tasks"))


def test_a_compose_allowlist_phase_reaches_its_hosts_and_its_sidecar_only(
    run: Run, public: Outside
) -> None:
    first = run.first
    agent, verifier, facts, token = first.agent, first.verifier, first.facts, first.token
    proxy_host, chain = first.proxy_host, first.chain
    agent_events, verifier_events = first.agent_events, first.verifier_events
    seen, ip = run.seen, public.net.ip
    # The proxy listens on the project's own gateway.
    assert proxy_host in first.gateways, (facts, first.gateways)
    # The agent's environment names the proxy; loopback and the sidecar stay direct.
    proxy_url = f"http://{facts['egress_proxy']}"
    assert agent["env"]["HTTP_PROXY"] == proxy_url == agent["env"]["https_proxy"], agent
    assert agent["env"]["NO_PROXY"].startswith("localhost,127.0.0.1,::1,kv,"), agent
    # The sidecar, by name, in both phases: through urllib with the proxy variables set,
    # raw TCP and UDP, and the engine's embedded DNS itself.
    for report in (agent, verifier):
        assert report["sidecar-http"].startswith(f"SIDECAR-OK {token} /canary-"), report
        assert report["sidecar-raw"] == "CONNECTED", report
        assert isinstance(report["dns-sidecar"], list) and report["dns-sidecar"], report
        assert report["dns-sidecar"][0] in agent["env"]["NO_PROXY"].split(","), report
    # Listed: HTTP (the wildcard too) and HTTPS with a matching SNI; the embedded DNS
    # forwards the listed name to the proxy's responder and gets its address.
    assert agent["http-listed"] == "PUBLIC-OK host=pub.test", agent
    assert agent["http-wildcard"] == "PUBLIC-OK host=www.pub.test", agent
    assert agent["https"] == "TLS-OK sni=pub.test", agent
    assert agent["dns-listed"] == [ip], agent
    assert agent["dns-unlisted"] == "rcode 3", agent  # NXDOMAIN from the responder
    # DNS over TCP, through the embedded DNS and to the gateway: the same answers.
    assert agent["tcp-dns-sidecar"] == [0, agent["dns-sidecar"][0]], agent
    assert agent["tcp-dns-listed"] == [0, ip], agent
    assert agent["tcp-dns-gateway"] == [0, ip], agent
    assert agent["tcp-dns-unlisted"] == [3, None], agent
    # Refused by the proxy: unlisted, raw IP, the host, metadata, a mismatched SNI.
    for label in ("http-unlisted", "http-raw-ip", "http-host", "http-metadata"):
        assert agent[label] == "HTTP 403", (label, agent)
    assert agent["https-unlisted"].startswith("HTTP/1.1 403"), agent
    assert "TLS-OK" not in agent["https-sni-mismatch"], agent
    # Past the proxy nothing leaves: TCP, UDP, DNS to the host's resolver.
    for label in ("raw-public-80", "raw-public-8443", "raw-host", "raw-metadata"):
        assert agent[label] != "CONNECTED", (label, agent)
    assert not isinstance(agent["dns-host-resolver"], list), agent
    # The no-network verifier: the sidecar and nothing else (no proxy, no name, no IP).
    assert verifier["env"] == {"HTTP_PROXY": None, "https_proxy": None, "NO_PROXY": None}
    assert not isinstance(verifier["dns-listed"], list), verifier
    assert verifier["raw-public-80"] != "CONNECTED", verifier
    assert verifier["http-listed"] != "PUBLIC-OK host=pub.test", verifier
    # From outside: the servers saw only the listed, matching requests (both trials'
    # agents'); the host's listener nothing; the sidecar exactly the two requests by name
    # and the two datagrams.
    assert run.host_received == [], f"the host's listener was reached: {run.host_received}"
    assert "evil.test" not in seen and "UDP-CANARY" not in seen, seen
    assert seen.count("sni pub.test") == 2 and seen.count("tcp443") == 2, seen
    assert seen.count("Host: pub.test\\r") == 2 and seen.count("Host: www.pub.test\\r") == 2, seen
    requests = [line for line in first.sidecar_log.splitlines() if line.startswith("REQUEST ")]
    assert requests == [
        "REQUEST GET /canary-agent HTTP/1.1",
        "REQUEST GET /canary-verifier HTTP/1.1",
    ], first.sidecar_log
    datagrams = [line for line in first.sidecar_log.splitlines() if line.startswith("UDP ")]
    assert datagrams == ["UDP UDP-CONTROL-agent", "UDP UDP-CONTROL-verifier"], first.sidecar_log
    # Every refusal is an event, with its destination, in the phase it happened.
    reasons = {(e["protocol"], e.get("host") or e.get("ip") or e.get("destination"), e["reason"])
               for e in agent_events}  # fmt: skip
    text = " | ".join(f"{p} {d}: {r}" for p, d, r in sorted(reasons, key=str))
    for needle in (
        "http evil.test: the host is not listed",
        f"http {ip}: the IP is not listed",
        f"http {proxy_host}: port {run.host_port} is not allowed",
        f"http {METADATA}: the IP is not listed",
        "connect evil.test: the host is not listed",
        "tls evil.test: the ClientHello names 'evil.test', the CONNECT 'pub.test'",
        "dns evil.test: the name is not listed",
        "ip allowlist: allowlist phase: only the egress proxy",
    ):
        assert needle in text, f"{needle!r} not in {text}"
    # Before the agent: the sidecar's datagram to the host, the trial's own event (the
    # project's packets to the host go through its chain, not only the main container's).
    assert {e["phase"] for e in agent_events} == {"start", "agent"}, agent_events
    sidecar = {(e["protocol"], e.get("ip"), e.get("port"), e["refused"])
               for e in agent_events if e["phase"] == "start" and e.get("logged")}  # fmt: skip
    assert sidecar == {("udp", first.gateways[0], run.host_port, "host")}, agent_events
    dropped = [e for e in agent_events if e.get("refused") == "allowlist"]
    assert dropped and dropped[0]["packets"] >= 7, dropped  # 4 SYNs, 2 datagrams, 1 query
    assert ("verifier", "closed") in {(e["phase"], e.get("refused")) for e in verifier_events}
    # The project's packets to the host went to the trial's chain before the host guard's
    # drop (that is how its proxy was reachable, and its refusals its own).
    assert f"input-{chain}" in run.during, run.during
    # Nothing of the trial is left: its chain, its DNS redirect, its INPUT jump, its proxy.
    listing, nat = _iptables("-S"), _iptables("-t", "nat", "-S", "PREROUTING")
    assert chain not in listing and chain not in nat, (listing, nat)
    assert not _reachable(facts["egress_proxy"]), facts


def test_a_public_compose_phase_reaches_the_internet_and_nothing_of_the_host_or_other_trials(
    run: Run, public: Outside
) -> None:
    """The second trial: the same allowlist agent, then a ``public`` verifier that attacks.

    The verifier gets no proxy in its environment, every name from the responder (now
    public) and the public rules: the namespace's /30 is on a link of the host (a subnet
    ``public`` keeps out), its routed public-like address is reached (the control), and
    the host on every address, the metadata and private addresses and the first trial's
    sidecar are not, by TCP or UDP. The raw IPv6 frames from its namespace are counted as
    its own events, not the first trial's.
    """
    second, token = run.second, run.token
    agent, verifier = second.agent, second.verifier
    assert agent["http-listed"] == "PUBLIC-OK host=pub.test", agent
    assert agent["raw-public-80"] != "CONNECTED", agent
    assert verifier["env"] == {"HTTP_PROXY": None, "https_proxy": None, "NO_PROXY": None}
    for report in (agent, verifier):
        assert report["sidecar-http"].startswith(f"SIDECAR-OK {second.token} /canary-"), report
        assert report["sidecar-raw"] == "CONNECTED", report
        assert isinstance(report["dns-sidecar"], list) and report["dns-sidecar"], report
    assert verifier["dns-listed"] == [public.net.ip] == verifier["dns-unlisted"], verifier
    assert verifier["raw-public-80"] != "CONNECTED", verifier
    assert verifier["http-listed"] != "PUBLIC-OK host=pub.test", verifier  # no proxy now
    # Its attacks, judged from outside: only the public-like address heard it (TCP and UDP).
    control = f"{public.public_like}:8443"
    assert verifier[f"hit {control}"] == "CONNECTED", verifier
    heard = [line for line in run.seen.splitlines() if token in line]
    assert sorted(heard) == [f"tcp8443 {token} {control}", f"udp8443 {token} {control} udp"], (
        run.seen
    )
    for target in run.attacks[:-1]:
        assert verifier[f"hit {target}"] != "CONNECTED", (target, verifier)
    host_got = b"\n".join(data for _kind, _peer, data in run.host_received).decode()
    assert token not in host_got and run.host_received == [], host_got
    assert token not in run.first.sidecar_log, run.first.sidecar_log
    # Nothing else reached the namespace's plain listener: no agent's raw attempt.
    plain = [line for line in run.seen.splitlines() if line.startswith(("tcp8443", "udp8443"))]
    assert [line for line in plain if token not in line] == [], run.seen
    # The refusals are this trial's events, with their destinations: the host through
    # the project's chain (before the host guard), the metadata and the private address;
    # the raw IPv6 frames through the host guard's own rule, counted for this trial only.
    refused = {(e["phase"], e.get("refused")) for e in second.verifier_events}
    assert ("verifier", "host-subnet") in refused, second.verifier_events
    assert ("verifier", "allowlist") not in refused, second.verifier_events
    logged = {(e["protocol"], e.get("ip"), e.get("port"), e["refused"])
              for e in second.verifier_events if e.get("logged")}  # fmt: skip
    gateway = second.gateways[0]
    for expected in [
        ("tcp", gateway, run.host_port, "host"),
        ("udp", gateway, run.host_port, "host"),
        ("tcp", run.first.gateways[0], run.host_port, "host"),
        ("tcp", primary_addresses()["ipv4"], run.host_port, "host"),
        ("tcp", METADATA, 8443, "metadata"),
        ("udp", METADATA, 8443, "metadata"),
        ("tcp", public.private, 8443, "private"),
    ]:
        assert expected in logged, (expected, sorted(logged, key=str))
    v6 = [e for e in second.verifier_events if e["protocol"] == "ipv6"]
    assert v6 and sum(e["packets"] for e in v6) >= len(run.raw6), second.verifier_events
    assert {(e["refused"], e["destination"]) for e in v6} == {("host", "host")}, v6
    assert not [e for e in run.first_after if e["protocol"] == "ipv6"], run.first_after
    assert not [e for e in run.first_after if e.get("refused") == "host"], run.first_after


def test_a_killed_run_leaves_no_input_jump_cleanup_cannot_remove() -> None:
    """A run killed with -9 after a compose allowlist trial's chain got its proxy.

    Its chain, its DNS redirect and its ``INPUT`` jump (which would keep the chain from
    being deleted) stay on the host, the project's bridge gone with the engine's
    network; ``remove_leaks`` removes all three.
    """
    from support.docker import docker_client

    from sandbox.docker import egress
    from sandbox.docker.engine import remove_leaks
    from sandbox.docker.hostguard import bridge_name

    label = f"compose-allowlist-kill-{secrets.token_hex(4)}"
    bridge = bridge_name(f"harness-gone-{secrets.token_hex(4)}")
    script = (
        "import os, docker\n"
        "from sandbox.docker import egress\n"
        f"run = egress.EgressRun(docker.from_env(), {label!r}); run.ensure()\n"
        f"flt = egress.TrialFilter(kind='C', key={bridge!r}, bridge={bridge!r})\n"
        "flt.install(); flt.source = '172.31.254.9'\n"
        "flt.attach_proxy(('172.31.254.1', 3128, 5353)); flt.restrict()\n"
        "os.kill(os.getpid(), 9)\n"
    )
    killed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    chain = egress.chain_name("C", bridge)
    assert f"input-{chain}" in _iptables("-S", "INPUT")
    assert f"dns-{chain}" in _iptables("-t", "nat", "-S", "PREROUTING")
    report = remove_leaks(docker_client(), run=label)
    listing, nat = _iptables("-S"), _iptables("-t", "nat", "-S", "PREROUTING")
    assert chain not in listing and chain not in nat and not report.errors, report


def test_a_sweep_leaves_a_live_runs_compose_chain_made_before_its_bridge() -> None:
    """Another run's sweep (at its start) while a compose trial is being set up.

    The project's chain is made before compose makes its bridge, so the bridge cannot say
    the chain is alive: the installing process's claim does. Under the suite's parallel
    load a sweep took such a chain halfway through its install. Its owner gone (killed),
    the same chain is swept.
    """
    from support.docker import docker_client

    from sandbox.docker import egress
    from sandbox.docker.hostguard import bridge_name

    bridge = bridge_name(f"harness-not-yet-{secrets.token_hex(4)}")
    run = egress.EgressRun(docker_client(), f"compose-claim-{secrets.token_hex(4)}")
    run.ensure()
    flt = egress.TrialFilter(kind="C", key=bridge, bridge=bridge)
    try:
        flt.install()
        swept = egress.sweep(docker_client())  # what another run's start does
        assert flt.chain in _iptables("-S") and not swept.errors, swept
    finally:
        flt.remove()
        run.close()
    assert flt.chain not in _iptables("-S")
