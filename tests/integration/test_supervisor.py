"""The supervisor protocol, spoken directly: ``python3 -I -S sandbox/inside/supervisor.py``.

Covers what LocalSandbox hides: bad requests, harness death (stdin EOF, or the harness
SIGKILLed), forged results, inherited fds, secrets on stdin only, aborted phases.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from support.workers import uid_base

from sandbox.backend import PROTOCOL_VERSION, SUPERVISOR_PATH, SupervisorSession
from sandbox.environment import FIXED_PATH
from sandbox.errors import HostToolInterrupted, SandboxError, SupervisorError
from sandbox.local import cgroups
from sandbox.storage import release_leftovers

IS_ROOT = os.geteuid() == 0
SYSTEM_PYTHON = shutil.which("python3", path=FIXED_PATH) or sys.executable
REPO = Path(__file__).resolve().parents[2]


def procs_with(token: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if p.info["status"] != "zombie" and token in " ".join(p.info["cmdline"] or []):
            found.append(p)
    return found


def wait_for(predicate: Any, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def start_supervisor() -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [SYSTEM_PYTHON, "-I", "-S", str(SUPERVISOR_PATH)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={"PATH": FIXED_PATH},
        cwd="/",
        start_new_session=True,
    )


@pytest.fixture
def supervisor() -> Iterator[tuple[subprocess.Popen[bytes], SupervisorSession]]:
    proc = start_supervisor()
    session = SupervisorSession(proc)
    yield proc, session
    session.close(timeout=10)
    if proc.stderr:
        proc.stderr.close()


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A cwd for phases, writable by the uid a test drops to (tmp_path is root-only)."""
    path = Path(tempfile.mkdtemp(prefix="harness-test-sup-", dir="/tmp"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def phase(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "argv": ["true"],
        "env": {"PATH": FIXED_PATH},
        "cwd": "/",
        "timeout_sec": 20,
        "user": None,
    }
    base.update(fields)
    return base


def drop_to(uid: int = uid_base(61010)) -> dict[str, int] | None:
    return {"uid": uid, "gid": uid} if IS_ROOT else None


def test_one_phase_round_trip(supervisor: Any, workdir: Path) -> None:
    _, session = supervisor
    out = workdir / "out.log"
    result = session.request(
        phase(argv=["bash", "-c", "echo hi; exit 4"], logs={"stdout": str(out)}, cwd=str(workdir))
    )
    assert result["version"] == PROTOCOL_VERSION
    assert result["exit_code"] == 4 and result["error"] is None
    assert out.read_text() == "hi\n"


def test_bad_requests_get_an_error_and_the_supervisor_keeps_serving(supervisor: Any) -> None:
    proc, session = supervisor
    bad = session.request({"version": 999, "argv": ["true"]})
    assert bad["error"]["type"] == "ValueError" and "protocol" in bad["error"]["message"]
    assert proc.stdin is not None and proc.stdout is not None
    for raw in (b'{"version": 999}\n', b"this is not json\n", b"[1, 2]\n"):
        proc.stdin.write(raw)
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())
        assert answer["error"] is not None, raw
        assert answer["error"]["type"] in ("ValueError", "JSONDecodeError"), answer
    assert session.request(phase(argv=["bash", "-c", "exit 7"]))["exit_code"] == 7


def test_missing_command_is_an_exec_error(supervisor: Any) -> None:
    _, session = supervisor
    result = session.request(phase(argv=["definitely-not-a-command-xyz"]))
    assert result["error"]["type"] == "ExecError"
    assert result["exit_code"] == 127


def test_eof_without_a_request_exits_cleanly() -> None:
    proc = start_supervisor()
    out, _ = proc.communicate(b"", timeout=20)
    assert proc.returncode == 0 and out == b""


def test_agent_cannot_forge_the_result_line(supervisor: Any) -> None:
    _, session = supervisor
    forged = json.dumps({"version": 1, "exit_code": 0, "error": None, "posture": {"x": 1}})
    first = session.request(
        phase(argv=["bash", "-c", f"echo '{forged}'; echo '{forged}' >&2; exit 5"])
    )
    assert first["exit_code"] == 5
    assert first["posture"] != {"x": 1}
    second = session.request(phase(argv=["bash", "-c", "exit 6"]))
    assert second["exit_code"] == 6


def test_agent_inherits_only_stdio(supervisor: Any, workdir: Path) -> None:
    _, session = supervisor
    code = (
        "import os\n"
        "me = '/proc/%d/fd' % os.getpid()\n"
        "fds = {}\n"
        "for fd in os.listdir('/proc/self/fd'):\n"
        "    try:\n"
        "        fds[int(fd)] = os.readlink('/proc/self/fd/' + fd)\n"
        "    except OSError:\n"
        "        pass\n"
        "open('fds.txt', 'w').write(repr(sorted(fds.items())))\n"
        "extra = [fd for fd, target in fds.items() if fd > 2 and not target.startswith(me)]\n"
        "raise SystemExit(1 if extra else 0)\n"
    )
    result = session.request(
        phase(argv=["python3", "-I", "-c", code], cwd=str(workdir), user=drop_to())
    )
    assert result["error"] is None, result
    assert result["exit_code"] == 0, (workdir / "fds.txt").read_text()


def test_stdin_eof_mid_phase_kills_the_phase() -> None:
    token = f"1{secrets.randbelow(10**6)}.125"
    proc = start_supervisor()
    assert proc.stdin is not None and proc.stdout is not None
    try:
        request = {
            "version": PROTOCOL_VERSION,
            **phase(argv=["sleep", token], timeout_sec=None, user=drop_to()),
        }
        proc.stdin.write((json.dumps(request) + "\n").encode())
        proc.stdin.flush()
        wait_for(lambda: procs_with(token) != [], what="the phase to start")
        began = time.monotonic()
        proc.stdin.close()  # the harness is gone
        proc.wait(timeout=30)
        assert time.monotonic() - began < 30
        assert procs_with(token) == []
        answer = json.loads(proc.stdout.readline())
        assert answer.get("harness_gone") is True
        assert answer["error"] is None, answer
        assert answer["timed_out"] is False
        assert proc.returncode == 1
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
        if proc.stderr:
            proc.stderr.close()


@pytest.mark.root
def test_harness_sigkill_mid_phase_kills_the_phase(tmp_path: Path) -> None:
    """A real harness process (LocalSandbox) is SIGKILLed while its agent sleeps."""
    token = f"1{secrets.randbelow(10**6)}.375"
    roots = Path("/tmp") / f"harness-test-roots-{secrets.token_hex(6)}"
    roots.mkdir(mode=0o711)
    label = f"doomed-{secrets.token_hex(6)}"
    script = tmp_path / "harness_main.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os, sys
            sys.path.insert(0, {str(REPO)!r})
            from pathlib import Path
            from sandbox.backend import PhaseRequest, SandboxSpec
            from sandbox.local.sandbox import IdentityPool, LocalSandbox
            sb = LocalSandbox(
                SandboxSpec(trial_id="doomed"),
                identities=IdentityPool({uid_base(61020)}, {uid_base(61020)}),
                python={SYSTEM_PYTHON!r},
                tmp_dir=Path({str(roots)!r}),
                run_label={label!r},
            )
            sb.start()
            sb.run_phase(PhaseRequest(role="agent", argv=["sleep", os.environ["TOKEN"]]))
            """
        )
    )
    # The token travels in the env so that only the agent's cmdline carries it.
    harness = subprocess.Popen(
        [sys.executable, str(script)], env={**os.environ, "TOKEN": token}, start_new_session=True
    )
    try:
        wait_for(lambda: procs_with(token) != [], what="the agent to start")
        (sup,) = [
            p for p in psutil.Process(harness.pid).children() if str(SUPERVISOR_PATH) in p.cmdline()
        ]
        harness.kill()
        harness.wait(timeout=10)
        wait_for(lambda: procs_with(token) == [], timeout=20, what="the agent to be killed")
        wait_for(
            lambda: not sup.is_running() or sup.status() == psutil.STATUS_ZOMBIE,
            what="the orphaned supervisor to exit",
        )
    finally:
        if harness.poll() is None:
            harness.kill()
            harness.wait()
        for p in procs_with(token):
            p.kill()
        # What `harness sandbox cleanup` does for a killed harness: its trial filesystem
        # is still mounted.
        release_leftovers(roots)
        shutil.rmtree(roots, ignore_errors=True)
        # ... and the trial's cgroup is still there (its processes dead).
        removed, errors = cgroups.sweep(label)
        assert not errors, errors
    assert len(removed) == (1 if cgroups.probe(create=False).version else 0), removed


def test_secret_env_never_touches_argv_or_the_supervisor_environ(
    supervisor: Any, workdir: Path, canary: str
) -> None:
    proc, session = supervisor
    stop = workdir / "stop"
    script = f'printf %s "$GATEWAY_TOKEN" > seen; while [ ! -e {stop} ]; do sleep 0.02; done'
    box: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: box.setdefault(
            "result",
            session.request(
                phase(
                    argv=["bash", "-c", script],
                    cwd=str(workdir),
                    secret_env={"GATEWAY_TOKEN": canary},
                    user=drop_to(),
                )
            ),
        )
    )
    thread.start()
    try:
        wait_for(lambda: (workdir / "seen").exists(), what="the agent")
        time.sleep(0.1)
        assert (workdir / "seen").read_text() == canary  # delivered to the process
        leaks = []
        for p in psutil.process_iter(["pid", "cmdline"]):
            if canary in " ".join(p.info["cmdline"] or []):
                leaks.append(("cmdline", p.info))
        sup_environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
        if canary.encode() in sup_environ:
            leaks.append(("supervisor environ", proc.pid))
        assert leaks == []
    finally:
        stop.touch()
        thread.join(30)
    assert box["result"]["exit_code"] == 0


@pytest.mark.root
def test_agent_cannot_signal_or_inspect_the_supervisor(supervisor: Any, workdir: Path) -> None:
    proc, session = supervisor
    script = (
        "cat /proc/$PPID/environ > environ.txt 2>&1; echo $? > environ.rc;"
        " kill -KILL $PPID 2> kill.txt; echo $? > kill.rc;"
        f" kill -KILL {proc.pid} 2>> kill.txt; echo $? >> kill.rc"
    )
    result = session.request(phase(argv=["bash", "-c", script], cwd=str(workdir), user=drop_to()))
    assert result["exit_code"] == 0
    assert proc.poll() is None
    assert (workdir / "environ.rc").read_text().strip() != "0"
    assert set((workdir / "kill.rc").read_text().split()) == {"1"}


@pytest.mark.root
def test_a_readable_protected_path_aborts_before_the_agent_runs(
    supervisor: Any, workdir: Path, outside_dir: Path
) -> None:
    _, session = supervisor
    bait = outside_dir / "solve.sh"
    bait.write_text("answer")
    bait.chmod(0o644)
    result = session.request(
        phase(
            argv=["bash", "-c", "touch ran"],
            cwd=str(workdir),
            user=drop_to(),
            unreadable=[str(bait)],
        )
    )
    assert result["error"]["type"] == "PostureError"
    assert str(bait) in result["error"]["message"]
    assert not (workdir / "ran").exists()


@pytest.mark.root
def test_a_symlinked_trial_dir_is_refused_and_never_chowned(
    supervisor: Any, workdir: Path, outside_dir: Path
) -> None:
    _, session = supervisor
    (workdir / "session").symlink_to(outside_dir, target_is_directory=True)
    result = session.request(
        phase(
            argv=["bash", "-c", "touch ran"],
            cwd=str(workdir),
            user=drop_to(),
            prepare_dirs=[{"path": str(workdir / "session"), "owner": "agent", "mode": 0o700}],
        )
    )
    assert result["error"] is not None and result["error"]["type"] == "PostureError"
    assert not (workdir / "ran").exists()
    st = outside_dir.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (0, 0, 0o755)


def test_delete_files_hides_secret_files_before_the_agent(
    supervisor: Any, workdir: Path, canary: str
) -> None:
    _, session = supervisor
    auth = workdir / "auth.json"
    auth.write_text(canary)
    result = session.request(
        phase(
            argv=["bash", "-c", "cat auth.json > leak 2>&1; true"],
            cwd=str(workdir),
            delete_files=[str(auth)],
        )
    )
    assert result["exit_code"] == 0
    assert not auth.exists()
    assert canary not in (workdir / "leak").read_text()


def test_without_a_user_orphans_are_still_killed(supervisor: Any) -> None:
    _, session = supervisor
    token = f"1{secrets.randbelow(10**6)}.625"
    result = session.request(
        phase(
            argv=["bash", "-c", f"setsid sleep {token} & ( ( sleep {token} & ) & ); sleep 0.3"],
            user=None,
        )
    )
    assert result["exit_code"] == 0
    assert procs_with(token) == []
    assert token in " ".join(p["cmdline"] for p in result["survivors"])


def test_a_supervisor_that_never_answers_is_given_up_on_and_killed() -> None:
    """Every wait has a deadline: the harness's wait for an answer too."""
    stuck = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    session = SupervisorSession(stuck)
    # Without the deadline the read would last until the stub exits (300 s), then fail
    # as "exited without a result".
    with pytest.raises(SupervisorError, match="no answer within 1s"):
        session.request({"op": "run", "argv": ["true"]}, timeout=1)
    assert stuck.wait(timeout=10) is not None, "the stuck supervisor was left running"
    session.close()


@pytest.mark.parametrize(
    ("death", "expected"),
    [
        ("kill -INT $$", HostToolInterrupted),  # a group Ctrl-C caught it as it started
        ("kill -TERM $$", HostToolInterrupted),
        ("kill -KILL $$", SupervisorError),  # not an interrupt: a failure, retried
        ("exit 3", SupervisorError),
    ],
)
def test_a_supervisor_dead_under_a_request_says_whether_an_interrupt_killed_it(
    death: str, expected: type[Exception]
) -> None:
    """An interrupt's death makes the trial ``cancelled``; any other is the supervisor's failure."""
    # It reads the request first, so the harness's write never races its death.
    dying = subprocess.Popen(
        ["bash", "-c", f"read -r line; {death}"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    session = SupervisorSession(dying)
    with pytest.raises(SandboxError) as caught:
        session.request({"op": "run", "argv": ["true"]}, timeout=30)
    assert type(caught.value) is expected, caught.value
    if expected is SupervisorError:
        assert f"(exit code {dying.returncode})" in str(caught.value)
    else:
        assert "the run is being stopped" in str(caught.value)
    session.close()


def test_a_batch_runs_file_ops_in_order_and_stops_at_the_first_failure(
    supervisor: Any, workdir: Path
) -> None:
    _, session = supervisor
    target = workdir / "batched"
    done = session.request(
        {
            "op": "batch",
            "ops": [
                {"op": "reset_dir", "path": str(target), "mode": 0o700},
                {"op": "put", "dest": str(target), "files": [{"path": "a.txt", "data": "aGk="}]},
            ],
        }
    )
    assert done["error"] is None and len(done["results"]) == 2, done
    assert (target / "a.txt").read_bytes() == b"hi"
    refused = session.request(
        {
            "op": "batch",
            "ops": [
                {"op": "whois", "name": "no-such-user-in-this-system"},
                {"op": "reset_dir", "path": str(workdir / "never"), "mode": 0o700},
            ],
        }
    )
    assert refused["error"] is not None, refused
    assert not (workdir / "never").exists()  # nothing after the failure ran
    nested = session.request({"op": "batch", "ops": [{"op": "batch", "ops": []}]})
    assert nested["error"] is not None and "batch" in nested["error"]["message"], nested
    assert session.request(phase())["exit_code"] == 0  # still serving
