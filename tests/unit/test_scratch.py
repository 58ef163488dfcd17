"""sandbox.scratch: a verifier's scratch dirs are fresh, the agent's files come back intact.

Real files on a real filesystem (as root, for the owners): what the agent left, including
symlinks and a dir it made unreadable, is moved aside unread and put back byte for byte; a
park that was never undone (a crash mid-verifier) loses nothing.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from sandbox.scratch import PARKED, SCRATCH_DIRS, park, unpark

GRADER = (4242, 4242)


def _layout(fs: Path) -> None:
    for name in SCRATCH_DIRS:
        (fs / name).mkdir(parents=True)
        os.chmod(fs / name, 0o1777)


def _agent_files(fs: Path) -> None:
    tmp = fs / "tmp"
    (tmp / "note").write_text("agent")
    os.symlink("/logs/verifier/reward.json", tmp / "result.json")
    (tmp / "locked").mkdir()
    (tmp / "locked" / "inside").write_text("deep")
    os.chmod(tmp / "locked", 0)
    (fs / "shm" / "seg").write_bytes(b"\0" * 16)


def _listing(fs: Path) -> dict[str, list[str]]:
    return {name: sorted(os.listdir(fs / name)) for name in SCRATCH_DIRS}


@pytest.mark.root
def test_park_leaves_empty_grader_dirs_and_unpark_restores_the_agents(tmp_path: Path) -> None:
    fs = tmp_path / "fs"
    _layout(fs)
    _agent_files(fs)
    before = _listing(fs)
    park(fs, GRADER)
    for name in SCRATCH_DIRS:
        st = os.lstat(fs / name)
        assert os.listdir(fs / name) == []
        assert (st.st_uid, st.st_gid) == GRADER and stat.S_IMODE(st.st_mode) == 0o755
    parked = os.lstat(fs / PARKED)
    assert parked.st_uid == 0 and stat.S_IMODE(parked.st_mode) == 0o700
    # The verifier's own files, one a symlink out of the trial.
    (fs / "tmp" / "verifier-note").write_text("grader")
    os.symlink("/etc/passwd", fs / "var-tmp" / "link")
    unpark(fs)
    assert _listing(fs) == before
    assert not os.path.lexists(fs / PARKED)
    assert os.readlink(fs / "tmp" / "result.json") == "/logs/verifier/reward.json"
    assert (fs / "tmp" / "note").read_text() == "agent"
    os.chmod(fs / "tmp" / "locked", 0o700)
    assert (fs / "tmp" / "locked" / "inside").read_text() == "deep"
    assert Path("/etc/passwd").exists()  # removing the verifier's link followed nothing
    for name in SCRATCH_DIRS:
        st = os.lstat(fs / name)
        assert st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o1777


@pytest.mark.root
def test_a_park_never_undone_is_undone_first(tmp_path: Path) -> None:
    fs = tmp_path / "fs"
    _layout(fs)
    _agent_files(fs)
    before = _listing(fs)
    park(fs, GRADER)
    (fs / "tmp" / "verifier-note").write_text("grader")
    park(fs, GRADER)  # the harness died mid-verifier; the next verifier phase parks again
    assert _listing(fs) == {name: [] for name in SCRATCH_DIRS}
    unpark(fs)
    assert _listing(fs) == before
    unpark(fs)  # nothing parked: a no-op
    assert _listing(fs) == before
