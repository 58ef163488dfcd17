"""Red team: a compose task without root, attacked by its sidecar's author and its agent.

Where the harness is not root on the engine's host, a compose task's network is guarded by
the engine alone (``internal``, no IPv4 on its bridge, no IPv6, sidecars without
``NET_RAW``) and by the rules of the trial's own namespace (``sandbox/docker/compose.py``,
``sandbox/docker/netns_rules.py``). Attacked through the real CLI as a docker-group user,
judged from outside (a host listener on ``0.0.0.0``, the engine's containers after the
run) wherever the verdict can be taken there:

- the sidecar, written by the task's author, root in its container, tries to open its
  namespace's rules, then sends UDP with no address of the host at all:
  to the limited broadcast, the all-hosts multicast group, an SSDP-like group and its
  subnet's broadcast, bound to its own address (no route, no ``NET_RAW`` needed), which a
  bridge without an address would still hand to the host's sockets on every address:
  nothing may arrive (each sidecar's namespace is filtered before it runs);
- a root agent (``--agent-root allow``) tries to rewrite its namespace (routes, sysctls,
  ``iptables``), then reaches for the host again, by TCP and by UDP to the broadcast
  addresses of every interface (the project's is inside the subnet every phase accepts);
- the sidecar scans every TCP port of the trial's namespace and asks its port 53 (the
  harness's relays and supervisor listen on its loopback only): only the agent's own port
  answers;
- the ``no-network`` verifier asks for a public name through the engine's resolver on
  ``127.0.0.11`` (port 53, then every port the engine's resolver really listens on) and
  through the sidecar, whose own resolver is the engine's; the sidecar, a public name at
  its start;
- the sidecar ignores its stop signal and asks to be restarted always: nothing of the
  project is left on the engine after the run.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.ci_image import ci_cli, ci_workdir
from support.compose_tasks import LoopbackResolver
from support.net import Listener, primary_addresses
from support.public_probe import ROOTFUL_HOST, read_records, token_packets
from support.users import (
    ROOTLESS_USER,
    UserHarness,
    docker_group_user,
    rootless_engine,
    run_args,
    user_harness,
)

pytestmark = [pytest.mark.docker, pytest.mark.root]

BASE = "harness/base:bookworm"
#: A name this machine's resolvers answer (the control: it resolves on the host).
RESOLVABLE = "deb.debian.org"

#: The sidecar (``python3 /srv/side.py``): an HTTP server on 8080 (``/report``,
#: ``/resolve/NAME``) that first resolves a public name and, when asked to, sends UDP to
#: every broadcast and multicast destination it can without an address of the host.
SIDECAR = r"""
import fcntl, json, signal, socket, struct, subprocess, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
token, port, public, broadcast, host, unicast = json.load(open("/srv/targets.json"))
report = {"done": False, "udp": {}}

def own():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        req = struct.pack("256s", b"eth0")
        address = struct.unpack("!I", fcntl.ioctl(s.fileno(), 0x8915, req)[20:24])[0]
        mask = struct.unpack("!I", fcntl.ioctl(s.fileno(), 0x891B, req)[20:24])[0]
        return address, mask
    finally:
        s.close()

def lookup(name):
    try:
        return socket.gethostbyname(name)
    except OSError as exc:
        return type(exc).__name__

