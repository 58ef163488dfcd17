"""End-to-end: datasets by name (``-d``, ``--repo``, ``--from-lock``) over real git repositories.

Every repository is a real one the test makes (plain paths, and ``git daemon`` on
127.0.0.1); registries are files, or served by a real HTTP server on 127.0.0.1. The tasks
differ between two commits, so a run shows which commit it ran.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REWARD = '#!/bin/bash\necho {reward} > "$HARNESS_VERIFIER_DIR/reward.txt"\n'


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.email=t@example.invalid", "-c", "user.name=t", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def _task(root: Path, name: str, reward: int) -> None:
    task = root / "tasks" / name
    (task / "tests").mkdir(parents=True, exist_ok=True)
    (task / "task.toml").write_text(f'[task]\nname = "ds/{name}"\n\n[agent]\ntimeout_sec = 30\n')
    (task / "instruction.md").write_text(f"Task {name}.\n")
    (task / "tests" / "test.sh").write_text(REWARD.format(reward=reward))
    (task / "tests" / "test.sh").chmod(0o755)


class Repo:
    """A git repository of task dirs at two commits: ``first`` (rewards 1), ``second``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True)
        _git(path, "init", "-q", "-b", "main")
        _task(path, "alpha", 1)
        _task(path, "beta", 1)
        _git(path, "add", "-A")
        _git(path, "commit", "-qm", "first")
        self.first = _git(path, "rev-parse", "HEAD")
        # The later commit breaks alpha (reward 0) and adds gamma: a run of the pinned
        # dataset must show neither.
        _task(path, "alpha", 0)
        _task(path, "gamma", 0)
        _git(path, "add", "-A")
        _git(path, "commit", "-qm", "second")
        self.second = _git(path, "rev-parse", "HEAD")


def _registry(
    path: Path, url: str, commit: str, names: tuple[str, ...] = ("alpha", "beta")
) -> Path:
    data = [
        {
            "name": "demo",
            "version": "1.0",
            "description": "two pinned tasks",
            "tasks": [
                {"name": n, "git_url": url, "git_commit_id": commit, "path": f"tasks/{n}"}
                for n in names
            ],
        },
        {"name": "demo", "version": "0.9", "description": "older", "tasks": []},
    ]
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return Repo(tmp_path / "upstream")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    import os

    return {**os.environ, "HARNESS_CACHE_DIR": str(tmp_path / "cache")}


def _run(e2e: Any, env: dict[str, str], out: Path, *args: Any) -> Any:
    return e2e.run(
        "run", *args, "--agent", "nop", "--sandbox", "local", "-o", out,
        "--display", "none", "--json", env=env, timeout=300,
    )  # fmt: skip


def _rewards(e2e: Any, run_dir: Path) -> dict[str, float]:
    return {r["task"]["name"]: r["reward"] for r in e2e.read_run(run_dir).records}


def _lock(run_dir: Path) -> dict[str, Any]:
    data = json.loads((run_dir / "datasets.lock.json").read_text())
    assert isinstance(data, dict)
    return data


