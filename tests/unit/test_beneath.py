"""``sandbox.beneath``: every component below the root is opened without following a link."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.episodes.judge import JudgeEnv, JudgeParams
from harness.errors import TaskError
from harness.tasks import load_task
from harness.tasks.limits import MAX_TASK_TEXT_BYTES
from sandbox import beneath
from sandbox.backend import dir_files
from sandbox.beneath import (
    copy_file_beneath,
    is_dir_beneath,
    lstat_beneath,
    open_beneath,
    read_beneath,
    safe_relative,
    walk_beneath,
)
from sandbox.errors import SandboxError, SeedingError
from sandbox.seeding import copy_tree_nofollow


@pytest.fixture(params=["openat2", "per-component"], autouse=True)
def resolution(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs with openat2 and with the per-component fallback."""
    if request.param == "openat2":
        beneath.open_beneath("/", "etc")  # decides whether the kernel has it
        if beneath._openat2_usable is not True:
            pytest.fail("this kernel has openat2 (Linux >= 5.6): it must be used")
    else:
        monkeypatch.setattr(beneath, "_openat2_usable", False)
    return str(request.param)


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f.txt").write_text("inside\n")
    outside.mkdir()
    (outside / "secret").write_text("outside\n")
    (root / "a" / "to-outside").symlink_to(outside)
    (root / "a" / "file-link").symlink_to(outside / "secret")
    (root / "a" / "inner-link").symlink_to("b")
    os.mkfifo(root / "a" / "fifo")
    return root, outside


def test_reads_stay_beneath_the_root(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    read = read_beneath(root, "a/b/f.txt", 100)
    assert read is not None and read.data == b"inside\n" and read.size == 7
    for rel in ("a/to-outside/secret", "a/file-link", "a/inner-link/f.txt", "a/fifo"):
        assert read_beneath(root, rel, 100) is None, rel
    for rel in ("../outside/secret", "a/../../outside/secret", str(tree[1] / "secret")):
        with pytest.raises(OSError):
            open_beneath(root, rel)
    assert read_beneath(root, "a/b/f.txt", 3) == (b"ins", 7)  # bounded, size reported
    proc = Path("/proc/self")
    assert read_beneath(proc, "root/etc/hostname", 100) is None  # a magic link on the way


def test_stat_and_dirs_do_not_follow(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    assert is_dir_beneath(root, "a/b") and not is_dir_beneath(root, "a/to-outside")
    info = lstat_beneath(root, "a/file-link")
    assert info is not None and not os.path.samestat(info, os.stat(tree[1] / "secret"))
    assert lstat_beneath(root, "a/to-outside/secret") is None


def test_walk_reports_links_and_never_enters_them(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    seen = {entry.rel for entry in walk_beneath(root)}
    assert {"a", "a/b", "a/b/f.txt", "a/to-outside", "a/file-link", "a/inner-link"} <= seen
    assert not any(rel.startswith(("a/to-outside/", "a/inner-link/")) for rel in seen)
    with pytest.raises(OSError):
        list(walk_beneath(root, "a/to-outside"))


def test_copy_refuses_a_link(tree: tuple[Path, Path], tmp_path: Path) -> None:
    root, _ = tree
    assert copy_file_beneath(root, "a/file-link", tmp_path / "x") is None
    assert not (tmp_path / "x").exists()
    assert copy_file_beneath(root, "a/b/f.txt", tmp_path / "y") is not None
    assert (tmp_path / "y").read_text() == "inside\n"


@pytest.mark.parametrize("bad", ["", "/abs", "a/../b", "./a", "a//b", "a/", "a\0b", 3, None])
def test_safe_relative_refuses(bad: object) -> None:
    assert safe_relative(bad) is None


def test_a_rubric_over_its_cap_is_refused_naming_it(tmp_path: Path) -> None:
    task_dir = tmp_path / "t"
    (task_dir / "tests").mkdir(parents=True)
    (task_dir / "judge").mkdir()
    (task_dir / "task.toml").write_text("")
    (task_dir / "instruction.md").write_text("x\n")
    (task_dir / "tests" / "test.sh").write_text("")
    with open(task_dir / "judge" / "rubric.md", "wb") as fh:
        fh.truncate(MAX_TASK_TEXT_BYTES + 1)
    env = JudgeEnv(JudgeParams())
    with pytest.raises(TaskError, match=f"rubric.md: .*{MAX_TASK_TEXT_BYTES} bytes"):
        env.check(load_task(task_dir))


def test_a_task_tree_is_copied_without_following_links(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    copy = root.parent / "copy"
    copy_tree_nofollow(root / "a", copy)
    assert (copy / "b" / "f.txt").read_text() == "inside\n"
    assert os.readlink(copy / "inner-link") == "b"  # kept as a link
    assert (copy / "to-outside").is_symlink() and (copy / "file-link").is_symlink()
    assert not (copy / "fifo").exists()
    with pytest.raises(SeedingError):
        copy_tree_nofollow(root / "a" / "to-outside", root.parent / "copy2")
    assert not (root.parent / "copy2").exists()


def test_dir_files_reads_no_link(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    items = {item["path"]: item for item in dir_files(root / "a")}
    assert sorted(items) == ["b/f.txt"]
    with pytest.raises(SandboxError):
        dir_files(root / "a" / "to-outside")
