"""``--executor ray`` on a real Ray cluster: a head node and a worker node on this machine.

The head has no CPUs, so every trial runs on the worker node (127.0.0.3) while the driver,
its gateway and its run dir stay on the head (127.0.0.2). Judged from outside: the run dir,
the records' node, the engine's containers, the nodes' dirs and the processes left.

The tests share one cluster and run in file order; the last ones kill the worker node and
start another.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import EXAMPLE_KEYS, EXAMPLES, RunningCli, make_task_dir, read_run_dir, start_cli
from support.docker import docker_client, require_image
from support.key_canary import CANARY_PREFIX, Upstream, process_memory_has
from support.ray_cluster import RayCluster

WORKER_IP = "127.0.0.3"
CONFORMANCE = Path(__file__).resolve().parents[1] / "conformance" / "harbor"
TEST_WHO = (
    '#!/bin/bash\n[ "$WHO" = driver ] && r=1 || r=0\necho $r > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
)
SLEEPER = "bash -c 'sleep {seconds}; echo done > $HARNESS_WORKSPACE/done.txt'"
TEST_DONE = (
    '#!/bin/bash\n[ -f "$HARNESS_WORKSPACE/done.txt" ] && r=1 || r=0\n'
    'echo $r > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    ray_cluster = RayCluster()
    try:
        ray_cluster.add_node(0)  # the head: the driver's node, no room for trials
        ray_cluster.add_node(2)  # the worker node
        yield ray_cluster
    finally:
        ray_cluster.stop()


def harness(cluster: RayCluster, *args: str | Path, timeout: float = 240) -> tuple[int, str]:
    running = start_harness(cluster, *args)
    result = running.wait(timeout)
    return result.code, result.stdout + result.stderr


def start_harness(cluster: RayCluster, *args: str | Path) -> RunningCli:
    assert cluster.address is not None
    return start_cli(
        "run",
        *args,
        "--executor",
        "ray",
        "--ray-address",
        cluster.address,
        "--display",
        "plain",
        env=cluster.env(),
    )


def wait_for(
    check: Callable[[], bool], what: str, running: RunningCli, timeout: float = 120
) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if running.proc.poll() is not None:
            result = running.wait(1)
            pytest.fail(f"the run ended before {what}:\n{result}")
        if time.monotonic() > deadline:
            running.kill()
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.3)


def running_in(run_dir: Path, phase: str) -> int:
    try:
        status = json.loads((run_dir / "status.json").read_text())
    except (OSError, ValueError):
        return 0
    return sum(1 for trial in status.get("running", []) if trial["phase"] == phase)


def node_dirs(run_name: str) -> list[Path]:
    """What the run keeps on a node: its task copies and scratch, its trial roots."""
    tmp = Path(tempfile.gettempdir())
    places = (tmp / f"harness-ray-{run_name}", tmp / f"harness-run-{run_name}")
    return [place for place in places if place.exists()]


def labelled(run_name: str) -> list[Any]:
    client = docker_client()
    return client.containers.list(all=True, filters={"label": f"org.harness.run={run_name}"})


def latest(run_dir: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in read_run_dir(run_dir).records}


def test_the_examples_run_on_the_worker_node_in_the_local_sandbox(
    cluster: RayCluster, tmp_path: Path
) -> None:
    out = tmp_path / "runs"
    code, output = harness(
        cluster, EXAMPLES, "--agent", "oracle", "-j", "2", "-o", out, "--run-name", "oracle"
    )
    assert code == 0, output
    code, output = harness(
        cluster, EXAMPLES, "--agent", "builtin", "--model", "faux/demo", "-j", "2",
        "-o", out, "--run-name", "builtin", "--fail-under", "1.0",
    )  # fmt: skip
    assert code == 0, output
    for name in ("oracle", "builtin"):
        run = read_run_dir(out / name)
        assert sorted(r["task"]["key"] for r in run.records) == sorted(EXAMPLE_KEYS)
        for record in run.records:
            assert record["status"] == "completed" and record["reward"] == 1.0, record
            assert record["sandbox"]["node"] == WORKER_IP
            assert record["task"]["path"].startswith(str(EXAMPLES))  # the driver's task
            evidence = run.evidence(record)
            assert list((evidence / "verifier").glob("reward.*")), "no reward file came back"
        assert not node_dirs(name), f"the run left {node_dirs(name)}"
    # The builtin agent's model calls crossed the bridge: recorded on the driver.
    builtin = read_run_dir(out / "builtin")
    for record in builtin.records:
        assert record["usage"]["calls"] >= 1
        calls = (builtin.evidence(record) / "model_calls.jsonl").read_text().splitlines()
        assert len(calls) == record["usage"]["calls"]
        transcript = (builtin.evidence(record) / "transcript.jsonl").read_text()
        assert '"model_call"' in transcript or "model" in transcript
    log = "".join(p.read_text() for p in (out / "builtin" / "logs").rglob("eval.log"))
    assert f"ran on node {WORKER_IP}" in log


def test_tasks_the_cluster_cannot_hold_or_that_want_a_network_are_refused(
    cluster: RayCluster, tmp_path: Path
) -> None:
    toml = '[task]\nname = "e2e/{name}"\n[environment]\n{line}\n'
    tasks = tmp_path / "tasks"
    make_task_dir(tasks, "net", toml=toml.format(name="net", line="allow_internet = true"))
    tb2 = 'network_mode = "no-network"\n[verifier]\nnetwork_mode = "public"'
    make_task_dir(tasks, "tb2", toml=toml.format(name="tb2", line=tb2))
    make_task_dir(tasks, "big", toml=toml.format(name="big", line="cpus = 64"))
    make_task_dir(tasks, "gpu", toml=toml.format(name="gpu", line="gpus = 1"))
    shutil.copytree(CONFORMANCE / "compose-mcp", tasks / "compose-mcp")
    out = tmp_path / "runs"
    code, output = harness(cluster, tasks, "--agent", "oracle", "-o", out, timeout=120)
    assert code == 2, output
    # The local backend enforces no-network only: it refuses both before Ray is asked.
    assert "net/task.toml: the agent phase's network_mode = 'public' cannot be" in output
    assert "tb2/task.toml: the verifier phase's network_mode = 'public' cannot be" in output
    assert "cpus = 64, but no node of the Ray cluster has more than 2 CPUs" in output
    assert "gpus = 1, but no node of the Ray cluster has more than 0 GPUs" in output
    assert "docker-compose.yaml: compose sidecars (and MCP servers among them) are" in output
    assert not out.exists() or not any(out.iterdir())
    code, output = harness(
        cluster, EXAMPLES, "--agent", "oracle", "--agent-concurrency", "1", "-o", out
    )
    assert code == 2 and "--agent-concurrency applies to --executor local only" in output
    code, output = harness(
        cluster, EXAMPLES, "--agent", "oracle", "--set", f"sandbox.expose=[\"{tmp_path}\"]",
        "-o", out,
    )  # fmt: skip
    assert code == 2 and "sandbox.expose is refused with --executor ray" in output


@pytest.mark.docker
def test_the_examples_run_on_the_worker_node_in_docker(cluster: RayCluster, tmp_path: Path) -> None:
    require_image(docker_client())
    out = tmp_path / "runs"
    code, output = harness(
        cluster, EXAMPLES, "--agent", "builtin", "--model", "faux/demo", "--sandbox", "docker",
        "-j", "2", "-o", out, "--run-name", "docker-builtin", "--fail-under", "1.0",
    )  # fmt: skip
    assert code == 0, output
    run = read_run_dir(out / "docker-builtin")
    assert len(run.records) == len(EXAMPLE_KEYS)
    for record in run.records:
        assert record["status"] == "completed" and record["reward"] == 1.0, record
        assert record["sandbox"]["backend"] == "docker" and record["sandbox"]["node"] == WORKER_IP
        assert record["sandbox"]["image"], "the image built on the worker node is named"
    assert labelled("docker-builtin") == []
    assert not node_dirs("docker-builtin")


@pytest.mark.docker
def test_harbor_tasks_run_the_same_lifecycle_on_the_worker_node(
    cluster: RayCluster, tmp_path: Path
) -> None:
    """Multi-step, a separate verifier, artifacts and task keys, as tests/e2e/test_harbor_*
    check them locally; env templates take the driver's environment, not the node's."""
    require_image(docker_client())
    tasks = tmp_path / "tasks"
    for name in ("multi-step", "separate-verifier", "task-keys"):
        shutil.copytree(CONFORMANCE / name, tasks / name)
    make_task_dir(
        tasks, "driver-env", test_sh=TEST_WHO,
        toml='[task]\nname = "e2e/driver-env"\n[verifier]\nenv = { WHO = "${RAY_E2E_WHO}" }\n',
    )  # fmt: skip
    assert "RAY_E2E_WHO" not in cluster.env(), "the worker node must not have it"
    out = tmp_path / "runs"
    running = start_cli(
        "run", tasks, "--agent", "oracle", "--sandbox", "docker", "-j", "2", "-o", out,
        "--run-name", "harbor", "--executor", "ray", "--ray-address", str(cluster.address),
        "--display", "plain", "--task-env", "RAY_E2E_WHO",
        env={**cluster.env(), "RAY_E2E_WHO": "driver"},
    )  # fmt: skip
    result = running.wait(600)
    assert result.code == 0, str(result)
    run = read_run_dir(out / "harbor")
    records = {r["task"]["path"].rsplit("/", 1)[-1]: r for r in run.records}
    assert sorted(records) == ["driver-env", "multi-step", "separate-verifier", "task-keys"]
    for name, record in records.items():
        assert record["status"] == "completed" and record["reward"] == 1.0, (name, record)
        assert record["sandbox"]["node"] == WORKER_IP
    multi = records["multi-step"]
    assert [(s["name"], s["reward"]) for s in multi["steps"]] == [("create", 1.0), ("extend", 1.0)]
    evidence = run.evidence(multi)
    for step in ("create", "extend"):
        assert (evidence / "steps" / step / "verifier" / "reward.txt").read_text().strip() == "1"
    manifest = json.loads((evidence / "steps/create/artifacts/manifest.json").read_text())
    assert [entry["status"] for entry in manifest] == ["ok"]
    separate = records["separate-verifier"]
    inputs = [e for e in separate["events"] if e["type"] == "verifier_input"]
    assert [(e["source"], e["status"]) for e in inputs] == [
        ("/logs/artifacts", "missing"),
        ("/app/answer.txt", "ok"),
        ("/app/report", "ok"),
    ]
    assert (run.evidence(separate) / "artifacts" / "manifest.json").is_file()
    assert labelled("harbor") == [], "a trial or verifier container was left"
    assert not node_dirs("harbor")


@pytest.mark.docker
def test_ctrl_c_cancels_on_every_node_and_resume_finishes(
    cluster: RayCluster, tmp_path: Path
) -> None:
    require_image(docker_client())
    task = make_task_dir(tmp_path / "tasks", "sleeper", test_sh=TEST_DONE, agent_timeout=8)
    (task / "environment").mkdir()
    (task / "environment" / "Dockerfile").write_text("FROM harness/base:bookworm\n")
    out = tmp_path / "runs"
    run_dir = out / "interrupted"
    agent = SLEEPER.format(seconds=30)
    args = (task, "--agent", "command", "--agent-cmd", agent, "--sandbox", "docker", "-r", "2",
            "-j", "2", "-o", out, "--run-name", "interrupted")  # fmt: skip
    running = start_harness(cluster, *args)
    wait_for(lambda: running_in(run_dir, "execute") == 2, "two agents running", running)
    assert len(labelled("interrupted")) == 2  # on the worker node's engine
    os.killpg(running.proc.pid, signal.SIGINT)  # what Ctrl-C does
    result = running.wait(timeout=90)
    assert result.code == 130, str(result)
    records = latest(run_dir)
    assert len(records) == 2 and all(r["status"] == "cancelled" for r in records.values())
    assert json.loads((run_dir / "status.json").read_text())["state"] == "interrupted"
    assert labelled("interrupted") == []
    assert not node_dirs("interrupted")

    code, output = harness(cluster, "--resume", run_dir, timeout=180)
    # The agents sleep past the task's 8 s limit this time: a result, not an error.
    assert code == 1, output
    final = latest(run_dir)
    assert len(final) == 2
    for record in final.values():
        assert record["status"] == "agent_timeout" and record["attempt"] == 2
        (previous,) = record["previous_attempts"]
        assert previous["status"] == "cancelled"
    assert labelled("interrupted") == []


# Runs in the sandbox on the worker node: it calls the model once through the gateway, then
# copies out everything it can reach that could hold a key: its environment, every
# process's environ and cmdline, Ray's session dirs and token, shared memory.
RAY_PROBE = r"""#!/bin/bash
out="$HARNESS_WORKSPACE/probe"
mkdir -p "$out"
env > "$out/env.txt"
for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do
    tr '\0' '\n' < "$f"
