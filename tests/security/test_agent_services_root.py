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
- under gVisor (no Landlock) the same run is refused before anything runs, naming why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_agent_services import PORT, QUERY_TEST, SOLVE

SECRET = "root-tests-secret-2c8e1d"

#: The attacking server, root with the root agent's capabilities: on each connection (the
#: verifier's client is connected, so the verifier runs) it attacks grading and answers
#: with what each attempt gave.
ATTACKER = r"""
import os, signal, socket, sys

def attempt(name, fn):
    try:
        got = fn()
        return "%s: SUCCEEDED %r" % (name, got)
    except Exception as exc:
        return "%s: denied (%s)" % (name, type(exc).__name__)

def write(path, text):
    with open(path, "w") as fh:
        fh.write(text)
    return path

def read(path):
    with open(path, "rb") as fh:
        return fh.read(200)

def verifier_pids():
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                raw = open("/proc/%s/cmdline" % name, "rb").read()
            except OSError:
                continue
            if b"/tests/test.sh" in raw or b"verifier-client" in raw:
                found.append(int(name))
    return found

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

s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(16)
while True:
    c, _ = s.accept()
    c.sendall(attacks().encode())
    c.close()
"""

ATTACK_AGENT = f"""
test "$(id -u)" = 0 || {{ echo "not root: $(id -u)"; exit 3; }}
cat > /app/attacker.py <<'EOF'
{ATTACKER}
EOF
setsid python3 /app/attacker.py {PORT} > /dev/null 2>&1 < /dev/null &
until python3 -c "import socket; socket.create_connection(('127.0.0.1', {PORT}))" 2>/dev/null
do sleep 0.1; done
"""

#: The honest verdict is 0 (the agent did not write answer.txt); the verifier's client
#: connects while the verdict is written, then runs check.sh (which the attacker rewrote,
#: if it could).
ATTACK_TEST = f"""
echo 0 > /logs/verifier/reward.txt
python3 - verifier-client <<'EOF' > /logs/verifier/attack.txt
import socket, sys
c = socket.create_connection(("127.0.0.1", {PORT}), timeout=30)
data = b""
while True:
    chunk = c.recv(65536)
    if not chunk:
        break
    data += chunk
sys.stdout.write(data.decode())
EOF
bash /tests/check.sh
test -f /app/answer.txt && echo 1 > /logs/verifier/reward.txt
exit 0
"""

KEEP_ROOT = ["--agent-services", "keep", "--agent-root", "allow"]


def _task(sec: Any, parent: Path, name: str, **kwargs: Any) -> Path:
    task: Path = sec.write_task(parent, sec.unique(name), verifier_timeout=60, **kwargs)
    return task


def _refused_on_gvisor(cli: Any, task: Path) -> None:
    """gVisor has no Landlock: a root agent's kept services are refused before anything runs."""
    run = cli.run([task], extra=["--agent-services", "keep", "--agent-root", "isolated"])
    assert run.code == 2, str(run)
    assert "--agent-services keep with --agent-root isolated" in run.stderr, str(run)
    assert "gVisor (runsc) has no Landlock" in run.stderr, str(run)
    assert run.records == [], "a trial ran"


@pytest.mark.docker
def test_a_kept_root_server_reaches_nothing_of_grading(
    cli: Any, sec: Any, tmp_path: Path, docker_runtime: str | None
) -> None:
    task = _task(
        sec,
        tmp_path / "tasks",
        "keep-root-attack",
        attack=ATTACK_AGENT,
        test_sh=ATTACK_TEST,
        tests_files={"secret.txt": SECRET + "\n", "check.sh": "exit 0\n"},
    )
    if docker_runtime == "runsc":
        _refused_on_gvisor(cli, task)
        return
    run = cli.run([task], extra=KEEP_ROOT, timeout=240)
    assert run.records, str(run)
    record = run.records[0]
    assert record["status"] == "completed" and record["attempt"] == 1, str(run)
    assert record["reward"] == 0.0, str(run)
    assert record["sandbox"].get("agent_services_wall") == "landlock", record["sandbox"]
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
    alive = record.get("agent_processes_alive")
    assert isinstance(alive, list) and [(p["comm"], p["uid"]) for p in alive] == [("python3", 0)], (
        alive
    )


@pytest.mark.docker
def test_a_kept_root_server_answers_the_tests(
    cli: Any, sec: Any, tmp_path: Path, docker_runtime: str | None
) -> None:
    task = _task(
        sec,
        tmp_path / "tasks",
        "keep-root-server",
        attack="exit 0\n",
        test_sh=QUERY_TEST,
        solution_files={"solve.sh": SOLVE},
    )
    if docker_runtime == "runsc":
        _refused_on_gvisor(cli, task)
        return
    run = cli.run([task], agent="oracle", extra=KEEP_ROOT, timeout=240)
    assert run.records, str(run)
    record = run.records[0]
    assert record["status"] == "completed" and record["attempt"] == 1, record
    assert record["reward"] == 1.0, str(run)
    assert record["sandbox"].get("agent_services_wall") == "landlock", record["sandbox"]
