"""The task cache: fetched task dirs, keyed by repository, commit and path, shared by runs.

Layout (under :func:`cache_root`)::

    tasks/<key>/entry.json     {git_url, commit, path, content_hash, fetched_at}
                               (a Hub package: git_url ``hub:ORG/NAME``, commit its digest)
    tasks/<key>/<task name>/   the task dir as fetched
    registries/<key>.json      the last copy of each registry URL read
    refs/<key>.json            ref -> commit first seen, per repository (moved refs are told)
    versions/<key>.json        each registry NAME@VERSION's entry as first used (edits are told)

``<key>`` is a digest of ``git_url``, ``commit`` and ``path``: a commit id names immutable
content, so an entry is never refreshed, only verified. The content hash is recorded when
the entry is made and checked on every use; a changed entry is refused, never repaired.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from harness.datasets.model import DatasetError

#: Overrides where the cache lives (default: ``$XDG_CACHE_HOME/harness``, ``~/.cache/harness``).
CACHE_ENV = "HARNESS_CACHE_DIR"
ENTRY_FILENAME = "entry.json"
_DIGEST_DOMAIN = b"harness-dataset-tree-v1\0"
_CHUNK = 1 << 20


def cache_root() -> Path:
    """Where the cache lives: ``$HARNESS_CACHE_DIR``, else ``$XDG_CACHE_HOME/harness``."""
    given = os.environ.get(CACHE_ENV)
    if given:
        return Path(given).expanduser().absolute()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return (base / "harness").absolute()


def key(*parts: str) -> str:
    """A stable file name for ``parts`` (a URL, a commit, a path)."""
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()[:32]


def tree_digest(top: Path) -> str:
    """``sha256:<hex>`` over every entry under ``top``, in order of relative path.

    A file counts its path and bytes, a symlink its path and target (never followed), the
    executable bit of a file counts too (a verifier script must stay runnable); times and
    owners do not, so the digest survives copies.
    """
    digest = hashlib.sha256(_DIGEST_DOMAIN)
    for rel, full in _walk(top):
        mode = os.lstat(full).st_mode
        if stat.S_ISLNK(mode):
            digest.update(b"L\0" + rel + b"\0" + os.fsencode(os.readlink(full)) + b"\0")
        elif stat.S_ISREG(mode):
            executable = b"x" if mode & stat.S_IXUSR else b"-"
            digest.update(b"F\0" + rel + b"\0" + executable + b"\0")
            with open(full, "rb") as handle:
                while chunk := handle.read(_CHUNK):
                    digest.update(chunk)
            digest.update(b"\0")
        else:
            digest.update(b"O\0" + rel + b"\0")
    return "sha256:" + digest.hexdigest()


def _walk(top: Path) -> Iterator[tuple[bytes, str]]:
    entries: list[tuple[bytes, str]] = []
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        rel_dir = os.path.relpath(dirpath, top)
        for name in [
            *filenames,
            *(d for d in dirnames if os.path.islink(os.path.join(dirpath, d))),
        ]:
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            entries.append((os.fsencode(rel), os.path.join(dirpath, name)))
    yield from sorted(entries)


@dataclass(frozen=True)
class CachedTask:
    """A verified cache entry.

    Attributes:
        task_dir: The task dir (``tasks/<key>/<name>``).
        content_hash: Its :func:`tree_digest`, as recorded at first fetch.
    """

    task_dir: Path
    content_hash: str


def task_dir_name(git_url: str, path: str) -> str:
    """The name a fetched task dir gets: the last part of its path (or of the repository)."""
    if path:
        return PurePosixPath(path).name
    tail = git_url.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1].removesuffix(".git")
    # A URL ending in ``..`` (or ``.``) must not name the entry's parent (or the entry).
    return tail if tail not in ("", ".", "..") else "task"


class TaskCache:
    """The cache of fetched task dirs (see the module docstring).

    Args:
        root: Where it lives (default: :func:`cache_root`).
    """

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else cache_root()

    @property
    def tasks_dir(self) -> Path:
        """Where the task entries are."""
        return self.root / "tasks"

    def entry_dir(self, git_url: str, commit: str, path: str) -> Path:
        """The entry of one task (whether or not it exists)."""
        return self.tasks_dir / key(git_url, commit, path)

    def lookup(self, git_url: str, commit: str, path: str) -> CachedTask | None:
        """The entry of a task, verified; None when it was never fetched.

        Raises:
            DatasetError: The entry's content no longer has the hash recorded when it was
                fetched (it was changed on disk).
        """
        entry = self.entry_dir(git_url, commit, path)
        meta_path = entry / ENTRY_FILENAME
        task_dir = entry / task_dir_name(git_url, path)
        if not meta_path.is_file() or not task_dir.is_dir():
            return None
        try:
            recorded = str(json.loads(meta_path.read_text())["content_hash"])
        except (OSError, ValueError, KeyError, TypeError):
            raise DatasetError(
                f"cache entry {entry} is damaged (unreadable {ENTRY_FILENAME}): remove it "
                "(`harness datasets clear`) and fetch again"
            ) from None
        found = tree_digest(task_dir)
        if found != recorded:
            raise DatasetError(
                f"cache entry {task_dir} changed since it was fetched ({found}, recorded "
                f"{recorded}): refusing it; remove it (`harness datasets clear`) and fetch again"
            )
        return CachedTask(task_dir, recorded)

    def store(self, git_url: str, commit: str, path: str, source: Path) -> CachedTask:
        """Copy a fetched task dir into its entry, record its hash, and return the entry.

        The entry appears whole or not at all (built aside, then renamed); if another run
        stored it meanwhile, that one is kept and verified.
        """
        entry = self.entry_dir(git_url, commit, path)
        self.tasks_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{entry.name}-", dir=self.tasks_dir))
        try:
            name = task_dir_name(git_url, path)
            shutil.copytree(source, staging / name, symlinks=True, ignore=_no_git)
            digest = tree_digest(staging / name)
            meta = {
                "git_url": git_url,
                "commit": commit,
                "path": path,
                "content_hash": digest,
                "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            (staging / ENTRY_FILENAME).write_text(json.dumps(meta, indent=2) + "\n")
            try:
                staging.rename(entry)
            except OSError:
                if not (entry / ENTRY_FILENAME).is_file():
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        found = self.lookup(git_url, commit, path)
        assert found is not None
        return found

    def lookup_package(self, name: str, digest: str) -> CachedTask | None:
        """The entry of the Hub package ``name`` at ``digest``, verified (see :meth:`lookup`)."""
        return self.lookup(f"hub:{name}", digest, "")

    def store_package(self, name: str, digest: str, source: Path) -> CachedTask:
        """Store an unpacked, digest-checked Hub package (see :meth:`store`)."""
        return self.store(f"hub:{name}", digest, "", source)

    def registry_copy(self, url: str) -> Path:
        """Where the last copy of the registry at ``url`` is kept."""
        return self.root / "registries" / f"{key(url)}.json"

    def pins_file(self, git_url: str) -> Path:
        """Where the commits first seen for ``git_url``'s refs are kept."""
        return self.root / "refs" / f"{key(git_url)}.json"

    def clear(self) -> int:
        """Remove every cached task, registry copy and ref pin; the number of tasks removed."""
        count = sum(1 for _ in self.tasks_dir.iterdir()) if self.tasks_dir.is_dir() else 0
        for part in ("tasks", "registries", "refs", "listings", "versions"):
            shutil.rmtree(self.root / part, ignore_errors=True)
        return count


def _no_git(_dir: str, names: list[str]) -> list[str]:
    return [name for name in names if name == ".git"]


def write_json_atomic(path: Path, data: object) -> None:
    """Write ``data`` as JSON to ``path`` through a temporary file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    with os.fdopen(fd, "w") as handle:
        handle.write(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


__all__ = [
    "CACHE_ENV",
    "CachedTask",
    "TaskCache",
    "cache_root",
    "key",
    "task_dir_name",
    "tree_digest",
    "write_json_atomic",
]