def probe():
    report["dns-start"] = lookup(public)
    address, mask = own()
    mine = socket.inet_ntoa(struct.pack("!I", address))
    directed = socket.inet_ntoa(struct.pack("!I", (address & mask) | (~mask & 0xFFFFFFFF)))
    dests = ["255.255.255.255", "224.0.0.1", "239.255.255.250", directed]
    # Root in its own container, the sidecar first tries to open its namespace's rules.
    report["tamper"] = {}
    for argv in (["iptables", "-w", "-P", "OUTPUT", "ACCEPT"], ["iptables", "-w", "-F"],
                 ["ip6tables", "-w", "-P", "OUTPUT", "ACCEPT"]) if broadcast else ():
        try:
            done = subprocess.run(argv, capture_output=True)
            report["tamper"][" ".join(argv)] = done.returncode
        except OSError as exc:
            report["tamper"][" ".join(argv)] = type(exc).__name__
    for _ in range(5 if broadcast else 0):
        for dest in dests:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
                s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(mine))
                s.bind((mine, 0))
                s.sendto(("SIDECAR" + dest + token).encode(), (dest, port))
                report["udp"][dest] = "sent"
            except OSError as exc:
                report["udp"][dest] = type(exc).__name__
            finally:
                s.close()
        time.sleep(0.5)
    # Unicast, TCP and UDP, to every name and address of the host it has: the names its
    # file maps (extra_hosts, now its holder's), the host's own, docker0, the metadata
    # address, slirp's host; IPv6 all-nodes and all-routers; a name through the resolvers
    # its file names (now reset).
    report["hosts"] = {n: lookup(n) for n in ("hostgw", "hostip", "metadata") if unicast}
    report["unicast"] = {}
    for dest in ("hostgw", "hostip", "metadata", host, "172.17.0.1", "169.254.169.254",
                 "10.0.2.2") if unicast else ():
        for kind in ("udp", "tcp"):
            data = ("SIDECAR-%s-%s-%s" % (kind, dest, token)).encode()
            try:
                if kind == "udp":
                    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                        s.sendto(data, (dest, port))
                else:
                    with socket.create_connection((dest, port), 1) as s:
                        s.sendall(data)
                report["unicast"][kind + " " + dest] = "sent"
            except OSError as exc:
                report["unicast"][kind + " " + dest] = type(exc).__name__
    for dest in ("ff02::1", "ff02::2") if unicast else ():
        try:
            with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
                s.sendto(("SIDECAR-6-" + dest + token).encode(),
                         (dest, port, 0, socket.if_nametoindex("eth0")))
            report["unicast"]["udp " + dest] = "sent"
        except OSError as exc:
            report["unicast"]["udp " + dest] = type(exc).__name__
    report["dns-file"] = lookup("q" + token) if unicast else None
    # The trial's namespace, once its first request says where it is: every TCP port, and
    # a DNS query to its port 53 (its relay is on its loopback, its supervisor too).
    while "peer" not in report:
        time.sleep(0.2)
    peer, opened, lock = report["peer"], [], threading.Lock()
    def scan(ports):
        for p in ports:
            t = socket.socket(); t.settimeout(1)
            try:
                t.connect((peer, p))
                with lock:
                    opened.append(p)
            except OSError:
                pass
            finally:
                t.close()
    threads = [threading.Thread(target=scan, args=(range(i, 65536, 64),)) for i in range(1, 65)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report["peer-open"] = sorted(opened)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(3)
    try:
        u.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x03deb\x06debian"
                 b"\x03org\x00\x00\x01\x00\x01", (peer, 53))
        report["peer-dns"] = len(u.recv(4096))
    except OSError as exc:
        report["peer-dns"] = type(exc).__name__
    report["done"] = True

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        report.setdefault("peer", self.client_address[0])
        if self.path.startswith("/resolve/"):
            body = json.dumps(lookup(self.path[len("/resolve/"):])).encode()
        else:
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

COMPOSE = """\
services:
  main:
    depends_on:
      {side}:
        condition: service_healthy
  {side}:
    build:
      context: ./side
    restart: always
    stop_signal: SIGUSR1
    healthcheck:
      test:
        - CMD
        - python3
        - -c
        - import socket; socket.create_connection(('localhost', 8080), 2)
      interval: 1s
      timeout: 5s
      retries: 30
"""

#: The same sidecar, whose file also declares a service named as the harness names the
#: sidecar's namespace filter, in a profile compose leaves out (so compose's reading of the
#: file does not list it), which does nothing and exits 0; the sidecar depends on it, as
#: optional. Compose merges both into the harness's filter: disabled, and optional.
FILTER_DECOY = (
    COMPOSE
    + """\
    depends_on:
      hxrules-{side}:
        condition: service_started
        required: false
  hxrules-{side}:
    image: harness/base:bookworm
    entrypoint: ["true"]
    profiles: ["off"]
"""
)

