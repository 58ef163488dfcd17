"""Agent and grading scripts for ``--agent-services keep``: servers an agent leaves listening.

The kept-services attack tests (``tests/security/test_agent_services*.py`` and
``test_redteam*_kept_*.py``) share these parts: the Python lines of a server's listening
socket, the shell that starts one in the background and returns once it listens, the
verifier's client that reads what a server answers, an attacker's helpers and the test.sh
that grades beside it, and the task and CLI steps every one of those tests takes.

Every script here runs inside the task's container (``python3`` on its ``PATH``); each
server takes the port it listens on as its first argument.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: The port the agents' servers listen on, inside the trial's container.
PORT = 5328
#: The CLI options: keep an agent's services; and keep a root agent's.
KEEP = ["--agent-services", "keep"]
KEEP_ROOT = [*KEEP, "--agent-root", "allow"]

#: Shell that fails the agent phase unless it runs as root (``--agent-root allow``).
AS_ROOT = 'test "$(id -u)" = 0 || { echo "not root: $(id -u)"; exit 3; }\n'

#: Python lines binding the listening socket ``s`` on every address, port ``sys.argv[1]``
#: (the script imports ``socket`` and ``sys``).
LISTEN = r"""
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(16)
"""

#: A server answering each connection with a greeting; it logs every request to stdout.
SERVER = (
    "import socket, sys\n"
    + LISTEN
    + r"""while True:
    c, _ = s.accept()
    print("request", flush=True)
    c.sendall(b"hello from the agent\n")
    c.close()
