"""A trial's final workspace, whichever ``--evidence`` mode kept it.

``full`` left a copy in ``<evidence>/workspace/``; ``diff`` and ``none`` left a manifest
(``workspace.manifest.json``) whose changed files live in the run's content store (see
:mod:`sandbox.evidence_diff`) and whose unchanged files are the task's own (its
``workspace/`` dir, each checked against its sha256). :func:`final_workspace` gives readers
one view: a dir of the final workspace's regular files — what a full copy holds — put
together from those when a manifest wrote it. Entries that are not regular files
(symlinks, FIFOs...) are in neither: they are evidence events in the record, as with a
full copy. Files that ``none`` did not keep are listed by :func:`not_kept`.

A run dir is untrusted input (``harness report`` or ``regrade`` may be given one from
anywhere): every manifest entry is validated (``path`` a clean relative path, ``sha256``
exactly 64 lowercase hex characters) and an invalid one is :func:`damaged`, never followed;
every file is opened beneath its root (the run dir for ``objects/``, the evidence dir for a
full copy, the task's ``workspace/`` for a seed) by directory fd with ``O_NOFOLLOW`` at every
component (:mod:`sandbox.beneath`), so a symlink anywhere in the run dir is never followed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.records.layout import (
    OBJECTS_DIRNAME,
    TRIALS_FILENAME,
    WORKSPACE_DIRNAME,
    WORKSPACE_MANIFEST_FILENAME,
)
from sandbox.beneath import (
    SHA256_RE,
    ReadResult,
    is_dir_beneath,
    lstat_beneath,
    open_beneath,
    read_beneath,
    safe_relative,
    walk_beneath,
)

#: How deep an evidence dir lies under its run dir (``trials/<id>/agents/<name>``).
_MAX_NESTING = 4

#: The largest manifest read (a manifest lists every file of a capped workspace).
MAX_MANIFEST_BYTES = 256 << 20

__all__ = [
    "WORKSPACE_DIRNAME",
    "Kept",
    "damaged",
    "entry_problem",
    "final_workspace",
    "kept_file",
    "not_kept",
    "read_kept",
    "read_manifest",
    "workspace_kept",
]


def read_manifest(evidence_dir: Path) -> dict[str, Any] | None:
    """The trial's workspace manifest, or None (a ``full`` copy, or no workspace kept)."""
    read = read_beneath(evidence_dir, WORKSPACE_MANIFEST_FILENAME, MAX_MANIFEST_BYTES)
    if read is None or read.size > len(read.data):
        return None
    try:
        data = json.loads(read.data.decode("utf-8"))
    except ValueError:
        return None
    return data if isinstance(data, dict) and isinstance(data.get("files"), list) else None


def entry_problem(entry: object) -> str | None:
    """Why a manifest entry is invalid (None: a clean relative path and a sha256)."""
    if not isinstance(entry, dict):
        return "not an object"
    if safe_relative(entry.get("path")) is None:
        return "path is not a relative path inside the workspace"
    sha = entry.get("sha256")
    if not isinstance(sha, str) or SHA256_RE.fullmatch(sha) is None:
        return "sha256 is not 64 lowercase hex characters"
    return None


def damaged(evidence_dir: Path) -> list[dict[str, Any]]:
    """The manifest's invalid entries, each ``{path, problem}`` (never followed).

    ``path`` is the entry's path as written (clipped, ``repr`` when not a string).
    """
    manifest = read_manifest(evidence_dir)
    if manifest is None:
        return []
    found = []
    for entry in manifest["files"]:
        problem = entry_problem(entry)
        if problem is not None:
            raw = entry.get("path") if isinstance(entry, dict) else entry
            shown = raw if isinstance(raw, str) else repr(raw)
            found.append({"path": shown[:300], "problem": problem})
    return found


@dataclass(frozen=True)
class Kept:
    """Where one kept file is: a path relative to a root, opened only beneath it.

    Attributes:
        root: The run dir (a changed file in ``objects/``), the evidence dir (a full
            copy) or the task's ``workspace/`` (an unchanged file).
        rel: Its path relative to ``root``.
    """

    root: Path
    rel: str

    @property
    def path(self) -> Path:
        """The joined path, for messages (open it with :func:`sandbox.beneath.open_beneath`)."""
        return self.root / self.rel


def _run_root(evidence_dir: Path) -> Path | None:
    """The run dir: the nearest ancestor with a real ``objects/`` (attempt dirs nest deeper).

    Looked for no higher than the run dir itself (at most :data:`_MAX_NESTING` levels up,
    and never past a dir holding ``trials.jsonl``): a store outside the run is never used.
    """
    for parent in evidence_dir.absolute().parents[:_MAX_NESTING]:
        if is_dir_beneath(parent, OBJECTS_DIRNAME):
            return parent
        if lstat_beneath(parent, TRIALS_FILENAME) is not None:
            return None
    return None


def _object(root: Path | None, sha: str) -> Kept | None:
    if root is None:
        return None
    kept = Kept(root, f"{OBJECTS_DIRNAME}/{sha[:2]}/{sha}")
    try:
        fd = open_beneath(root, kept.rel)
    except OSError:
        return None
    try:
        return kept if stat.S_ISREG(os.fstat(fd).st_mode) else None
    finally:
        os.close(fd)