def test_a_pinned_dataset_runs_its_commit_then_again_from_cache_without_its_repository(
    e2e: Any, tmp_path: Path, repo: Repo, env: dict[str, str]
) -> None:
    registry = _registry(tmp_path / "registry.json", str(repo.path), repo.first)
    first = _run(e2e, env, tmp_path / "runs1", "-d", "demo@1.0", "--registry-path", registry)
    assert first.code == 0, first
    run_dir = e2e.only_run_dir(tmp_path / "runs1")
    # The pinned commit's tasks: alpha rewards 1 there (0 at the later commit), no gamma.
    assert _rewards(e2e, run_dir) == {"ds/alpha": 1.0, "ds/beta": 1.0}
    lock = _lock(run_dir)
    assert lock["datasets"] == ["demo@1.0"] and lock["registry"] == str(registry)
    assert {t["commit"] for t in lock["tasks"]} == {repo.first}
    assert [t["path"] for t in lock["tasks"]] == ["tasks/alpha", "tasks/beta"]
    assert all(t["content_hash"].startswith("sha256:") for t in lock["tasks"])
    assert e2e.read_run(run_dir).config["run"]["tasks"]["datasets"]["names"] == ["demo@1.0"]

    shutil.move(repo.path, tmp_path / "gone")  # the repository is no more
    again = _run(e2e, env, tmp_path / "runs2", "-d", "demo@1.0", "--registry-path", registry)
    assert again.code == 0, again
    rerun = e2e.only_run_dir(tmp_path / "runs2")
    assert _rewards(e2e, rerun) == {"ds/alpha": 1.0, "ds/beta": 1.0}
    assert _lock(rerun)["tasks"] == lock["tasks"]

    # An upstream edit of the pinned version's entry is told, never taken silently.
    shutil.move(tmp_path / "gone", repo.path)
    _registry(registry, str(repo.path), repo.second)
    edited = _run(e2e, env, tmp_path / "runs-edited", "-d", "demo@1.0", "--registry-path", registry)
    assert edited.code == 0, edited
    assert "lists other tasks or commits than when first used" in edited.stderr, edited
    shutil.move(repo.path, tmp_path / "gone")
    _registry(registry, str(repo.path), repo.first)

    # The run dir reproduces its exact task set: from its lock, and on --resume.
    from_lock = _run(e2e, env, tmp_path / "runs3", "--from-lock", run_dir)
    assert from_lock.code == 0, from_lock
    assert _lock(e2e.only_run_dir(tmp_path / "runs3"))["tasks"] == lock["tasks"]
    resumed = e2e.run("run", "--resume", run_dir, "--display", "none", env=env, timeout=300)
    assert resumed.code == 0, resumed
    assert "nothing to resume" in resumed.stderr


def test_a_tampered_cache_entry_and_a_changed_task_are_refused(
    e2e: Any, tmp_path: Path, repo: Repo, env: dict[str, str]
) -> None:
    registry = _registry(tmp_path / "registry.json", str(repo.path), repo.first)
    first = _run(e2e, env, tmp_path / "runs1", "-d", "demo", "--registry-path", registry)
    assert first.code == 0, first
    run_dir = e2e.only_run_dir(tmp_path / "runs1")
    (test_sh,) = (tmp_path / "cache" / "tasks").glob("*/alpha/tests/test.sh")
    original = test_sh.read_text()
    test_sh.write_text(REWARD.format(reward=1) + "echo planted\n")
    tampered = _run(e2e, env, tmp_path / "runs2", "-d", "demo@1.0", "--registry-path", registry)
    assert tampered.code == 2, tampered
    assert "changed since it was fetched" in tampered.stderr, tampered
    e2e.assert_nothing_created(tmp_path / "runs2")
    resumed = e2e.run("run", "--resume", run_dir, "--display", "none", env=env, timeout=120)
    assert resumed.code == 2 and "changed since it was fetched" in resumed.stderr, resumed

    # Cleared, the cache is fetched again; a lock whose hash differs is refused.
    test_sh.write_text(original)
    cleared = e2e.run("datasets", "clear", env=env)
    assert cleared.code == 0 and "removed 2 cached task(s)" in cleared.stderr, cleared
    lock = _lock(run_dir)
    lock["tasks"][0]["content_hash"] = "sha256:" + "0" * 64
    edited = tmp_path / "edited.lock.json"
    edited.write_text(json.dumps(lock))
    refused = _run(e2e, env, tmp_path / "runs3", "--from-lock", edited)
    assert refused.code == 2 and "the lock recorded" in refused.stderr, refused
    e2e.assert_nothing_created(tmp_path / "runs3")
    refetched = _run(e2e, env, tmp_path / "runs4", "--from-lock", run_dir)
    assert refetched.code == 0, refetched