#: The same sidecar, whose file names the host everywhere a sidecar's keys can: its
#: ``extra_hosts`` map names to the engine host's gateway, the host's own address
#: (``{host}``) and the metadata address, its ``dns`` are the host's address, the
#: engine's resolver and docker0, its ``hostname`` and an alias are ``main``, another
#: alias its holder's name.
NAMES_THE_HOST = (
    COMPOSE
    + """\
    hostname: main
    dns: ["{host}", "127.0.0.11", "172.17.0.1"]
    dns_search: [example]
    extra_hosts:
      - "hostgw:host-gateway"
      - "hostip:{host}"
      - "metadata:169.254.169.254"
    networks:
      default:
        aliases: [main, "hxnet-{side}"]
"""
)

#: The agent (``python3 - TOKEN PORT HOST SIDE``): its capabilities, its attempts at its
#: namespace's rules and routes, then the host's listener again (TCP and broadcast UDP).
AGENT = r"""
import json, os, shutil, socket, subprocess, sys, time, urllib.request
token, port, host, side = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
out = {"uid": os.getuid(), "tamper": {}}
caps = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0]
out["net_admin"] = bool(int(caps, 16) >> 12 & 1)
out["net_raw"] = bool(int(caps, 16) >> 13 & 1)
for path in ("/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv4/conf/all/route_localnet",
             "/proc/sys/net/ipv6/conf/all/disable_ipv6"):
    try:
        open(path, "w").write("1\n" if "disable" not in path else "0\n")
        out["tamper"][path] = "written"
    except OSError as exc:
        out["tamper"][path] = type(exc).__name__
for argv in (["iptables", "-w", "-P", "OUTPUT", "ACCEPT"], ["iptables", "-w", "-F"],
             ["iptables", "-w", "-t", "nat", "-F"],
             ["ip", "route", "add", "default", "dev", "eth0"],
             ["ip", "link", "set", "eth1", "down"]):
    if shutil.which(argv[0]) is None:
        out["tamper"][" ".join(argv)] = "absent"
        continue
    done = subprocess.run(argv, capture_output=True, text=True)
    out["tamper"][" ".join(argv)] = done.returncode
def tcp(address):
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect((address, port)); s.sendall(("AGENT" + token).encode()); return "tcp"
    except OSError as exc:
        return type(exc).__name__
    finally:
        s.close()
out["host-after"] = tcp(host)
def broadcasts():
    # Each interface's directed broadcast: the project's is inside the sidecars' subnet,
    # which every phase's rules accept.
    import fcntl, struct
    found = []
    for name in [l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]]:
        req = struct.pack("256s", name.encode())
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            address = struct.unpack("!I", fcntl.ioctl(s.fileno(), 0x8915, req)[20:24])[0]
            mask = struct.unpack("!I", fcntl.ioctl(s.fileno(), 0x891B, req)[20:24])[0]
        except OSError:
            continue
        finally:
            s.close()
        if name != "lo":
            found.append(socket.inet_ntoa(struct.pack("!I", address | (~mask & 0xFFFFFFFF))))
    return found
out["broadcasts"] = {}
for dest in ["255.255.255.255", "224.0.0.1"] + broadcasts():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        s.sendto(("AGENT" + dest + token).encode(), (dest, port))
        out["broadcasts"][dest] = "sent"
    except OSError as exc:
        out["broadcasts"][dest] = type(exc).__name__
    s.close()
# The control of the sidecar's scan of the namespace: a port the agent opens itself.
control = socket.socket(); control.bind(("0.0.0.0", 7777)); control.listen(64)
report = {}
for _ in range(90):
    try:
        report = json.load(urllib.request.urlopen("http://%s:8080/report" % side, timeout=5))
    except OSError as exc:
        out["side"] = type(exc).__name__
        time.sleep(1)
        continue
    out["side"] = "reached"
    if report.get("done"):
        break
    time.sleep(1)
out["report"] = report
json.dump(out, open("net.json", "w"))
"""

