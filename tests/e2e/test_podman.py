"""The docker sandbox on podman: its Docker-compatible API, as a user without root.

Debian's podman serves the Docker API (``podman system service``); the harness reaches it
through ``DOCKER_HOST`` like any engine. Here it is the rootless podman of the rootless
user (``ROOTLESS_USER``, whose subordinate uids ``docker/start-rootless-engine.sh`` set
up), started by the test and stopped after it. Judged from outside: the examples pass with
``oracle`` on their first attempt; a ``public`` trial's agent reaches none of the host's
listeners, the gateway or the metadata address, and its record says which filter held and
that no limit the engine did not apply is claimed. What differs from Docker, and why the
rootful podman of this machine cannot start the harness's containers, is in
docs/deployments.md.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from support.docker import prerequisite_missing
from support.users import REPO, ROOTLESS_USER, UserHarness, run_args, user_harness

pytestmark = [pytest.mark.docker, pytest.mark.root]

BASE = "harness/base:bookworm"


def _as_user(user: str, runtime_dir: Path, *argv: str, **kwargs: Any) -> Any:
    home = os.path.expanduser(f"~{user}")
    env = [f"HOME={home}", f"XDG_RUNTIME_DIR={runtime_dir}", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"]
    command = ["runuser", "-u", user, "--", "env", "-i", *env, *argv]
    kwargs.setdefault("cwd", home)  # never the caller's dir, which may go first
    if kwargs.pop("background", False):
        return subprocess.Popen(command, start_new_session=True, **kwargs)
    return subprocess.run(command, **kwargs)


def _stop_leftovers(sock: Path) -> None:
    """Stop an API service on ``sock`` that an earlier run left (its dir may be gone)."""
    for proc in psutil.process_iter(["cmdline"]):
        argv = proc.info["cmdline"] or []
        if argv[:3] == ["podman", "system", "service"] and f"unix://{sock}" in argv:
            proc.kill()
            proc.wait(timeout=30)


def _answers(sock: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as conn:
        try:
            conn.connect(str(sock))
            conn.sendall(b"GET /_ping HTTP/1.0\r\n\r\n")
            return b"OK" in conn.recv(4096)
        except OSError:
            return False


@pytest.fixture(scope="module")
def podman() -> Iterator[str]:
    """The rootless user's podman API socket, serving, with the base image loaded."""
    if shutil.which("podman") is None:
        prerequisite_missing("podman (apt-get install podman)")
    user_harness(ROOTLESS_USER)  # the user exists, with its venv
    runtime_dir = Path(f"/run/{ROOTLESS_USER}-podman")
    runtime_dir.mkdir(mode=0o700, exist_ok=True)
    shutil.chown(runtime_dir, ROOTLESS_USER, ROOTLESS_USER)
    sock = runtime_dir / "podman.sock"
    _stop_leftovers(sock)
    service = None
    if not _answers(sock):
        service = _as_user(
            ROOTLESS_USER,
            runtime_dir,
            "podman",
            "system",
            "service",
            "--time=0",
            f"unix://{sock}",
            background=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        while not _answers(sock):
            if service.poll() is not None:
                prerequisite_missing(f"rootless podman's API service (exit {service.returncode})")
            threading.Event().wait(0.2)
    try:
        has = _as_user(ROOTLESS_USER, runtime_dir, "podman", "image", "exists", BASE)
        if has.returncode != 0:
            saved = subprocess.run(["docker", "save", BASE], capture_output=True, check=True)
            _as_user(
                ROOTLESS_USER,
                runtime_dir,
                "podman",
                "load",
                input=saved.stdout,
                capture_output=True,
                check=True,
            )
        yield f"unix://{sock}"
    finally:
        if service is not None:
            # The service's whole session: runuser and podman under it.
            os.killpg(service.pid, signal.SIGTERM)
            try:
                service.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(service.pid, signal.SIGKILL)
                service.wait(timeout=60)
            _stop_leftovers(sock)


def _records(out: Path) -> list[dict[str, Any]]:
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]


def _user() -> UserHarness:
    return user_harness(ROOTLESS_USER)


