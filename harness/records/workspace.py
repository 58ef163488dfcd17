"""A trial's final workspace, whichever ``--evidence`` mode kept it.

``full`` left a copy in ``<evidence>/workspace/``; ``diff`` and ``none`` left a manifest
(``workspace.manifest.json``) whose changed files live in the run's content store (see
:mod:`sandbox.evidence_diff`) and whose unchanged files are the task's own (its
``workspace/`` dir, each checked against its sha256). :func:`final_workspace` gives readers
one view: a dir of the final workspace's regular files — what a full copy holds — put
together from those when a manifest wrote it. Entries that are not regular files
(symlinks, FIFOs...) are in neither: they are evidence events in the record, as with a
full copy. Files that ``none`` did not keep are listed by :func:`not_kept`.
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
from pathlib import Path
from typing import Any

from sandbox.evidence_diff import MANIFEST_NAME, OBJECTS_DIR

WORKSPACE_DIRNAME = "workspace"

__all__ = ["WORKSPACE_DIRNAME", "final_workspace", "read_manifest", "not_kept"]


def read_manifest(evidence_dir: Path) -> dict[str, Any] | None:
    """The trial's workspace manifest, or None (a ``full`` copy, or no workspace kept)."""
    try:
        data = json.loads((evidence_dir / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("files"), list) else None


def _objects_dir(evidence_dir: Path) -> Path | None:
    """The run's store: the nearest ancestor's ``objects/`` (attempt dirs nest deeper)."""
    for parent in evidence_dir.absolute().parents:
        candidate = parent / OBJECTS_DIR
        if candidate.is_dir():
            return candidate
    return None


def _object(objects: Path | None, sha: object) -> Path | None:
    if objects is None or not isinstance(sha, str) or len(sha) != 64:
        return None
    path = objects / sha[:2] / sha
    return path if path.is_file() and not path.is_symlink() else None


def _seed_file(seed: Path | None, rel: str, sha: object) -> Path | None:
    """The task's own copy of an unchanged file, if it still has that content."""
    if seed is None:
        return None
    path = seed / rel
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return None
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
    return path if digest == sha else None


def _source(entry: Any, objects: Path | None, seed: Path | None) -> tuple[str, Path | None]:
    rel = _safe_rel(entry.get("path")) if isinstance(entry, dict) else None
    if rel is None:
        return "", None
    sha = entry.get("sha256")
    if entry.get("unchanged"):
        return rel, _seed_file(seed, rel, sha) or _object(objects, sha)
    return rel, _object(objects, sha)


def not_kept(evidence_dir: Path, seed: Path | None = None) -> list[dict[str, Any]]:
    """Changed files whose content is not in the store (``--evidence none``)."""
    manifest = read_manifest(evidence_dir)
    if manifest is None:
        return []
    objects = _objects_dir(evidence_dir)
    return [
        entry
        for entry in manifest["files"]
        if isinstance(entry, dict)
        and not entry.get("unchanged")
        and _source(entry, objects, seed)[1] is None
    ]


def kept_file(evidence_dir: Path, rel: str, seed: Path | None = None) -> Path | None:
    """Where one regular file of the final workspace is kept (None: not in it, or not kept).

    Args:
        evidence_dir: The trial's (or attempt's) evidence dir.
        rel: A workspace-relative path.
        seed: The task's ``workspace/`` dir, for a file the agent left unchanged.
    """
    manifest = read_manifest(evidence_dir)
    if manifest is None:
        return evidence_dir / WORKSPACE_DIRNAME / rel
    for entry in manifest["files"]:
        if isinstance(entry, dict) and entry.get("path") == rel:
            return _source(entry, _objects_dir(evidence_dir), seed)[1]
    return None


def workspace_kept(evidence_dir: Path, seed: Path | None = None) -> bool:
    """Whether the trial's whole final workspace can be rebuilt (``full`` or ``diff``)."""
    if read_manifest(evidence_dir) is None:
        copy = evidence_dir / WORKSPACE_DIRNAME
        return copy.is_dir() and not copy.is_symlink()
    return not not_kept(evidence_dir, seed)


def _safe_rel(rel: object) -> str | None:
    if not isinstance(rel, str) or not rel or rel.startswith("/"):
        return None
    parts = rel.split("/")
    return None if any(p in ("", ".", "..") for p in parts) else rel


@contextmanager
def final_workspace(evidence_dir: Path, seed: Path | None = None) -> Iterator[Path | None]:
    """The final workspace's regular files as a dir (None: none was kept).

    A ``full`` copy is given as it is; a manifest's files are linked (or copied) from the
    run's store and the seed into a temporary dir that is removed afterwards.

    Args:
        evidence_dir: The trial's (or attempt's) evidence dir.
        seed: The task's ``workspace/`` dir (the record's ``task.path``), for the files
            the agent left unchanged.
    """
    manifest = read_manifest(evidence_dir)
    copy = evidence_dir / WORKSPACE_DIRNAME
    if manifest is None:
        yield copy if copy.is_dir() and not copy.is_symlink() else None
        return
    objects = _objects_dir(evidence_dir)
    with tempfile.TemporaryDirectory(prefix="harness-workspace-") as tmp:
        root = Path(tmp) / WORKSPACE_DIRNAME
        root.mkdir()
        for entry in manifest["files"]:
            rel, source = _source(entry, objects, seed)
            if source is None:
                continue
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(source, target)
            except OSError:  # another filesystem: copy
                shutil.copyfile(source, target)
        yield root
