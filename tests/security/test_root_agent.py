"""A root agent (``--agent-root allow`` on runc, ``isolated`` on gVisor) attacks its trial.

The agent is uid 0 with only ``ROOT_AGENT_CAPS``. One trial per runtime runs the whole
battery as the agent's script (docs/security.md, "A root agent"): read the real key and
the grader's files, plant a reward and test files, leave processes behind (setsid, a
double fork, a ``start-stop-daemon`` daemon), signal and ptrace the supervisor, escape
with unshare/mount/chroot/nsenter/mknod, write through every read-only mount, plant a
setuid-root binary. Judged from outside: the record (reward, posture, survivors), the run
dir (no canary anywhere), the host's temp dir (no marker), the evidence's file modes.
The attack's own loot file is only what it could reach, read as evidence.

Plus the rule's edges: ``isolated`` on runc is refused before anything runs (exit 2, no
container), ``--agent-root`` on the local sandbox likewise, and under ``never`` a task
whose ``[agent].user`` is root runs unprivileged, named in the run's one line.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any

import pytest

from sandbox.docker.container import ROOT_AGENT_CAPS
from sandbox.inside.confine import CAP_NUMBERS

ATTACK = r"""
set +e
L=/app/loot.txt
note() { echo "$1=$2" >> $L; }
id >> $L
# The real key and the grader's files: whatever is readable goes into the workspace.
cat /proc/1/environ /proc/self/environ > /app/environ.txt 2>/dev/null
for p in /proc/[0-9]*; do cat $p/environ; echo; done > /app/all-environ.txt 2>/dev/null
cat /proc/1/mem > /dev/null 2>&1; note proc1_mem $?
# Listing /proc/1/fd is root's (the dir is root's), following an fd is ptrace's.
n=0; for f in /proc/1/fd/*; do readlink "$f" > /dev/null 2>&1 && n=$((n+1)); done
note proc1_fd_links $n
n=0; for f in /proc/1/fd/*; do timeout 2 head -c1 "$f" > /dev/null 2>&1 && n=$((n+1)); done
note proc1_fd_opened $n
cp -r /tests /solution /logs /trial /opt/harness-gateway /app/grabbed/ 2>/dev/null
mkdir -p /app/grabbed && for d in /tests /solution /logs /trial /opt/harness-gateway; do
  cp -r "$d" /app/grabbed/ 2>/dev/null; done
grep -rIaho 'GRADER-CANARY-[0-9a-f]*' / --exclude-dir=proc --exclude-dir=sys \
  --exclude-dir=dev --exclude-dir=app > /app/grep.txt 2>/dev/null
# Plant a reward and grader files for the verifier to find.
mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt; note plant_reward $?
echo planted > /tests/planted.sh; note plant_tests $?
mkdir -p /trial/grader && echo planted > /trial/grader/planted; note plant_grader $?
ln -sf /app/leak /trial/logs/verifier.stdout; note link_log $?
# Processes that try to outlive the phase.
setsid sleep 1001 > /dev/null 2>&1 < /dev/null &
( ( sleep 1002 > /dev/null 2>&1 < /dev/null & ) & )
nohup sleep 1003 > /dev/null 2>&1 < /dev/null &
start-stop-daemon --start --background --exec /bin/sleep -- 1004; note daemon $?
python3 -c 'import os,time
if os.fork(): os._exit(0)
os.setsid()
if os.fork(): os._exit(0)
time.sleep(1005)' &
# The supervisor: signals, ptrace.
for s in SIGNALS; do kill -$s 1 2>/dev/null; note kill_$s $?; done
python3 -c 'import ctypes,os
libc=ctypes.CDLL(None,use_errno=True)
r=libc.ptrace(16,1,0,0)
print("ptrace=%d errno=%d" % (r, ctypes.get_errno()))' >> $L
# Escapes.
unshare -m true 2>/dev/null; note unshare_mount $?
unshare -U true 2>/dev/null; note unshare_user $?
unshare -p -f true 2>/dev/null; note unshare_pid $?
mount -t tmpfs none /mnt 2>/dev/null; note mount_tmpfs $?
chroot / true 2>/dev/null; note chroot $?
nsenter -t 1 -m true 2>/dev/null; note nsenter $?
mknod /tmp/sda b 8 0 2>/dev/null; note mknod $?
# Write the host through every read-only mount.
for m in /opt/harness /opt/harness-python /opt/harness-tools /opt/harness-gateway; do
  touch "$m/MARKER" 2>/dev/null; note "write_$m" $?
  mount -o remount,rw "$m" 2>/dev/null; note "remount_$m" $?
done
# A setuid-root shell for whoever copies the workspace.
cp /bin/bash /app/suid && chmod 4755 /app/suid; note suid $?
chown 4321:4321 /app/suid; note chown $?
echo done > /app/done.txt
"""

TEST_SH = r"""
L="$HARNESS_VERIFIER_DIR"
# Globs, not ls: gVisor's statx of a tmpfs mount's root fails (EINVAL) in this version.
shopt -s nullglob dotglob
pre=$(cd "$L" && echo *)
tests=$(cd /tests && for f in *; do echo "$f"; done | sort | tr '\n' ' ')
# (the pattern is not its own match: grep's cmdline is scanned too)
alive=$(for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done |
  grep -c 'slee[p] 100')
printf 'pre=%s\ntests=%s\nalive=%s\n' "$pre" "$tests" "$alive" > "$L/seen.txt"
if [ -z "$pre" ] && [ "$tests" = "secret.txt test.sh " ] && [ "$alive" = 0 ]; then
  echo 1 > "$L/reward.txt"
else
  echo 0 > "$L/reward.txt"
fi
"""


def _signals(runtime: str | None) -> list[str]:
    """What the agent sends the supervisor: every catchable kind, and on runc KILL/STOP."""
    catchable = ["INT", "TERM", "HUP", "USR1", "USR2", "QUIT", "ALRM", "SEGV", "RTMIN"]
    return catchable + ([] if runtime == "runsc" else ["KILL", "STOP"])


def _loot(path: Path) -> dict[str, str]:
    assert path.is_file(), "the attack left no loot (did it run?)"
    found = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and " " not in key:
            found[key] = value
    return found


def _remove_runs(client: Any, sec: Any, cli: Any) -> None:
    """Remove what the runs of ``cli`` left on the engine (by their run labels only)."""
    if not cli.output.exists():
        return
    for run_dir in cli.output.iterdir():
        filters = {"label": [f"{sec.MANAGED}=1", f"{sec.RUN_LABEL}={run_dir.name}"]}
        for container in client.containers.list(all=True, filters=filters):
            container.remove(force=True, v=True)


@pytest.mark.docker
def test_a_root_agent_keeps_every_guarantee(
    client: Any, cli: Any, sec: Any, tmp_path: Path, docker_runtime: str | None
) -> None:
    """runc with ``--agent-root allow``; gVisor with ``--agent-root isolated``."""
    runtime = docker_runtime
    rule = "isolated" if runtime == "runsc" else "allow"
    key = f"sk-canary-{secrets.token_hex(16)}"
    grader = f"GRADER-CANARY-{secrets.token_hex(16)}"
    marker = f"MARKER-{secrets.token_hex(8)}"
    name = sec.unique("rootagent")
    task = sec.write_task(
        tmp_path / "tasks",
        name,
        # gVisor delivers SIGKILL and SIGSTOP to pid 1 (Linux does not): see the next test.
        attack=ATTACK.replace("MARKER", marker).replace("SIGNALS", " ".join(_signals(runtime))),
        test_sh=TEST_SH,
        agent_timeout=60,
        verifier_timeout=30,
        tests_files={"secret.txt": grader},
        solution_files={"solve.sh": f"#!/bin/bash\necho {grader}\n"},
    )
    run = cli.run([task], env={"OPENAI_API_KEY": key}, timeout=300, extra=["--agent-root", rule])
    assert run.code == 0, run
    assert f"--agent-root {rule}" in run.stderr + run.stdout, run
    record = run.by_task(name)
    evidence = run.evidence(record)
    ws = evidence / "workspace"
    assert (ws / "done.txt").is_file(), f"the attack did not finish: {run}"
    loot = _loot(ws / "loot.txt")

    # It really was root, with the root agent's capabilities and no more, filtered.
    posture = record["posture"]
    assert posture["uid"] == [0, 0, 0] and posture["root_agent"] is True, posture
    mask = sum(1 << CAP_NUMBERS[n] for n in ROOT_AGENT_CAPS)
    for field in ("CapBnd", "CapPrm", "CapEff"):
        assert int(posture["caps"][field], 16) & ~mask == 0, posture["caps"]
    assert posture["no_new_privs"] == "1" and posture["seccomp"] == "2"
    boundary = "gvisor" if runtime == "runsc" else "none"
    assert posture["identity"] == {
        "rule": rule,
        "wanted": "root",
        "wanted_root": True,
        "user": "root",
        "uid": 0,
        "gid": 0,
        "boundary": boundary,
    }
    assert loot.get("chown") == "0", loot  # root's own powers work

    # No key, no grader file: in no file of the run dir (the loot included).
    for canary in (key, grader):
        assert not sec.files_containing(run.run_dir, canary), f"{canary[:14]} leaked"

    # Nothing planted reached the verifier, no process outlived the phase: the verifier
    # (trusted) says so with reward 1, and the record lists the processes it killed.
    seen = (evidence / "verifier" / "seen.txt").read_text()
    assert record["reward"] == 1.0, seen
    survivors = [e for e in record["events"] if e["type"] == "survivors"]
    assert survivors and survivors[0]["phase"] == "agent", record["events"]

    # The supervisor survived every signal and refused ptrace (the trial completed).
    assert record["status"] == "completed", record
    assert "ptrace=-1" in (ws / "loot.txt").read_text(), loot
    assert loot["proc1_mem"] != "0", loot
    if runtime != "runsc":
        assert loot["proc1_fd_links"] == "0" and loot["proc1_fd_opened"] == "0", loot
    # gVisor lets root open pid 1's fds: what that gives is the next test's attack.

    # Every escape failed; nothing was written through a read-only mount.
    for attempt in ("unshare_mount", "unshare_user", "unshare_pid", "mount_tmpfs", "nsenter"):
        assert loot[attempt] != "0", (attempt, loot)
    assert loot["chroot"] != "0" and loot["mknod"] != "0", loot
    for mount in ("/opt/harness", "/opt/harness-python", "/opt/harness-tools"):
        assert loot[f"write_{mount}"] != "0" and loot[f"remount_{mount}"] != "0", loot
    written = [p for p in sec.every_file(cli.tmpdir) if marker in p.name]
    assert not written, written

    # The setuid-root binary it planted is evidence, never a setuid file on the host.
    assert loot["suid"] == "0", loot
    kept = ws / "suid"
    if kept.exists():
        assert not kept.stat().st_mode & (stat.S_ISUID | stat.S_ISGID), oct(kept.stat().st_mode)
        assert kept.stat().st_uid == os.getuid() or not kept.stat().st_mode & 0o111


FORGE = r"""
R='{"version": 1, "exit_code": 0, "signal": null, "timed_out": false, "posture": null,
 "error": null, "survivors": [], "killed": 0, "stdout_bytes": 0, "stderr_bytes": 0}'
R=$(echo $R)
for f in /proc/1/fd/*; do echo "$R" > "$f" 2>/dev/null; done
for i in 1 2 3 4 5 6 7 8 9 10; do sleep 1; cp -r /tests /app/tests$i 2>/dev/null; done
"""


@pytest.mark.docker
def test_under_gvisor_a_root_agent_at_the_supervisor_ends_its_trial_ungraded(
    client: Any, sec: Any, tmp_path: Path
) -> None:
    """gVisor lets a root agent SIGKILL pid 1 and open its fds (Linux does neither).

    One agent kills the supervisor: the container dies with it, before any test arrives.
    One writes a forged phase result into every fd of pid 1 (the supervisor's channel
    among them): the answer lacks its request's nonce, the harness stops trusting the
    channel, and the tests never arrive while the agent runs. Both: ``agent_error``
    (``SandboxDied``), never graded, the grader's canary nowhere (docs/security.md).
    """
    if "runsc" not in (client.info().get("Runtimes") or {}):
        pytest.fail("runtime runsc is not registered (docker/start-engine.sh does it)")
    grader = f"GRADER-CANARY-{secrets.token_hex(16)}"
    names = {sec.unique("root-kill1"): "kill -KILL 1\nsleep 5\n", sec.unique("root-forge"): FORGE}
    tasks = [
        sec.write_task(
            tmp_path / "tasks",
            name,
            attack=attack,
            test_sh='echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n',
            tests_files={"secret.txt": grader},
        )
        for name, attack in names.items()
    ]
    cli = sec.Cli(tmp_path, runtime="runsc")
    try:
        run = cli.run(tasks, timeout=240, extra=["--agent-root", "isolated", "--max-retries", "0"])
    finally:
        _remove_runs(client, sec, cli)
    for name in names:
        record = run.by_task(name)
        assert record["status"] == "agent_error" and record["reward"] in (None, 0.0), record
        assert any(e["type"] == "SandboxDied" for e in record["errors"]), record["errors"]
    forged = run.by_task(list(names)[1])
    assert "nonce" in json.dumps(forged["errors"]), forged["errors"]
    assert not sec.files_containing(run.run_dir, grader)


@pytest.mark.docker
def test_isolated_on_runc_is_refused_before_anything_runs(
    client: Any, sec: Any, tmp_path: Path
) -> None:
    info = client.info()
    security = " ".join(info.get("SecurityOptions") or [])
    assert "name=userns" not in security and "name=rootless" not in security, (
        "this engine remaps user namespaces: runc is a second boundary here"
    )
    name = sec.unique("isolated-runc")
    task = sec.write_task(tmp_path / "tasks", name, attack="echo ran > /app/ran\n")
    cli = sec.Cli(tmp_path)
    run = cli.run([task], extra=["--agent-root", "isolated"], timeout=120)
    assert run.code == 2, run
    assert "--runtime runsc" in run.stderr and "second boundary" in run.stderr, run
    assert run.records == []
    assert sec.labelled(client, f"{sec.TASK_LABEL}={name}")["containers"] == []


@pytest.mark.root
def test_the_local_sandbox_refuses_a_root_agent(sec: Any, tmp_path: Path) -> None:
    name = sec.unique("local-root")
    task = sec.write_task(tmp_path / "tasks", name, attack="echo ran > ran\n")
    run = sec.Cli(tmp_path, sandbox="local").run([task], extra=["--agent-root", "allow"])
    assert run.code == 2, run
    assert "no second boundary" in run.stderr and run.records == [], run


@pytest.mark.docker
def test_never_runs_a_root_task_unprivileged_and_names_it(
    client: Any, sec: Any, tmp_path: Path
) -> None:
    """The oracle runs as the agent would: unprivileged, named in the run's one line."""
    name = sec.unique("never-root")
    task = sec.write_task(
        tmp_path / "tasks",
        name,
        attack="unused: the oracle runs solution/solve.sh\n",
        solution_files={"solve.sh": "#!/bin/bash\nid -u > /app/uid-$RANDOM$RANDOM\n"},
    )
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("[agent]\n", '[agent]\nuser = "root"\n'))
    cli = sec.Cli(tmp_path)
    try:
        run = cli.run([task], agent="oracle", timeout=240)
    finally:
        _remove_runs(client, sec, cli)
    assert run.code == 0, run
    lines = [line for line in (run.stderr + run.stdout).splitlines() if "Harbor" in line]
    assert len(lines) == 1 and name in lines[0] and "--agent-root" in lines[0], run
    assert len(run.records) == 1, run
    for record in run.records:
        assert record["status"] == "completed", record
        (found,) = (run.evidence(record) / "workspace").glob("uid-*")
        uid = int(found.read_text())
        assert uid != 0 and record["posture"]["uid"] == [uid] * 3
        assert record["posture"]["dropped"] is True
        identity = record["posture"]["identity"]
        assert identity["rule"] == "never" and identity["wanted"] == "root"
        assert identity["wanted_root"] is True and identity["user"] is None
