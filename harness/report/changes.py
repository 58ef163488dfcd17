"""The files an agent changed: its final workspace against the task's initial workspace.

:func:`agent_changes` is the one place that knows where the two sides come from: the
task dir's ``workspace/`` (the record's ``task.path``; missing means the workspace started
empty) and the trial's final workspace, a full copy or a manifest over the run's content
store (:mod:`harness.records.workspace`).

Both trees are walked without following links. Text files up to
:attr:`~harness.report.clip.Limits.diff_bytes` get a unified diff; larger or binary files
are listed with their sizes (a text file gets a preview of its start).
"""

from __future__ import annotations

import difflib
import os
import stat
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

from harness.records import TrialRecord
from harness.records.workspace import WORKSPACE_DIRNAME, damaged, final_workspace, not_kept
from harness.report.clip import Limits, clip_text, read_text_capped
from sandbox.beneath import is_dir_beneath, open_beneath, read_beneath, walk_beneath

__all__ = ["WORKSPACE_DIRNAME", "FileChange", "agent_changes", "diff_trees"]


_SNIFF_BYTES = 8192


@dataclass(frozen=True)
class FileChange:
    """One changed path.

    Attributes:
        path: Path relative to the workspace root (posix).
        change: ``added``, ``deleted``, ``modified``, ``type`` (a file became a link...)
            or ``damaged`` (an invalid manifest entry: its ``preview`` says why).
        kind: ``text``, ``binary``, ``large``, ``symlink``, ``other``, ``not_kept`` or
            ``damaged``.
        before: Size in bytes before (None when absent).
        after: Size in bytes after (None when absent).
        diff: Unified diff text (maybe clipped), for text files.
        preview: The start of a large text file's new content.
    """

    path: str
    change: str
    kind: str
    before: int | None
    after: int | None
    diff: Any = None
    preview: Any = None


class _Entry(NamedTuple):
    kind: str  # "file", "symlink", "other"
    size: int
    root: Path  # the tree walked: the entry is opened beneath it, never through a link
    rel: str

    @property
    def path(self) -> Path:
        return self.root / self.rel


def _walk(root: Path) -> dict[str, _Entry]:
    """Every non-directory entry under ``root``, by dir fd, without following links."""
    entries: dict[str, _Entry] = {}
    try:
        found = list(walk_beneath(root))
    except OSError:  # missing, or itself a link
        return entries
    for rel, info in found:
        if stat.S_ISDIR(info.st_mode):
            continue
        if stat.S_ISLNK(info.st_mode):
            kind = "symlink"
        elif stat.S_ISREG(info.st_mode):
            kind = "file"
        else:
            kind = "other"
        entries[rel] = _Entry(kind, info.st_size, root, rel)
    return entries


def _read_small(entry: _Entry, limit: int) -> bytes | None:
    """A regular file's bytes when it has at most ``limit`` bytes (no links followed)."""
    if entry.size > limit:
        return None
    read = read_beneath(entry.root, entry.rel, limit + 1)
    return None if read is None else read.data


def _same_content(a: _Entry, b: _Entry) -> bool:
    """Whether two regular files of equal size hold the same bytes."""
    try:
        fa, fb = open_beneath(a.root, a.rel), open_beneath(b.root, b.rel)
    except OSError:
        return False
    try:
        while True:
            chunk_a, chunk_b = os.read(fa, 1 << 16), os.read(fb, 1 << 16)
            if chunk_a != chunk_b:
                return False
            if not chunk_a:
                return True
    except OSError:
        return False
    finally:
        os.close(fa)
        os.close(fb)


def _is_text(data: bytes) -> bool:
    return b"\0" not in data[:_SNIFF_BYTES]


def _link_text(entry: _Entry) -> str:
    try:
        return f"-> {os.readlink(entry.path)}"
    except OSError:
        return "-> ?"


def _text_change(
    rel: str, change: str, old: _Entry | None, new: _Entry | None, limits: Limits
) -> FileChange:
    """A regular file added, deleted or modified: a diff, a preview, or just sizes."""
    before = old[1] if old else None
    after = new[1] if new else None
    old_bytes = _read_small(old, limits.diff_bytes) if old else b""
    new_bytes = _read_small(new, limits.diff_bytes) if new else b""
    if old_bytes is None or new_bytes is None:
        preview = read_text_capped(new.root, new.rel, limits.string) if new else None
        return FileChange(rel, change, "large", before, after, preview=preview)
    if not (_is_text(old_bytes) and _is_text(new_bytes)):
        return FileChange(rel, change, "binary", before, after)
    old_lines = old_bytes.decode("utf-8", errors="replace").splitlines(keepends=True)
    new_lines = new_bytes.decode("utf-8", errors="replace").splitlines(keepends=True)
    diff = "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
        for line in difflib.unified_diff(
            old_lines,
            new_lines,
            fromfile=f"a/{rel}" if old else "/dev/null",
            tofile=f"b/{rel}" if new else "/dev/null",
        )
    )
    return FileChange(rel, change, "text", before, after, diff=clip_text(diff, limits.text))


