"""LocalSandbox + the real supervisor, as root: attacks checked from outside (security §6).

Every test runs real processes under a pool uid; each assertion looks at side effects on the
host (files, /proc, psutil), never at what the agent claims.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from support.docker import prerequisite_missing

from harness.agents.command import CommandAgent
from harness.records import TrialStatus
from harness.trial import TrialPlan, TrialSettings, run_trial
from sandbox.backend import PhaseRequest, PhaseResult, SandboxSpec
from sandbox.environment import FIXED_PATH
from sandbox.errors import SandboxError
from sandbox.local.sandbox import LocalSandbox

pytestmark = pytest.mark.root

MakeSandbox = Callable[..., LocalSandbox]


def agent(
    sandbox: LocalSandbox, script: str, *, timeout: float = 20, **request: object
) -> PhaseResult:
    return sandbox.run_phase(
        PhaseRequest(
            role="agent",
            argv=["bash", "-c", script],
            env={"PATH": FIXED_PATH},
            timeout_sec=timeout,
            **request,  # type: ignore[arg-type]
        )
    )


def live_procs(uid: int) -> list[psutil.Process]:
    """Non-zombie processes whose real uid is ``uid``."""
    return [
        p
        for p in psutil.process_iter(["uids", "status"])
        if p.info["uids"] and p.info["uids"].real == uid and p.info["status"] != "zombie"
    ]


def procs_with(token: str) -> list[psutil.Process]:
    """Non-zombie processes whose command line mentions ``token``."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if p.info["status"] != "zombie" and token in " ".join(p.info["cmdline"] or []):
            found.append(p)
    return found


def ws(sandbox: LocalSandbox) -> Path:
    return sandbox.host_path(sandbox.paths.workspace)


def as_user(uid: int, gid: int, argv: list[str], **kw: object) -> subprocess.CompletedProcess:
    """Control experiment: run ``argv`` as uid/gid WITHOUT the supervisor's hardening."""
    return subprocess.run(
        argv, user=uid, group=gid, extra_groups=[], capture_output=True, text=True, **kw
    )  # type: ignore[call-overload]


def test_posture_is_fully_dropped(make_local_sandbox: MakeSandbox) -> None:
    sb = make_local_sandbox()
    assert sb.identity is not None
    uid, gid = sb.identity
    result = agent(sb, "grep -E '^(Uid|Gid|Groups|Cap...|NoNewPrivs):' /proc/self/status > p")
    assert result.error is None and result.exit_code == 0
    posture = result.posture
    assert posture is not None and posture["dropped"] is True
    assert posture["uid"] == [uid] * 3 and posture["gid"] == [gid] * 3
    assert posture["groups"] == []
    assert set(posture["caps"]) == {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}
    assert all(int(v, 16) == 0 for v in posture["caps"].values())
    assert posture["no_new_privs"] == "1"
    # What the exec'd agent itself sees, read from the file it left behind.
    status = dict(
        (k, v.split())
        for k, _, v in (ln.partition(":") for ln in (ws(sb) / "p").read_text().splitlines())
    )
    assert status["Uid"] == [str(uid)] * 4 and status["Gid"] == [str(gid)] * 4
    assert status["Groups"] == []
    assert status["NoNewPrivs"] == ["1"]
    assert all(int(status[c][0], 16) == 0 for c in ("CapPrm", "CapEff", "CapBnd", "CapAmb"))


def test_agent_cannot_regain_root(make_local_sandbox: MakeSandbox) -> None:
    sb = make_local_sandbox()
    assert sb.identity is not None
    code = (
        "import os\n"
        "out = []\n"
        "for name, fn in [('setuid', lambda: os.setuid(0)),\n"
        "                 ('setresuid', lambda: os.setresuid(0, 0, 0)),\n"
        "                 ('setgid', lambda: os.setgid(0)),\n"
        "                 ('setgroups', lambda: os.setgroups([0]))]:\n"
        "    try:\n"
        "        fn(); out.append(name + '=OK')\n"
        "    except PermissionError:\n"
        "        out.append(name + '=EPERM')\n"
        "out.append('euid=%d' % os.geteuid())\n"
        "open('regain.txt', 'w').write(' '.join(out))\n"
    )
    result = sb.run_phase(
        PhaseRequest(
            role="agent", argv=["python3", "-c", code], env={"PATH": FIXED_PATH}, timeout_sec=20
        )
    )
    assert result.exit_code == 0, result
    assert (ws(sb) / "regain.txt").read_text() == (
        f"setuid=EPERM setresuid=EPERM setgid=EPERM setgroups=EPERM euid={sb.identity[0]}"
    )


