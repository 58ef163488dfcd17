"""Attacks on a compose task's ``allowlist`` phase (issue 24), under runc and gVisor.

A compose task: a sidecar ``kv`` (an HTTP server on 8080 that answers a token only it
knows and logs every request) and the hardened main container on the project's network.
"The internet" is a network namespace the test makes (``support.netns.PublicNet``); the
trial's egress proxy, bound on the project's bridge gateway, resolves ``pub.test``
(listed) and ``evil.test`` (not listed) to it from the run's pinned names. A listener on
every host address stands for the host's own services.

Two trials per runtime. The first one's ``allowlist`` agent phase attacks from inside:
the listed host by HTTP and HTTPS through the proxy its environment names; an unlisted
host, the listed host's raw IP, the host's listener and the metadata address through the
proxy; a mismatched SNI; raw TCP and UDP past the proxy; DNS straight to the host's
resolver; and the engine's embedded DNS (``127.0.0.11``, asked directly, not ``/etc/hosts``) for the
sidecar's name, a listed and an unlisted one. The sidecar stays reachable by its name,
with the proxy variables set (``NO_PROXY`` names it) and by raw TCP. Its ``no-network``
verifier then still reaches the sidecar and nothing else. The second one's ``public``
verifier gets the public rules and no proxy after the same agent. Judged from outside:
what the public servers, the host's listener and the sidecar logged, the trial's
``network_refused`` events, where the proxy listened, and what is left on the host after
the trial stopped.
"""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.egress_runtime import egress_runtime
from support.net import Listener
from support.netns import PublicNet
from support.probes import PROXY_CLIENT

from sandbox.backend import PhaseRequest, Sandbox, SandboxSpec
from sandbox.environment import FIXED_PATH
from sandbox.network_policy import NO_NETWORK, NetworkPolicy

pytestmark = [pytest.mark.docker, pytest.mark.root]

ALLOWLIST = NetworkPolicy(mode="allowlist", allowed_hosts=("pub.test", "*.pub.test"))
METADATA = "169.254.169.254"
BASE_IMAGE = "harness/base:bookworm"

#: The sidecar: answers ``SIDECAR-OK <token> <path>``; the engine keeps its request log.
KV = r"""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
token = sys.argv[1]
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
out["sidecar-http"] = get("http://kv:8080/canary-" + role)
out["sidecar-raw"] = raw("kv", 8080)
out["dns-sidecar"] = query("127.0.0.11", "kv")
out["dns-listed"] = query("127.0.0.11", "pub.test")
out["dns-unlisted"] = query("127.0.0.11", "evil.test")
out["raw-public-80"] = raw(public, 80)
out["http-listed"] = get("http://pub.test/")
if role == "agent":
    out["http-wildcard"] = get("http://www.pub.test/")
    out["https"] = tunnel("pub.test:443", "pub.test")
    out["http-unlisted"] = get("http://evil.test/")
    out["http-raw-ip"] = get("http://%s/" % public)
    out["http-host"] = get("http://%s:%s/" % (gateway, port))
    out["http-metadata"] = get("http://%s/" % os.environ["META"])
    out["https-unlisted"] = tunnel("evil.test:443", "evil.test")
    out["https-sni-mismatch"] = tunnel("pub.test:443", "evil.test")
    out["dns-host-resolver"] = query(os.environ["RESOLVER"], "pub.test")
    out["tcp-dns-sidecar"] = tcp_dns("127.0.0.11", "kv")
    out["tcp-dns-listed"] = tcp_dns("127.0.0.11", "pub.test")
    out["tcp-dns-unlisted"] = tcp_dns("127.0.0.11", "evil.test")
    out["tcp-dns-gateway"] = tcp_dns(gateway, "www.pub.test")
    out["raw-public-8443"] = raw(public, 8443)
    out["raw-host"] = raw(gateway, int(port))
    out["raw-metadata"] = raw(os.environ["META"], 80)
    for host, p in ((public, 8443), (gateway, int(port))):
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.sendto(b"UDP-CANARY", (host, p)); u.close()
print(json.dumps(out))
"""
)


@pytest.fixture(scope="module")
def public(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PublicNet]:
    with PublicNet(tmp_path_factory.mktemp("public")) as net:
        yield net


