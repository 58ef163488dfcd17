"""The local sandbox enforces ``memory_mb``, ``cpus`` and ``pids`` in a cgroup per trial.

Attacks through the real CLI (``harness run --sandbox local``), judged from outside: the
host's cgroup tree (found by the run's name in the cgroup names), /proc, the host's free
memory sampled by the test, the trial record. See docs/security.md, "Local resource limits".
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, Cli, read_records, write_task
from support.host_procs import named
from support.sampler import Sampler

from sandbox.local import cgroups

pytestmark = pytest.mark.root

CGROUP_ROOT = Path("/sys/fs/cgroup")
MIB = 1024 * 1024


# --------------------------------------------------------------------------- from outside


def trial_cgroups(run: str) -> list[Path]:
    """Every dir of the host's cgroup tree that belongs to run ``run``'s trials."""
    prefix = f"harness-trial@{run}@"
    found = []
    for dirpath, dirnames, _files in os.walk(CGROUP_ROOT):
        for name in list(dirnames):
            if name.startswith(prefix):
                found.append(Path(dirpath) / name)
                dirnames.remove(name)
            elif name == "docker":
                dirnames.remove(name)  # the engine's: nothing of ours is below it
    return found


def _keyed(path: Path, key: str) -> int | None:
    try:
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == key:
                return int(parts[1])
    except (OSError, ValueError):
        return None
    return None


def oom_kills(dirs: list[Path]) -> int | None:
    """``oom_kill`` of the trial's memory cgroup (v2 memory.events, v1 memory.oom_control)."""
    for path in dirs:
        for name in ("memory.events", "memory.oom_control"):
            found = _keyed(path / name, "oom_kill")
            if found is not None:
                return found
    return None


def cpu_usage_usec(dirs: list[Path]) -> int | None:
    """CPU time used by the trial's processes (v2 cpu.stat usage_usec, v1 cpuacct.usage)."""
    for path in dirs:
        found = _keyed(path / "cpu.stat", "usage_usec")
        if found is not None:
            return found
        try:
            return int((path / "cpuacct.usage").read_text()) // 1000
        except (OSError, ValueError):
            continue
    return None


def procs(dirs: list[Path]) -> set[int]:
    """The processes of the trial's cgroup (every hierarchy)."""
    found: set[int] = set()
    for path in dirs:
        try:
            found.update(int(p) for p in (path / "cgroup.procs").read_text().split())
        except OSError:
            continue
    return found


def mem_available() -> int:
    """The host's MemAvailable, in bytes."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no MemAvailable in /proc/meminfo")


@pytest.fixture
def local(tmp_path: Path) -> Iterator[Cli]:
    """The CLI on the local sandbox; teardown removes what a failed test's runs left."""
    runner = Cli(tmp_path, sandbox="local")
    yield runner
    if runner.output.exists():
        for run_dir in runner.output.iterdir():
            cgroups.sweep(run_dir.name)


def run_name() -> str:
    return f"sec-limits-{secrets.token_hex(4)}"


def limits_task(parent: Path, attack: str, **kwargs: Any) -> Path:
    name = f"sec-limits-{secrets.token_hex(4)}"
    return write_task(parent, name, attack=attack, **kwargs)


# --------------------------------------------------------------------------- memory


def test_an_agent_allocating_3000_mib_under_512_is_oom_killed(local: Cli, tmp_path: Path) -> None:
    """3,000 MiB asked under memory_mb = 512: OOM-killed in its cgroup, SandboxDied, no retry."""
    attack = (
        "python3 - <<'EOF'\n"
        "import time\n"
        "held = []\n"
        "for _ in range(30):\n"
        "    held.append(b'x' * (100 * 1024 * 1024))\n"
        "time.sleep(5)\n"
        "EOF\n"
        "echo survived > /trial/artifacts/survived.txt\n"
    )
    task = limits_task(tmp_path / "tasks", attack, agent_timeout=60)
    name = run_name()
    baseline = mem_available()
    seen: dict[str, Any] = {"lowest": baseline, "oom": None, "dirs": []}

    def sample() -> None:
        seen["lowest"] = min(seen["lowest"], mem_available())
        dirs = trial_cgroups(name)
        if dirs:
            seen["dirs"] = [str(d) for d in dirs]
            count = oom_kills(dirs)
            if count is not None:
                seen["oom"] = count

    with Sampler(sample, interval=0.02):
        run = local.run([task], timeout=240, extra=["--run-name", name])
    assert run.run_dir is not None, run
    record = run.records[0]
    assert record["status"] == "agent_error", record
    [error] = record["errors"]
    assert error["type"] == "SandboxDied", error
    assert "oom_kill" in error["message"] and "memory_mb = 512" in error["message"], error
    limits = record["sandbox"]["limits"]
    assert limits["memory_mb"] == 512 and limits["swap_mb"] == 0, limits
    assert limits["mechanism"] in ("cgroup v1", "cgroup v2") and limits["cgroup"].startswith(
        f"harness-trial@{name}@"
    )
    # From outside: the cgroup's own count of OOM kills, and the host never lost the memory.
    assert seen["dirs"], "the trial's cgroup was never seen"
    assert seen["oom"] is not None and seen["oom"] >= 1, seen
    drop = baseline - seen["lowest"]
    assert drop < 1.5 * 1024 * MIB, f"the host's free memory dropped by {drop / MIB:.0f} MiB"
    assert not (run.evidence(record) / "artifacts" / "survived.txt").exists()
    assert trial_cgroups(name) == [], "the trial's cgroup outlived the run"
    # Never retried (the default retries environment errors): the first attempt is the last.
    assert record["attempt"] == 1 and not record["previous_attempts"], record
    assert len(read_records(run.run_dir)) == 1


