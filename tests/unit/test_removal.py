"""``remove_tree``: an agent's read-only tree goes; what holds the tree is never changed.

A removal that fails at the top (a mount point still busy) once made the top's parent dir
mode 0700 while retrying: with the parent ``/tmp``, every other user lost it (found when the
suite's parallel workers removed run dirs that were still being written).
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from sandbox.removal import remove_tree


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_a_tree_the_agent_made_unremovable_goes(tmp_path: Path) -> None:
    top = tmp_path / "ws"
    (top / "a" / "b").mkdir(parents=True)
    (top / "a" / "b" / "f").write_text("x")
    (top / "a" / "b" / "f").chmod(0o400)
    for path in (top / "a" / "b", top / "a", top):
        path.chmod(0)
    remove_tree(top)
    assert not top.exists()


def test_a_symlink_in_the_tree_is_removed_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o755)
    (outside / "keep").write_text("kept")
    top = tmp_path / "ws"
    (top / "d").mkdir(parents=True)
    (top / "d" / "link").symlink_to(outside)
    (top / "d").chmod(0)
    remove_tree(top)
    assert not top.exists()
    assert (outside / "keep").read_text() == "kept" and _mode(outside) == 0o755


@pytest.mark.root
def test_a_top_that_cannot_go_leaves_its_parent_as_it_was(tmp_path: Path) -> None:
    parent = tmp_path / "shared"
    parent.mkdir()
    parent.chmod(0o1777)  # as /tmp is
    top = parent / "busy"
    top.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(top)], check=True)
    try:
        (top / "entry").write_text("x")
        with pytest.raises(OSError):
            remove_tree(top)  # the mount point itself cannot be removed (EBUSY)
        assert _mode(parent) == 0o1777
    finally:
        subprocess.run(["umount", "-l", str(top)], check=True)
