"""The host's processes as a test on it sees them, found by the name a test gave them."""

from __future__ import annotations

import os
from pathlib import Path


def named(argv0: str) -> list[int]:
    """Pids of the host whose argv[0] is ``argv0`` (a zombie's is empty: never one)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                first = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            if first == argv0.encode():
                found.append(int(entry))
    return found


__all__ = ["named"]