#: The ``no-network`` verifier (``python3 /tests/verify.py TOKEN NAME SIDE``): every way to
#: a resolver it can think of; prints ``RT3 {json}``; reward 1 when it reached the sidecar.
VERIFIER = r"""
import json, os, random, socket, struct, sys, urllib.request
token, name, side = sys.argv[1], sys.argv[2], sys.argv[3]
def query(qname, qtype=1):
    qid = random.randrange(65536)
    body = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in qname.split("."):
        body += bytes([len(label)]) + label.encode()
    return qid, body + b"\0" + struct.pack("!HH", qtype, 1)
def ask_udp(server, port, qname, qtype=1):
    qid, packet = query(qname, qtype)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
    try:
        s.sendto(packet, (server, port))
        data = s.recv(4096)
        return [struct.unpack("!H", data[2:4])[0] & 0xF, struct.unpack("!H", data[6:8])[0]]
    except OSError as exc:
        return type(exc).__name__
    finally:
        s.close()
def ask_tcp(server, port, qname, qtype=1):
    qid, packet = query(qname, qtype)
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect((server, port)); s.sendall(struct.pack("!H", len(packet)) + packet)
        data = s.recv(4096)[2:]
        return [struct.unpack("!H", data[2:4])[0] & 0xF, struct.unpack("!H", data[6:8])[0]]
    except OSError as exc:
        return type(exc).__name__
    finally:
        s.close()
def engine_ports(table):
    # The engine's resolver listens on 127.0.0.11 at ports of its own (0B00007F).
    ports = set()
    try:
        for line in open(table).readlines()[1:]:
            local = line.split()[1]
            if local.startswith("0B00007F:"):
                ports.add(int(local.split(":")[1], 16))
    except OSError:
        pass
    return sorted(ports)
out = {"gethostbyname": None, "udp": {}, "tcp": {}}
try:
    out["gethostbyname"] = socket.gethostbyname(name)
except OSError as exc:
    out["gethostbyname"] = type(exc).__name__
out["udp"]["53"] = ask_udp("127.0.0.11", 53, token + ".a." + name, 16)
out["tcp"]["53"] = ask_tcp("127.0.0.11", 53, token + ".b." + name, 16)
for port in engine_ports("/proc/net/udp"):
    out["udp"][str(port)] = ask_udp("127.0.0.11", port, token + ".c." + name)
for port in engine_ports("/proc/net/tcp"):
    out["tcp"][str(port)] = ask_tcp("127.0.0.11", port, token + ".d." + name)
def side_get(path):
    try:
        return json.load(urllib.request.urlopen("http://%s:8080%s" % (side, path), timeout=40))
    except OSError as exc:
        return type(exc).__name__
out["side-resolve"] = side_get("/resolve/" + name)
out["side-report"] = side_get("/report")
print("RT3 " + json.dumps(out))
ok = isinstance(out["side-report"], dict)
open(os.environ["HARNESS_VERIFIER_DIR"] + "/reward.txt", "w").write("1" if ok else "0")
"""


def _task(
    root: Path,
    token: str,
    side: str,
    port: int,
    host: str,
    broadcast: bool,
    compose: str,
    unicast: bool,
) -> Path:
    task = root / "tasks" / "compose"
    (task / "tests").mkdir(parents=True)
    (task / "environment" / "side").mkdir(parents=True)
    (task / "task.toml").write_text(
        '[task]\nname = "redteam3/compose"\n'
        '[agent]\ntimeout_sec = 180\nnetwork_mode = "public"\n'
        '[verifier]\ntimeout_sec = 90\nnetwork_mode = "no-network"\n'
    )
    (task / "environment" / "Dockerfile").write_text(f"FROM {BASE}\n")
    (task / "environment" / "docker-compose.yaml").write_text(compose.format(side=side, host=host))
    sidecar = task / "environment" / "side"
    (sidecar / "Dockerfile").write_text(
        f'FROM {BASE}\nCOPY side.py targets.json /srv/\nCMD ["python3", "/srv/side.py"]\n'
    )
    (sidecar / "side.py").write_text(SIDECAR)
    (sidecar / "targets.json").write_text(
        json.dumps([token, port, RESOLVABLE, broadcast, host, unicast])
    )
    (task / "instruction.md").write_text(
        f"python3 - {token} {port} {host} {side} <<'AGENT'\n{AGENT}AGENT\n"
    )
    (task / "tests" / "verify.py").write_text(VERIFIER)
    (task / "tests" / "test.sh").write_text(
        f"python3 /tests/verify.py {token} {RESOLVABLE} {side}\n"
    )
    return root / "tasks"


Packets = list[tuple[str, str, bytes]]

