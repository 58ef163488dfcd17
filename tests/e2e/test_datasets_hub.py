"""End-to-end: Harbor Hub datasets and tasks (``-d ORG/NAME@REF``, ``-t ORG/NAME@REF``).

The Hub is a real HTTP server on 127.0.0.1 answering Harbor's read API
(tests/support/harbor_hub.py); its packages are real ``tar.gz`` archives of real task dirs
and its git pins name a real repository served by ``git daemon`` on 127.0.0.1. Every run
is the real CLI with the local sandbox and the oracle agent, so a reward of 1 says the task
that ran is the one pinned.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from support.harbor_hub import HubState, hub_env, make_task, serve_hub


def _run(e2e: Any, env: dict[str, str], out: Path, *args: Any) -> Any:
    return e2e.run(
        "run", *args, "--agent", "oracle", "--sandbox", "local", "-o", out,
        "--display", "none", env=env, timeout=300,
    )  # fmt: skip


def _rewards(e2e: Any, run_dir: Path) -> dict[str, float]:
    return {r["task"]["name"]: r["reward"] for r in e2e.read_run(run_dir).records}


def _lock(run_dir: Path) -> dict[str, Any]:
    data = json.loads((run_dir / "datasets.lock.json").read_text())
    assert isinstance(data, dict)
    return data


def _hub(tmp_path: Path) -> tuple[HubState, dict[str, str]]:
    """Two packaged tasks in ``acme/pkgset`` (tags ``1.0``, ``latest``); the digests."""
    state = HubState()
    src = tmp_path / "src"
    alpha = state.publish_task("acme", make_task(src, "alpha"), tags=("1",), revision=1)
    beta = state.publish_task("acme", make_task(src, "beta"))
    # A later alpha (the verifier wants another answer than its oracle writes: reward 0)
    # takes the moving tag: the pinned dataset must never run it.
    later = make_task(tmp_path / "later", "alpha", answer="7")
    (later / "solution" / "solve.sh").write_text("#!/bin/bash\ntrue\n")
    state.publish_task("acme", later, tags=("latest",), revision=2)
    rows = [state.task_row("acme", "alpha", alpha), state.task_row("acme", "beta", beta)]
    state.publish_dataset("acme", "pkgset", rows, tags=("1.0", "latest"))
    return state, {"alpha": alpha, "beta": beta}


def test_a_hub_dataset_of_packages_runs_pinned_and_reruns_from_its_lock(
    e2e: Any, tmp_path: Path
) -> None:
    state, digests = _hub(tmp_path)
    env = hub_env(tmp_path / "cache")
    with serve_hub(state) as url:
        first = _run(e2e, env, tmp_path / "runs1", "-d", "acme/pkgset@1.0", "--hub-url", url)
        assert first.code == 0, first
    run_dir = e2e.only_run_dir(tmp_path / "runs1")
    assert _rewards(e2e, run_dir) == {"acme/alpha": 1.0, "acme/beta": 1.0}
    lock = _lock(run_dir)
    assert lock["registry"] == f"hub:{url}"
    assert lock["datasets"][0].startswith("acme/pkgset@sha256:")
    assert [(t["package"], t["digest"]) for t in lock["tasks"]] == [
        ("acme/alpha", f"sha256:{digests['alpha']}"),
        ("acme/beta", f"sha256:{digests['beta']}"),
    ]
    # The Hub is gone: the lock reruns the same tasks from the cache.
    again = _run(e2e, env, tmp_path / "runs2", "--from-lock", run_dir, "--hub-url", url)
    assert again.code == 0, again
    rerun = e2e.only_run_dir(tmp_path / "runs2")
    assert _rewards(e2e, rerun) == {"acme/alpha": 1.0, "acme/beta": 1.0}
    assert _lock(rerun)["tasks"] == lock["tasks"]
    resumed = e2e.run("run", "--resume", run_dir, "--display", "none", env=env, timeout=300)
    assert resumed.code == 0 and "nothing to resume" in resumed.stderr, resumed
    # Cleared, the cache is fetched again from the Hub, by digest, and checked against it.
    assert e2e.run("datasets", "clear", env=env).code == 0
    state.requests.clear()
    with serve_hub(state) as url:
        fetched = _run(e2e, env, tmp_path / "runs3", "--from-lock", run_dir, "--hub-url", url)
        assert fetched.code == 0, fetched
    assert _lock(e2e.only_run_dir(tmp_path / "runs3"))["tasks"] == lock["tasks"]
    assert "GET /rest/v1/dataset_version_tag" not in state.requests  # the lock, not the tag


def test_hub_tasks_by_name_tag_revision_and_digest(e2e: Any, tmp_path: Path) -> None:
    state, digests = _hub(tmp_path)
    env = hub_env(tmp_path / "cache")
    with serve_hub(state) as url:
        refs = ["acme/beta", "acme/alpha@1", f"acme/alpha@sha256:{digests['alpha']}"]
        got = e2e.run("datasets", "download", "--hub-url", url, *[
            arg for ref in refs for arg in ("-t", ref)
        ], env={**env, "COLUMNS": "1000"})  # fmt: skip
        assert got.code == 0, got
        lines = [line.split() for line in got.stdout.strip().splitlines()]
        assert [(line[-4], line[-3]) for line in lines] == [
            ("acme/beta", f"sha256:{digests['beta']}"),
            ("acme/alpha", f"sha256:{digests['alpha']}"),
        ]
        run = _run(e2e, env, tmp_path / "runs", "-t", "acme/alpha@1", "--hub-url", url)
        assert run.code == 0, run
        # The moving tag names the later alpha: resolved anew, told in the lock.
        latest = _run(e2e, env, tmp_path / "runs-latest", "-t", "acme/alpha", "--hub-url", url)
        assert latest.code == 0, latest
        # The tag moves again: told, never taken silently.
        state.publish_task("acme", make_task(tmp_path / "third", "alpha", "9"), revision=3)
        moved = e2e.run("datasets", "download", "-t", "acme/alpha", "--hub-url", url, env=env)
        assert moved.code == 0 and "when first used here" in moved.stderr, moved
    assert _rewards(e2e, e2e.only_run_dir(tmp_path / "runs")) == {"acme/alpha": 1.0}
    later = _lock(e2e.only_run_dir(tmp_path / "runs-latest"))["tasks"]
    assert later[0]["requested_ref"] == "latest" and later[0]["digest"] != digests["alpha"]
    assert _rewards(e2e, e2e.only_run_dir(tmp_path / "runs-latest")) == {"acme/alpha": 0.0}


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.email=t@example.invalid", "-c", "user.name=t", *args],
        cwd=repo, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip()


@contextlib.contextmanager
def _git_daemon(base: Path) -> Iterator[str]:
    """``git daemon`` serving ``base`` on 127.0.0.1: a remote repository, as a Hub names one."""
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


def test_a_hub_dataset_of_git_pins_runs_its_commit(e2e: Any, tmp_path: Path) -> None:
    repo = tmp_path / "upstream"
    make_task(repo / "tasks", "gamma")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "first")
    commit = _git(repo, "rev-parse", "HEAD")
    make_task(repo / "tasks", "gamma", answer="0")  # a later commit the pin must not run
    (repo / "tasks" / "gamma" / "solution" / "solve.sh").write_text("#!/bin/bash\ntrue\n")
    _git(repo, "commit", "-qam", "second")
    state = HubState()
    row = {
        "task_version": {
            "content_hash": "0" * 64,
            "package": {"name": "gamma", "org": {"name": "acme"}},
            "git_url": "",
            "git_commit_id": commit,
            "path": "tasks/gamma",
        }
    }
    env = hub_env(tmp_path / "cache")
    with _git_daemon(tmp_path) as daemon, serve_hub(state) as url:
        row["task_version"]["git_url"] = f"{daemon}/upstream"
        state.publish_dataset("acme", "gitset", [row])
        run = _run(e2e, env, tmp_path / "runs", "-d", "acme/gitset", "--hub-url", url)
        assert run.code == 0, run
    run_dir = e2e.only_run_dir(tmp_path / "runs")
    assert _rewards(e2e, run_dir) == {"acme/gamma": 1.0}
    (task,) = _lock(run_dir)["tasks"]
    pin = (f"{daemon}/upstream", commit, "tasks/gamma")
    assert (task["git_url"], task["commit"], task["path"]) == pin
    # The repository is gone too: the lock reruns the pinned task from the cache.
    again = _run(e2e, env, tmp_path / "runs2", "--from-lock", run_dir)
    assert again.code == 0 and _lock(e2e.only_run_dir(tmp_path / "runs2"))["tasks"] == [task]


def test_an_unreachable_hub_names_its_url_and_the_override_and_yanked_warns(
    e2e: Any, tmp_path: Path
) -> None:
    env = hub_env(tmp_path / "cache")
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    result = _run(e2e, env, tmp_path / "runs", "-d", "acme/pkgset", "--hub-url", dead)
    assert result.code == 2, result
    (line,) = [x for x in result.error_lines() if x.startswith("error:")]
    assert dead in line and "--hub-url" in line and "HARNESS_HUB_URL" in line, line
    e2e.assert_nothing_created(tmp_path / "runs")
    state, _ = _hub(tmp_path)
    state.dataset_versions[("acme", "pkgset")][0]["yanked_at"] = "2026-11-01T00:00:00Z"
    state.dataset_versions[("acme", "pkgset")][0]["yanked_reason"] = "broken verifier"
    with serve_hub(state) as url:
        yanked = e2e.run("datasets", "download", "acme/pkgset@1.0", "--hub-url", url, env=env)
        missing = e2e.run("datasets", "download", "acme/nope", "--hub-url", url, env=env)
    assert yanked.code == 0 and "is yanked: broken verifier" in yanked.stderr, yanked
    assert missing.code == 2 and "acme/nope@latest is not on Harbor Hub" in missing.stderr
