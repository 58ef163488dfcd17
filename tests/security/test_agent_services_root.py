"""A root agent's kept services reach nothing of grading: the Landlock wall.

``--agent-services keep`` with ``--agent-root allow`` (issue 34, item 9): every process of
the root agent's phase runs in a Landlock domain (:mod:`sandbox.inside.landlock`), and so
do the listening ones kept through grading. Judged from outside, on docker with runc:

- a kept root server that attacks grading once the verifier runs (its client connected):
  writes ``reward.txt`` and ``reward.json`` and creates a file in ``/logs/verifier``,
  rewrites, plants in, lists and reads ``/tests``, opens ``/proc/<pid>/root``, ``mem`` and
  ``environ`` of the verifier and of the supervisor (pid 1), signals both. It keeps
  ``CAP_DAC_OVERRIDE`` and ``CAP_KILL``; every attempt fails all the same, the reward is
  the honest 0 on attempt 1, and the record says the wall was ``landlock``;
- a kept root server still answers the tests (reward 1);
- a root server whose workers run as another user (nginx's ``www-data`` workers): the
  root master binds the socket and never accepts, its uid-33 workers inherited it and do;
  the workers are kept beside it (the supervisor, without ``CAP_SYS_PTRACE``, reads their
  fds as their own user) and answer the tests (reward 1), and the record lists them
  listening;
- under gVisor (no Landlock) the same run is refused before anything runs, naming why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.kept_servers import (
    AS_ROOT,
    ATTEMPTS,
    LISTEN,
    PORT,
    alive,
    attack_test,
    kept_task,
    oracle_task,
    read_answer,
    run_walled,
    start_server,
)

SECRET = "root-tests-secret-2c8e1d"

#: The attacking server, root with the root agent's capabilities: on each connection (the
#: verifier's client is connected, so the verifier runs) it attacks grading and answers
#: with what each attempt gave.
ATTACKER = (
    ATTEMPTS
    + r"""
