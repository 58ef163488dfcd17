"""``--agent claude-code --executor ray``: each node fills and checks its own agent cache.

A real Ray cluster on this machine (tests/support/ray_cluster.py): a head with no CPUs (the
driver's node) and a worker node with its own agent cache (``HARNESS_AGENT_CACHE`` of that
node only). The driver's cache holds an intact Claude Code entry; the worker's holds the
same entry with one file tampered with, as a node's disk might. The trial must run on the
worker from the worker's own cache, which the worker checks against its manifest, finds
damaged, and fetches again (from npm, on that node) — never the driver's path, never the
damaged file — and whose files must be those the driver planned with (the same ``tree``).
Judged from outside: the record, both cache dirs.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EXAMPLES, CliResult, read_run_dir, start_cli
from support.ray_cluster import RayCluster

from harness.agents.installed.cache import AgentCache, scan_tree, write_manifest
from harness.agents.installed.claude_code import ClaudeCode

pytestmark = pytest.mark.root  # the local sandbox's root view binds the CLI's cache entry

WORKER_IP = "127.0.0.3"
TAMPERED = "package.json"


def _copy_entry(entry: Path, root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    target = root / entry.name
    subprocess.run(["cp", "-a", str(entry), str(target)], check=True)
    return target


@pytest.fixture(scope="module")
def caches(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(driver's cache, worker's cache, the entry's key), from the user's filled cache."""
    entry = AgentCache().ensure(ClaudeCode().install_spec()).path  # scripts/agents.sh filled it
    base = tmp_path_factory.mktemp("caches")
    base.chmod(0o755)
    driver, worker = base / "driver", base / "worker"
    _copy_entry(entry, driver)
    damaged = _copy_entry(entry, worker)
    (damaged / "npm" / TAMPERED).chmod(0o644)
    (damaged / "npm" / TAMPERED).write_text('{"tampered": true}\n')
    return driver, worker, Path(entry.name)


@pytest.fixture(scope="module")
def cluster(caches: tuple[Path, Path, Path]) -> Iterator[RayCluster]:
    ray_cluster = RayCluster()
    try:
        # A loaded machine registers nodes slowly: Ray's own wait, made longer.
        slow = {"RAY_raylet_start_wait_time_s": "180"}
        ray_cluster.add_node(0, env=slow, timeout=240)  # the head: no room for trials
        worker_env = {**slow, "HARNESS_AGENT_CACHE": str(caches[1])}
        ray_cluster.add_node(2, env=worker_env, timeout=240)
        yield ray_cluster
    finally:
        ray_cluster.stop()


def _run(cluster: RayCluster, driver_cache: Path, tmp_path: Path) -> tuple[CliResult, Path]:
    """hello-file solved by Claude Code on the cluster; the result and the run dir."""
    tasks = tmp_path / "tasks"
    shutil.copytree(EXAMPLES / "hello-file", tasks / "hello-file")
    script = {
        "responses": [
            {
                "tool_calls": [
                    {
                        "name": "Bash",
                        "arguments": {"command": "printf 'Hello, world!\\n' > hello.txt"},
                    }
                ]
            },
            {"text": "Created hello.txt."},
        ]
    }
    (tasks / "script.json").write_text(json.dumps(script))
    (tasks / "models.toml").write_text(
        '[models."faux/ray-cc"]\nscript = "script.json"\napi = "anthropic-messages"\n'
    )
    out = tmp_path / "runs"
    assert cluster.address is not None
    canary = "sk-ant-canary-" + secrets.token_hex(16)
    running = start_cli(
        "run", tasks, "--agent", "claude-code", "--model", "faux/ray-cc",
        "--executor", "ray", "--ray-address", cluster.address, "--display", "plain",
        "-o", out, "--run-name", "ray-cc",
        env={
            **cluster.env(),
            "HARNESS_AGENT_CACHE": str(driver_cache),
            "ANTHROPIC_API_KEY": canary,
            "HARNESS_PROVIDER": "",
            "HARNESS_MODEL": "",
        },
    )  # fmt: skip
    result = running.wait(900)
    run_dir = out / "ray-cc"
    assert not any(canary.encode() in p.read_bytes() for p in run_dir.rglob("*") if p.is_file())
    return result, run_dir


def test_the_worker_runs_claude_code_from_its_own_checked_cache(
    cluster: RayCluster, caches: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    driver_cache, worker_cache, key = caches
    result, run_dir = _run(cluster, driver_cache, tmp_path)
    assert result.code == 0, result
    [record] = read_run_dir(run_dir).records
    assert record["status"] == "completed" and record["reward"] == 1, record["errors"]
    assert record["sandbox"]["node"] == WORKER_IP
    install = record["agent"]["install"]
    # The worker's own cache, never the driver's path.
    assert Path(install["path"]) == worker_cache / key, install
    # The damaged entry was found out on the worker and fetched again there.
    fetched = worker_cache / key
    assert json.loads((fetched / "npm" / TAMPERED).read_text()) != {"tampered": True}
    manifest = json.loads((fetched / "manifest.json").read_text())
    assert scan_tree(fetched) == manifest["files"] and install["tree"] == manifest["tree"]
    # And it holds the files the driver planned with (the same tree).
    planned = json.loads((driver_cache / key / "manifest.json").read_text())["tree"]
    assert install["tree"] == planned, (install, planned)
    # The driver's entry was checked on the driver, before any trial, and left as it was.
    assert (
        scan_tree(driver_cache / key)
        == json.loads((driver_cache / key / "manifest.json").read_text())["files"]
    )
    assert os.stat(fetched).st_uid == 0


def test_a_worker_whose_entry_holds_other_files_is_refused(
    cluster: RayCluster, caches: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """An intact entry (its manifest matches) with other files under the same key.

    As a worker's own fetch would hold had npm resolved another dependency tree: the
    trial does not run it, and says why and what to do, once (a retry cannot help).
    """
    driver_cache, worker_cache, key = caches
    entry = worker_cache / key
    shutil.rmtree(entry, ignore_errors=True)
    _copy_entry(driver_cache / key, worker_cache)
    other = entry / "npm" / TAMPERED
    other.chmod(0o644)
    other.write_text(other.read_text() + "\n")  # another build's package.json
    spec = ClaudeCode().install_spec()
    tree = write_manifest(entry, spec)
    planned = json.loads((driver_cache / key / "manifest.json").read_text())["tree"]
    assert AgentCache(worker_cache).ensure(spec).tree == tree != planned  # intact, other

    result, run_dir = _run(cluster, driver_cache, tmp_path)
    assert result.code == 1, result
    [record] = read_run_dir(run_dir).records
    assert record["status"] == "environment_error" and record["attempt"] == 1, record
    [error] = record["errors"]
    assert error["type"] == "EntryMismatch" and error["retryable"] is False, error
    assert tree in error["message"] and planned in error["message"], error
    assert "replace" in error["message"] and "--resume" in error["message"], error
    assert not (run_dir / "trials").exists() or not list(run_dir.rglob("agent.log"))
    shutil.rmtree(entry)  # the next test fetches it again
