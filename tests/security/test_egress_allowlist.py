"""Attacks on a docker trial's ``allowlist`` phase (issue 24 item 3), under runc and gVisor.

"The internet" is a network namespace the test makes (``support.netns.PublicNet``: HTTP
on 80, TLS on 443 recording each SNI, plain TCP on 8443, each logging what reached it);
the trial's egress proxy resolves ``pub.test`` (listed, with ``*.pub.test``) and
``evil.test`` (not listed) to it from the run's pinned names. A listener on every host
address stands for the host's own services. One trial per runtime, its agent phase
``allowlist``, attacks from inside: the listed host by HTTP and HTTPS (CONNECT + SNI)
through the proxy the phase's environment names; an unlisted host, the listed host's raw
IP, a mismatched SNI, the host's listener and the metadata address through the proxy; DNS
for listed and unlisted names through the container's resolver, by UDP and by TCP; raw
TCP and UDP to the public host, the host and the metadata address, past the proxy. Its
``public`` verifier then gets the public rules: no proxy, every name resolved. Judged
from outside: what the servers and the listener saw, the trial's ``network_refused``
events, and what is left on the host after it stopped.
"""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from support.egress_runtime import egress_runtime
from support.net import Listener
from support.netns import PublicNet
from support.probes import PROXY_CLIENT

from sandbox.backend import PhaseRequest, Sandbox, SandboxSpec
from sandbox.environment import FIXED_PATH
from sandbox.network_policy import NetworkPolicy

pytestmark = [pytest.mark.docker, pytest.mark.root]

ALLOWLIST = NetworkPolicy(mode="allowlist", allowed_hosts=("pub.test", "*.pub.test"))
PUBLIC = NetworkPolicy(mode="public")
METADATA = "169.254.169.254"

