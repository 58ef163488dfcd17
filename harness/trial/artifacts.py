"""Collecting a task's ``artifacts`` into the trial's evidence (every backend).

After each step (after its verifier), the convention dir (``/logs/artifacts``) and every
configured path are copied out of the sandbox with the evidence code (no symlink followed,
regular files only, size-capped), into ``artifacts/`` of the trial (or of the step), with a
``manifest.json`` saying what was found. Collection is best effort, as in Harbor: a missing
path is a manifest entry, never a trial error.
"""

from __future__ import annotations

import fnmatch
import json
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.tasks.model import Artifact
from sandbox.backend import Sandbox
from sandbox.errors import SandboxError
from sandbox.inside.evidence import EvidenceEvent

MANIFEST = "manifest.json"
#: The name the convention dir's files are listed under in the manifest.
CONVENTION = "artifacts"
#: An artifacts space with less free than this is full (the agent's writes met ENOSPC).
FULL_SLACK = 1 << 20


@dataclass(frozen=True)
class Caps:
    """Size caps of one collection."""

    file_bytes: int
    total_bytes: int


def _excluded(rel: str, patterns: list[str]) -> bool:
    """Whether a relative path matches a pattern (itself or any of its components)."""
    parts = rel.split("/")
    return any(
        fnmatch.fnmatch(rel, pattern) or any(fnmatch.fnmatch(part, pattern) for part in parts)
        for pattern in patterns
    )


def prune_excluded(top: Path, patterns: list[str]) -> None:
    """Remove what matches an artifact's ``exclude`` patterns from a copied tree."""
    if not patterns or not top.is_dir():
        return
    for path in sorted(top.rglob("*"), reverse=True):
        if _excluded(path.relative_to(top).as_posix(), patterns):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()


def _inside(dest: Path, rel: str) -> Path | None:
    """``dest/rel`` when it is strictly inside ``dest``, else None.

    Never ``dest`` itself or a parent of it: replacing that would delete the trial's evidence.
    """
    parts = [part for part in rel.split("/") if part not in ("", ".")]
    if not parts or ".." in parts or rel.startswith("/"):
        return None
    return dest.joinpath(*parts)


def tree_bytes(path: Path) -> int:
    """The bytes of the regular files at or below ``path`` (no link followed)."""
    if path.is_symlink() or not path.exists():
        return 0
    if not path.is_dir():
        return path.lstat().st_size if path.is_file() else 0
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def copy_artifact(
    sandbox: Sandbox, artifact: Artifact, dest: Path, caps: Caps
) -> tuple[dict[str, Any], list[EvidenceEvent]]:
    """Copy one artifact to ``dest``; return its manifest entry and evidence events.

    The entry's ``bytes`` (not for the manifest) is what was kept, so that a collection can
    share one total cap among its artifacts (:func:`collect_artifacts`).
    """
    with tempfile.TemporaryDirectory(prefix="harness-artifact-") as tmp:
        staged = Path(tmp) / "out"
        entry: dict[str, Any] = {"source": artifact.source, "destination": artifact.target}
        target = _inside(dest, artifact.target)
        if target is None or ".." in artifact.source.split("/"):
            # The task model refuses these at load; never replace anything outside dest.
            entry.update(type=None, status="failed", detail="escapes artifacts/ (refused)")
            return entry, []
        try:
            events = sandbox.copy_out(
                artifact.source,
                staged,
                max_file_bytes=caps.file_bytes,
                max_total_bytes=caps.total_bytes,
            )
        except SandboxError as exc:  # e.g. a path the backend cannot reach
            entry.update(type=None, status="failed", detail=str(exc))
            return entry, []
        found = [e for e in events if e.kind != "missing"]
        if not staged.exists():
            entry.update(type=None, status="missing")
            return entry, found
        entry["type"] = "directory" if staged.is_dir() else "file"
        prune_excluded(staged, artifact.exclude)
        entry["bytes"] = tree_bytes(staged)
        try:
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(staged), target)
        except OSError as exc:  # the agent's convention dir holds a parent (a file)
            detail = f"destination already taken: {exc.strerror or exc}"
            entry.update(status="failed", detail=detail)
            return entry, found
        entry["status"] = "ok"
        if found:
            entry["events"] = [event.as_dict() for event in found]
        return entry, found


def full_event(sandbox: Sandbox) -> EvidenceEvent | None:
    """A ``limit`` event (cap ``artifacts_bytes``) when the artifacts dir's space is full.

    Where the backend gives the convention dir a space of its own (docker), an agent that
    fills it meets ``ENOSPC`` there and nowhere else: the trial is graded as any other,
    and this event says the artifacts may be cut short.
    """
    try:
        usage = sandbox.artifacts_usage()
    except SandboxError:  # the question is best effort, as collection is
        return None
    if usage is None or usage[1] - usage[0] >= FULL_SLACK:
        return None
    return EvidenceEvent(
        "limit",
        sandbox.paths.artifacts,
        f"the artifacts dir is full ({usage[1] >> 20} MB): writes past it failed with ENOSPC",
        "artifacts_bytes",
    )


def collect_artifacts(
    sandbox: Sandbox,
    artifacts: list[Artifact],
    dest: Path,
    caps: Caps,
    extra: Callable[[], list[dict[str, Any]]] | None = None,
) -> list[EvidenceEvent]:
    """Collect the convention dir and ``artifacts`` into ``dest`` and write its manifest.

    ``extra``, when given, places what was collected before (a sidecar's artifacts,
    :mod:`harness.trial.collect`) into ``dest`` last and returns its manifest entries.

    Returns:
        Evidence events (tampering, truncation, a full artifacts dir) met on the way;
        nothing is written when there was nothing to collect.
    """
    manifest: list[dict[str, Any]] = []
    events: list[EvidenceEvent] = []
    # One total cap for the whole collection: a task listing one large path many times
    # never multiplies what reaches the run dir.
    left = caps.total_bytes
    convention = sandbox.paths.artifacts
    if convention:
        full = full_event(sandbox)
        if full is not None:
            events.append(full)
        with tempfile.TemporaryDirectory(prefix="harness-artifacts-") as tmp:
            staged = Path(tmp) / "out"
            events += sandbox.copy_out(
                convention, staged, max_file_bytes=caps.file_bytes, max_total_bytes=caps.total_bytes
            )
            if staged.is_dir() and any(staged.iterdir()):
                left -= tree_bytes(staged)
                dest.mkdir(parents=True, exist_ok=True)
                shutil.copytree(staged, dest, dirs_exist_ok=True, symlinks=True)
                manifest.append(
                    {"source": convention, "destination": ".", "type": "directory", "status": "ok"}
                )
    for artifact in artifacts:
        if left <= 0:
            detail = f"not copied: the collection's {caps.total_bytes} bytes are spent"
            manifest.append(
                {"source": artifact.source, "destination": artifact.target, "type": None}
                | {"status": "failed", "detail": detail}
            )
            events.append(EvidenceEvent("limit", artifact.source, detail, "artifacts_bytes"))
            continue
        entry, found = copy_artifact(
            sandbox, artifact, dest, Caps(min(caps.file_bytes, left), left)
        )
        left -= int(entry.pop("bytes", 0))
        manifest.append(entry)
        events += found
    if extra is not None:
        dest.mkdir(parents=True, exist_ok=True)
        manifest += extra()
    if manifest:
        dest.mkdir(parents=True, exist_ok=True)
        (dest / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return events