@pytest.fixture(params=[None, "runsc"], ids=["runc", "runsc"])
def docker_runtime(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A DockerRuntime under runc, and under gVisor (its ``runsc-net`` sibling)."""
    with egress_runtime(request.param, "compose-allowlist") as runtime:
        yield runtime


def _compose_file(parent: Path, token: str) -> Path:
    """``environment/docker-compose.yaml`` (JSON is YAML) of a task with the ``kv`` sidecar."""
    environment = parent / "environment"
    environment.mkdir(parents=True)
    health = "import socket; socket.create_connection(('localhost', 8080), 2)"
    compose = {
        "services": {
            "main": {"depends_on": {"kv": {"condition": "service_healthy"}}},
            "kv": {
                "image": BASE_IMAGE,
                "command": ["python3", "-c", KV, token],
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


def _sidecar_log(client: Any, project: str) -> str:
    """The ``kv`` sidecar's log, as the engine kept it."""
    found = client.containers.list(
        all=True,
        filters={"label": [f"com.docker.compose.project={project}",
                           "com.docker.compose.service=kv"]},
    )  # fmt: skip
    assert len(found) == 1, found
    return str(found[0].logs().decode())


def _iptables(*args: str) -> str:
    return subprocess.run(["iptables", "-w", *args], capture_output=True, text=True).stdout


@dataclass
class Trial:
    """What one compose allowlist trial saw, inside and out."""

    token: str
    agent: dict[str, Any]
    verifier: dict[str, Any]
    agent_events: list[dict[str, Any]]
    verifier_events: list[dict[str, Any]]
    facts: dict[str, Any]
    #: The project network's gateways, as the engine has them.
    gateways: list[str]
    sidecar_log: str
    #: ``iptables -S INPUT`` while the trial ran.
    during: str
    #: What the public servers logged during the trial.
    seen: str
    host_port: int
    host_received: list[Any]

    @property
    def chain(self) -> str:
        return str(self.facts["egress_chain"])

    @property
    def proxy_host(self) -> str:
        return str(self.facts["egress_proxy"]).rpartition(":")[0]


def _trial(runtime: Any, public: PublicNet, task: Path, verifier: NetworkPolicy) -> Trial:
    """One trial of the compose task: its ``allowlist`` agent, then ``verifier``'s policy."""
    from sandbox.docker.backend import DockerSandbox

    runtime.egress.hosts = {
        "pub.test": [public.ip],
        "www.pub.test": [public.ip],
        "evil.test": [public.ip],
    }
    token = f"KV-{secrets.token_hex(8)}"
    spec = SandboxSpec(
        trial_id=f"compose-allowlist-{secrets.token_hex(3)}",
        image=BASE_IMAGE,
        task_name="compose-allowlist",
        compose_file=_compose_file(task, token),
        allow_internet=True,
        networks={"agent": ALLOWLIST, "verifier": verifier},
    )
    client = runtime.client
    before = public.seen()
    with Listener() as host:
        sandbox = DockerSandbox(spec, runtime)
        try:
            sandbox.start()
            facts = sandbox.describe()
            project = client.networks.get(facts["compose"]["network"])
            gateways = [str(c.get("Gateway")) for c in project.attrs["IPAM"]["Config"]]
            env = {
                "PUB": public.ip,
                "GW": facts["egress_proxy"].rpartition(":")[0],
                "HPORT": str(host.port),
                "META": METADATA,
                "RESOLVER": _host_resolver(),
            }
            agent = _phase(sandbox, "agent", env)
            agent_events = sandbox.network_events()
            late = _phase(sandbox, "verifier", env)
            verifier_events = sandbox.network_events()
            facts = sandbox.describe()
            sidecar_log = _sidecar_log(client, facts["compose"]["project"])
            during = _iptables("-S", "INPUT")
        finally:
            sandbox.stop()
    return Trial(
        token=token,
        agent=agent,
        verifier=late,
        agent_events=agent_events,
        verifier_events=verifier_events,
        facts=facts,
        gateways=gateways,
        sidecar_log=sidecar_log,
        during=during,
        seen=public.seen()[len(before) :],
        host_port=host.port,
        host_received=list(host.received),
    )


def test_a_compose_allowlist_phase_reaches_its_hosts_and_its_sidecar_only(
    docker_runtime: Any, public: PublicNet, tmp_path: Path
) -> None:
    run = _trial(docker_runtime, public, tmp_path / "task", NO_NETWORK)
    agent, verifier, facts, seen, token = run.agent, run.verifier, run.facts, run.seen, run.token
    proxy_host, chain = run.proxy_host, run.chain
    agent_events, verifier_events = run.agent_events, run.verifier_events
    # The proxy listens on the project's own gateway.
    assert proxy_host in run.gateways, (facts, run.gateways)
    # The agent's environment names the proxy; loopback and the sidecar stay direct.
    proxy_url = f"http://{facts['egress_proxy']}"
    assert agent["env"]["HTTP_PROXY"] == proxy_url == agent["env"]["https_proxy"], agent
    assert agent["env"]["NO_PROXY"].startswith("localhost,127.0.0.1,::1,kv,"), agent
    # The sidecar, by name, in both phases: through urllib with the proxy variables set,
    # raw TCP, and the engine's embedded DNS itself.
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
    assert agent["dns-listed"] == [public.ip], agent
    assert agent["dns-unlisted"] == "rcode 3", agent  # NXDOMAIN from the responder
    # DNS over TCP, through the embedded DNS and to the gateway: the same answers.
    assert agent["tcp-dns-sidecar"] == [0, agent["dns-sidecar"][0]], agent
    assert agent["tcp-dns-listed"] == [0, public.ip], agent
    assert agent["tcp-dns-gateway"] == [0, public.ip], agent
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
    # From outside: the servers saw only the listed, matching requests; the host's
    # listener nothing; the sidecar exactly the two requests by name.
    assert run.host_received == [], f"the host's listener was reached: {run.host_received}"
    assert "evil.test" not in seen and "tcp8443" not in seen, seen
    assert seen.count("sni pub.test") == 1 and seen.count("tcp443") == 1, seen
    assert seen.count("http b'GET") == 2, seen
    requests = [line for line in run.sidecar_log.splitlines() if line.startswith("REQUEST ")]
    assert requests == [
        "REQUEST GET /canary-agent HTTP/1.1",
        "REQUEST GET /canary-verifier HTTP/1.1",
    ], run.sidecar_log
    # Every refusal is an event, with its destination, in the phase it happened.
    reasons = {(e["protocol"], e.get("host") or e.get("ip") or e.get("destination"), e["reason"])
               for e in agent_events}  # fmt: skip
    text = " | ".join(f"{p} {d}: {r}" for p, d, r in sorted(reasons, key=str))
    for needle in (
        "http evil.test: the host is not listed",
        f"http {public.ip}: the IP is not listed",
        f"http {proxy_host}: port {run.host_port} is not allowed",
        f"http {METADATA}: the IP is not listed",
        "connect evil.test: the host is not listed",
        "tls evil.test: the ClientHello names 'evil.test', the CONNECT 'pub.test'",
        "dns evil.test: the name is not listed",
        "ip allowlist: allowlist phase: only the egress proxy",
    ):
        assert needle in text, f"{needle!r} not in {text}"
    assert all(e["phase"] == "agent" for e in agent_events), agent_events
    dropped = [e for e in agent_events if e.get("refused") == "allowlist"]
    assert dropped and dropped[0]["packets"] >= 7, dropped  # 4 SYNs, 2 datagrams, 1 query
    assert ("verifier", "closed") in {(e["phase"], e.get("refused")) for e in verifier_events}
    # The main container's packets to the host went to the trial's chain before the
    # host guard's drop (that is how its proxy was reachable).
    assert f"input-{chain}" in run.during, run.during
    # Nothing of the trial is left: its chain, its DNS redirect, its INPUT jump, its proxy.
    listing, nat = _iptables("-S"), _iptables("-t", "nat", "-S", "PREROUTING")
    assert chain not in listing and chain not in nat, (listing, nat)
    assert not _reachable(facts["egress_proxy"]), facts


def test_a_public_verifier_after_a_compose_allowlist_agent_gets_the_public_rules(
    docker_runtime: Any, public: PublicNet, tmp_path: Path
) -> None:
    """The same task with a ``public`` verifier: the agent's restriction is lifted, no more.

    The verifier gets no proxy in its environment, every name from the responder (now
    public), the public rules for raw TCP (the namespace's /30 is on a link of the host,
    a subnet ``public`` keeps out), and the sidecar as before.
    """
    run = _trial(docker_runtime, public, tmp_path / "task", NetworkPolicy(mode="public"))
    agent, verifier = run.agent, run.verifier
    assert agent["http-listed"] == "PUBLIC-OK host=pub.test", agent
    assert agent["raw-public-80"] != "CONNECTED", agent
    assert verifier["env"] == {"HTTP_PROXY": None, "https_proxy": None, "NO_PROXY": None}
    for report in (agent, verifier):
        assert report["sidecar-http"].startswith(f"SIDECAR-OK {run.token} /canary-"), report
        assert report["sidecar-raw"] == "CONNECTED", report
        assert isinstance(report["dns-sidecar"], list) and report["dns-sidecar"], report
    assert verifier["dns-listed"] == [public.ip] == verifier["dns-unlisted"], verifier
    assert verifier["raw-public-80"] != "CONNECTED", verifier
    assert verifier["http-listed"] != "PUBLIC-OK host=pub.test", verifier  # no proxy now
    assert run.host_received == [], run.host_received
    assert run.seen.count("http b'GET") == 2, run.seen  # the agent's two, none after
    refused = {(e["phase"], e.get("refused")) for e in run.verifier_events}
    assert ("verifier", "host-subnet") in refused, run.verifier_events
    assert ("verifier", "allowlist") not in refused, run.verifier_events


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
