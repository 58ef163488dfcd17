"""The verifier's own scratch dirs: a fresh ``/tmp``, ``/var/tmp`` and ``/dev/shm`` per phase.

The trial's scratch dirs are shared by its phases, so whatever an agent left there meets
the verifier: a symlink named like a file the tests write (``/tmp/result.json`` ->
``reward.json``) redirects that write, and neither gVisor nor a host whose
``fs.protected_symlinks`` is 0 refuses to follow it. So for each grading phase the backend
*parks* the agent's entries in a dir of the trial's filesystem that no phase sees (a
rename: nothing is copied, read or followed), leaves each scratch dir empty, owned by the
verifier with mode 0755 — the commands it runs as the agent can read what it shares there
and create nothing — and puts everything back afterwards, so a later step's agent finds
its files again.

Host side only: the trial's processes are all dead (or, during the phase, the verifier's).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

#: The scratch dirs on a trial's filesystem (``fs/<name>``), as the backends lay them out.
SCRATCH_DIRS = ("tmp", "var-tmp", "shm")
#: The same dirs as a phase sees them.
IN_SANDBOX = ("/tmp", "/var/tmp", "/dev/shm")
#: Where the agent's entries wait while a verifier runs (root-only, in no phase's view).
PARKED = "parked"
#: Mode of a scratch dir between verifier phases (the agent's, shared: sticky, world-writable).
SHARED_MODE = 0o1777
#: Mode of a scratch dir during a verifier phase: its owner's alone to write.
PRIVATE_MODE = 0o755
#: The same where the image has apt's sandbox user: its group (``nogroup``, never the
#: agent's) may write too, since ``apt-get`` drops to ``_apt`` to fetch and verify package
#: lists in ``/tmp`` (a Terminal-Bench ``test.sh`` installs its tools that way). Sticky, so
#: no member removes another's entries; the agent's uid and gid still cannot write.
SERVICE_MODE = 0o1775


def park(fs: Path, owner: tuple[int, int]) -> None:
    """Move the agent's scratch entries aside; leave the dirs empty and ``owner``'s.

    A park that was never undone (a crash during a verifier phase) is undone first, so the
    agent's files are never mixed with a verifier's or lost.
    """
    parked = fs / PARKED
    if os.path.lexists(parked):
        unpark(fs)
    parked.mkdir(mode=0o700)
    os.lchown(parked, 0, 0)
    for name in SCRATCH_DIRS:
        scratch, keep = fs / name, parked / name
        keep.mkdir(mode=0o700)
        with os.scandir(scratch) as entries:
            for entry in entries:
                # rename moves the entry itself (a symlink stays a symlink, unfollowed).
                os.rename(entry.path, keep / entry.name)
        os.lchown(scratch, *owner)
        os.chmod(scratch, PRIVATE_MODE)


def unpark(fs: Path) -> None:
    """Remove the verifier's scratch files and put the agent's back (no-op if none parked)."""
    parked = fs / PARKED
    if not parked.is_dir() or parked.is_symlink():
        return
    for name in SCRATCH_DIRS:
        scratch, keep = fs / name, parked / name
        clear(scratch)
        os.lchown(scratch, 0, 0)
        os.chmod(scratch, SHARED_MODE)
        if keep.is_dir() and not keep.is_symlink():
            with os.scandir(keep) as entries:
                for entry in entries:
                    os.rename(entry.path, scratch / entry.name)
            keep.rmdir()
    parked.rmdir()


def clear(top: Path) -> None:
    """Remove everything in ``top`` (kept itself), following no symlink."""
    with os.scandir(top) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)


__all__ = [
    "PARKED",
    "PRIVATE_MODE",
    "SCRATCH_DIRS",
    "SERVICE_MODE",
    "SHARED_MODE",
    "clear",
    "park",
    "unpark",
]