#: A UDP listener on ``0.0.0.0:PORT`` printing each datagram it gets (hex), one a line.
NS_LISTENER = r"""
import socket, sys
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind(("0.0.0.0", int(sys.argv[1])))
print("ready", flush=True)
while True:
    data, peer = u.recvfrom(4096)
    print(peer[0], data.hex(), flush=True)
"""


class _EngineNamespaceListener:
    """A UDP listener in a rootless engine's own network namespace (its "host").

    A rootless engine's bridges are in the namespace of its ``dockerd`` (rootlesskit's),
    not the machine's: what reaches that namespace's stack reaches the engine's host.
    """

    def __init__(self, user: str, port: int) -> None:
        pid = subprocess.run(
            ["pgrep", "-u", user, "-x", "dockerd"], capture_output=True, text=True, timeout=30
        ).stdout.split()
        assert len(pid) == 1, f"the rootless engine's dockerd of {user}: {pid}"
        self.proc = subprocess.Popen(
            ["nsenter", "-t", pid[0], "-n", "python3", "-c", NS_LISTENER, str(port)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "ready"

    def close(self) -> list[tuple[str, str, bytes]]:
        """Stop the listener; what it received."""
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=30)
        return [
            ("udp-engine-ns", peer, bytes.fromhex(data))
            for peer, data in (line.split() for line in out.splitlines() if line.strip())
        ]


def _engine(where: str) -> tuple[str, str]:
    """The engine's ``DOCKER_HOST`` and the user the harness runs as, for ``where``."""
    if where == "rootless":
        return rootless_engine(), ROOTLESS_USER
    return ROOTFUL_HOST, docker_group_user()


def _run(
    token: str,
    side: str,
    *,
    where: str,
    broadcast: bool,
    agent_root: bool,
    ci_dir: Path | None = None,
    compose: str = COMPOSE,
    refused: bool = False,
    unicast: bool = False,
) -> tuple[dict[str, Any], Path, Packets]:
    """One compose trial as the user of ``where``; its record, run dir and host packets.

    ``where`` is ``docker-group``, ``rootless`` or ``ci-image`` (the harness in the CI
    image, the host's engine through its socket, in ``ci_dir``). The packets: what a
    listener on the machine's ``0.0.0.0`` got carrying ``token`` (and, for a rootless
    engine, a listener on the same port in the engine's own namespace). ``compose`` is the
    task's file (``{side}``: the sidecar's name); ``refused``: the CLI must refuse the task
    before any trial (exit code 2, no trial recorded), and the record returned is then
    ``{"refusal": <its stderr>}``. ``unicast``: the sidecar also sends to the names its
    file maps and the host's addresses (:data:`NAMES_THE_HOST`).
    """
    user: UserHarness | None = None
    if where == "ci-image":
        assert ci_dir is not None
        name, work = "", ci_dir
    else:
        docker_host, name = _engine(where)
        user = user_harness(name)
        work = user.workdir()
    with Listener(ipv6=True) as listener:
        engine_ns = _EngineNamespaceListener(name, listener.port) if where == "rootless" else None
        try:
            host = primary_addresses()["ipv4"]
            tasks = _task(work, token, side, listener.port, host, broadcast, compose, unicast)
            args = [*run_args(tasks, work / "out", "--agent", "command", "--agent-cmd",
                              "bash {instruction_file}")]  # fmt: skip
            if agent_root:
                args += ["--agent-root", "allow"]
            if user is None:
                result = ci_cli(work, *args, timeout=900)
            else:
                user.give(work)
                result = user.cli(*args, docker_host=docker_host, timeout=900)
        finally:
            in_engine = engine_ns.close() if engine_ns is not None else []
        got = token_packets(listener, token)
        got += [packet for packet in in_engine if token.encode() in packet[2]]
    if refused:
        assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
        assert not list((work / "out").rglob("trials.jsonl")), "a trial ran"
        return {"refusal": result.stderr}, work / "out", got
    assert result.returncode == 0, result.stderr[-3000:]
    (record,) = read_records(work / "out")
    (run_dir,) = [p for p in (work / "out").iterdir() if p.is_dir()]
    return record, run_dir, got


def _left_on_engine(docker_host: str, side: str) -> list[str]:
    """Containers of the sidecar's service still on the engine (any state)."""
    return subprocess.run(
        ["docker", "-H", docker_host, "ps", "-aq", "--filter",
         f"label=com.docker.compose.service={side}"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.split()  # fmt: skip


@pytest.fixture
def ci_dir() -> Iterator[Path]:
    with ci_workdir() as work:
        yield work


# Sidecars run on the engine's default runtime whatever the trial's (``runtime`` is a reset
# key): ``--runtime runsc`` would run the same sidecar again.
@pytest.mark.parametrize("where", ["docker-group", "rootless", "ci-image"])
def test_a_sidecars_broadcasts_and_multicasts_reach_no_host_socket(
    where: str, ci_dir: Path
) -> None:
    """The task's sidecar sends UDP to broadcast and multicast groups: nothing arrives.

    No address of the host is on the project's bridge, but the bridge is still the host's
    interface: a datagram to ``255.255.255.255``, ``224.0.0.1``, an SSDP-like group or the
    subnet's own broadcast, sent from the sidecar's own address, needs neither a route
    nor ``NET_RAW``, and a bridge without an IPv4 address would still hand the first two
    to its host's sockets bound to ``0.0.0.0``. Each sidecar's namespace is filtered
    before it runs, so the listener on the machine's ``0.0.0.0`` (and, for a rootless
    engine, the one in the engine's own namespace, whose bridges are there) hears
    nothing at all, while the agent still reaches the sidecar by its name.
    """
    token = secrets.token_hex(8)
    side = "bc" + token[:6]
    record, run_dir, got = _run(
        token, side, where=where, broadcast=True, agent_root=False, ci_dir=ci_dir
    )
    workspace = run_dir / "trials" / record["id"] / "workspace"
    net = json.loads((workspace / "net.json").read_text())
    report = net["report"]
    guard = record["sandbox"]["compose"]["host_guard"]
    assert guard["kind"] == "engine", record["sandbox"]
    assert report.get("done") and len(report["udp"]) == 4, report  # the sidecar did try
    # Each tool ran (as root) and was refused: the sidecar has no NET_ADMIN.
    tamper = report["tamper"]
    assert len(tamper) == 3 and all(isinstance(v, int) and v for v in tamper.values()), report
    assert net["side"] == "reached", net  # its peers still reach it, by its name
    # From outside: not one datagram (nor anything else) carrying the token arrived.
    assert not got, got
    # The record says what held: every sidecar filtered, no residual declared.
    assert guard["sidecars_filtered"] is True and "residual" not in guard, guard


@pytest.mark.parametrize("where", ["docker-group", "rootless"])
def test_a_root_agent_and_a_closed_verifier_reach_no_resolver_and_leave_nothing(
    where: str,
) -> None:
    """A root agent cannot rewrite its namespace; a closed verifier gets no DNS answer.

    The agent (``--agent-root allow``) tries the namespace's sysctls, ``iptables`` and
    routes, then the host's primary address; the ``no-network`` verifier asks the engine's
    resolver on every port it listens on and the sidecar's resolver for a public name; the
    sidecar asks too at its start. After the run, the sidecar (which ignores its stop signal
    and asks to be restarted always) is gone from the engine.
    """
    token = secrets.token_hex(8)
    side = "rt" + token[:6]
    record, run_dir, got = _run(token, side, where=where, broadcast=False, agent_root=True)
    assert not got, got
    assert record["status"] == "completed" and record["reward"] == 1, record
    assert not _left_on_engine(_engine(where)[0], side)
    workspace = run_dir / "trials" / record["id"] / "workspace"
    net = json.loads((workspace / "net.json").read_text())
    assert net["uid"] == 0, net  # the attack ran as root
    assert not net["net_admin"] and not net["net_raw"], net
    assert "written" not in net["tamper"].values(), net
    assert 0 not in net["tamper"].values(), net
    assert net["host-after"] != "tcp", net
    # The sidecar has no resolver that answers a public name (no internet, no DNS).
    assert net["report"]["dns-start"].count(".") != 3, net["report"]
    # Nothing the harness runs in the trial's namespace listens where a sidecar reaches:
    # only the agent's own port (the control).
    assert net["report"]["peer-open"] == [7777], net["report"]
    assert not isinstance(net["report"]["peer-dns"], int), net["report"]
    lines = [
        line.removeprefix("RT3 ")
        for path in run_dir.rglob("*")
        if path.is_file() and path.stat().st_size < 1 << 20
        for line in path.read_text(errors="replace").splitlines()
        if line.startswith("RT3 {")
    ]
    assert lines, "the verifier's report was not found in the run dir"
    verifier = json.loads(lines[-1])
    assert verifier["gethostbyname"] == "gaierror", verifier
    assert str(verifier["side-resolve"]).count(".") != 3, verifier
    for proto in ("udp", "tcp"):
        for port, answer in verifier[proto].items():
            # No answer at all, or an answer with no record (a refusal by the relay).
            assert not (isinstance(answer, list) and answer[1] > 0), (proto, port, verifier)


@pytest.mark.parametrize("where", ["docker-group", "rootless"])
def test_a_sidecar_that_disables_its_namespace_filter_never_runs(where: str) -> None:
    """A task's service named as the sidecar's filter, out of every profile: refused.

    Compose's reading of the file leaves a service of an inactive profile out, so the
    harness would name the sidecar's filter after it; compose then merges the task's
    service into the harness's (its ``profiles`` disable the filter, its ``entrypoint``
    makes it a no-op) and the sidecar's ``required: false`` into its dependency on it:
    the sidecar would start in its holder's namespace with no rule at all, and its
    broadcasts reach the host. The task is refused before any trial, naming the service,
    the listener on the machine's ``0.0.0.0`` (and in a rootless engine's namespace)
    hears nothing, and nothing of the sidecar is on the engine.
    """
    token = secrets.token_hex(8)
    side = "fd" + token[:6]
    record, _out, got = _run(
        token, side, where=where, broadcast=True, agent_root=False,
        compose=FILTER_DECOY, refused=True,
    )  # fmt: skip
    assert not got, got
    assert f"services.hxrules-{side} takes a name the harness gives" in record["refusal"], record
    assert not _left_on_engine(_engine(where)[0], side)


@pytest.mark.parametrize("where", ["docker-group", "rootless"])
def test_a_sidecar_whose_file_names_the_host_reaches_no_host_socket(where: str) -> None:
    """Names and resolvers of the host in a sidecar's file: nothing of the host answers.

    The file maps names to the engine host's gateway (``host-gateway``), the host's own
    address and the metadata address, names the host's address, the engine's resolver and
    docker0 as its resolvers, calls itself ``main`` and its holder's name. The keys a
    joined namespace refuses move to its holder (the names resolve: the control), its
    resolvers are the harness's; then the sidecar sends TCP and UDP to each name and to
    the host's addresses it knows, to IPv6 all-nodes and all-routers, and asks for a name
    carrying the token. Judged from outside: the listener on the machine's ``0.0.0.0`` and
    ``::`` (and in a rootless engine's namespace) and a resolver on the host's address
    get nothing.
    """
    token = secrets.token_hex(8)
    side = "nh" + token[:6]
    resolver = LoopbackResolver(primary_addresses()["ipv4"])
    try:
        record, run_dir, got = _run(
            token, side, where=where, broadcast=True, agent_root=False,
            compose=NAMES_THE_HOST, unicast=True,
        )  # fmt: skip
    finally:
        resolver.close()
    assert not got, got
    assert not [query for query in resolver.got if token.encode() in query], resolver.got
    report = json.loads((run_dir / "trials" / record["id"] / "workspace" / "net.json").read_text())[
        "report"
    ]
    # The file's names held (on its holder): the sidecar had the host's address in hand.
    assert report["hosts"]["hostip"] == primary_addresses()["ipv4"], report
    assert report["hosts"]["metadata"] == "169.254.169.254", report
    assert report.get("done") and len(report["unicast"]) == 16, report  # it tried every one
    # None left its namespace (UDP refused at once by its rules, TCP never connected).
    assert "sent" not in report["unicast"].values(), report
    assert str(report["dns-file"]).count(".") != 3, report
    guard = record["sandbox"]["compose"]["host_guard"]
    assert guard["kind"] == "engine" and guard["sidecars_filtered"] is True, guard
