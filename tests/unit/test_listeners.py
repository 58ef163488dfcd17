"""Finding listening processes (``sandbox.inside.listeners``) and recording kept services.

Real sockets of this test process, read back through the real ``/proc/net`` and
``/proc/<pid>/fd``; records through the real summary.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from support.docker import prerequisite_missing

from harness.records import AgentRef, SandboxRef, TaskRef, TrialRecord, TrialStatus, Usage
from harness.records.metrics import summarize
from harness.records.model import verdict_with_agent_processes
from sandbox.inside import confine, listeners
from sandbox.inside.processes import Reaper

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_listening_sockets_of_each_kind_are_found_and_connected_ones_are_not(
    tmp_path: Path,
) -> None:
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen()
    port = tcp.getsockname()[1]
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(str(tmp_path / "s.sock"))
    unix.listen()
    client = socket.create_connection(("127.0.0.1", port))
    server_side, _ = tcp.accept()
    try:
        found = listeners.listening_processes([os.getpid()], None, Reaper())
        labels = found[os.getpid()]
        assert f"tcp:127.0.0.1:{port}" in labels
        assert f"udp:127.0.0.1:{udp.getsockname()[1]}" in labels
        assert f"unix:{tmp_path / 's.sock'}" in labels
        # The connected pair holds no listening socket of its own.
        assert not [label for label in labels if label.endswith(f":{client.getsockname()[1]}")]
    finally:
        for sock in (client, server_side, tcp, udp, unix):
            sock.close()
    assert os.getpid() not in listeners.listening_processes([os.getpid()], None, Reaper())


def test_another_users_listener_is_read_by_a_child_of_that_user() -> None:
    """Root without CAP_SYS_PTRACE cannot read another uid's fds: the child drops to it."""
    if os.geteuid() != 0:
        prerequisite_missing("root (to run a listener as another uid)")
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        prerequisite_missing("a python3 every user may run, in /usr/bin or /bin")
    code = (
        "import socket, sys, time\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
        "print(s.getsockname()[1], flush=True); sys.stdin.read()\n"
    )
    server = subprocess.Popen(
        [python, "-c", code],
        user=65533,
        group=65533,
        extra_groups=[],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        user = {"uid": 65533, "gid": 65533}
        found = listeners.listening_processes([server.pid], user, Reaper())
        assert found == {server.pid: [f"tcp:127.0.0.1:{port}"]}
    finally:
        server.kill()
        server.communicate()


#: Binds a listening socket, prints its port, then (argv: uid gid suid) changes its ids
#: without an exec and makes itself dumpable again: only its ids decide who reads its fds.
_LISTENER = """
import ctypes, os, socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
uid, gid, suid = (int(x) for x in sys.argv[1:4])
if uid:
    os.setgroups([]); os.setresgid(gid, gid, gid); os.setresuid(uid, uid, suid)
ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE
print(s.getsockname()[1], flush=True); sys.stdin.read()
"""

#: The supervisor's condition in a container: root without CAP_SYS_PTRACE (checked), the
#: scan of a root agent's phase (no user).
_SCAN = """
import json, sys
caps = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0]
assert not int(caps, 16) & (1 << 19), "CAP_SYS_PTRACE still held: " + caps
from sandbox.inside import listeners
from sandbox.inside.processes import Reaper
found = listeners.listening_processes(json.loads(sys.argv[1]), None, Reaper())
print(json.dumps({str(k): v for k, v in found.items()}))
"""


@contextmanager
def _listeners(*owners: tuple[int, int, int], no_ptrace: bool = False) -> Iterator[dict[int, str]]:
    """Processes of :data:`_LISTENER`, one per (uid, gid, saved uid): pid → its label."""
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        prerequisite_missing("a python3 every user may run, in /usr/bin or /bin")
    prefix = [_setpriv(), "--bounding-set", "-sys_ptrace"] if no_ptrace else []
    servers = [
        subprocess.Popen(
            [*prefix, python, "-c", _LISTENER, *(str(i) for i in ids)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for ids in owners
    ]
    try:
        labels = {}
        for server in servers:
            assert server.stdout is not None
            labels[server.pid] = f"tcp:127.0.0.1:{int(server.stdout.readline())}"
        yield labels
    finally:
        for server in servers:
            server.kill()
            server.communicate()


def _setpriv() -> str:
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        prerequisite_missing("setpriv (util-linux), to drop CAP_SYS_PTRACE")
    return setpriv


def _needs_root() -> None:
    if os.geteuid() != 0:
        prerequisite_missing("root (to run listeners as other uids)")


def test_a_root_agents_listeners_of_every_user_are_found_without_ptrace() -> None:
    """Root without CAP_SYS_PTRACE reads each user's fds as that user (nginx's workers).

    Listeners of root, of uid 65533 (gid 65533), of uid 65533 with gid 65534, and one
    whose saved uid stayed root (a setuid program's): the kernel lets only a caller whose
    fsuid and fsgid equal all of a target's real, effective and saved ids read its fd links,
    so the last is unreadable by anyone here and no listener. Every process here runs
    without CAP_SYS_PTRACE, as in the container: a reader's capabilities must also include
    its target's.
    """
    _needs_root()
    owners = ((0, 0, 0), (65533, 65533, 65533), (65533, 65534, 65533), (65533, 65533, 0))
    with _listeners(*owners, no_ptrace=True) as labels:
        pids = list(labels)
        scan = subprocess.run(
            [_setpriv(), "--bounding-set", "-sys_ptrace", sys.executable, "-c", _SCAN,
             json.dumps(pids)],
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert scan.returncode == 0, scan.stderr
        found = {int(k): v for k, v in json.loads(scan.stdout).items()}
        assert found == {pid: [labels[pid]] for pid in pids[:3]}, (found, pids)


def test_a_non_root_agents_scan_finds_only_its_own_users_listeners() -> None:
    """A root listener among a non-root agent's processes (a setuid program's) is no service."""
    _needs_root()
    with _listeners((0, 0, 0), (65533, 65533, 65533)) as labels:
        root, mine = labels
        user = {"uid": 65533, "gid": 65533}
        found = listeners.listening_processes([root, mine], user, Reaper())
        assert found == {mine: [labels[mine]]}


def test_a_root_agents_scan_reads_a_bounded_number_of_users(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past MAX_USERS users (root's first, then by lowest pid), processes are no listeners."""
    _needs_root()
    monkeypatch.setattr(listeners, "MAX_USERS", 2)
    with _listeners((65531, 65531, 65531), (65532, 65532, 65532), (0, 0, 0)) as labels:
        first, second, root = labels
        unread: set[int] = set()
        found = listeners.listening_processes(list(labels), None, Reaper(), unread)
        assert found == {root: [labels[root]], first: [labels[first]]}, (found, labels)
        assert unread == {second}  # for the record: never read, so no listener


def test_a_process_without_sockets_or_gone_is_no_listener() -> None:
    reaper = Reaper()
    assert listeners.listening_processes([], None, reaper) == {}
    child = reaper.fork()
    if child == 0:  # pragma: no cover - the child
        os._exit(0)
    reaper.wait(child, 10.0)
    assert listeners.listening_processes([child], None, reaper) == {}


def _record(trial: str, reward: float | None, **extra: Any) -> TrialRecord:
    return TrialRecord(
        id=trial,
        task=TaskRef(name="t", key="t", hash="h", path="tasks/t"),
        agent=AgentRef(name="oracle"),
        sandbox=SandboxRef(backend="docker"),
        status=TrialStatus.COMPLETED if reward is not None else TrialStatus.VERIFIER_ERROR,
        ok=reward is not None,
        reward=reward,
        usage=Usage(),
        started_at=T0,
        finished_at=T0 + timedelta(seconds=1),
        **extra,
    )


def test_verdicts_taken_beside_kept_services_are_counted_only_where_they_happened() -> None:
    alive = [{"pid": 9, "uid": 65532, "comm": "python3", "listening": ["tcp:0.0.0.0:80"]}]
    kept = _record("a", 1.0, agent_processes_alive=alive)
    none_alive = _record("b", 0.0, agent_processes_alive=[])
    ungraded = _record("c", None, agent_processes_alive=alive)
    plain = _record("d", 1.0)
    assert verdict_with_agent_processes(kept)
    assert not any(verdict_with_agent_processes(r) for r in (none_alive, ungraded, plain))
    summary = summarize([kept, none_alive, ungraded, plain], planned=4).model_dump()
    assert summary["agent_services"] == {"verdicts": 1}
    assert "agent_services" not in summarize([plain], planned=1).model_dump()


def _reader_facts() -> dict[str, Any]:
    """What a forked child sees of itself after :func:`listeners.become_reader`."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - a child process
        code = 1
        try:
            os.close(read_end)
            how = listeners.become_reader(65533, 65533)
            lines = Path("/proc/self/status").read_text().splitlines()
            status = dict(line.split(":", 1) for line in lines)
            seen = {
                "how": how,
                "uid": status["Uid"].split(),
                "gid": status["Gid"].split(),
                "eff": status["CapEff"].strip(),
                "prm": status["CapPrm"].strip(),
                "groups": status["Groups"].split(),
                "dumpable": confine.prctl(3),  # PR_GET_DUMPABLE
            }
            os.write(write_end, json.dumps(seen).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end) as answer:
        seen: dict[str, Any] = json.loads(answer.read())
    os.waitpid(child, 0)
    return seen


def test_a_reader_takes_only_the_users_fs_ids_and_no_capability() -> None:
    """The scan's child stays root by its real, effective and saved ids: out of the user's reach.

    A process of that user may ptrace or signal a process only if its own uid matches all
    of the target's; the reader's are root's from the start, with no capability left, and
    its fs ids (what a read of ``/proc/<pid>/fd`` is checked against) are the user's.
    """
    _needs_root()
    seen = _reader_facts()
    assert seen["how"] == "fs"  # Linux has setfsuid (gVisor's fallback: the runsc tests)
    assert seen["uid"] == ["0", "0", "0", "65533"]  # real, effective, saved, fs
    assert seen["gid"] == ["0", "0", "0", "65533"]
    assert int(seen["eff"], 16) == 0 and int(seen["prm"], 16) == 0
    assert seen["groups"] == []
    assert seen["dumpable"] == 0


@pytest.mark.serial  # fs.suid_dumpable is the host's, not this test's alone
def test_a_reader_is_non_dumpable_where_id_changes_leave_processes_dumpable() -> None:
    """With ``fs.suid_dumpable = 1`` the new fs ids leave the reader dumpable: it turns that off.

    Dumpable, a root agent's process (uid 0, and a superset of the reader's no
    capabilities) could ptrace it and forge its answer.
    """
    _needs_root()
    knob = Path("/proc/sys/fs/suid_dumpable")
    before = knob.read_text().strip()
    knob.write_text("1")
    try:
        seen = _reader_facts()
    finally:
        knob.write_text(before)
    assert seen["how"] == "fs" and seen["dumpable"] == 0
