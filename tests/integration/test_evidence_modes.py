"""``--evidence full|diff|none``: what each keeps, and that readers see one workspace.

The agent (a real command in a real sandbox) leaves a seed file alone, changes one, adds
one, deletes one, and replaces one with a symlink to a host secret and another with a
FIFO. Each mode must record the tampering, never follow the link or open the FIFO, and
give ``harness report``'s ``agent_changes`` the same logical workspace.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from harness.config import RunConfig
from harness.records.workspace import final_workspace, read_manifest
from harness.report.changes import agent_changes
from harness.report.clip import Limits
from harness.runner import execute_run, prepare_run
from sandbox.evidence_diff import MANIFEST_NAME, OBJECTS_DIR

SEED = {
    "keep.txt": b"unchanged seed file\n",
    "edit.txt": b"old line\n",
    "gone.txt": b"deleted by the agent\n",
    "link.txt": b"replaced by a symlink\n",
    "fifo.txt": b"replaced by a fifo\n",
    "lib/deep.txt": b"nested, unchanged\n",
}
AGENT = """set -e
cd "$HARNESS_WORKSPACE"
echo 'new line' > edit.txt
echo 'made by the agent' > added.txt
rm gone.txt
rm link.txt && ln -s {secret} link.txt
rm fifo.txt && mkfifo fifo.txt
"""


def _task(root: Path, secret: Path) -> Path:
    task = root / "evidence-task"
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text(
        '[task]\nname = "evidence-task"\n\n[agent]\ntimeout_sec = 60\n\n'
        "[verifier]\ntimeout_sec = 60\n"
    )
    (task / "instruction.md").write_text(AGENT.format(secret=secret))
    (task / "tests" / "test.sh").write_text(
        '#!/bin/bash\necho 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
    )
    for rel, data in SEED.items():
        (task / "workspace" / rel).parent.mkdir(parents=True, exist_ok=True)
        (task / "workspace" / rel).write_bytes(data)
    return task


def _run(task: Path, out: Path, mode: str, backend: str) -> tuple[Any, Path]:
    config = RunConfig.model_validate(
        {
            "tasks": {"paths": [str(task)]},
            "agent": {"name": "command", "cmd": "bash {instruction_file}"},
            "sandbox": {"backend": backend.split("-")[0], "runtime": runtime_of(backend)},
            "output_dir": str(out),
            "evidence": mode,
        }
    )
    outcome = execute_run(prepare_run(config))
    (record,) = outcome.records
    assert record.ok and record.reward == 1.0, record
    return record, outcome.run_dir / "trials" / record.id


def runtime_of(backend: str) -> str | None:
    """``docker-runsc``: the docker backend under gVisor (FIFOs stay inside the sandbox)."""
    return backend.split("-", 1)[1] if "-" in backend else None


def _files(root: Path | None) -> dict[str, bytes]:
    assert root is not None
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def _tampering(record: Any) -> dict[str, str]:
    return {
        e["path"].rsplit("/", 1)[-1]: e["kind"]
        for e in record.events
        if e.get("type") == "evidence" and e["path"].endswith(("link.txt", "fifo.txt"))
    }


@pytest.mark.parametrize(
    "backend",
    [
        "local",
        pytest.param("docker", marks=pytest.mark.docker),
        pytest.param("docker-runsc", marks=pytest.mark.docker),
    ],
)
def test_every_mode_keeps_one_logical_workspace_and_records_the_symlink_and_fifo(
    tmp_path: Path, backend: str
) -> None:
    if os.geteuid() != 0:
        pytest.fail("the evidence-mode test needs root (a confined local sandbox)")
    secret = tmp_path / "host-secret.txt"
    secret.write_text("HOST SECRET\n")
    task = _task(tmp_path / "tasks", secret)
    runs = {mode: _run(task, tmp_path / mode, mode, backend) for mode in ("full", "diff", "none")}
    expected = {
        "keep.txt": SEED["keep.txt"],
        "lib/deep.txt": SEED["lib/deep.txt"],
        "edit.txt": b"new line\n",
        "added.txt": b"made by the agent\n",
    }
    views = {}
    for mode, (record, evidence) in runs.items():
        # Tampering is recorded in every mode; the link is never followed.
        assert _tampering(record) == {"link.txt": "symlink", "fifo.txt": "fifo"}, mode
        for path in evidence.rglob("*"):
            assert not (path.is_file() and b"HOST SECRET" in path.read_bytes()), path
        with final_workspace(evidence, task / "workspace") as final:
            views[mode] = _files(final) if mode != "none" else None
        changes = agent_changes(record, evidence, Limits())
        summary = {f["path"]: f["change"] for f in changes["files"]}
        assert summary == {
            "edit.txt": "modified",
            "added.txt": "added",
            "gone.txt": "deleted",
            "link.txt": "deleted",
            "fifo.txt": "deleted",
        }, (mode, changes)
    assert views["full"] == views["diff"] == expected

    # diff: only the changed files are in workspace/ (hard links into the run's store).
    _, diff_evidence = runs["diff"]
    assert _files(diff_evidence / "workspace") == {
        "edit.txt": b"new line\n",
        "added.txt": b"made by the agent\n",
    }
    manifest = read_manifest(diff_evidence)
    assert manifest is not None
    files = {f["path"]: f for f in manifest["files"]}
    assert set(files) == set(expected)
    assert files["keep.txt"]["unchanged"] and files["lib/deep.txt"]["unchanged"]
    assert not files["edit.txt"]["unchanged"] and not files["added.txt"]["unchanged"]
    assert files["edit.txt"]["size"] == len(b"new line\n")
    assert {s["path"]: s["type"] for s in manifest["special"]} == {
        "link.txt": "symlink",
        "fifo.txt": "fifo",
    }
    stored = (diff_evidence / "workspace" / "edit.txt").stat()
    assert stored.st_nlink >= 2 and not stored.st_mode & 0o222  # shared, read-only

    # none: the manifest only; the changed files are listed, their content not kept.
    record, none_evidence = runs["none"]
    assert not (none_evidence / "workspace").exists()
    assert (none_evidence / MANIFEST_NAME).is_file()
    kinds = {f["path"]: f["kind"] for f in agent_changes(record, none_evidence, Limits())["files"]}
    assert kinds["edit.txt"] == kinds["added.txt"] == "not_kept"

    # full: today's copy, no manifest.
    _, full_evidence = runs["full"]
    assert not (full_evidence / MANIFEST_NAME).exists()


def test_identical_files_across_trials_are_stored_once_per_run(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("the evidence-mode test needs root (a confined local sandbox)")
    task = tmp_path / "tasks" / "same"
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text('[task]\nname = "same"\n')
    (task / "instruction.md").write_text('echo same > "$HARNESS_WORKSPACE/out.txt"\n')
    (task / "tests" / "test.sh").write_text('echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n')
    (task / "workspace").mkdir()
    (task / "workspace" / "seed.txt").write_bytes(os.urandom(4096))
    config = RunConfig.model_validate(
        {
            "tasks": {"paths": [str(task)]},
            "agent": {"name": "command", "cmd": "bash {instruction_file}"},
            "rollouts": 3,
            "output_dir": str(tmp_path / "runs"),
        }
    )
    outcome = execute_run(prepare_run(config))
    assert all(r.ok for r in outcome.records)
    objects = [p for p in (outcome.run_dir / OBJECTS_DIR).rglob("*") if p.is_file()]
    # the one output, once, whatever the number of trials (the seed stays the task's)
    assert len(objects) == 1, objects
    links = [outcome.run_dir / "trials" / r.id / "workspace" / "out.txt" for r in outcome.records]
    assert len({p.stat().st_ino for p in links}) == 1