def _root_owned_copy(source: str, *targets: Path, mode: int = 0o755) -> None:
    for target in targets:
        shutil.copy2(os.path.realpath(source), target)
        os.chown(target, 0, 0)
        os.chmod(target, mode)


def test_setuid_root_binary_does_not_raise_privilege(
    make_local_sandbox: MakeSandbox, outside_dir: Path
) -> None:
    sb = make_local_sandbox()
    assert sb.identity is not None
    uid, gid = sb.identity
    # Control on the host (no nosuid there): the helper does make the uid root.
    _root_owned_copy("/usr/bin/id", outside_dir / "suid-id", ws(sb) / "suid-id", mode=0o4755)
    control = as_user(uid, gid, [str(outside_dir / "suid-id"), "-u"])
    if control.stdout.strip() != "0":
        prerequisite_missing(f"setuid bits are inert in {outside_dir.parent}: {control!r}")
    result = agent(sb, "./suid-id -u > suid.out 2>&1")
    assert result.exit_code == 0
    assert (ws(sb) / "suid.out").read_text().strip() == str(uid)


def test_file_capability_binary_does_not_grant_caps(
    make_local_sandbox: MakeSandbox, outside_dir: Path, canary: str
) -> None:
    setcap = shutil.which("setcap", path=FIXED_PATH)
    if setcap is None:
        prerequisite_missing("setcap (libcap2-bin) is not installed; scripts/test installs it")
    sb = make_local_sandbox()
    assert sb.identity is not None
    uid, gid = sb.identity
    # The secret is in the agent's view (its workspace), root-only: only a capability reads it.
    for secret in (outside_dir / "root-only.txt", ws(sb) / "root-only.txt"):
        secret.write_text(canary)
        secret.chmod(0o600)
    _root_owned_copy("/usr/bin/cat", outside_dir / "capcat", ws(sb) / "capcat")
    for capcat in (outside_dir / "capcat", ws(sb) / "capcat"):
        subprocess.run([setcap, "cap_dac_read_search+ep", str(capcat)], check=True)
    # Control on the host: the capability does read the secret.
    control = as_user(uid, gid, [str(outside_dir / "capcat"), str(outside_dir / "root-only.txt")])
    if canary not in control.stdout:
        prerequisite_missing(f"file capabilities do not work in {outside_dir.parent}: {control!r}")
    result = agent(sb, "./capcat root-only.txt > leak.txt 2>&1; echo $? > rc")
    assert result.exit_code == 0
    assert canary not in (ws(sb) / "leak.txt").read_text()
    assert (ws(sb) / "rc").read_text().strip() != "0"


def test_protected_dir_is_unreadable(
    make_local_sandbox: MakeSandbox, outside_dir: Path, canary: str
) -> None:
    (outside_dir / "tests").mkdir()
    (outside_dir / "tests" / "test.sh").write_text(f"answer={canary}\n")
    (outside_dir / "tests" / "test.sh").chmod(0o644)
    (outside_dir / "tests").chmod(0o755)
    bare = make_local_sandbox()
    assert bare.identity is not None
    control = as_user(*bare.identity, ["cat", str(outside_dir / "tests" / "test.sh")])
    assert canary in control.stdout, "the bait must be readable without protection"

    sb = make_local_sandbox(SandboxSpec(trial_id="protected", protected_paths=(outside_dir,)))
    script = (
        f"cat {outside_dir}/tests/test.sh > leak.txt 2>&1; echo $? > rc;"
        f" ls -la {outside_dir} {outside_dir}/tests >> leak.txt 2>&1;"
        f" grep -r answer {outside_dir} >> leak.txt 2>&1; true"
    )
    result = agent(sb, script)
    assert result.error is None and result.exit_code == 0, result
    assert (ws(sb) / "rc").read_text().strip() != "0"
    assert canary not in (ws(sb) / "leak.txt").read_text()
    assert (outside_dir / "tests" / "test.sh").read_text() == f"answer={canary}\n"