"""
)

#: An attacker's helpers: ``attempt(name, fn)`` says whether ``fn()`` succeeded and what it
#: gave, ``write`` and ``read`` a file, ``verifier_pids()`` the verifier's processes (its
#: test.sh, and a client of :func:`read_answer` run ``as_verifier``).
ATTEMPTS = r"""
import os, signal, socket, sys, time

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
"""


def wait_listening(port: int = PORT) -> str:
    """Shell lines that return once something accepts connections on 127.0.0.1:``port``."""
    probe = f"import socket; socket.create_connection(('127.0.0.1', {port}))"
    return f'until python3 -c "{probe}" 2>/dev/null\ndo sleep 0.1; done\n'


def start_server(
    name: str, script: str, *args: str, port: int = PORT, detached: bool = True
) -> str:
    """Shell lines writing ``script`` to ``/app/<name>.py``, starting it, waiting till it listens.

    Args:
        name: The script's file name, without ``.py`` (what ``ps`` and the record show).
        script: The server's Python source.
        *args: Its arguments after the port.
        port: Its first argument: the port it listens on.
        detached: In a session of its own, its stdio ``/dev/null`` (an agent leaving a
            daemon); otherwise a plain background job whose stdio is the phase's pipes, as
            Terminal-Bench 2's solutions leave their servers.
    """
    command = " ".join([f"python3 /app/{name}.py", str(port), *args])
    start = f"setsid {command} > /dev/null 2>&1 < /dev/null &" if detached else f"{command} &"
    return f"cat > /app/{name}.py <<'EOF'\n{script}\nEOF\n{start}\n" + wait_listening(port)


def read_answer(out: str, *, send: str = "", as_verifier: bool = False, timeout: int = 30) -> str:
    """Shell lines: a client connects to the kept server, sends ``send``, writes all it answers.

    Args:
        out: The file the answer goes to (the verifier's dir: evidence to read from outside).
        send: What the client sends first (nothing: it only reads).
        as_verifier: Whether the client runs as ``verifier-client``, one of the verifier's
            processes an attacker of :data:`ATTEMPTS` goes for.
        timeout: Seconds the client waits for the server to connect and to answer.
    """
    argv = " verifier-client" if as_verifier else ""
    sending = f"c.sendall({send.encode()!r})\n" if send else ""
    return f"""python3 -{argv} <<'EOF' > {out}
import socket, sys
c = socket.create_connection(("127.0.0.1", {PORT}), timeout={timeout})
{sending}data = b""
while True:
    chunk = c.recv(65536)
    if not chunk:
        break
    data += chunk
sys.stdout.write(data.decode())
EOF
"""


#: solve.sh: the server in the background, its stdio the phase's; a non-listening helper.
SOLVE = "#!/bin/bash\n" + start_server("server", SERVER, detached=False) + "setsid sleep 1000 &\n"

#: test.sh: reward 1 iff the agent's server answers; the agent's processes listed.
QUERY_TEST = f"""
python3 - <<'EOF'
import json, os, socket
try:
    c = socket.create_connection(("127.0.0.1", {PORT}), timeout=10)
    ok = c.recv(100).startswith(b"hello")
except OSError:
    ok = False
procs = []
for name in os.listdir("/proc"):
    if name.isdigit():
        try:
            uid = os.stat("/proc/" + name).st_uid
            comm = open("/proc/%s/comm" % name).read().strip()
        except OSError:
            continue
        if uid != 0:
            procs.append({{"pid": int(name), "uid": uid, "comm": comm}})
open("/logs/verifier/agent_procs.json", "w").write(json.dumps(procs))
open("/logs/verifier/reward.txt", "w").write("1" if ok else "0")
EOF
"""


def attack_test(timeout: int = 30) -> str:
    """test.sh beside an attacking server: the verdict, the attack's report, then check.sh.

    The honest verdict is 0 (the agent did not write answer.txt); the verifier's client
    connects while the verdict is written (its report goes to ``attack.txt``), then the
    tests run ``check.sh``, which the attacker rewrote if it could.
    """
    return (
        "echo 0 > /logs/verifier/reward.txt\n"
        + read_answer("/logs/verifier/attack.txt", as_verifier=True, timeout=timeout)
        + "bash /tests/check.sh\n"
        + "test -f /app/answer.txt && echo 1 > /logs/verifier/reward.txt\n"
        + "exit 0\n"
    )


def kept_task(sec: Any, parent: Path, name: str, **kwargs: Any) -> Path:
    """``sec.write_task`` under a unique ``name``, its verifier given 60 s (``kwargs`` win)."""
    task: Path = sec.write_task(parent, sec.unique(name), **{"verifier_timeout": 60, **kwargs})
    return task


def oracle_task(sec: Any, parent: Path, name: str) -> Path:
    """A task the oracle solves by leaving :data:`SERVER` listening; :data:`QUERY_TEST` grades.

    The agent's instruction does nothing (``exit 0``): only the oracle's solve.sh starts
    the server, so a reward of 1 says the server was kept and answered the tests.
    """
    return kept_task(
        sec, parent, name, attack="exit 0\n", test_sh=QUERY_TEST, solution_files={"solve.sh": SOLVE}
    )


def add_collect_hook(task: Path, command: str) -> None:
    """Append a ``[[verifier.collect]]`` hook running ``command`` to the task's task.toml."""
    toml = task / "task.toml"
    toml.write_text(toml.read_text() + f'\n[[verifier.collect]]\ncommand = """{command}"""\n')


def offline_agent_public_verifier(task: Path) -> None:
    """Make the task's agent phase ``no-network`` and its verifier's ``public``."""
    toml = task / "task.toml"
    text = toml.read_text().replace("allow_internet = false\n", "")
    text = text.replace("[agent]\n", '[agent]\nnetwork_mode = "no-network"\n')
    toml.write_text(text.replace("[verifier]\n", '[verifier]\nnetwork_mode = "public"\n'))


def refused_on_gvisor(cli: Any, task: Path) -> None:
    """gVisor has no Landlock: a root agent's kept services are refused before anything runs."""
    run = cli.run([task], extra=["--agent-services", "keep", "--agent-root", "isolated"])
    assert run.code == 2, str(run)
    assert "--agent-services keep with --agent-root isolated" in run.stderr, str(run)
    assert "gVisor (runsc) has no Landlock" in run.stderr, str(run)
    assert run.records == [], "a trial ran"


def alive(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The record's ``agent_processes_alive`` (it must be there: a list)."""
    found = record.get("agent_processes_alive")
    assert isinstance(found, list), record
    return found


def completed_on_attempt_1(run: Any) -> dict[str, Any]:
    """The run's first trial record, which must say completed, on attempt 1."""
    assert run.records, str(run)
    record: dict[str, Any] = run.records[0]
    assert record["status"] == "completed" and record["attempt"] == 1, str(run)
    return record


def run_walled(
    cli: Any, task: Path, docker_runtime: str | None, **kwargs: Any
) -> tuple[Any, dict[str, Any]] | None:
    """Run ``task`` with a root agent's services kept (:data:`KEEP_ROOT`), checking the wall.

    Under runc: the run and its record, completed on attempt 1, its services walled by
    Landlock. Under gVisor (no Landlock): ``None``, the run refused before anything ran.
    ``kwargs`` go to ``cli.run`` (``agent="oracle"``).
    """
    if docker_runtime == "runsc":
        refused_on_gvisor(cli, task)
        return None
    run = cli.run([task], extra=KEEP_ROOT, timeout=240, **kwargs)
    record = completed_on_attempt_1(run)
    assert record["sandbox"].get("agent_services_wall") == "landlock", record["sandbox"]
    return run, record