# --------------------------------------------------------------------------- cpus


def test_four_busy_loops_under_one_cpu_use_one_core(local: Cli, tmp_path: Path) -> None:
    """4 busy loops under cpus = 1: the cgroup's CPU time over the trial's time stays ~1 core."""
    attack = "for i in 1 2 3 4; do (while :; do :; done) & done\nsleep 8\nkill $(jobs -p)\n"
    task = limits_task(tmp_path / "tasks", attack, agent_timeout=60)
    name = run_name()
    first: list[tuple[float, int]] = []
    last: list[tuple[float, int]] = []

    def sample() -> None:
        dirs = trial_cgroups(name)
        usage = cpu_usage_usec(dirs) if dirs else None
        if usage is None:
            return
        point = (time.monotonic(), usage)
        if not first:
            first.append(point)
        last[:] = [point]

    with Sampler(sample, interval=0.1):
        run = local.run([task], timeout=240, extra=["--run-name", name])
    record = run.records[0]
    assert record["status"] == "completed", record
    assert record["sandbox"]["limits"]["cpus"] == 1, record["sandbox"]
    assert first and last, "the trial's cgroup was never seen"
    elapsed = last[0][0] - first[0][0]
    used = (last[0][1] - first[0][1]) / 1e6
    assert elapsed > 2, f"the trial's cgroup was seen for only {elapsed:.1f} s"
    ratio = used / elapsed
    # Without the limit, 4 loops take every core of the host (2 here); the bound is ~1.
    assert 0.1 <= ratio <= 1.3, f"{used:.2f} s of CPU in {elapsed:.2f} s: {ratio:.2f} cores"


# --------------------------------------------------------------------------- every process


def test_a_detached_agent_process_lives_in_the_cgroup_and_dies_with_it(
    local: Cli, tmp_path: Path
) -> None:
    """setsid + double fork: still in the trial's cgroup (every hierarchy), gone at the end.

    The verifier and a command it runs through ``$HARNESS_AGENT_EXEC`` are in it too.
    """
    agent_canary = f"canary-agent-{secrets.token_hex(4)}"
    verifier_canary = f"canary-verifier-{secrets.token_hex(4)}"
    exec_canary = f"canary-exec-{secrets.token_hex(4)}"
    attack = (
        f"( setsid bash -c 'exec -a {agent_canary} sleep 1000' & ) </dev/null >/dev/null 2>&1\n"
        "sleep 4\n"
    )
    test_sh = (
        f"( exec -a {verifier_canary} sleep 3 ) &\n"
        f"\"$HARNESS_AGENT_EXEC\" bash -c 'exec -a {exec_canary} sleep 3'\n"
        "wait\n"
        'echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
    )
    task = limits_task(tmp_path / "tasks", attack, test_sh=test_sh, agent_timeout=60)
    name = run_name()
    placed: dict[str, set[str]] = {agent_canary: set(), verifier_canary: set(), exec_canary: set()}
    pids: dict[str, set[int]] = {key: set() for key in placed}

    def sample() -> None:
        # The members are read after the canaries are found: a canary forked between
        # the two reads would otherwise look "out". One that is not a member is
        # looked up again, since it may have ended after it was found.
        found = {canary: named(canary) for canary in placed}
        if not any(found.values()):
            return
        members = procs(trial_cgroups(name))
        for canary, canary_pids in found.items():
            for pid in canary_pids:
                pids[canary].add(pid)
                try:
                    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
                except OSError:
                    continue
                inside = pid in members and any(f"harness-trial@{name}@" in x for x in lines)
                if not inside and pid not in named(canary):
                    continue
                placed[canary].add("in" if inside else "out")

    with Sampler(sample, interval=0.05):
        run = local.run([task], timeout=240, extra=["--run-name", name])
    record = run.records[0]
    assert record["status"] == "completed", record
    for canary, where in placed.items():
        assert where == {"in"}, f"{canary} was seen {where or 'never'} (pids {pids[canary]})"
    assert not any(named(c) for c in placed), "a trial process outlived the trial"
    assert trial_cgroups(name) == []


# --------------------------------------------------------------------------- a crash