def test_protected_file_is_unreadable_and_the_agent_still_runs(
    make_local_sandbox: MakeSandbox, outside_dir: Path, canary: str
) -> None:
    secret = outside_dir / "solution.sh"
    secret.write_text(canary)
    secret.chmod(0o644)
    sb = make_local_sandbox(SandboxSpec(trial_id="protected-file", protected_paths=(secret,)))
    result = agent(sb, f"cat {secret} > leak.txt 2>&1; echo ran > ran.txt")
    # Masking a file must hide its content without failing the posture self-check.
    assert result.error is None, result.error
    assert (ws(sb) / "ran.txt").exists()
    assert canary not in (ws(sb) / "leak.txt").read_text()


def test_harness_dirs_of_the_trial_are_unreadable(
    make_local_sandbox: MakeSandbox, tmp_path: Path
) -> None:
    sb = make_local_sandbox()
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text("secret-test")
    sb.put_dir(tests, sb.paths.tests, agent_readable=False)  # as grading does
    sb.put_file(f"{sb.paths.root}/artifacts/a.txt", b"secret-artifact", agent_readable=False)
    agent(sb, "echo first-run-output")
    result = agent(
        sb,
        "for f in ../logs/agent.stdout ../tests/test.sh ../artifacts/a.txt; do"
        " cat $f >> leak.txt 2>&1; done; ls .. ../tests >> leak.txt 2>&1; true",
    )
    assert result.error is None and result.exit_code == 0, result
    leak = (ws(sb) / "leak.txt").read_text()
    assert "first-run-output" not in leak
    assert "secret-test" not in leak and "secret-artifact" not in leak


def test_put_file_not_agent_readable_keeps_new_parent_dirs_private(
    make_local_sandbox: MakeSandbox,
) -> None:
    sb = make_local_sandbox()
    sb.put_file(f"{sb.paths.tests}/test.sh", b"secret-test", agent_readable=False)
    # The parent dir put_file created must not be listable by the agent: otherwise the
    # posture self-check (rightly) refuses every later agent phase.
    result = agent(sb, "ls ../tests > listing.txt 2>&1; true")
    assert result.error is None, result.error
    assert "test.sh" not in (ws(sb) / "listing.txt").read_text()


def test_timeout_kills_a_sleeping_agent_quickly(make_local_sandbox: MakeSandbox) -> None:
    sb = make_local_sandbox()
    token = f"1{secrets.randbelow(10**6)}.5"
    began = time.monotonic()
    result = agent(sb, f"sleep {token}", timeout=1)
    assert time.monotonic() - began < 30
    assert procs_with(token) == []
    assert result.error is None, result.error
    assert result.timed_out
    assert result.exit_code is None and result.signal is not None


def test_every_process_of_the_trial_dies_with_the_phase(make_local_sandbox: MakeSandbox) -> None:
    sb = make_local_sandbox()
    assert sb.identity is not None
    token = f"1{secrets.randbelow(10**6)}.25"
    marker = Path(f"/tmp/harness-test-marker-{secrets.token_hex(8)}")
    script = (
        f"setsid bash -c 'sleep {token}' &\n"
        f"( ( sleep {token} & ) & )\n"
        f"nohup sleep {token} >/dev/null 2>&1 &\n"
        f"( trap '' TERM HUP; sleep 2; echo tampered > {marker} ) &\n"
        "sleep 0.5\n"
        "exit 0\n"
    )
    try:
        result = agent(sb, script, timeout=20)
        assert result.exit_code == 0 and not result.timed_out
        assert live_procs(sb.identity[0]) == []
        assert procs_with(token) == []
        reported = " ".join(p.get("cmdline", "") for p in result.survivors)
        assert token in reported, result.survivors
        assert all(p["uid"] == sb.identity[0] for p in result.survivors)
        time.sleep(3)
        assert not marker.exists(), "a process of the trial outlived the phase"
    finally:
        marker.unlink(missing_ok=True)