#: Runs in the trial: every attempt's outcome as one JSON line.
PROBE = (
    PROXY_CLIENT
    + r"""
out, public, gateway, port = {}, os.environ["PUB"], os.environ["GW"], os.environ["HPORT"]
out["env"] = {k: os.environ.get(k) for k in ("HTTP_PROXY", "https_proxy", "NO_PROXY")}
def resolve(name):
    try:
        return sorted({a[4][0] for a in socket.getaddrinfo(name, 80, socket.AF_INET)})
    except socket.gaierror as exc:
        return "gaierror %s" % exc.errno
resolver = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
out["dns-listed"] = resolve("pub.test")
out["raw-public-80"] = raw(public, 80)
if os.environ.get("SHORT"):
    out["dns-unlisted"] = resolve("evil.test")
    print(json.dumps(out))
    raise SystemExit(0)
out["http"] = get("http://pub.test/")
out["http-wildcard"] = get("http://www.pub.test/")
out["https"] = tunnel("pub.test:443", "pub.test")
out["http-unlisted"] = get("http://evil.test/")
out["http-raw-ip"] = get("http://%s/" % public)
out["http-host"] = get("http://%s:%s/" % (gateway, port))
out["http-metadata"] = get("http://%s/" % os.environ["META"])
out["https-unlisted"] = tunnel("evil.test:443", "evil.test")
out["https-sni-mismatch"] = tunnel("pub.test:443", "evil.test")
out["dns-unlisted"] = resolve("evil.test")
out["tcp-dns-listed"] = tcp_dns(resolver, "pub.test")
out["tcp-dns-unlisted"] = tcp_dns(resolver, "evil.test")
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
    with egress_runtime(request.param, "allowlist") as runtime:
        yield runtime


def _phase(sandbox: Sandbox, role: str, env: dict[str, str]) -> dict[str, Any]:
    full = {"PATH": FIXED_PATH, "PROBE": PROBE, **env}
    argv = ["bash", "-c", 'python3 -c "$PROBE"']
    result = sandbox.run_phase(PhaseRequest(role=role, argv=argv, env=full, timeout_sec=120))  # type: ignore[arg-type]
    data, _event = sandbox.read_file(f"{sandbox.paths.logs}/{role}.stdout", max_bytes=1 << 16)
    text = (data or b"").decode()
    lines = [line for line in text.splitlines() if line.startswith("{")]
    assert result.exit_code == 0 and lines, (result, text)
    report: dict[str, Any] = json.loads(lines[-1])
    return report


def _reachable(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
    except OSError:
        return False
    return True


def test_an_allowlist_phase_reaches_only_its_listed_hosts_through_the_proxy(
    docker_runtime: Any, public: PublicNet
) -> None:
    from sandbox.docker.backend import DockerSandbox

    docker_runtime.egress.hosts = {
        "pub.test": [public.ip],
        "www.pub.test": [public.ip],
        "evil.test": [public.ip],
    }
    spec = SandboxSpec(
        trial_id=f"allowlist-{secrets.token_hex(3)}",
        allow_internet=True,
        networks={"agent": ALLOWLIST, "verifier": PUBLIC},
    )
    before = public.seen()
    with Listener() as host:
        sandbox = DockerSandbox(spec, docker_runtime)
        try:
            sandbox.start()
            facts = sandbox.describe()
            gateway = facts["egress_proxy"].rpartition(":")[0]
            env = {"PUB": public.ip, "GW": gateway, "HPORT": str(host.port), "META": METADATA}
            agent = _phase(sandbox, "agent", env)
            agent_events = sandbox.network_events()
            verifier = _phase(sandbox, "verifier", {**env, "SHORT": "1"})
            verifier_events = sandbox.network_events()
            facts = sandbox.describe()
        finally:
            sandbox.stop()
    seen = public.seen()[len(before) :]
    # The phase's environment names the proxy; loopback stays direct.
    proxy_url = f"http://{facts['egress_proxy']}"
    assert agent["env"] == {
        "HTTP_PROXY": proxy_url,
        "https_proxy": proxy_url,
        "NO_PROXY": "localhost,127.0.0.1,::1",
    }, agent
    # Listed: HTTP (also under the wildcard) and HTTPS with a matching SNI; DNS answers it.
    assert agent["http"] == "PUBLIC-OK host=pub.test", agent
    assert agent["http-wildcard"] == "PUBLIC-OK host=www.pub.test", agent
    assert agent["https"] == "TLS-OK sni=pub.test", agent
    assert agent["dns-listed"] == [public.ip], agent
    # Refused by the proxy: unlisted, raw IP, the host, metadata, a mismatched SNI.
    for label in ("http-unlisted", "http-raw-ip", "http-host", "http-metadata"):
        assert agent[label] == "HTTP 403", (label, agent)
    assert agent["https-unlisted"].startswith("HTTP/1.1 403"), agent
    assert "TLS-OK" not in agent["https-sni-mismatch"], agent
    assert isinstance(agent["dns-unlisted"], str), agent  # NXDOMAIN, nothing resolved
    # DNS over TCP, through the engine's resolver and to the gateway: the same answers.
    assert agent["tcp-dns-listed"] == [0, public.ip], agent
    assert agent["tcp-dns-gateway"] == [0, public.ip], agent
    assert agent["tcp-dns-unlisted"] == [3, None], agent  # NXDOMAIN
    # Past the proxy: nothing leaves, by TCP or UDP.
    for label in ("raw-public-80", "raw-public-8443", "raw-host", "raw-metadata"):
        assert agent[label] != "CONNECTED", (label, agent)
    # From outside: the servers saw only the listed, matching requests.
    assert host.received == [], f"the host's listener was reached: {host.received}"
    assert "evil.test" not in seen and "tcp8443" not in seen, seen
    assert seen.count("sni pub.test") == 1 and seen.count("tcp443") == 1, seen
    assert seen.count("http b'GET") == 2, seen
    # The public verifier: no proxy in its environment, any name resolves (through the
    # same responder, now public), and raw TCP meets the public rules, not the proxy-only
    # one: the namespace's /30 is on a link of the host, a subnet public keeps out.
    assert verifier["env"] == {"HTTP_PROXY": None, "https_proxy": None, "NO_PROXY": None}
    assert verifier["dns-listed"] == [public.ip] == verifier["dns-unlisted"], verifier
    assert verifier["raw-public-80"] != "CONNECTED", verifier
    # Every refusal is an event, with its destination.
    reasons = {(e["protocol"], e.get("host") or e.get("ip") or e.get("destination"), e["reason"])
               for e in agent_events}  # fmt: skip
    text = " | ".join(f"{p} {d}: {r}" for p, d, r in sorted(reasons, key=str))
    for needle in (
        "http evil.test: the host is not listed",
        f"http {public.ip}: the IP is not listed",
        f"http {gateway}: port {host.port} is not allowed",
        f"http {METADATA}: the IP is not listed",
        "connect evil.test: the host is not listed",
        "tls evil.test: the ClientHello names 'evil.test', the CONNECT 'pub.test'",
        "dns evil.test: the name is not listed",
        "ip allowlist: allowlist phase: only the egress proxy",
    ):
        assert needle in text, f"{needle!r} not in {text}"
    assert all(e["phase"] == "agent" for e in agent_events), agent_events
    dropped = [e for e in agent_events if e.get("refused") == "allowlist"]
    assert dropped and dropped[0]["packets"] >= 6, dropped  # 4 TCP SYNs and 2 datagrams
    refused = {(e["phase"], e.get("refused")) for e in verifier_events}
    assert refused == {("verifier", "host-subnet")}, verifier_events
    # Nothing of the trial is left: its chain, its DNS redirect, its proxy.
    listing = subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout
    nat = subprocess.run(
        ["iptables", "-t", "nat", "-S", "PREROUTING"], capture_output=True, text=True
    ).stdout
    assert facts["egress_chain"] not in listing and facts["egress_chain"] not in nat, nat
    assert not _reachable(facts["egress_proxy"]), facts


def test_a_killed_run_leaves_no_dns_redirect_cleanup_cannot_remove() -> None:
    """A run killed with -9 after an allowlist trial's chain and DNS redirect were installed.

    Its proxy was a thread of the killed process (gone with it); ``remove_leaks`` removes
    the chain and the ``nat`` redirect left on the host.
    """
    from support.docker import docker_client

    from sandbox.docker import egress
    from sandbox.docker.engine import remove_leaks

    label = f"allowlist-kill-{secrets.token_hex(4)}"
    key = f"harness-gone-{secrets.token_hex(4)}"
    script = (
        "import os, docker\n"
        "from sandbox.docker import egress\n"
        f"run = egress.EgressRun(docker.from_env(), {label!r}); run.ensure()\n"
        f"flt = egress.TrialFilter(kind='E', key={key!r}, source='172.31.254.9')\n"
        "flt.proxy = (run.gateway(), 3128, 5353)\n"
        "flt.install(); flt.restrict()\n"
        "os.kill(os.getpid(), 9)\n"
    )
    killed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    chain = egress.chain_name("E", key)

    def nat() -> str:
        return subprocess.run(
            ["iptables", "-t", "nat", "-S", "PREROUTING"], capture_output=True, text=True
        ).stdout

    assert f"dns-{chain}" in nat()
    report = remove_leaks(docker_client(), run=label)
    listing = subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout
    assert chain not in listing and chain not in nat() and not report.errors, report