def attacks():
    lines = ["uid %d caps %s" % (os.getuid(), [
        l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")])]
    pids = verifier_pids()
    lines.append("verifier pids: %r" % pids)
    forged = "echo 1 > /logs/verifier/reward.txt\n"
    lines.append(attempt("write reward.txt", lambda: write("/logs/verifier/reward.txt", "1")))
    lines.append(attempt("write reward.json", lambda: write("/logs/verifier/reward.json", "1")))
    lines.append(attempt("plant in verifier logs", lambda: write("/logs/verifier/x", "x")))
    lines.append(attempt("rewrite tests", lambda: write("/tests/check.sh", forged)))
    lines.append(attempt("plant in tests", lambda: write("/tests/planted", "x")))
    lines.append(attempt("read tests", lambda: read("/tests/secret.txt")))
    lines.append(attempt("list tests", lambda: os.listdir("/tests")))
    for pid in pids + [1]:
        secret = "/proc/%d/root/tests/secret.txt" % pid
        lines.append(attempt("root of %d" % pid, lambda: read(secret)))
        lines.append(attempt("mem of %d" % pid, lambda: os.open("/proc/%d/mem" % pid, os.O_RDWR)))
        lines.append(attempt("environ of %d" % pid, lambda: read("/proc/%d/environ" % pid)))
    lines.append(attempt("signal 1", lambda: os.kill(1, signal.SIGTERM)))
    for pid in pids:
        lines.append(attempt("kill %d" % pid, lambda: os.kill(pid, signal.SIGKILL)))
    return "\n".join(lines) + "\n"
"""
    + LISTEN
    + r"""while True:
    c, _ = s.accept()
    c.sendall(attacks().encode())
    c.close()
"""
)

ATTACK_AGENT = AS_ROOT + start_server("attacker", ATTACKER)


@pytest.mark.docker
def test_a_kept_root_server_reaches_nothing_of_grading(
    cli: Any, sec: Any, tmp_path: Path, docker_runtime: str | None
) -> None:
    task = kept_task(
        sec,
        tmp_path / "tasks",
        "keep-root-attack",
        attack=ATTACK_AGENT,
        test_sh=attack_test(),
        tests_files={"secret.txt": SECRET + "\n", "check.sh": "exit 0\n"},
    )
    walled = run_walled(cli, task, docker_runtime)
    if walled is None:
        return  # gVisor: refused before anything ran
    run, record = walled
    assert record["reward"] == 0.0, str(run)
    evidence = run.evidence(record)
    report = (evidence / "verifier" / "attack.txt").read_text()
    # Root, with the root agent's capabilities (CAP_DAC_OVERRIDE and CAP_KILL among them).
    assert report.startswith("uid 0 caps ['00000000000004fb']"), report
    assert "verifier pids: [" in report and "verifier pids: []" not in report, report
    succeeded = [line for line in report.splitlines() if "SUCCEEDED" in line]
    assert succeeded == [], report
    for attack in (
        "write reward.txt",
        "write reward.json",
        "plant in verifier logs",
        "rewrite tests",
        "plant in tests",
        "read tests",
        "list tests",
        "root of 1",
        "mem of 1",
        "environ of 1",
        "signal 1",
    ):
        assert f"{attack}: denied" in report, report
    assert "kill " in report and "mem of " in report and "root of " in report, report
    assert sec.files_containing(run.run_dir, SECRET) == [], "the tests' secret leaked"
    assert not (evidence / "verifier" / "reward.json").exists()
    assert not (evidence / "verifier" / "x").exists()
    listed = alive(record)
    assert [(p["comm"], p["uid"]) for p in listed] == [("python3", 0)], listed


@pytest.mark.docker
def test_a_kept_root_server_answers_the_tests(
    cli: Any, sec: Any, tmp_path: Path, docker_runtime: str | None
) -> None:
    task = oracle_task(sec, tmp_path / "tasks", "keep-root-server")
    walled = run_walled(cli, task, docker_runtime, agent="oracle")
    if walled is None:
        return  # gVisor: refused before anything ran
    run, record = walled
    assert record["reward"] == 1.0, str(run)


#: A pre-forking root server: the master binds the socket and never accepts nor respawns;
#: two workers that inherited it, as uid 33 (``www-data``, as nginx's run), answer.
PREFORK = (
    "import os, signal, socket, subprocess, sys\n"
    + LISTEN
    + r"""WORKER = '''
import os, socket, sys
s = socket.socket(fileno=int(sys.argv[1]))
while True:
    c, _ = s.accept()
    c.sendall(b"hello from a worker, uid %d\\n" % os.getuid())
    c.close()
'''
workers = [
    subprocess.Popen([sys.executable, "-c", WORKER, str(s.fileno())], user=33, group=33,
                     extra_groups=[], pass_fds=[s.fileno()])
    for _ in range(2)
]
while True:
    signal.pause()
"""
)

#: test.sh: reward 1 iff a worker answers (the master never does).
WORKER_TEST = (
    read_answer("/logs/verifier/answer.txt", timeout=10)
    + "grep -q '^hello from a worker, uid 33$' /logs/verifier/answer.txt"
    + " && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
)


@pytest.mark.docker
def test_a_root_servers_workers_of_another_user_are_kept_and_answer(
    cli: Any, sec: Any, tmp_path: Path, docker_runtime: str | None
) -> None:
    task = kept_task(
        sec,
        tmp_path / "tasks",
        "keep-root-workers",
        attack=AS_ROOT + start_server("prefork", PREFORK),
        test_sh=WORKER_TEST,
    )
    walled = run_walled(cli, task, docker_runtime)
    if walled is None:
        return  # gVisor: refused before anything ran
    run, record = walled
    answer = (run.evidence(record) / "verifier" / "answer.txt").read_text()
    assert record["reward"] == 1.0, (answer, str(run))
    listening = f"tcp:0.0.0.0:{PORT}"
    [kept] = [e for e in record["events"] if e.get("type") == "agent_services_kept"]
    assert sorted((p["uid"], p["listening"]) for p in kept["processes"]) == [
        (0, [listening]),
        (33, [listening]),
        (33, [listening]),
    ], kept
    listed = alive(record)
    assert sorted((p["comm"], p["uid"], p["listening"]) for p in listed) == [
        ("python3", 0, [listening]),
        ("python3", 33, [listening]),
        ("python3", 33, [listening]),
    ], listed
    # The very processes kept at the agent's end answered: none was killed and respawned.
    assert {p["pid"] for p in listed} == {p["pid"] for p in kept["processes"]}, (kept, listed)


#: A root master, and a sleeping child holding its socket under each of 70 users
#: (2000..2069, started in that order): more users than the listener scan reads. The
#: socket listens only once every child holds it (start_server waits for that).
MANY_USERS = r"""import signal, socket, subprocess, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
children = [
    subprocess.Popen(["sleep", "600"], user=uid, group=uid, extra_groups=[],
                     pass_fds=[s.fileno()])
    for uid in range(2000, 2070)
]
s.listen(16)
while True:
    signal.pause()
"""


@pytest.mark.docker
def test_processes_past_the_scans_users_are_killed_and_the_record_says_so(
    cli: Any, sec: Any, tmp_path: Path, docker_runtime: str | None
) -> None:
    """Past 64 users (root's first, then by lowest pid) nothing is read: the record counts them.

    The master (root) and the children of the first 63 users are read and kept; the last 7
    users' children are no listeners, killed with the phase, and the agent phase's
    ``agent_services_unread`` event counts and lists them.
    """
    task = kept_task(
        sec,
        tmp_path / "tasks",
        "keep-many-users",
        attack=AS_ROOT + start_server("many", MANY_USERS),
        # The users of every live process (zombies are dead: the master never reaps).
        test_sh='for d in /proc/[0-9]*; do awk \'/^State:/{z=($2=="Z")} /^Uid:/{u=$2} '
        "END{if(!z)print u}' $d/status 2>/dev/null; "
        "done | sort -un > /logs/verifier/uids.txt\necho 1 > /logs/verifier/reward.txt\n",
    )
    walled = run_walled(cli, task, docker_runtime)
    if walled is None:
        return  # gVisor: refused before anything ran
    run, record = walled
    [kept] = [e for e in record["events"] if e.get("type") == "agent_services_kept"]
    [unread] = [e for e in record["events"] if e.get("type") == "agent_services_unread"]
    assert unread["phase"] == "agent" and unread["count"] == 7, unread
    assert "past its 64 users or 4096 processes" in unread["detail"], unread
    assert sorted(p["uid"] for p in unread["processes"]) == list(range(2063, 2070)), unread
    kept_uids = sorted(p["uid"] for p in kept["processes"])
    assert kept_uids == [0, *range(2000, 2049)], kept_uids  # the record lists the first 50
    seen = (run.evidence(record) / "verifier" / "uids.txt").read_text().split()
    alive_uids = {int(uid) for uid in seen}
    assert set(range(2000, 2063)) <= alive_uids, seen  # kept through grading
    assert not alive_uids & set(range(2063, 2070)), seen  # killed with the agent's phase
