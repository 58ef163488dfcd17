"""End-to-end: a hostile registry or repository cannot run a command, write outside the cache,
or slip content past the recorded hash. Effects are checked from outside (canaries on disk).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.email=t@example.invalid", "-c", "user.name=t", *args],
        cwd=repo, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip()


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "HARNESS_CACHE_DIR": str(tmp_path / "cache")}


def _registry(path: Path, tasks: list[dict[str, str]]) -> Path:
    path.write_text(json.dumps([{"name": "evil", "version": "1", "tasks": tasks}]))
    return path


def _run(e2e: Any, tmp_path: Path, registry: Path) -> Any:
    return e2e.run(
        "run", "-d", "evil@1", "--registry-path", registry, "--agent", "nop",
        "--sandbox", "local", "-o", tmp_path / "runs", "--display", "none",
        env=_env(tmp_path), timeout=120,
    )  # fmt: skip


def test_an_ext_url_never_runs_its_command(e2e: Any, tmp_path: Path) -> None:
    canary = tmp_path / "pwned"
    url = f"ext::sh -c touch% {canary}"
    registry = _registry(
        tmp_path / "r.json",
        [{"name": "x", "git_url": url, "git_commit_id": "a" * 40, "path": "x"}],
    )
    result = _run(e2e, tmp_path, registry)
    assert result.code == 2, result
    assert not canary.exists(), "the ext:: transport ran a command"
    unpinned = _registry(
        tmp_path / "r2.json", [{"name": "x", "git_url": url, "git_commit_id": "HEAD", "path": "x"}]
    )
    result = _run(e2e, tmp_path, unpinned)
    assert result.code == 2 and not canary.exists(), result
    e2e.assert_nothing_created(tmp_path / "runs")


@pytest.mark.parametrize("path", ["../outside", "tasks/../../outside", "/etc"])
def test_a_task_path_leaving_the_repository_is_refused(e2e: Any, tmp_path: Path, path: str) -> None:
    registry = _registry(
        tmp_path / "r.json",
        [{"name": "x", "git_url": str(tmp_path), "git_commit_id": "a" * 40, "path": path}],
    )
    result = _run(e2e, tmp_path, registry)
    assert result.code == 2 and "must be relative" in result.stderr, result
    assert not (tmp_path / "cache" / "tasks").exists()


def test_a_symlink_in_a_fetched_task_stays_a_link_inside_the_cache(
    e2e: Any, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    task = repo / "t"
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text('[task]\nname = "evil/t"\n')
    (task / "instruction.md").write_text("x\n")
    (task / "tests" / "test.sh").write_text(
        '#!/bin/bash\necho 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
    )
    secret = tmp_path / "host-secret"
    secret.write_text("SECRET\n")
    os.symlink(secret, task / "leak")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "x")
    commit = _git(repo, "rev-parse", "HEAD")
    registry = _registry(
        tmp_path / "r.json",
        [{"name": "t", "git_url": str(repo), "git_commit_id": commit, "path": "t"}],
    )
    fetched = e2e.run(
        "datasets", "download", "evil@1", "--registry-path", registry, env=_env(tmp_path)
    )
    assert fetched.code == 0, fetched
    (leak,) = (tmp_path / "cache" / "tasks").glob("*/t/leak")
    # The link was copied as a link (never followed): the secret's bytes are not in the cache.
    assert leak.is_symlink()
    cached = [p for p in (tmp_path / "cache").rglob("*") if p.is_file() and not p.is_symlink()]
    assert all(b"SECRET" not in p.read_bytes() for p in cached)
    shutil.rmtree(repo)