def _seed_file(seed: Path | None, rel: str, sha: str) -> Kept | None:
    """The task's own copy of an unchanged file, if it still has that content.

    The seed dir itself must not be a symlink (a forged record's ``task.path`` may name a
    dir whose ``workspace`` links anywhere).
    """
    if seed is None or not is_dir_beneath(seed.parent, seed.name):
        return None
    try:
        fd = open_beneath(seed, rel)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return None
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
    return Kept(seed, rel) if digest == sha else None


def _source(entry: Any, root: Path | None, seed: Path | None) -> tuple[str, Kept | None]:
    """An entry's path and where its content is ("", None for an invalid entry)."""
    if entry_problem(entry) is not None:
        return "", None
    rel, sha = entry["path"], entry["sha256"]
    if entry.get("unchanged"):
        return rel, _seed_file(seed, rel, sha) or _object(root, sha)
    return rel, _object(root, sha)


def not_kept(evidence_dir: Path, seed: Path | None = None) -> list[dict[str, Any]]:
    """Changed files whose content is not in the store (``--evidence none``).

    Invalid entries are not listed here: they are :func:`damaged`.
    """
    manifest = read_manifest(evidence_dir)
    if manifest is None:
        return []
    root = _run_root(evidence_dir)
    return [
        entry
        for entry in manifest["files"]
        if entry_problem(entry) is None
        and not entry.get("unchanged")
        and _source(entry, root, seed)[1] is None
    ]


def kept_file(evidence_dir: Path, rel: str, seed: Path | None = None) -> Kept | None:
    """Where one regular file of the final workspace is kept (None: not in it, or not kept).

    Args:
        evidence_dir: The trial's (or attempt's) evidence dir.
        rel: A workspace-relative path.
        seed: The task's ``workspace/`` dir, for a file the agent left unchanged.
    """
    if safe_relative(rel) is None:
        return None
    manifest = read_manifest(evidence_dir)
    if manifest is None:
        return Kept(evidence_dir, f"{WORKSPACE_DIRNAME}/{rel}")
    for entry in manifest["files"]:
        if isinstance(entry, dict) and entry.get("path") == rel:
            return _source(entry, _run_root(evidence_dir), seed)[1]
    return None


def read_kept(
    evidence_dir: Path, rel: str, limit: int, seed: Path | None = None
) -> ReadResult | None:
    """At most ``limit`` bytes of one file of the final workspace, with its size.

    None: not in the workspace, not kept, or not a regular file reached without a link.
    """
    kept = kept_file(evidence_dir, rel, seed)
    return None if kept is None else read_beneath(kept.root, kept.rel, limit)


def workspace_kept(evidence_dir: Path, seed: Path | None = None) -> bool:
    """Whether the trial's whole final workspace can be rebuilt (``full`` or ``diff``).

    A manifest with a :func:`damaged` entry cannot: that file's content is unknown.
    """
    if read_manifest(evidence_dir) is None:
        return is_dir_beneath(evidence_dir, WORKSPACE_DIRNAME)
    return not not_kept(evidence_dir, seed) and not damaged(evidence_dir)


def _place(kept: Kept, target: Path) -> bool:
    """Put the kept file at ``target``; False when nothing could be made.

    A hard link when the path still names the very file opened beneath its root, else a
    copy from that fd. Nothing is made for an entry that is not a regular file, or whose
    place is taken (a forged manifest listing both ``a`` and ``a/b``).
    """
    try:
        fd = open_beneath(kept.root, kept.rel)
    except OSError:
        return False
    try:
        return _place_fd(fd, kept, target)
    except OSError:
        return False
    finally:
        os.close(fd)


def _place_fd(fd: int, kept: Kept, target: Path) -> bool:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(kept.path, target, follow_symlinks=False)
        made = os.lstat(target)
        if (made.st_dev, made.st_ino) == (info.st_dev, info.st_ino):
            return True
        target.unlink()  # the path changed under us: copy what was opened
    except OSError:  # another filesystem: copy
        pass
    with os.fdopen(os.dup(fd), "rb") as src, open(target, "xb") as dst:
        shutil.copyfileobj(src, dst)
    return True


@contextmanager
def final_workspace(evidence_dir: Path, seed: Path | None = None) -> Iterator[Path | None]:
    """The final workspace's regular files as a dir (None: none was kept).

    Always a temporary dir (removed afterwards) holding regular files only: a ``full``
    copy's files, or a manifest's files from the run's store and the seed, each opened
    beneath its root without following a link (and hard-linked when it can be).

    Args:
        evidence_dir: The trial's (or attempt's) evidence dir.
        seed: The task's ``workspace/`` dir (the record's ``task.path``), for the files
            the agent left unchanged.
    """
    manifest = read_manifest(evidence_dir)
    if manifest is None and not is_dir_beneath(evidence_dir, WORKSPACE_DIRNAME):
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="harness-workspace-") as tmp:
        root = Path(tmp) / WORKSPACE_DIRNAME
        root.mkdir()
        if manifest is None:
            for entry in walk_beneath(evidence_dir, WORKSPACE_DIRNAME):
                if stat.S_ISREG(entry.info.st_mode):
                    _place(Kept(evidence_dir, f"{WORKSPACE_DIRNAME}/{entry.rel}"), root / entry.rel)
        else:
            run_root = _run_root(evidence_dir)
            for item in manifest["files"]:
                rel, source = _source(item, run_root, seed)
                if source is not None:
                    _place(source, root / rel)
        yield root