done > "$out/proc.txt" 2>/dev/null
for place in "$RAY_DIR" /tmp /tmp/ray /root/.ray "$HOME/.ray" /dev/shm /run/harness; do
    echo "== $place"; ls -la "$place" 2>&1
done > "$out/places.txt"
cat "$RAY_DIR"/auth_token /root/.ray/auth_token > "$out/tokens.txt" 2>&1
grep -rIs -e "" "$RAY_DIR" /dev/shm 2>&1 | head -c 2000000 > "$out/ray-files.txt"
python3 - > "$out/call.txt" 2>&1 <<'PY'
import json, os, urllib.request
req = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
             "Content-Type": "application/json"})
print(urllib.request.urlopen(req, timeout=30).status)
PY
"""


def test_the_real_key_never_reaches_a_worker_node(cluster: RayCluster, tmp_path: Path) -> None:
    """The driver holds the key; its sandbox, records, Ray's objects and logs never do."""
    upstream = Upstream()
    canary = CANARY_PREFIX + secrets.token_hex(24)
    task = make_task_dir(tmp_path / "tasks", "probe", workspace={"probe.sh": RAY_PROBE})
    catalog = tmp_path / "models.toml"
    catalog.write_text(
        '[models."openai/canary-model"]\nmodel = "upstream-name"\n'
        f'base_url = "http://127.0.0.1:{upstream.port}/v1"\n'
    )
    out = tmp_path / "runs"
    assert cluster.address is not None
    try:
        running = start_cli(
            "run", task, "--agent", "command",
            "--agent-cmd", f"env RAY_DIR={cluster.temp_dir} bash {{workspace}}/probe.sh",
            "--model", "openai/canary-model", "--models", catalog, "-o", out,
            "--run-name", "canary", "--executor", "ray", "--ray-address", cluster.address,
            env={**cluster.env(), "OPENAI_API_KEY": canary, "HARNESS_PROVIDER": "",
                 "HARNESS_MODEL": ""},
        )  # fmt: skip
        result = running.wait(180)
    finally:
        upstream.close()
    assert result.code == 0, str(result)
    # The key was really used: the upstream got it, from the driver's gateway.
    assert [r["headers"].get("authorization") for r in upstream.requests] == [f"Bearer {canary}"]
    run = read_run_dir(out / "canary")
    (record,) = run.records
    assert record["sandbox"]["node"] == WORKER_IP and record["usage"]["calls"] == 1
    probe = run.evidence(record) / "workspace" / "probe"
    assert (probe / "call.txt").read_text().strip() == "200"
    assert (probe / "proc.txt").stat().st_size > 0 and (probe / "env.txt").stat().st_size > 0
    needles = {"the provider key": canary.encode(), "Ray's token": cluster.token.encode()}
    # Nothing the run wrote (the sandbox's whole view included) holds the key or Ray's token.
    for path in out.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for what, needle in needles.items():
                assert needle not in data, f"{what} in {path}"
    assert canary not in result.stdout + result.stderr
    # No Ray log, session file or spilled object holds the key.
    for path in cluster.temp_dir.rglob("*"):
        if path.is_file() and not path.is_socket():
            try:
                assert canary.encode() not in path.read_bytes(), f"the key in {path}"
            except OSError:
                continue
    # No process of any node (raylets, object stores, the workers that ran the trial)
    # holds it in memory: only the driver ever did.
    scanned = 0
    for node in cluster.nodes:
        for proc in node.processes():
            assert not process_memory_has(proc.pid, canary.encode()), proc.cmdline()
            scanned += 1
    assert scanned >= 4, "too few Ray processes were scanned"


