"""What the harness may do in a trial's compose sidecars: run a task's hook, copy files out.

Schema 1.4's ``[[verifier.collect]]`` hooks run in compose services after the agent phase,
and ``artifacts`` entries with a ``service`` are copied out of a sidecar's filesystem. A
backend with sidecars (docker, for a task with ``environment/docker-compose.yaml``) gives
a :class:`SidecarAccess` (``Sandbox.sidecars``); the others give None, and a task naming a
sidecar cannot have been started there.

Everything crosses as data: the service is one the task's compose project runs (never a
name the engine would resolve to another container), the user a plain name or id, the
command one argument to ``sh -c`` inside the service; nothing runs on the host but the
engine's own API calls. Files come out as the engine's archive of the path, read as a
stream under the evidence caps; only regular files and dirs are kept, never a link.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from sandbox.inside.evidence import EvidenceEvent


@dataclass(frozen=True)
class HookResult:
    """What one hook run in a sidecar did.

    Attributes:
        exit_code: Its exit status (None: it did not finish, or could not start).
        timed_out: It ran past its time and was left behind (its output so far is kept).
        output: The tail of its stdout and stderr, decoded, capped.
        error: Why it could not run (None: it ran).
    """

    exit_code: int | None
    timed_out: bool = False
    output: str = ""
    error: str | None = None


class SidecarAccess(ABC):
    """A trial's compose sidecars, for collect hooks and sidecar artifacts."""

    @abstractmethod
    def services(self) -> list[str]:
        """The sidecars that run (service names)."""

    @abstractmethod
    def run_hook(
        self, service: str, command: str, *, user: str | None, timeout_sec: float, max_output: int
    ) -> HookResult:
        """Run ``sh -c command`` in ``service`` as ``user`` (None: its default), bounded.

        Never raises for the hook's own failure: the result says it.
        """

    @abstractmethod
    def copy_out(
        self,
        service: str,
        source: str,
        dest: Path,
        *,
        max_file_bytes: int,
        max_total_bytes: int,
        max_entries: int,
    ) -> list[EvidenceEvent]:
        """Copy ``source`` of ``service`` to ``dest`` (absent when it is missing).

        Regular files and dirs only; links, devices and paths leaving ``dest`` are events.
        """

    @abstractmethod
    def freeze_main(self) -> str | None:
        """Freeze the agent's container (every process in it stopped); None, or why not."""

    @abstractmethod
    def thaw_main(self) -> None:
        """Let the agent's container run again (after :meth:`freeze_main`)."""


__all__ = ["HookResult", "SidecarAccess"]