def test_the_examples_pass_on_rootless_podman(podman: str) -> None:
    user = _user()
    work = user.workdir()
    shutil.copytree(REPO / "examples" / "tasks", work / "tasks")
    user.give(work)
    result = user.cli(
        *run_args(work / "tasks", work / "out", "--agent", "oracle"), docker_host=podman
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    records = _records(work / "out")
    assert len(records) == 4
    for record in records:
        assert record["status"] == "completed" and record["reward"] == 1, record
        assert record["attempt"] == 1, record
        # Rootless podman on this cgroup v1 host applies no cgroup limit: never claimed.
        limits = record["sandbox"]["limits"]
        host_v2 = Path("/sys/fs/cgroup/cgroup.controllers").exists()
        if not host_v2:
            assert limits["enforced"]["memory_mb"] is False, limits
            assert limits["enforced"]["pids"] is False, limits


class _Listener:
    """A TCP listener on every host address (0.0.0.0): whatever connects is counted."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("0.0.0.0", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


def _probe_task(root: Path, targets: list[str], port: int) -> Path:
    task = root / "tasks" / "reach"
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text(
        '[task]\nname = "podman/reach"\n[agent]\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 60\n'
        "[environment]\nallow_internet = true\n"
    )
    # The agent tries the test's listener at the gateway, each host address, the metadata
    # address and slirp's host address, and port 80 at those that are not the host's own
    # (concurrent tests give the host public-like addresses with servers on 80), and
    # writes which it reached (none should be).
    (task / "instruction.md").write_text(
        "python3 - <<'PY'\n"
        "import socket\n"
        "route = [l.split() for l in open('/proc/net/route')][1:]\n"
        "gw = [socket.inet_ntoa(bytes.fromhex(r[2])[::-1]) for r in route if r[1] == '00000000']\n"
        "others = gw + ['169.254.169.254', '10.0.2.2']\n"
        f"pairs = [(h, {port}) for h in others + {targets!r}] + [(h, 80) for h in others]\n"
        "reached = []\n"
        "for host, port in pairs:\n"
        "    s = socket.socket(); s.settimeout(3)\n"
        "    try:\n"
        "        s.connect((host, port)); reached.append(f'{host}:{port}')\n"
        "    except OSError:\n"
        "        pass\n"
        "    s.close()\n"
        "open('reached.txt', 'w').write(' '.join(reached) or 'none')\n"
        "PY\n"
    )
    (task / "tests" / "test.sh").write_text(
        "cat reached.txt; grep -qx none reached.txt && r=1 || r=0; "
        'echo $r > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
    )
    return root / "tasks"


def test_a_public_trial_on_rootless_podman_reaches_nothing_of_the_host(podman: str) -> None:
    user = _user()
    work = user.workdir()
    listener = _Listener()
    addresses = sorted(
        {
            a.address
            for addrs in psutil.net_if_addrs().values()
            for a in addrs
            if a.family == socket.AF_INET
        }
    )
    try:
        tasks = _probe_task(work, addresses, listener.port)
        user.give(work)
        agent = ("--agent", "command", "--agent-cmd", "bash {instruction_file}")
        result = user.cli(*run_args(tasks, work / "out", *agent), docker_host=podman)
    finally:
        listener.close()
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    (record,) = _records(work / "out")
    assert record["status"] == "completed" and record["attempt"] == 1, record
    (reached,) = (work / "out").glob("*/trials/*/workspace/reached.txt")
    assert reached.read_text() == "none", reached.read_text()
    assert record["reward"] == 1, record  # the agent reached none of them
    assert listener.accepted == 0
    sandbox = record["sandbox"]
    assert sandbox["policies"]["agent"]["mode"] == "public", sandbox
    # Not root on the engine's host: the trial's own namespace filter held.
    assert sandbox["egress"] == "namespace", sandbox
    refused = {
        event.get("refused") for event in record["events"] if event["type"] == "network_refused"
    }
    assert {"gateway", "metadata"} <= refused, record["events"]


def test_the_doctor_on_rootless_podman_says_what_holds(podman: str) -> None:
    """Podman says it has a cgroup driver, then drops the limits: the doctor says not held."""
    done = _user().cli("doctor", "--json", docker_host=podman, timeout=300)
    assert done.stdout.startswith("{"), done.stderr[-3000:]
    report = json.loads(done.stdout)
    rows = {row["name"]: row for row in report["guarantees"]}
    public = rows["network: public"]
    assert public["holds"] and "own namespace filter" in public["how"], public
    allowlist = rows["network: allowlist"]
    assert allowlist["holds"] and "own namespace filter" in allowlist["how"], rows
    assert rows["writable root"]["how"].startswith("writable, soft cap"), rows
    # Podman takes the network but drops the option that keeps a host address off it.
    guard = rows["compose host guard"]
    assert (
        not guard["holds"] and "drops the com.docker.network.bridge.inhibit_ipv4" in (guard["how"])
    ), guard
    if not Path("/sys/fs/cgroup/cgroup.controllers").exists():  # cgroup v1
        for limit in ("memory_mb", "cpus", "pids"):
            row = rows[f"limit: {limit}"]
            assert not row["holds"] and "dropped it" in row["how"], row