@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_a_worker_node_that_dies_mid_trial_is_retried_elsewhere(
    cluster: RayCluster, tmp_path: Path, backend: str
) -> None:
    task = make_task_dir(tmp_path / "tasks", "slow", test_sh=TEST_DONE, agent_timeout=60)
    if backend == "docker":
        require_image(docker_client())
        (task / "environment").mkdir()
        (task / "environment" / "Dockerfile").write_text("FROM harness/base:bookworm\n")
    out = tmp_path / "runs"
    name = f"node-death-{backend}"
    run_dir = out / name
    agent = SLEEPER.format(seconds=6)
    running = start_harness(
        cluster, task, "--agent", "command", "--agent-cmd", agent, "--sandbox", backend,
        "-r", "3", "-j", "3", "--set", "retry.backoff_sec=0.5", "-o", out, "--run-name", name,
    )  # fmt: skip
    wait_for(lambda: running_in(run_dir, "execute") == 2, "two agents on the worker", running)
    victim = cluster.nodes[-1]  # the one worker node alive
    victim.kill()  # the machine's failure: the raylet and its worker processes, at once
    replacement = f"127.0.0.{2 + len(cluster.nodes)}"
    cluster.add_node(2)  # a replacement node joins; the retries land there
    result = running.wait(timeout=240)
    assert result.code == 0, str(result)
    lines = (run_dir / "trials.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    ids = [r["id"] for r in records]
    assert len(ids) == 3 and len(set(ids)) == 3, "every planned trial recorded exactly once"
    retried = [r for r in records if r["previous_attempts"]]
    assert len(retried) >= 2, records
    for record in records:
        assert record["status"] == "completed" and record["reward"] == 1.0
        assert record["sandbox"]["node"] == replacement or not record["previous_attempts"]
    for record in retried:
        first = record["previous_attempts"][0]
        assert first["status"] == "environment_error", first
        assert any("Ray task" in e["message"] for e in first["errors"]), first
    assert not victim.processes()
    assert not node_dirs(name), f"left behind: {node_dirs(name)}"
    if backend == "docker":
        assert labelled(name) == [], "containers of the dead node's trials were left"
    leftover = [
        p.info["cmdline"]
        for p in psutil.process_iter(["cmdline"])
        if p.info["cmdline"] and "sleep 6; echo done" in " ".join(p.info["cmdline"])
    ]
    assert leftover == [], leftover