def test_stopped_and_term_ignoring_processes_are_killed(make_local_sandbox: MakeSandbox) -> None:
    sb = make_local_sandbox()
    assert sb.identity is not None
    token = f"1{secrets.randbelow(10**6)}.75"
    script = f"sleep {token} & kill -STOP $!; trap '' TERM INT HUP; sleep {token}"
    began = time.monotonic()
    result = agent(sb, script, timeout=1)
    assert time.monotonic() - began < 30
    assert procs_with(token) == []
    assert live_procs(sb.identity[0]) == []
    assert result.error is None, result.error
    assert result.timed_out


def test_output_flood_is_capped(make_local_sandbox: MakeSandbox) -> None:
    sb = make_local_sandbox()
    limit = 1 << 20
    began = time.monotonic()
    result = agent(
        sb, "head -c 50000000 /dev/zero; head -c 3000000 /dev/zero >&2", max_output_bytes=limit
    )
    assert time.monotonic() - began < 30
    assert result.exit_code == 0
    assert result.output_truncated
    assert result.stdout_bytes == 50_000_000
    assert result.stderr_bytes == 3_000_000
    logs = Path(sb.paths.logs)
    assert (logs / "agent.stdout").stat().st_size == limit
    assert (logs / "agent.stderr").stat().st_size == limit


def test_small_output_is_captured_exactly_and_not_truncated(
    make_local_sandbox: MakeSandbox,
) -> None:
    sb = make_local_sandbox()
    result = agent(sb, "printf 'out\\0put'; printf err >&2")
    assert not result.output_truncated
    assert (Path(sb.paths.logs) / "agent.stdout").read_bytes() == b"out\0put"
    assert (Path(sb.paths.logs) / "agent.stderr").read_bytes() == b"err"


def test_agent_crash_and_signal_death_are_reported(make_local_sandbox: MakeSandbox) -> None:
    sb = make_local_sandbox()
    crashed = agent(sb, "exit 3")
    assert (crashed.exit_code, crashed.signal, crashed.timed_out) == (3, None, False)
    killed = agent(sb, "kill -9 $$")
    assert (killed.exit_code, killed.signal, killed.timed_out) == (None, 9, False)
    aborted = agent(sb, "ulimit -c > ulimit-c.txt; python3 -c 'import os; os.abort()'")
    assert aborted.signal == 6 or aborted.exit_code == 128 + 6, aborted
    assert (ws(sb) / "ulimit-c.txt").read_text().strip() == "0"
    assert not [p for p in ws(sb).iterdir() if p.name.startswith("core")]


def test_concurrent_trials_get_distinct_identities_and_cannot_read_each_other(
    make_local_sandbox: MakeSandbox, canary: str
) -> None:
    a, b = make_local_sandbox(), make_local_sandbox()
    assert a.identity is not None and b.identity is not None
    assert a.identity[0] != b.identity[0] and a.identity[1] != b.identity[1]
    assert agent(b, f"printf %s {canary} > secret.txt; chmod 644 secret.txt").exit_code == 0
    assert canary in (ws(b) / "secret.txt").read_text()
    result = agent(
        a,
        f"cat {ws(b)}/secret.txt > leak.txt 2>&1; ls {b.paths.root} >> leak.txt 2>&1;"
        f" cat {b.paths.logs}/agent.stdout >> leak.txt 2>&1; echo > {ws(b)}/planted; true",
    )
    assert result.exit_code == 0
    assert canary not in (ws(a) / "leak.txt").read_text()
    assert not (ws(b) / "planted").exists()


def test_one_trials_kill_sweep_spares_a_concurrent_trial(make_local_sandbox: MakeSandbox) -> None:
    a, b = make_local_sandbox(), make_local_sandbox()
    results: dict[str, PhaseResult] = {}
    thread = threading.Thread(
        target=lambda: results.setdefault(
            "b", agent(b, "touch started; sleep 2; echo done > done.txt", timeout=30)
        )
    )
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not (ws(b) / "started").exists():
            assert time.monotonic() < deadline, "trial B never started"
            time.sleep(0.02)
        # A leaves a background process behind: its uid sweep runs while B is mid-phase.
        result_a = agent(a, "sleep 1000 & sleep 0.2")
        assert result_a.survivors
    finally:
        thread.join(30)
    assert results["b"].exit_code == 0 and results["b"].signal is None, results["b"]
    assert (ws(b) / "done.txt").read_text().strip() == "done"


