"""Emptying what an agent left (``sandbox/inside/spaces.py``, the supervisor's ops over it)."""

from __future__ import annotations

import os
from pathlib import Path

from sandbox.inside.spaces import clear_dir, op_clear_dir, remove_entry
from sandbox.inside.supervisor import op_reset_dir


def _deep(top: Path, depth: int, name: str = "d" * 200) -> None:
    """A tree ``depth`` levels deep under ``top/deep``, a file and a link at every level."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    os.mkdir("deep", dir_fd=fd)
    cur = os.open("deep", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    os.close(fd)
    for _ in range(depth):
        os.close(os.open("f", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=cur))
        os.symlink("/", "l", dir_fd=cur)
        os.mkdir(name, dir_fd=cur)
        below = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=cur)
        os.close(cur)
        cur = below
    os.close(cur)


def test_a_tree_deeper_than_the_recursion_limit_and_path_max_goes(tmp_path: Path) -> None:
    _deep(tmp_path, 1500)  # 1,500 levels of 200-byte names: 300 KB of path
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "kept").write_text("x")
    os.symlink(outside, tmp_path / "link")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        remove_entry(fd, "deep")
        remove_entry(fd, "link")
        remove_entry(fd, "absent")
    finally:
        os.close(fd)
    assert os.listdir(tmp_path) == []
    assert (outside / "kept").read_text() == "x"  # never followed


def test_clear_dir_keeps_mount_points_and_trims_the_harness_files(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "mine").write_text("agent's")
    (tmp_path / "agent.stdout").write_bytes(b"o" * 5000)
    (tmp_path / "small.log").write_bytes(b"s" * 10)
    os.symlink("/etc/passwd", tmp_path / "linked.log")
    os.mkfifo(tmp_path / "fifo.log")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "fill").write_bytes(b"0" * 4096)
    (tmp_path / "junk.bin").write_bytes(b"0" * 4096)
    trim = {"agent.stdout": 100, "small.log": 100, "linked.log": 100, "fifo.log": 100}
    removed = clear_dir(str(tmp_path), ["home"], trim)
    assert removed == 2
    assert sorted(os.listdir(tmp_path)) == ["agent.stdout", "home", "small.log"]
    assert (tmp_path / "agent.stdout").read_bytes() == b"o" * 100
    assert (tmp_path / "small.log").read_bytes() == b"s" * 10
    assert (tmp_path / "home" / "mine").read_text() == "agent's"
    assert Path("/etc/passwd").stat().st_size > 0
    assert op_clear_dir({"path": str(tmp_path), "keep": ["home"]}) == {"removed": 2}


def test_reset_dir_empties_a_deep_tree_keeping_the_dir(tmp_path: Path) -> None:
    top = tmp_path / "verifier"
    top.mkdir()
    _deep(top, 1200, name="d")
    op_reset_dir({"path": str(top), "keep_dir": True, "mode": 0o755})
    assert top.is_dir() and os.listdir(top) == []
    os.symlink("/", tmp_path / "planted")
    op_reset_dir({"path": str(tmp_path / "planted"), "mode": 0o700})
    assert (tmp_path / "planted").is_dir() and not (tmp_path / "planted").is_symlink()
