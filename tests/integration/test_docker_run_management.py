"""Run management on the docker backend, through the real CLI: Ctrl-C and ``kill -9``.

Ctrl-C: exit 130, the running trials recorded ``cancelled``, and no container or volume
labelled with the run left. ``kill -9`` of the harness leaves its containers behind (the
test checks that it does); the next ``--resume`` removes them by the run's label and ends
with every planned trial exactly once.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker.errors
import pytest
from support.docker import docker_client, require_image

pytestmark = pytest.mark.docker

HARNESS = Path(sys.executable).with_name("harness")
RUN_LABEL = "org.harness.run"


@pytest.fixture
def client() -> Any:
    engine = docker_client()
    require_image(engine)
    return engine


def labelled(client: Any, run: str, *, warm: bool = True) -> dict[str, list[str]]:
    """Containers and volumes of the run (the shared runtime volume is never run-labelled).

    Containers as the engine lists them (one removed meanwhile must not fail the listing);
    ``warm=False`` leaves out those made ahead that no trial has taken yet.
    """
    filters = {"label": ["org.harness.managed=1", f"{RUN_LABEL}={run}"]}
    containers = [
        str((c.get("Names") or ["?"])[0]).lstrip("/")
        for c in client.api.containers(all=True, filters=filters)
        if warm or (c.get("Labels") or {}).get("org.harness.trial") != "warm"
    ]
    return {
        "containers": containers,
        "volumes": [str(v.name) for v in client.volumes.list(filters=filters)],
    }


def remove_run_containers(client: Any, run: str) -> None:
    """Whatever a failed test left of the run ``run``."""
    for entry in client.api.containers(all=True, filters={"label": f"{RUN_LABEL}={run}"}):
        try:
            client.api.remove_container(entry["Id"], force=True, v=True)
        except docker.errors.NotFound:
            pass


def make_tasks(root: Path, count: int, seconds: int) -> Path:
    for i in range(count):
        task = root / f"d{i}"
        (task / "tests").mkdir(parents=True)
        (task / "task.toml").write_text(
            f'[task]\nname = "dockerrun/d{i}"\n[agent]\ntimeout_sec = 120\n'
            "[verifier]\ntimeout_sec = 30\n"
        )
        (task / "instruction.md").write_text(f"sleep {seconds}\n")
        (task / "tests" / "test.sh").write_text('echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n')
    return root


def start(tmp_path: Path, *args: str | Path) -> tuple[subprocess.Popen[bytes], Path]:
    err = tmp_path / f"stderr-{secrets.token_hex(3)}.txt"
    with err.open("wb") as stderr:
        proc = subprocess.Popen(
            [str(HARNESS), *map(str, args)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"},
            start_new_session=True,
        )
    return proc, err


def finish(proc: subprocess.Popen[bytes], err: Path, timeout: float = 120) -> tuple[int, str]:
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"harness did not finish within {timeout:g}s\n{err.read_text()}")
    return code, err.read_text()


def wait_for(condition: Callable[[], bool], what: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while not condition():
        assert proc.poll() is None, f"harness exited ({proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def records(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "trials.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def running_agents(run_dir: Path) -> int:
    try:
        status = json.loads((run_dir / "status.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return 0
    return sum(1 for t in status.get("running", []) if t["phase"] == "execute")


def run_args(tasks: Path, out: Path, name: str) -> list[str | Path]:
    return ["run", tasks, "--sandbox", "docker", "--agent", "command", "--agent-cmd",
            "bash {instruction_file}", "-j", "2", "-o", out, "--run-name", name,
            "--display", "plain"]  # fmt: skip


def test_ctrl_c_exits_130_and_leaves_no_container(client: Any, tmp_path: Path) -> None:
    name = f"dockerrun-int-{secrets.token_hex(4)}"
    tasks = make_tasks(tmp_path / "tasks", 3, seconds=60)
    run_dir = tmp_path / "runs" / name
    proc, err = start(tmp_path, *run_args(tasks, tmp_path / "runs", name))
    try:
        wait_for(lambda: running_agents(run_dir) == 2, "two agents running", proc)
        # The two trials' own; the third trial's may already wait warm (drained by Ctrl-C).
        assert len(labelled(client, name, warm=False)["containers"]) == 2
        os.killpg(proc.pid, signal.SIGINT)
        code, stderr = finish(proc, err)
    finally:
        left = labelled(client, name)
        remove_run_containers(client, name)
    assert code == 130, stderr
    assert left == {"containers": [], "volumes": []}, f"Ctrl-C leaked {left}"
    statuses = sorted(r["status"] for r in records(run_dir))
    assert statuses == ["cancelled", "cancelled"], statuses
    assert json.loads((run_dir / "status.json").read_text())["state"] == "interrupted"


def test_kill_9_leaks_containers_and_resume_removes_them(client: Any, tmp_path: Path) -> None:
    name = f"dockerrun-int-{secrets.token_hex(4)}"
    tasks = make_tasks(tmp_path / "tasks", 3, seconds=3)
    run_dir = tmp_path / "runs" / name
    proc, err = start(tmp_path, *run_args(tasks, tmp_path / "runs", name))
    try:
        wait_for(lambda: running_agents(run_dir) == 2, "two agents running", proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        leaked = labelled(client, name)
        assert leaked["containers"], "kill -9 left no container (the test did not bite)"

        resumed, err = start(tmp_path, "run", "--resume", run_dir, "--display", "plain")
        code, stderr = finish(resumed, err)
        assert code == 0, stderr
        assert "leaked sandbox object(s) of the run" in stderr
        for container in leaked["containers"]:
            assert container in stderr
    finally:
        left = labelled(client, name)
        remove_run_containers(client, name)
    assert left == {"containers": [], "volumes": []}, left
    final = records(run_dir)
    assert len(final) == 3 and len({r["id"] for r in final}) == 3
    assert all(r["status"] == "completed" for r in final), [r["errors"] for r in final]


def test_an_object_the_run_cannot_remove_is_reported_apart_from_what_it_removed(
    client: Any, tmp_path: Path
) -> None:
    """Attack: a network labelled with the run that a foreign container keeps in use.

    Its removal fails at the run's end. The failure is never counted as removed: the
    run says it could not remove it and how to, the log names it, and once the container
    is gone ``harness sandbox cleanup --run`` removes it.
    """
    name = f"dockerrun-int-{secrets.token_hex(4)}"
    network = client.networks.create(
        f"held-{name}", labels={"org.harness.managed": "1", RUN_LABEL: name}
    )
    holder = client.containers.run(
        "harness/base:bookworm", ["sleep", "300"], detach=True, network=network.name,
        labels={"test.holder": name},
    )  # fmt: skip
    try:
        tasks = make_tasks(tmp_path / "tasks", 1, seconds=0)
        proc, err = start(tmp_path, *run_args(tasks, tmp_path / "runs", name))
        code, stderr = finish(proc, err)
        assert code == 0, stderr
        assert "could not remove 1 sandbox object(s) of the run" in stderr, stderr
        assert f"`harness sandbox cleanup --run {name}` removes them" in stderr
        assert "leaked sandbox object(s)" not in stderr, stderr
        # The run's start tried it first (a dead invocation's leftover, to it), and said so.
        assert f"could not remove: network held-{name}" in stderr, stderr
        log = (tmp_path / "runs" / name / "eval.log").read_text()
        assert f"cleanup failed: network held-{name}" in log, log
        assert "removed leaked sandbox objects" not in log, log
        holder.remove(force=True)
        done = subprocess.run(
            [str(HARNESS), "sandbox", "cleanup", "--run", name, "--no-temp"],
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert "1 network(s)" in done.stdout, done.stdout
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            holder.remove(force=True)
        remove_run_containers(client, name)
        for left in client.networks.list(names=[f"held-{name}"]):
            left.remove()
    assert not client.networks.list(names=[f"held-{name}"])
