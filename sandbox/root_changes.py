r"""What a phase changed in the image's root: the contract between backends and the harness.

A backend whose image root is writable (docker: the container's writable layer) lists the
paths outside the workspace and the trial's own dirs that a phase created, changed or
removed (:meth:`sandbox.backend.Sandbox.root_changes`). Names are task- and agent-chosen:
they are carried losslessly (``path`` is text with undecodable bytes escaped as
``\xNN``, ``path_b64`` the raw bytes when they are not UTF-8) and the list is bounded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

ChangeKind = Literal["added", "modified", "removed"]
EntryType = Literal["file", "dir", "symlink", "other"]
#: The most changes one listing holds; past it the listing says it was cut.
MAX_ROOT_CHANGES = 10_000


@dataclass(frozen=True)
class RootChange:
    r"""One path of the image root a phase created, changed or removed.

    Attributes:
        path: Absolute path inside the sandbox (``\xNN`` escapes for undecodable bytes).
        kind: ``added``, ``modified`` or ``removed``.
        type: What is there now (what was there, for ``removed``).
        mode: Permission bits and setuid/setgid/sticky (0 for ``removed``).
        size: Bytes (files), else 0.
        path_b64: The raw name, base64, when it is not valid UTF-8.
    """

    path: str
    kind: ChangeKind
    type: EntryType = "file"
    mode: int = 0
    size: int = 0
    path_b64: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The change as the record stores it."""
        data: dict[str, Any] = {
            "path": self.path,
            "kind": self.kind,
            "type": self.type,
            "mode": oct(self.mode),
            "size": self.size,
        }
        if self.path_b64 is not None:
            data["path_b64"] = self.path_b64
        return data


@dataclass(frozen=True)
class RootChanges:
    """A bounded listing of a phase's root changes.

    Attributes:
        changes: The changes, sorted by path.
        truncated: More changes existed than were listed.
        total: How many were found (at least ``len(changes)``).
    """

    changes: tuple[RootChange, ...] = ()
    truncated: bool = False
    total: int = 0


__all__ = ["MAX_ROOT_CHANGES", "ChangeKind", "EntryType", "RootChange", "RootChanges"]
