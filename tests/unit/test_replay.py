"""The replay agent's restore: the workspace becomes exactly the saved copy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.agents.replay import RESTORE_SCRIPT, ReplayAgent
from harness.errors import AgentRunError


def tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): p.read_text() if p.is_file() else "<dir>"
        for p in sorted(root.rglob("*"))
    }


def test_restore_deletes_extras_writes_changes_and_keeps_the_rest(tmp_path: Path) -> None:
    saved, workspace = tmp_path / "saved", tmp_path / "ws"
    for root, files in (
        (saved, {"a.txt": "new", "same.txt": "same", "sub/b.txt": "b"}),
        (workspace, {"a.txt": "old", "same.txt": "same", "gone.txt": "x", "olddir/c.txt": "c"}),
    ):
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
    (workspace / "link").symlink_to(saved / "a.txt")
    subprocess.run([sys.executable, "-c", RESTORE_SCRIPT, str(saved), str(workspace)], check=True)
    assert (
        tree(workspace)
        == tree(saved)
        == {"a.txt": "new", "same.txt": "same", "sub": "<dir>", "sub/b.txt": "b"}
    )


def test_trial_ids_cannot_leave_the_source_evidence(tmp_path: Path) -> None:
    (tmp_path / "trials").mkdir()
    agent = ReplayAgent(source=str(tmp_path))
    with pytest.raises(AgentRunError, match="does not name an evidence dir"):
        agent._evidence("../../etc")
    assert agent.describe() == {"name": "replay", "source": str(tmp_path)}
    assert agent.session_file is None and ReplayAgent(source="x", session=True).session_file
