"""Attacks on ``$HARNESS_AGENT_EXEC``: what it starts dies with it, and sees no verifier secret.

Each test is a native task whose verifier runs the agent's code through
``"$HARNESS_AGENT_EXEC" --timeout 5``, run through the real CLI on local, docker (runc) and
gVisor (``runsc``), and judged from outside the trial: the host's ``/proc`` (local) or the
engine's process list of the container (``docker top``), and the run dir.
"""

from __future__ import annotations

import json
import secrets
import threading
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def _evidence_text(run: Any) -> str:
    assert run.run_dir is not None
    return "\n".join(
        p.read_bytes().decode("utf-8", "replace")
        for p in sorted(run.run_dir.rglob("*"))
        if p.is_file() and not p.is_symlink()
    )


def _add_verifier_env(task: Path, env: dict[str, str]) -> None:
    toml = task / "task.toml"
    pairs = ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())
    text = toml.read_text()
    assert "[verifier]\n" in text
    toml.write_text(text.replace("[verifier]\n", f"[verifier]\nenv = {{ {pairs} }}\n", 1))


class _ProcessSampler:
    """Samples, from outside the trial, the command lines of the trial's processes.

    Local: the host's ``/proc`` (every process of the trial's namespaces is there). Docker
    (runc): ``docker top`` of the trial's container (the engine asks runc, not the trial).
    """

    def __init__(self, backend: str, any_cli: Any, task_name: str, request: Any) -> None:
        self.samples: list[list[str]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._client = None
        #: gVisor's processes are not the host's, and ``docker top`` fails on runsc: there
        #: the root verifier's own listing of the container is the view.
        self.watching = backend != "runsc"
        if backend != "local":
            self._client = request.getfixturevalue("client")
        self._label = f"org.harness.task={task_name}"
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> _ProcessSampler:
        if self.watching:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self.watching:
            self._thread.join(timeout=30)

    def _sample(self) -> list[str]:
        if self._client is None:
            found = []
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit():
                    try:
                        raw = (entry / "cmdline").read_bytes()
                        state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                    except OSError:
                        continue
                    if state != "Z":
                        found.append(raw.replace(b"\0", b" ").decode("utf-8", "replace"))
            return found
        lines = []
        for summary in self._client.api.containers(filters={"label": [self._label]}):
            try:
                top = self._client.api.top(summary["Id"])
            except Exception as exc:  # the container may stop between list and top
                self.errors.append(repr(exc))
                continue
            titles = top.get("Titles") or []
            col = titles.index("CMD") if "CMD" in titles else len(titles) - 1
            lines.extend(str(row[col]) for row in top.get("Processes") or [])
        return lines

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(self._sample())
            except Exception as exc:
                self.errors.append(repr(exc))
            self._stop.wait(0.2)


def test_what_agent_exec_started_dies_with_it_whatever_it_detached(
    backend: str, any_cli: Any, sec: Any, tmp_path: Path, request: Any
) -> None:
    """Attack: agent code run by the verifier detaches workers that answer after 7 s.

    The verifier runs the agent's ``worker.sh`` with ``--timeout 4``; the script starts a
    setsid, a double-forked, a nohup and a non-dumpable double-forked worker, each of
    which waits 10 s and then writes the answer the verifier checks 10 s after the command
    returned, and itself sleeps past the timeout. (The 6 s between the timeout and the
    workers' write keep a kill that a loaded machine delays from passing for an escape;
    the verifier prints how long the command took, to tell the two apart.) From outside:
    while the verifier's checkpoint process runs (after the command returned) no worker is
    alive; the workers were seen before (the sampler can see them); the reward is 0 and the
    answer is the agent's own.
    """
    tag = secrets.token_hex(5)
    worker, checkpoint = f"worker-{tag}", f"checkpoint-{tag}"
    script = rf"""
ws=$(pwd)
job="sleep 10; echo right > '$ws/answer.txt'"
setsid bash -c "$job" {worker} </dev/null >/dev/null 2>&1 &
( ( bash -c "$job" {worker} </dev/null >/dev/null 2>&1 & ) & )
nohup bash -c "$job" {worker} </dev/null >/dev/null 2>&1 &
WS="$ws" python3 - {worker} <<'PY' </dev/null >/dev/null 2>&1
import ctypes, os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
        time.sleep(10)
        with open(os.path.join(os.environ["WS"], "answer.txt"), "w") as fh:
            fh.write("right\n")
    os._exit(0)
PY
sleep 30
"""
    attack = (
        'echo wrong > "$HARNESS_WORKSPACE/answer.txt"\n'
        f"cat > \"$HARNESS_WORKSPACE/worker.sh\" <<'SH'\n{script}\nSH\n"
    )
    test_sh = (
        'cd "$HARNESS_WORKSPACE"\n'
        "t0=$(date +%s%N)\n"
        '"$HARNESS_AGENT_EXEC" --timeout 4 -- bash worker.sh; echo "exec-status=$?"\n'
        'echo "exec-took-ms=$(( ($(date +%s%N) - t0) / 1000000 ))"\n'
        # What the container holds right after the command (a root verifier sees all of it).
        "for p in /proc/[0-9]*; do\n"
        "  echo \"PS $(awk '/^Uid:/ {print $2}' $p/status) $(tr '\\0' ' ' < $p/cmdline)\"\n"
        "done\n"
        f"(exec -a {checkpoint} sleep 10)\n"
        'ok=0; [ "$(cat answer.txt)" = right ] && ok=1\n'
        'echo "$ok" > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
    )
    name = sec.unique("exec-detach")
    task = sec.write_task(
        tmp_path / "tasks", name, attack=attack, test_sh=test_sh, verifier_timeout=60
    )
    with _ProcessSampler(backend, any_cli, name, request) as sampler:
        run = any_cli.run([task], timeout=180)
    assert run.code == 0, run
    record = run.by_task(name)
    assert record["status"] == "completed", record["errors"]
    stdout = (run.evidence(record) / "verifier" / "test-stdout.txt").read_text()
    assert "exec-status=124" in stdout, stdout  # the command ran until its timeout
    if backend != "local":
        # The root verifier saw every process of the container right after the command.
        listing = [line.split(" ", 2)[1:] for line in stdout.splitlines() if line.startswith("PS ")]
        assert any("test.sh" in cmd for _uid, cmd in listing), listing
        agent_uid = str(record["sandbox"]["uid"])
        left = [cmd for uid, cmd in listing if uid == agent_uid or worker in cmd]
        assert left == [], f"processes of the agent outlived $HARNESS_AGENT_EXEC: {left}"
    if sampler.watching:
        workers_seen = [s for s in sampler.samples if any(worker in c for c in s)]
        assert workers_seen, f"the sampler never saw a worker: {sampler.errors[:3]}"
        assert any(any(checkpoint in c for c in s) for s in sampler.samples), sampler.errors
        overlap = [
            [c for c in s if worker in c]
            for s in sampler.samples
            if any(checkpoint in c for c in s) and any(worker in c for c in s)
        ]
        assert overlap == [], f"workers outlived $HARNESS_AGENT_EXEC: {overlap[:2]}"
    took = [line for line in stdout.splitlines() if line.startswith("exec-took-ms=")]
    assert record["reward"] == 0, f"a detached worker wrote the answer after the command {took}"
    assert (run.evidence(record) / "workspace" / "answer.txt").read_text().strip() == "wrong"


SNOOP = r"""
import glob, json, os, sys
name = sys.argv[1]
found = {"hits": [], "own": os.environ.get(name), "pids": 0}
for entry in glob.glob("/proc/[0-9]*"):
    found["pids"] += 1
    for what in ("environ", "cmdline"):
        try:
            data = open(entry + "/" + what, "rb").read().decode("utf-8", "replace")
        except OSError:
            continue
        for item in data.split("\0"):
            if item.startswith(name + "="):
                found["hits"].append(entry + "/" + what)
                print("STOLEN " + item.split("=", 1)[1])
if found["own"]:
    print("STOLEN " + found["own"])
print("SNOOP " + json.dumps(found))
"""


def test_agent_exec_code_never_sees_the_verifier_env(
    backend: str, any_cli: Any, sec: Any, tmp_path: Path
) -> None:
    """Attack: agent code run through $HARNESS_AGENT_EXEC hunts for ``[verifier].env``.

    The task's ``[verifier].env`` holds the expected answer. While the verifier waits for
    it, the agent's snoop scans every ``/proc/*/environ`` and ``cmdline`` it can see for the
    variable, and its own environment; it prints what it stole, and the verifier pays
    reward 1 for the right answer. From outside: the reward is 0 and the canary is nowhere
    in the run dir. On local and runc the snoop ran and found the variable in no process
    and not in its own environment; under gVisor, where any process reads any environ,
    the command is refused (exit 125, the reason on the verifier's stderr).
    """
    canary = f"ANSWER-{secrets.token_hex(12)}"
    var = "HIDDEN_EXPECTED_ANSWER"
    attack = f"cat > \"$HARNESS_WORKSPACE/snoop.py\" <<'PY'\n{SNOOP}\nPY\n"
    test_sh = (
        'cd "$HARNESS_WORKSPACE"\n'
        f'out=$("$HARNESS_AGENT_EXEC" --timeout 5 -- python3 snoop.py {var}); status=$?\n'
        'echo "exec-status=$status"; echo "$out" | grep "^SNOOP "\n'
        'ok=0; echo "$out" | grep -qx "STOLEN $' + var + '" && ok=1\n'
        'echo "$ok" > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
    )
    name = sec.unique("exec-env")
    task = sec.write_task(tmp_path / "tasks", name, attack=attack, test_sh=test_sh)
    _add_verifier_env(task, {var: canary})
    run = any_cli.run([task], timeout=150)
    assert run.code == 0, run
    record = run.by_task(name)
    assert record["status"] == "completed", record["errors"]
    assert record["reward"] == 0, "the agent's code read the expected answer"
    assert canary not in _evidence_text(run)
    verifier = run.evidence(record) / "verifier"
    stdout = (verifier / "test-stdout.txt").read_text()
    if backend == "runsc":
        stderr = (verifier / "test-stderr.txt").read_text()
        assert "exec-status=125" in stdout and "SNOOP " not in stdout, stdout
        assert "gVisor" in stderr and var in stderr, stderr
        return
    assert "SNOOP " in stdout, f"the snoop did not run: {stdout}"
    report = json.loads(stdout.split("SNOOP ", 1)[1].splitlines()[0])
    assert report["pids"] >= 1, report  # it did see /proc
    assert report["hits"] == [], f"the verifier's env was visible: {report}"
    assert report["own"] is None, "the command inherited the verifier's env"


@pytest.mark.docker
def test_a_verifier_of_the_agents_uid_gets_no_agent_commands_with_a_verifier_env(
    cli: Any, sec: Any, tmp_path: Path
) -> None:
    """Attack: the verifier runs as the agent's own uid, whose code could read its environ.

    ``[verifier].user`` is the agent's uid (65532) and ``[verifier].env`` holds the answer.
    Same uid means Linux lets the agent's code read the verifier's ``/proc/<pid>/environ``,
    so every agent command is refused (exit 125): reward 0, the canary nowhere in the run.
    """
    canary = f"ANSWER-{secrets.token_hex(12)}"
    var = "HIDDEN_EXPECTED_ANSWER"
    attack = f"cat > \"$HARNESS_WORKSPACE/snoop.py\" <<'PY'\n{SNOOP}\nPY\n"
    test_sh = (
        'cd "$HARNESS_WORKSPACE"\n'
        f'out=$("$HARNESS_AGENT_EXEC" --timeout 5 -- python3 snoop.py {var}); status=$?\n'
        'echo "exec-status=$status"\n'
        'ok=0; echo "$out" | grep -qx "STOLEN $' + var + '" && ok=1\n'
        'echo "$ok" > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
    )
    name = sec.unique("exec-same-uid")
    task = sec.write_task(tmp_path / "tasks", name, attack=attack, test_sh=test_sh)
    _add_verifier_env(task, {var: canary})
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("[verifier]\n", '[verifier]\nuser = "65532"\n', 1))
    run = cli.run([task], timeout=150)
    assert run.code == 0, run
    record = run.by_task(name)
    assert record["status"] == "completed", record["errors"]
    assert record["reward"] == 0
    assert canary not in _evidence_text(run)
    verifier = run.evidence(record) / "verifier"
    assert "exec-status=125" in (verifier / "test-stdout.txt").read_text()
    assert var in (verifier / "test-stderr.txt").read_text()
