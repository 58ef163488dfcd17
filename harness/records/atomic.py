"""Replacing a file atomically: readers see the old file or the whole new one, never a part."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import BaseModel

from harness.records.failpoints import kill_point


def fsync_dir(directory: Path) -> None:
    """Flush a directory entry change (create/rename) to disk, where the OS allows it."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[BinaryIO]:
    """A file that replaces ``path`` atomically once the block ends without an error.

    Temp file in the same dir, fsync, rename, fsync of the dir: readers see the old file or
    the whole new one. The new file keeps the old file's permission bits, or gets ``0o644``
    if it is new. On an error the temp file is removed and ``path`` is untouched.

    Yields:
        The temp file, open for binary writing.
    """
    path = Path(path)
    directory = path.parent
    directory.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o644
    fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
        kill_point(f"replace:{path.name}")
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    fsync_dir(directory)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically (see :func:`replacing`)."""
    with replacing(path) as fh:
        fh.write(data)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as pretty-printed JSON to ``path`` atomically.

    Readers see either the old file or the complete new one, never a partial write.
    A pydantic model is dumped in JSON mode first.

    Args:
        path: Destination file; its directory is created if needed.
        data: A JSON-serialisable value or a pydantic model.

    Raises:
        TypeError: If ``data`` is not JSON-serialisable.
    """
    if isinstance(data, BaseModel):
        data = data.model_dump(mode="json")
    text = json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    write_bytes_atomic(Path(path), text.encode("utf-8"))


__all__ = ["fsync_dir", "replacing", "write_bytes_atomic", "write_json_atomic"]
