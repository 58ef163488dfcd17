"""Finding listening processes (``sandbox.inside.listeners``) and recording kept services.

Real sockets of this test process, read back through the real ``/proc/net`` and
``/proc/<pid>/fd``; records through the real summary.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from support.docker import prerequisite_missing

from harness.records import AgentRef, SandboxRef, TaskRef, TrialRecord, TrialStatus, Usage
from harness.records.metrics import summarize
from harness.records.model import verdict_with_agent_processes
from sandbox.inside import listeners
from sandbox.inside.processes import Reaper

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