def diff_trees(initial: Path | None, final: Path, limits: Limits) -> list[FileChange]:
    """The changes from ``initial`` (None: empty) to ``final``, sorted by path."""
    old = _walk(initial) if initial is not None else {}
    new = _walk(final)
    changes: list[FileChange] = []
    for rel in sorted(old.keys() | new.keys()):
        a, b = old.get(rel), new.get(rel)
        if a and b and a[0] == b[0] == "file":
            if a[1] == b[1] and _same_content(a, b):
                continue
            changes.append(_text_change(rel, "modified", a, b, limits))
        elif a and b:
            if a[0] == b[0] == "symlink" and _link_text(a) == _link_text(b):
                continue
            kind = b[0] if b[0] != "file" else a[0]
            changes.append(FileChange(rel, "type", kind, a[1], b[1], preview=_link_text(b)))
        elif b:
            changes.append(_entry_change(rel, "added", None, b, limits))
        elif a:
            changes.append(_entry_change(rel, "deleted", a, None, limits))
    return changes


def _entry_change(
    rel: str, change: str, old: _Entry | None, new: _Entry | None, limits: Limits
) -> FileChange:
    entry = new or old
    assert entry is not None
    if entry[0] == "file":
        return _text_change(rel, change, old, new, limits)
    preview = _link_text(entry) if entry[0] == "symlink" else None
    return FileChange(
        rel, change, entry[0], old[1] if old else None, new[1] if new else None, preview=preview
    )


def agent_changes(record: TrialRecord, evidence_dir: Path | None, limits: Limits) -> dict[str, Any]:
    """The files the agent changed in one attempt of a trial.

    Args:
        record: The trial's record (``task.path`` locates the initial workspace).
        evidence_dir: The attempt's evidence dir (its final workspace, in whichever
            ``--evidence`` mode it was kept: :func:`~harness.records.workspace.final_workspace`).
        limits: Report limits (files listed, diff sizes).

    Returns:
        ``{"base": str, "base_found": bool, "final_found": bool, "files": [...],
        "omitted": int}``: the initial workspace's path, whether each side exists, the
        changes (see :class:`FileChange`) and how many were left out past the limit.
    """
    initial = Path(record.task.path) / WORKSPACE_DIRNAME
    task_found = Path(record.task.path).is_dir()
    # The task's workspace/ must be a real dir of the task dir (a link there is not followed).
    seed = initial if is_dir_beneath(record.task.path, WORKSPACE_DIRNAME) else None
    files: list[FileChange] = []
    final_found = False
    if evidence_dir is not None:
        with final_workspace(evidence_dir, seed) as final:
            final_found = final is not None
            if final is not None:
                files = diff_trees(seed, final, limits)
        files = _with_not_kept(files, evidence_dir, seed) + _damaged(evidence_dir)
    return {
        "base": str(initial),
        "base_found": seed is not None,
        "task_found": task_found,
        "final_found": final_found,
        "files": [asdict(change) for change in files[: limits.files]],
        "omitted": max(len(files) - limits.files, 0),
    }


def _damaged(evidence_dir: Path) -> list[FileChange]:
    """The manifest's invalid entries (a forged ``sha256`` or path): listed, never followed."""
    return [
        FileChange(entry["path"], "damaged", "damaged", None, None, preview=entry["problem"])
        for entry in damaged(evidence_dir)
    ]


def _with_not_kept(
    files: list[FileChange], evidence_dir: Path, seed: Path | None
) -> list[FileChange]:
    """Changed files ``--evidence none`` listed without content (not "deleted")."""
    missing = {str(e.get("path")): e for e in not_kept(evidence_dir, seed)}
    if not missing:
        return files
    out = [f for f in files if not (f.path in missing and f.change == "deleted")]
    before = {f.path: f.before for f in files if f.change == "deleted"}
    for rel, entry in missing.items():
        size = entry.get("size") if isinstance(entry.get("size"), int) else None
        change = "modified" if rel in before else "added"
        out.append(FileChange(rel, change, "not_kept", before.get(rel), size))
    return sorted(out, key=lambda f: f.path)
