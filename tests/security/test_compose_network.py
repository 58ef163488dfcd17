"""Attack: from a compose task's agent, reach services listening on the host itself.

Docker's ``internal`` networks only stop forwarding; packets addressed to the host (the
network's own gateway, docker0, the host's primary addresses) go through the host's INPUT
chain. The harness drops them there for every compose network it creates
(``sandbox/docker/hostguard.py``). The canary is a host listener bound to every address;
what it receives is the verdict, never the agent's report.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support.compose_tasks import kv_compose
from support.net import Listener, bridge_gateway, primary_addresses

PROBE = r"""
set +e
python3 - <<'PY'
import fcntl, json, socket, struct, urllib.request
token = "@TOKEN@"
out = {"token": token, "tcp": {}}
def ifaddr(name, request):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        packed = fcntl.ioctl(s.fileno(), request, struct.pack("256s", name.encode()))
        return struct.unpack("!I", packed[20:24])[0]
    except OSError:
        return None
    finally:
        s.close()
with open("/proc/net/dev") as fh:
    out["interfaces"] = sorted(l.split(":")[0].strip() for l in fh.readlines()[2:])
targets = [t for t in "@TARGETS@".split(",") if t]
for name in out["interfaces"]:
    address, mask = ifaddr(name, 0x8915), ifaddr(name, 0x891B)
    if name != "lo" and address is not None and mask is not None:
        # The network's gateway is its subnet's first address (docker's default IPAM).
        targets.append(socket.inet_ntoa(struct.pack("!I", (address & mask) + 1)))
if "@SIDECAR@":
    # gVisor's host network answers no SIOCGIFADDR: the gateway from the own address.
    try:
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.connect(("@SIDECAR@", 9))
        a, b, c, _d = u.getsockname()[0].split(".")
        u.close()
        for gw in ("%s.%s.0.1" % (a, b), "%s.%s.%s.1" % (a, b, c)):
            if gw not in targets:
                targets.append(gw)
    except OSError:
        pass
out["targets"] = targets
for host in targets:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect((host, @PORT@))
        s.sendall(token.encode() + b"\n")
        out["tcp"][host] = "CONNECTED"
    except OSError as exc:
        out["tcp"][host] = "%s: %s" % (type(exc).__name__, exc)
    finally:
        s.close()
    u = socket.socket(family, socket.SOCK_DGRAM)
    try:
        u.sendto(token.encode(), (host, @PORT@))
    except OSError:
        pass
    u.close()
if "@SIDECAR@":
    try:
        urllib.request.urlopen("http://@SIDECAR@:8080/canary", timeout=5)
        out["sidecar"] = "REACHED"
    except urllib.error.HTTPError as exc:
        out["sidecar"] = "REACHED" if exc.code == 404 else "HTTP %s" % exc.code
    except Exception as exc:
        out["sidecar"] = "%s: %s" % (type(exc).__name__, exc)
with open("/app/probe.json", "w") as fh:
    json.dump(out, fh)
PY
"""

KV = """\
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_error(404)


ThreadingHTTPServer(("0.0.0.0", 8080), Handler).serve_forever()
"""

COMPOSE = kv_compose()


def _compose_task(sec: Any, parent: Path, name: str, attack: str) -> Path:
    task = sec.write_task(
        parent, name, attack=attack, dockerfile=f"FROM {sec.BASE_IMAGE}\n", agent_timeout=40
    )
    environment = task / "environment"
    (environment / "kv").mkdir()
    (environment / "kv" / "Dockerfile").write_text(
        f'FROM {sec.BASE_IMAGE}\nCOPY kv.py /srv/kv.py\nCMD ["python3", "/srv/kv.py"]\n'
    )
    (environment / "kv" / "kv.py").write_text(KV)
    (environment / "docker-compose.yaml").write_text(COMPOSE)
    return task


class _NetworkWatcher:
    """Records the gateways of the networks labelled with a task, while they exist."""

    def __init__(self, client: Any, task_label: str) -> None:
        self.client = client
        self.label = task_label
        self.gateways: dict[str, list[str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> _NetworkWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                for network in self.client.networks.list(filters={"label": self.label}):
                    configs = (network.attrs.get("IPAM") or {}).get("Config") or []
                    found = [str(c["Gateway"]) for c in configs if c.get("Gateway")]
                    self.gateways[str(network.name)] = found
            except Exception:  # a network removed while listed: seen on the next poll
                pass
            self._stop.wait(0.2)


def _guard_rules(run_name: str) -> list[str]:
    """This run's tagged INPUT rules still on the host (IPv4 and IPv6)."""
    from sandbox.docker import netfilter
    from sandbox.docker.hostguard import run_tag

    left = []
    for tool in ("iptables", "ip6tables"):
        listing = netfilter.run(tool, "-S", "INPUT")
        left += [line for line in listing.stdout.splitlines() if run_tag(run_name) in line]
    return left


