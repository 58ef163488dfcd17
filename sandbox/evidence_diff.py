"""A workspace's evidence as a diff: a manifest of every final entry, changed files once per run.

``--evidence diff`` (the default) keeps, per trial, a manifest of every entry of the final
workspace — path, mode, size and sha256 of each regular file, marked ``unchanged`` when it
equals the seed's file at that path, and the kind of every symlink, FIFO, socket or device
(never followed or opened) — and the content of the changed files (unchanged ones are the
task's own). Contents live in the run's content-addressed store
(``<run>/objects/<sha[:2]>/<sha>``, read-only), so a file that many trials produce is
stored once; the trial's ``workspace/`` dir holds hard links
to the changed files only, so it reads like today's copy minus the seed's unchanged
files. ``--evidence none`` keeps the manifest only; ``--evidence full`` is the full copy.

The walk is the evidence walk (:func:`sandbox.inside.evidence.walk_tree`): by dir fd,
O_NOFOLLOW, regular files only, capped; everything refused is an event, as with a full copy.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sandbox.inside.evidence import DEFAULT_LIMITS, SPECIAL_KINDS, EvidenceEvent, Limits, walk_tree

EVIDENCE_MODES = ("full", "diff", "none")
#: The manifest, beside the trial's ``workspace/`` evidence dir.
MANIFEST_NAME = "workspace.manifest.json"
#: The run's content store, under the run dir.
OBJECTS_DIR = "objects"
#: Entries a manifest lists at most by default (unchanged files cost a line each, no
#: bytes): the walk's ``max_entries`` cap (:class:`sandbox.inside.evidence.Limits`).
MAX_MANIFEST_ENTRIES = DEFAULT_LIMITS.max_entries


def sha256_bytes(data: bytes) -> str:
    """The hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


class ObjectStore:
    """A run's content-addressed files: ``<root>/<sha[:2]>/<sha>``, each written once."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, sha: str) -> Path:
        """Where the content with this sha256 lives."""
        return self.root / sha[:2] / sha

    def put(self, data: bytes, sha: str | None = None) -> Path:
        """Store ``data`` (unless already there); return its path. Safe across threads."""
        sha = sha or sha256_bytes(data)
        target = self.path(sha)
        if target.exists():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.chmod(tmp, 0o444)  # shared by hard links: never written again
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return target


def seed_index(fixtures: Mapping[str, Any]) -> dict[str, str]:
    """Path -> sha256 of the seed's files (fixture bytes, or (bytes, mode))."""
    index = {}
    for rel, fixture in fixtures.items():
        data = fixture[0] if isinstance(fixture, tuple) else fixture
        index[rel] = sha256_bytes(data)
    return index


class _Snapshot:
    """The walk's sink: hash each file, keep what differs from the seed."""

    def __init__(
        self,
        store: ObjectStore,
        seed: Mapping[str, str],
        links: Path | None,
        max_file_bytes: int,
    ) -> None:
        self.store = store
        self.seed = seed
        self.links = links
        self.max_file_bytes = max_file_bytes
        self.files: list[dict[str, Any]] = []

    def __call__(self, sub: str, fd: int, limit: int) -> tuple[int, bool, bool]:
        info = os.fstat(fd)
        chunks, size = [], 0
        while size <= self.max_file_bytes:
            chunk = os.read(fd, min(1 << 20, self.max_file_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
        sha = sha256_bytes(data)
        entry: dict[str, Any] = {
            "path": sub,
            "mode": stat.S_IMODE(info.st_mode),
            "size": info.st_size,
            "sha256": sha,
            "unchanged": self.seed.get(sub) == sha and size == info.st_size,
        }
        self.files.append(entry)
        if entry["unchanged"]:
            return 0, False, False  # listed, nothing stored: counts against no content cap
        truncated = len(data) > limit
        if truncated:
            data = data[:limit]
            entry.update(sha256=sha256_bytes(data), truncated=True)
        if self.links is not None:
            stored = self.store.put(data, entry["sha256"])
            link = self.links / sub
            link.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(stored, link)
            except OSError as exc:
                if exc.errno != errno.EMLINK:
                    raise
                # The object has the filesystem's most links (many trials made the same
                # file): this trial keeps its own read-only copy.
                out = os.open(link, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444)
                with os.fdopen(out, "wb") as fh:
                    fh.write(data)
        return len(data), truncated, True


def snapshot_tree(
    root: Path,
    rel: str,
    *,
    store: ObjectStore,
    seed: Mapping[str, str],
    links: Path | None,
    max_file_bytes: int,
    max_total_bytes: int,
    limits: Limits | None = None,
) -> tuple[dict[str, Any], list[EvidenceEvent]]:
    """The manifest of ``root/rel`` and the evidence events of its walk.

    A walk cut short by a cap of ``limits`` still gives a manifest of what it kept; its
    ``omitted`` list says which cap (or error) kept what out (each also an event).

    Args:
        root: A trusted dir the walk starts from (never left).
        rel: The workspace under it.
        store: The run's content store.
        seed: What the workspace was seeded with (path -> sha256).
        links: Where changed files are hard-linked (``diff``); None keeps no content
            (``none``).
        max_file_bytes: Per-file cap (a longer changed file is kept truncated).
        max_total_bytes: Cap on the changed bytes kept.
        limits: The walk's other caps (depth, path length, entries, stored files,
            allocated blocks); the defaults when None.
    """
    sink = _Snapshot(store, seed, links, max_file_bytes)
    events = walk_tree(
        root,
        rel,
        sink,
        max_file_bytes=max_file_bytes,
        max_total_bytes=max_total_bytes,
        limits=limits,
    )
    prefix = rel.strip("/") + "/"
    special = [
        {"path": e.path[len(prefix) :], "type": e.kind, "detail": e.detail}
        for e in events
        if e.kind in SPECIAL_KINDS and e.path.startswith(prefix)
    ]
    manifest = {
        "version": 1,
        "mode": "diff" if links is not None else "none",
        "objects": OBJECTS_DIR,
        "files": sorted(sink.files, key=lambda f: f["path"]),
        "special": sorted(special, key=lambda f: f["path"]),
        "omitted": omitted(events, rel),
    }
    return manifest, events


def omitted(events: list[EvidenceEvent], rel: str) -> list[dict[str, Any]]:
    """The manifest's ``omitted``: what a cap (``limit``) or an error kept out, and why.

    Paths are relative to the workspace (``""`` for the workspace itself); a name that is
    not UTF-8 stays a ``str`` with surrogate escapes, which ``json.dumps`` escapes and
    ``json.loads`` reads back unchanged.
    """
    prefix = rel.strip("/")
    found = []
    for e in events:
        if e.kind not in ("limit", "error"):
            continue
        path = e.path.strip("/")
        sub = path[len(prefix) :].lstrip("/") if path.startswith(prefix) else path
        found.append({"path": sub, "kind": e.kind, "cap": e.cap, "detail": e.detail})
    return found