def _start_crashing(local: Cli, tmp_path: Path, name: str, canary: str) -> subprocess.Popen[str]:
    # The crashed attempt's agent stays alive (the sweep must kill it); the rerun a
    # --resume makes starts after the host's ``resumed`` flag exists (an exposed dir,
    # read-only) and ends at once instead of sleeping a minute more.
    flags = tmp_path / "flags"
    flags.mkdir()
    attack = (
        f"( setsid bash -c 'exec -a {canary} sleep 1000' & ) </dev/null >/dev/null 2>&1\n"
        f"[ -e {flags}/resumed ] || sleep 60\n"
    )
    task = limits_task(tmp_path / "tasks", attack, agent_timeout=120)
    expose = f'sandbox.expose=["{flags}"]'
    proc = local.start([task], extra=["--run-name", name, "--set", expose])
    stop_at = time.monotonic() + 120
    while time.monotonic() < stop_at and not (trial_cgroups(name) and named(canary)):
        time.sleep(0.1)
    assert trial_cgroups(name) and named(canary), "the trial never started"
    os.kill(proc.pid, signal.SIGKILL)  # the harness only: its supervisor is left behind
    proc.wait()
    (flags / "resumed").touch()
    if proc.stdout:
        proc.stdout.close()
    if proc.stderr:
        proc.stderr.close()
    return proc


def test_resume_after_a_kill_9_removes_the_leftover_cgroup(local: Cli, tmp_path: Path) -> None:
    """kill -9 of the harness mid-trial: its cgroup is left; ``--resume`` removes it."""
    name, canary = run_name(), f"canary-crash-{secrets.token_hex(4)}"
    _start_crashing(local, tmp_path, name, canary)
    left = trial_cgroups(name)
    assert left, "the crash left no cgroup to sweep (nothing tested)"
    run_dir = local.output / name
    argv = [sys.executable, "-m", "harness", "run", "--resume", str(run_dir)]
    resumed = subprocess.run(
        argv, env=local.env(), cwd=str(REPO), capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode in (0, 1), resumed.stderr
    assert not any(path.exists() for path in left), [p for p in left if p.exists()]
    assert trial_cgroups(name) == []
    assert not named(canary)


@pytest.mark.docker
def test_sandbox_cleanup_after_a_kill_9_removes_the_leftover_cgroup(
    local: Cli, tmp_path: Path, client: Any
) -> None:
    """kill -9 of the harness mid-trial: ``harness sandbox cleanup --run`` removes its cgroup."""
    name, canary = run_name(), f"canary-crash-{secrets.token_hex(4)}"
    _start_crashing(local, tmp_path, name, canary)
    left = trial_cgroups(name)
    assert left, "the crash left no cgroup to sweep (nothing tested)"
    argv = [sys.executable, "-m", "harness", "sandbox", "cleanup", "--run", name]
    done = subprocess.run(
        argv, env=local.env(), cwd=str(REPO), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "1 cgroup(s)" in done.stdout, done.stdout
    assert trial_cgroups(name) == [] and not any(path.exists() for path in left)
    assert not named(canary)


@pytest.mark.docker
def test_doctor_says_the_local_limits_work_here(local: Cli, client: Any) -> None:
    """``harness doctor`` makes (and removes) a probe cgroup and reports the mechanism."""
    argv = [sys.executable, "-m", "harness", "doctor"]
    done = subprocess.run(
        argv, env=local.env(), cwd=str(REPO), capture_output=True, text=True, timeout=300
    )
    row = [line for line in done.stdout.splitlines() if "local sandbox limits" in line]
    assert row and ("cgroup v1" in row[0] or "cgroup v2" in row[0]), done.stdout
    assert "cannot enforce memory_mb" not in done.stderr, done.stderr
    assert trial_cgroups("probe") == [], "the doctor's probe cgroup was left behind"


# --------------------------------------------------------------------------- no cgroups


def _without_cgroups(local: Cli, tasks: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """``harness run`` in a mount namespace of its own where no cgroup is mounted."""
    argv = ["unshare", "-m", "--propagation", "private", "sh", "-c"]
    argv += ['umount -R /sys/fs/cgroup && exec "$@"', "sh"]
    argv += local.argv([tasks], extra=list(extra))
    return subprocess.run(
        argv, env=local.env(), cwd=str(REPO), capture_output=True, text=True, timeout=300
    )


def test_without_cgroups_the_run_is_refused_or_warned(local: Cli, tmp_path: Path) -> None:
    """No cgroup can be made: refused by default; ``local_limits = "warn"`` says so and runs."""
    task = limits_task(tmp_path / "tasks", "true\n")
    refused = _without_cgroups(local, tmp_path / "tasks")
    assert refused.returncode == 2, refused.stderr
    assert "cannot enforce the tasks' memory_mb, cpus and pids" in refused.stderr
    assert 'local_limits = "warn"' in refused.stderr
    assert not local.output.exists() or not any(local.output.iterdir())
    warned = _without_cgroups(local, tmp_path / "tasks", "--set", 'sandbox.local_limits="warn"')
    assert warned.returncode == 0, warned.stderr
    assert "the limits are NOT enforced" in warned.stderr + warned.stdout
    [run_dir] = local.output.iterdir()
    [record] = read_records(run_dir)
    assert record["task"]["name"] == task.name and record["status"] == "completed"
    limits = record["sandbox"]["limits"]
    assert limits["mechanism"] is None and limits["memory_mb"] is None, limits
    assert "cgroup" in limits["problem"], limits
