"""A shared-mode judge is a user of its own: a process of the solver's uid, started from
outside while the judge runs in the solver's sandbox, can neither read the judge's private
dir nor write its verdict; the same commands as the judge's uid can (the control). Local
sandbox (entering the judge's mount namespace as the solver's uid) and docker (an exec as
the solver's uid)."""

from __future__ import annotations

import glob
import json
import os
import secrets
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker.errors
import psutil
import pytest
from support.docker import docker_client
from support.episodes import EXAMPLES, HELLO, RUN_NAME, episode_config, only, run_dir

import harness
from harness.episodes import episode_of
from sandbox.run_tmp import run_tmp_dir

#: The judge: writes its verdict and a private note, says where, waits for the attack.
JUDGE = (
    'd=$(dirname "$HARNESS_VERDICT_FILE"); echo {{{{\\"score\\": 1}}}} > "$HARNESS_VERDICT_FILE"; '
    'echo {secret} > "$d/private.txt"; id -u > /tmp/judge-{tok}; echo "$d" > /tmp/ready-{tok}; '
    "for i in $(seq 300); do [ -e /tmp/attacked-{tok} ] && break; sleep 0.1; done"
)
#: Run as the solver's uid (the attack) and as the judge's (the control).
ATTACK = "cat {dir}/private.txt; echo forged > {dir}/{target} && echo WROTE; ls {dir}; true"
#: Only as the solver's uid, which left its HOME mode 0777: swap the judge's dir for its own.
SWAP = "mv {dir} {dir}.gone && mkdir {dir} && echo SWAPPED; true"

#: Runs the attack (or another script) in the judge's sandbox as a uid, on the judge's dir.
Attack = Callable[..., str]
#: Set while the run is going (a run that ended early ends the wait).
_RUNNING = threading.Event()


def _wait(found: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _RUNNING.is_set():
        value = found()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _local_attack(tok: str) -> tuple[Attack, Callable[[str], str], Callable[[], None]]:
    """(run as a uid, read a /tmp file, release the judge) in the judge's local sandbox."""
    ready = _wait(
        lambda: glob.glob(f"{run_tmp_dir(RUN_NAME)}/harness-trial-*/fs/tmp/ready-{tok}"),
        "the judge",
    )
    fs = Path(ready[0]).parents[1]
    verdict_dir = (fs / "tmp" / f"ready-{tok}").read_text().strip()
    judge_uid = int((fs / "tmp" / f"judge-{tok}").read_text())
    pid = next(p.pid for p in psutil.process_iter(["uids"]) if p.info["uids"].real == judge_uid)

    def run_as(uid: int, target: str, attack: str = ATTACK) -> str:
        argv = ["nsenter", "-t", str(pid), "-m", "--", "setpriv", f"--reuid={uid}"]
        argv += [f"--regid={uid}", "--clear-groups", "--", "sh", "-c"]
        script = attack.format(dir=verdict_dir, target=target)
        done = subprocess.run([*argv, script], capture_output=True, text=True, timeout=30)
        return done.stdout + done.stderr

    def release() -> None:
        (fs / "tmp" / f"attacked-{tok}").write_text("")

    return run_as, lambda name: (fs / "tmp" / name).read_text(), release


def _docker_attack(tok: str) -> tuple[Attack, Callable[[str], str], Callable[[], None]]:
    """The same in the judge's container, by ``docker exec``."""
    client = docker_client()

    def container() -> Any:
        # Only this run's solver containers (the engine is shared: no one else's is touched).
        for found in client.containers.list(filters={"label": f"org.harness.run={RUN_NAME}"}):
            if not found.labels.get("org.harness.trial", "").endswith("-solver"):
                continue
            try:
                if found.exec_run(["test", "-e", f"/tmp/ready-{tok}"]).exit_code == 0:
                    return found
            except docker.errors.APIError:  # it stopped meanwhile
                continue
        return None

    box = _wait(container, "the judge's container")

    def read(name: str) -> str:
        return str(box.exec_run(["cat", f"/tmp/{name}"]).output.decode())

    verdict_dir = read(f"ready-{tok}").strip()

    def run_as(uid: int, target: str, attack: str = ATTACK) -> str:
        script = attack.format(dir=verdict_dir, target=target)
        output = ""
        for _ in range(3):
            # Every script prints something; the engine (20.10) can lose a short exec's
            # output under load. A repeat cannot hide a swap: the test checks it as root.
            output = str(box.exec_run(["sh", "-c", script], user=f"{uid}:{uid}").output.decode())
            if output:
                break
        return output

    def release() -> None:
        box.exec_run(["touch", f"/tmp/attacked-{tok}"])

    return run_as, read, release


@pytest.mark.root
@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_a_solver_uid_cannot_reach_the_shared_judges_dir(tmp_path: Path, backend: str) -> None:
    if backend == "docker":
        docker_client()  # the engine, or the test fails (CI) or skips saying why
    tok, secret = secrets.token_hex(6), "JUDGECANARY" + secrets.token_hex(8)
    judge = JUDGE.format(secret=secret, tok=tok)
    config = episode_config(
        tmp_path,
        EXAMPLES / "hello-file",
        f'{HELLO}; id -u > /tmp/solver-{tok}; chmod 0777 "$HOME"',
        {
            "id": "judge",
            "mode": "shared",
            "roles": {"judge": {"name": "command", "cmd": f"bash -c '{judge}'"}},
        },
        backend=backend,
    )
    outcome: dict[str, Any] = {}

    def run() -> None:
        _RUNNING.set()
        try:
            outcome["run"] = harness.run(config)
        finally:
            _RUNNING.clear()

    runner = threading.Thread(target=run)
    runner.start()
    try:
        run_as, read, release = (_local_attack if backend == "local" else _docker_attack)(tok)
        solver_uid, judge_uid = int(read(f"solver-{tok}")), int(read(f"judge-{tok}"))
        attacked = run_as(solver_uid, "verdict.json")
        swapped = run_as(solver_uid, "", SWAP)
        moved = run_as(0, "", "test -e {dir}.gone && echo MOVED || echo IN_PLACE")
        control = run_as(judge_uid, "probe.txt")
    finally:
        if "release" in locals():
            release()
        runner.join(120)
    assert solver_uid != judge_uid and solver_uid > 0 and judge_uid > 0
    # The control: the judge's own uid reaches its dir (so the paths are right).
    assert secret in control and "WROTE" in control and "verdict.json" in control, control
    # The attack: denied both ways.
    assert secret not in attacked and "WROTE" not in attacked, attacked
    assert "ermission denied" in attacked, attacked
    assert "SWAPPED" not in swapped and "ermission denied" in swapped, swapped
    assert "IN_PLACE" in moved, moved  # from outside the solver's uid
    # From outside: the recorded verdict is the one the judge wrote, not the solver's.
    record = only(outcome["run"])
    episode = episode_of(record)
    assert episode is not None and episode.ok, record
    judge_trace = next(t for t in episode.traces if t.role == "judge")
    kept = run_dir(config) / str(judge_trace.evidence_dir) / "verdict.json"
    assert json.loads(kept.read_text()) == {"score": 1}
    assert record.reward == 1.0
    solver_trace = next(t for t in episode.traces if t.role == "solver")
    assert (judge_trace.sandbox or {})["uid"] == judge_uid
    assert (solver_trace.sandbox or {})["uid"] == solver_uid
    assert os.path.exists(run_dir(config))
