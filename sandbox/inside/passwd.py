"""The sandbox's ``/etc/passwd``, read and parsed by our own code: never through NSS.

glibc's ``getpwuid``/``getpwnam`` (Python's :mod:`pwd`) read the sandbox's
``/etc/nsswitch.conf`` and ``dlopen`` the ``libnss_<service>.so.2`` it names: a module of
the container's own root (or, for a service name with a ``/``, one relative to the working
dir), run inside the calling process. A root agent can write both, so any NSS call in the
supervisor would run the agent's code as the supervisor. Every user lookup of the
in-sandbox code goes through here instead.

What this module promises:

- The file is opened ``O_NOFOLLOW | O_NONBLOCK`` (a link or FIFO in its place is refused,
  never followed or waited on), must be a regular file by ``fstat``, and at most
  :data:`MAX_BYTES` of it are read; a larger file is refused whole (:class:`PasswdError`),
  never half-parsed.
- Lines are parsed as the ``files`` NSS service does: seven ``:``-separated fields, a
  decimal uid and gid; the first entry for a name or uid wins. Comments, blank lines, NIS
  ``+``/``-`` lines and malformed lines are skipped. Nothing in the file is executed,
  expanded or followed.
- The result is data: the caller still checks a home dir before it uses it.

Stdlib-only, Python >= 3.9 (it runs in the supervisor).
"""

from __future__ import annotations

import os
import stat
from typing import List, NamedTuple, Optional, Union

PASSWD = "/etc/passwd"
#: The largest ``/etc/passwd`` read (a real one is a few KiB).
MAX_BYTES = 1 << 20
_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_MAX_ID = (1 << 32) - 1


class PasswdError(OSError):
    """``/etc/passwd`` cannot be read safely (a link, not a regular file, too large)."""


class Entry(NamedTuple):
    """One ``/etc/passwd`` line: the fields the harness uses."""

    name: str
    uid: int
    gid: int
    home: str


def read(path: str = PASSWD) -> bytes:
    """The bytes of ``path``: a regular file, not a link, at most :data:`MAX_BYTES`.

    Raises:
        PasswdError: ``path`` is a symlink, not a regular file, or larger than the cap.
        FileNotFoundError: there is no such file.
    """
    try:
        fd = os.open(path, _FLAGS)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        message = "%s cannot be opened safely: %s" % (path, exc.strerror)
        raise PasswdError(exc.errno, message) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise PasswdError("%s is not a regular file" % path)
        os.set_blocking(fd, True)
        chunks: List[bytes] = []
        size = 0
        while size <= MAX_BYTES:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_BYTES:
            raise PasswdError("%s is larger than %d bytes" % (path, MAX_BYTES))
        return b"".join(chunks)
    finally:
        os.close(fd)


def _id(field: str) -> Optional[int]:
    if not field or not field.isdigit() or not field.isascii() or len(field) > 10:
        return None
    value = int(field)
    return value if value <= _MAX_ID else None


def parse(data: bytes) -> List[Entry]:
    """Every well-formed entry of ``data``, in the file's order."""
    entries: List[Entry] = []
    for raw in data.split(b"\n"):
        line = raw.decode("utf-8", "surrogateescape").rstrip("\r")
        if not line or line[0] in "#+-":
            continue
        fields = line.split(":")
        if len(fields) != 7 or not fields[0]:
            continue
        uid, gid = _id(fields[2]), _id(fields[3])
        if uid is None or gid is None:
            continue
        entries.append(Entry(fields[0], uid, gid, fields[5]))
    return entries


def lookup(key: Union[int, str], path: str = PASSWD) -> Optional[Entry]:
    """The first entry whose uid (an int) or name (a str) is ``key``; None if none.

    A missing file has no entries.

    Raises:
        PasswdError: see :func:`read`.
    """
    try:
        data = read(path)
    except FileNotFoundError:
        return None
    for entry in parse(data):
        if (entry.uid == key) if isinstance(key, int) else (entry.name == key):
            return entry
    return None


__all__ = ["MAX_BYTES", "PASSWD", "Entry", "PasswdError", "lookup", "parse", "read"]