@pytest.mark.docker
def test_compose_agent_cannot_reach_the_hosts_own_services(
    client: Any, cli: Any, sec: Any, tmp_path: Path, docker_runtime: str | None
) -> None:
    """Attack host-services: a compose task's agent connects to a host listener.

    The listener binds 0.0.0.0 (and ::); the agent tries docker0's address, its own
    network's gateway and the host's primary addresses, over TCP and UDP. Nothing may
    arrive, while the agent still reaches its sidecar by name (control). A plain task run
    alongside tries the same and has loopback only (``--network none``). Under gVisor the
    main container joins the project's network through ``runsc-net`` (egress.py).
    """
    compose, plain = sec.unique("hostnet-compose"), sec.unique("hostnet-plain")
    tokens = {name: f"HOSTNET-{secrets.token_hex(12)}" for name in (compose, plain)}
    host = primary_addresses()
    targets = [bridge_gateway(client), *host.values()]
    tasks = tmp_path / "tasks"
    with Listener(ipv6=True) as listener:
        for name, sidecar in ((compose, "kv"), (plain, "")):
            attack = (
                PROBE.replace("@TOKEN@", tokens[name])
                .replace("@TARGETS@", ",".join(targets))
                .replace("@PORT@", str(listener.port))
                .replace("@SIDECAR@", sidecar)
            )
            if sidecar:
                _compose_task(sec, tasks, name, attack)
            else:
                sec.write_task(tasks, name, attack=attack)
        with _NetworkWatcher(client, f"{sec.TASK_LABEL}={compose}") as networks:
            run = cli.run([tasks], jobs=2, timeout=240)
        time.sleep(0.5)
    assert run.code == 0, run
    got = b"\n".join(data for _kind, _peer, data in listener.received)
    assert tokens[compose].encode() not in got, f"a compose agent reached the host: {got!r}"
    assert tokens[plain].encode() not in got, f"a plain agent reached the host: {got!r}"

    plain_report = json.loads((run.evidence(run.by_task(plain)) / "workspace" / "probe.json")
                              .read_text())  # fmt: skip
    assert plain_report["interfaces"] == ["lo"], plain_report
    assert run.by_task(plain)["sandbox"]["network"] == "none"

    record = run.by_task(compose)
    assert record["status"] == "completed", record
    report = json.loads((run.evidence(record) / "workspace" / "probe.json").read_text())
    assert report["sidecar"] == "REACHED", f"control failed: no sidecar reached: {report}"
    seen = [g for found in networks.gateways.values() for g in found]
    assert seen, "the compose network was never seen on the engine"
    assert set(seen) <= set(report["tcp"]), (seen, report)
    assert not any(v == "CONNECTED" for v in report["tcp"].values()), report
    guard = record["sandbox"]["compose"]["host_guard"]
    assert guard["bridge"] and guard["families"], guard
    # The guard's drops are the trial's events (its rule is the project's own): the
    # agent's TCP and UDP attempts at the host, counted in its phase, no destinations.
    dropped = [e for e in record["events"] if e["type"] == "network_refused"]
    assert {(e["phase"], e["protocol"], e["refused"], e["destination"]) for e in dropped} == {
        ("agent", "ip", "host", "host")
    }, dropped
    assert sum(e["packets"] for e in dropped) >= 2 * len(seen), dropped
    assert run.run_dir is not None
    assert _guard_rules(run.run_dir.name) == [], "the trial's firewall rules outlived it"


def _stand_in_bridge(name: str, *, up: bool) -> None:
    """Create (or delete) an empty bridge without addresses, standing in for a live network."""
    args = ["ip", "link", "add", name, "type", "bridge"] if up else ["ip", "link", "del", name]
    subprocess.run(args, check=True, capture_output=True)


@pytest.mark.docker
def test_cleanup_sweeps_only_the_runs_rules_of_gone_bridges(
    client: Any, sec: Any, tmp_path: Path
) -> None:
    """A crashed run's rules are found by their tag and removed by ``sandbox cleanup --run``.

    Three rules are planted as a dead run would leave them: the run's for a bridge that is
    gone, the run's for a bridge still up (its network alive: it must stay), and another
    run's (never touched by a cleanup of this run).
    """
    from sandbox.docker.hostguard import HostGuard, bridge_name

    run, other = sec.unique("guard-run"), sec.unique("guard-other")
    gone = HostGuard(run, bridge_name(f"{run}-gone"))
    alive = HostGuard(run, bridge_name(f"{run}-alive"))
    foreign = HostGuard(other, bridge_name(f"{other}-gone"))
    _stand_in_bridge(alive.bridge, up=True)
    try:
        for guard in (gone, alive, foreign):
            guard.install()
        before = _guard_rules(run)
        assert len(before) == 2 * len(gone.families) and gone.families, before
        result = subprocess.run(
            [sys.executable, "-m", "harness", "sandbox", "cleanup", "--run", run],
            capture_output=True, text=True, env=sec.Cli(tmp_path).env(), check=False,
            timeout=120,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert f"{len(gone.families)} firewall rule(s)" in result.stdout, result.stdout
        left = _guard_rules(run)
        assert left and all(alive.bridge in line for line in left), left
        assert len(_guard_rules(other)) == len(foreign.families), "another run's rule went"
    finally:
        _stand_in_bridge(alive.bridge, up=False)
        for guard in (gone, alive, foreign):
            guard.remove()
    assert _guard_rules(run) == [] and _guard_rules(other) == []