def test_stop_removes_a_sabotaged_root(make_local_sandbox: MakeSandbox, roots_dir: Path) -> None:
    sb = make_local_sandbox()
    root = sb.host_path(sb.paths.root)
    script = (
        "mkfifo fifo; mkdir -p a/b/c; echo x > a/b/c/f; chmod 000 a/b/c a/b a;"
        " touch $'name\\nwith newline';"
        " for i in $(seq 300); do mkdir deep_directory_name_$i && cd deep_directory_name_$i;"
        " done; ln -s / rootlink; ln -s /etc/passwd pw; cd $HARNESS_WS; chmod 000 .; true"
    )
    result = sb.run_phase(
        PhaseRequest(
            role="agent",
            argv=["bash", "-c", script],
            env={"PATH": FIXED_PATH, "HARNESS_WS": str(ws(sb))},
            timeout_sec=20,
        )
    )
    assert result.exit_code == 0
    began = time.monotonic()
    sb.stop()
    assert time.monotonic() - began < 30
    assert not root.exists()
    assert list(roots_dir.iterdir()) == []
    assert Path("/etc/passwd").is_file()


def test_put_file_never_writes_through_an_agent_planted_symlink(
    make_local_sandbox: MakeSandbox, outside_dir: Path
) -> None:
    sb = make_local_sandbox()
    agent(sb, f"ln -s {outside_dir} sub; ln -s {outside_dir}/direct.txt direct.txt")
    with pytest.raises(OSError):
        sb.put_file(f"{ws(sb)}/direct.txt", b"pwned", agent_readable=True)
    try:
        sb.put_file(f"{ws(sb)}/sub/planted.txt", b"pwned", agent_readable=True)
    except (OSError, SandboxError):
        pass  # refusing is fine; writing outside is not
    src = outside_dir.parent / f"harness-test-src-{secrets.token_hex(4)}"
    src.mkdir()
    try:
        (src / "f.txt").write_text("pwned")
        try:
            sb.put_dir(src, f"{ws(sb)}/sub/dir", agent_readable=True)
        except (OSError, SandboxError):
            pass
    finally:
        shutil.rmtree(src)
    assert sorted(p.name for p in outside_dir.iterdir()) == []


def test_stop_releases_the_identity(make_local_sandbox: MakeSandbox) -> None:
    first = make_local_sandbox()
    uid = first.identity
    first.stop()
    first.stop()  # idempotent
    assert make_local_sandbox().identity == uid


def _trial(make_local_sandbox: MakeSandbox, tmp_path: Path, task: Any, command: str) -> Any:
    settings = TrialSettings(
        run_dir=tmp_path / "run",
        agent=CommandAgent(command),
        make_sandbox=lambda spec: make_local_sandbox(spec, start=False),
    )
    return run_trial(TrialPlan(id="real-trial", task=task, rollout=0), settings)


def test_a_real_trial_end_to_end(
    make_local_sandbox: MakeSandbox, make_task: Callable[..., Any], tmp_path: Path
) -> None:
    task = make_task(
        test_sh=(
            'grep -q solved "$HARNESS_WORKSPACE/answer.txt"'
            ' && echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
        ),
        workspace={"input.txt": b"question"},
    )
    record = _trial(
        make_local_sandbox,
        tmp_path,
        task,
        "bash -c 'cat input.txt > /dev/null && echo solved > answer.txt && echo agent-said-hi'",
    )
    assert record.status is TrialStatus.COMPLETED, record.errors
    assert record.reward == 1.0
    assert record.posture is not None and record.posture["dropped"] is True
    evidence = tmp_path / "run" / record.evidence_dir
    assert (evidence / "agent.log").read_text() == "agent-said-hi\n"
    assert (evidence / "workspace" / "answer.txt").read_text() == "solved\n"


def test_a_real_trial_agent_timeout_is_an_agent_timeout(
    make_local_sandbox: MakeSandbox, make_task: Callable[..., Any], tmp_path: Path
) -> None:
    task = make_task(agent_timeout=1)
    token = f"1{secrets.randbelow(10**6)}.0625"
    began = time.monotonic()
    record = _trial(make_local_sandbox, tmp_path, task, f"sleep {token}")
    assert time.monotonic() - began < 30
    assert procs_with(token) == []
    assert record.status is TrialStatus.AGENT_TIMEOUT, record.errors
    assert record.reward == 1.0  # graded after the kill