def _one_error(result: Any) -> str:
    assert result.code == 2, result
    errors = [line for line in result.error_lines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result
    return str(errors[0])


def test_errors_are_one_line_and_exit_2_before_anything_runs(
    e2e: Any, tmp_path: Path, repo: Repo, env: dict[str, str]
) -> None:
    out = tmp_path / "runs"
    good = _registry(tmp_path / "registry.json", str(repo.path), repo.first)
    line = _one_error(_run(e2e, env, out, "-d", "nope", "--registry-path", good))
    assert "unknown dataset 'nope'" in line and "demo@1.0, demo@0.9" in line
    line = _one_error(_run(e2e, env, out, "-d", "demo@7", "--registry-path", good))
    assert "no version '7'" in line and "1.0, 0.9" in line
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    line = _one_error(
        _run(e2e, env, out, "-d", "demo", "--registry-url", f"http://127.0.0.1:{port}/r.json")
    )
    assert "unreachable" in line
    missing_repo = _registry(tmp_path / "r2.json", str(tmp_path / "no-such-repo"), repo.first)
    line = _one_error(_run(e2e, env, out, "-d", "demo@1.0", "--registry-path", missing_repo))
    assert "unreachable" in line and "no-such-repo" in line
    no_commit = _registry(tmp_path / "r3.json", str(repo.path), "ab" * 20)
    line = _one_error(_run(e2e, env, out, "-d", "demo@1.0", "--registry-path", no_commit))
    assert f"commit {'ab' * 20} is not in" in line
    no_ref = _registry(tmp_path / "r5.json", str(repo.path), "no-such-branch")
    line = _one_error(_run(e2e, env, out, "-d", "demo@1.0", "--registry-path", no_ref))
    assert "has no ref 'no-such-branch'" in line
    # gamma exists only at the later commit.
    no_path = _registry(tmp_path / "r4.json", str(repo.path), repo.first, ("alpha", "gamma"))
    line = _one_error(_run(e2e, env, out, "-d", "demo@1.0", "--registry-path", no_path))
    assert "task path 'tasks/gamma' is not in commit" in line
    e2e.assert_nothing_created(out)


@contextlib.contextmanager
def _http_server(root: Path) -> Iterator[str]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def _git_daemon(base: Path) -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        ["git", "daemon", "--export-all", "--reuseaddr", "--listen=127.0.0.1",
         f"--port={port}", f"--base-path={base}", str(base)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(200):  # until it accepts connections (bounded)
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield f"git://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_an_abbreviated_commit_id_is_resolved_in_the_history(
    e2e: Any, tmp_path: Path, repo: Repo, env: dict[str, str]
) -> None:
    registry = _registry(tmp_path / "registry.json", str(repo.path), repo.first[:10])
    result = _run(e2e, env, tmp_path / "runs", "-d", "demo@1.0", "--registry-path", registry)
    assert result.code == 0, result
    run_dir = e2e.only_run_dir(tmp_path / "runs")
    assert {t["commit"] for t in _lock(run_dir)["tasks"]} == {repo.first}
    assert {t["requested_ref"] for t in _lock(run_dir)["tasks"]} == {repo.first[:10]}
    assert _rewards(e2e, run_dir) == {"ds/alpha": 1.0, "ds/beta": 1.0}


def test_a_served_registry_and_a_git_daemon_repository(
    e2e: Any, tmp_path: Path, repo: Repo, env: dict[str, str]
) -> None:
    with _git_daemon(tmp_path) as daemon, _http_server(tmp_path / "site") as site:
        (tmp_path / "site").mkdir()
        _registry(tmp_path / "site" / "registry.json", f"{daemon}/upstream", repo.first)
        listed = e2e.run("datasets", "list", "--registry-url", f"{site}/registry.json", env=env)
        assert listed.code == 0, listed
        assert "demo" in listed.stdout and "1.0" in listed.stdout and "0.9" in listed.stdout
        one = _run(
            e2e, env, tmp_path / "runs", "-t", "demo@1.0/beta",
            "--registry-url", f"{site}/registry.json",
        )  # fmt: skip
        assert one.code == 0, one
        assert _rewards(e2e, e2e.only_run_dir(tmp_path / "runs")) == {"ds/beta": 1.0}
        # The default registry URL is the user's to configure.
        env2 = {**env, "HARNESS_REGISTRY_URL": f"{site}/registry.json"}
        fetched = e2e.run("datasets", "download", "demo@1.0", env=env2, timeout=120)
        assert fetched.code == 0, fetched
        assert fetched.stdout.count(repo.first[:12]) == 2, fetched


def test_a_repository_of_task_dirs_at_a_ref_and_a_moved_ref_is_told(
    e2e: Any, tmp_path: Path, repo: Repo, env: dict[str, str]
) -> None:
    pinned = _run(e2e, env, tmp_path / "runs1", "--repo", f"{repo.path}@{repo.first}")
    assert pinned.code == 0, pinned
    assert _rewards(e2e, e2e.only_run_dir(tmp_path / "runs1")) == {"ds/alpha": 1.0, "ds/beta": 1.0}
    _git(repo.path, "branch", "release", repo.first)
    first = _run(e2e, env, tmp_path / "runs2", "--repo", f"{repo.path}@release")
    assert first.code == 0, first
    assert "not pinned" in first.stderr
    _git(repo.path, "branch", "-f", "release", repo.second)  # the ref moves
    moved = _run(e2e, env, tmp_path / "runs3", "--repo", f"{repo.path}@release")
    assert moved.code == 0, moved
    assert f"moved from {repo.first} to {repo.second}" in moved.stderr, moved
    run_dir = e2e.only_run_dir(tmp_path / "runs3")
    assert {t["commit"] for t in _lock(run_dir)["tasks"]} == {repo.second}
    assert _rewards(e2e, run_dir) == {"ds/alpha": 0.0, "ds/beta": 1.0, "ds/gamma": 0.0}
    # The older run still reruns exactly what it ran.
    old = _run(e2e, env, tmp_path / "runs4", "--from-lock", e2e.only_run_dir(tmp_path / "runs2"))
    assert old.code == 0, old
    assert _rewards(e2e, e2e.only_run_dir(tmp_path / "runs4")) == {"ds/alpha": 1.0, "ds/beta": 1.0}


def test_a_repository_using_git_lfs_without_git_lfs_is_warned_about(
    e2e: Any, tmp_path: Path, env: dict[str, str]
) -> None:
    upstream = tmp_path / "lfs-repo"
    upstream.mkdir()
    _git(upstream, "init", "-q")
    _task(upstream, "big", 1)
    (upstream / "tasks" / "big" / ".gitattributes").write_text("*.bin filter=lfs -text\n")
    (upstream / "tasks" / "big" / "data.bin").write_text("pointer-or-content\n")
    _git(upstream, "add", "-A")
    _git(upstream, "commit", "-qm", "lfs")
    result = e2e.run("datasets", "download", "--repo", str(upstream), env=env, timeout=120)
    assert result.code == 0, result
    lfs = subprocess.run(["git", "lfs", "version"], capture_output=True, check=False)
    if lfs.returncode != 0:
        assert "uses Git LFS but git-lfs is not installed" in result.stderr, result
    else:
        assert "git-lfs is not installed" not in result.stderr, result


def test_the_library_resolves_and_checks_a_dataset_run_in_process(
    tmp_path: Path, repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    import harness
    from harness.datasets import load_registry, resolve

    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    registry = _registry(tmp_path / "registry.json", str(repo.path), repo.first)
    offered = load_registry(path=str(registry))
    assert [d.ref for d in offered.datasets] == ["demo@1.0", "demo@0.9"]
    datasets = harness.DatasetsConfig(names=["demo@1.0"], registry_path=str(registry))
    resolved = resolve(datasets)
    assert [p.name for p in resolved.task_dirs] == ["alpha", "beta"]
    config = harness.RunConfig(
        tasks=harness.TasksConfig(datasets=datasets),
        agent=harness.AgentConfig(name="nop"),
        sandbox=harness.SandboxConfig(backend="local"),
        output_dir=str(tmp_path / "runs"),
    )
    plans = harness.check(config)
    assert sorted(plan.task.name for plan in plans) == ["ds/alpha", "ds/beta"]
    assert not (tmp_path / "runs").exists()
