"""A killed harness's allowlist socket dirs are removed by the next one, and nothing else."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sandbox.docker.trial_network import EGRESS_DIR_PREFIX, remove_stale_egress_dirs


def _dead_pid() -> int:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


def test_only_dirs_of_processes_that_are_gone_are_removed(tmp_path: Path) -> None:
    dead = tmp_path / f"{EGRESS_DIR_PREFIX}{_dead_pid()}-abc"
    alive = tmp_path / f"{EGRESS_DIR_PREFIX}{os.getpid()}-def"
    odd = tmp_path / f"{EGRESS_DIR_PREFIX}x-1"
    for path in (dead, alive, odd):
        path.mkdir()
        (path / "proxy.sock").write_text("")
    # A link named like a dead harness's dir: never followed, its target kept.
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep").write_text("x")
    link = tmp_path / f"{EGRESS_DIR_PREFIX}{_dead_pid()}-link"
    link.symlink_to(target)
    assert remove_stale_egress_dirs(tmp_path) == [dead]
    assert not dead.exists() and alive.is_dir() and odd.is_dir()
    assert link.is_symlink() and (target / "keep").read_text() == "x"
