"""Collect hooks and artifact copies in a docker trial's compose sidecars.

The docker backend's :class:`~sandbox.sidecars.SidecarAccess`. A service is found by the
labels compose put on its container in this trial's project only (a name the task wrote
never reaches the engine as a container name), and every call goes through the engine's
API with the argument as data:

- a hook is ``sh -c COMMAND`` created as an exec in that container (the user passed as the
  exec's user, already a plain name or id), its output read into a bounded tail, waited
  for at most its capped time; the processes of one that runs past it (those carrying its
  own mark in their environment: the engine kills no exec) are killed from inside the
  sidecar, best effort, and the result says it timed out;
- a file comes out as the engine's archive of the path, resolved inside the container's
  own root, read as a stream (never more than the caps allow, then cut) and unpacked by
  the harness into a fresh dir: regular files and dirs only, each created with
  ``O_NOFOLLOW | O_EXCL``; a link, a device, an absolute or ``..`` name is an event, never
  written;
- the main container is frozen (``docker pause``) while a separate verifier's sidecar
  hooks run, as Harbor stops it first, and thawed before its artifacts are copied out.
"""

from __future__ import annotations

import collections
import os
import secrets
import tarfile
import threading
from pathlib import Path, PurePosixPath
from typing import IO, Any

from typing_extensions import override

from sandbox.docker.compose import ComposeProject
from sandbox.docker.sdk import EngineError, call
from sandbox.errors import SandboxError
from sandbox.inside.evidence import EvidenceEvent
from sandbox.sidecars import HookResult, SidecarAccess

#: The variable each hook's processes carry (a fresh token), so a late one can be found.
HOOK_MARK = "HARNESS_COLLECT_HOOK"
#: Bytes of archive read past the byte cap (tar headers, skipped files) before the copy is cut.
ARCHIVE_SLACK = 64 << 20


class _Capped:
    """A read-only stream over the engine's chunks that ends after ``limit`` bytes."""

    def __init__(self, chunks: Any, limit: int) -> None:
        self._chunks = iter(chunks)
        self._buffer = b""
        self.limit = limit
        self.read_bytes = 0
        self.cut = False

    def read(self, size: int = -1) -> bytes:
        while (size < 0 or len(self._buffer) < size) and not self.cut:
            try:
                chunk = next(self._chunks)
            except StopIteration:
                break
            self.read_bytes += len(chunk)
            if self.read_bytes > self.limit:
                self.cut = True
                chunk = chunk[: max(0, len(chunk) - (self.read_bytes - self.limit))]
            self._buffer += chunk
        if size < 0:
            data, self._buffer = self._buffer, b""
        else:
            data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data


class DockerSidecars(SidecarAccess):
    """The sidecars of one docker trial's compose project."""

    def __init__(self, client: Any, project: ComposeProject, main: Any) -> None:
        self.client = client
        self.project = project
        self.main = main

    @override
    def services(self) -> list[str]:
        return list(self.project.plan.sidecars)

    def _container_id(self, service: str) -> str:
        if service not in self.project.plan.sidecars:
            raise SandboxError(f"no sidecar named {service!r} in this trial")
        found = call(
            self.client.containers.list,
            all=True,
            filters={
                "label": [
                    f"com.docker.compose.project={self.project.name}",
                    f"com.docker.compose.service={service}",
                ]
            },
        )
        if not found:
            raise SandboxError(f"the sidecar {service!r} has no container")
        # compose's labels are the project's own; any container of another project,
        # even one the task named alike, is not in this list
        return str(found[0].id)

    @override
    def run_hook(
        self, service: str, command: str, *, user: str | None, timeout_sec: float, max_output: int
    ) -> HookResult:
        try:
            container = self._container_id(service)
            token = secrets.token_hex(16)
            created = call(
                self.client.api.exec_create,
                container,
                ["sh", "-c", command],
                stdout=True,
                stderr=True,
                user=user or "",
                environment={HOOK_MARK: token},
            )
            output = call(self.client.api.exec_start, created["Id"], stream=True)
        except (SandboxError, EngineError) as exc:
            return HookResult(exit_code=None, error=str(exc))
        tail: collections.deque[bytes] = collections.deque()
        kept = [0]

        def drain() -> None:
            try:
                for chunk in output:
                    tail.append(chunk)
                    kept[0] += len(chunk)
                    while kept[0] > max_output and len(tail) > 1:
                        kept[0] -= len(tail.popleft())
            except Exception:  # the stream closed under us (timeout)
                return

        reader = threading.Thread(target=drain, name=f"collect-{service}", daemon=True)
        reader.start()
        reader.join(timeout_sec)
        timed_out = reader.is_alive()
        if timed_out:
            close = getattr(output, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # best effort: the hook is left behind
                    pass
        text = b"".join(tail)[-max_output:].decode("utf-8", "replace")
        if timed_out:
            self._kill_marked(container, token)
            return HookResult(exit_code=None, timed_out=True, output=text)
        try:
            state = call(self.client.api.exec_inspect, created["Id"])
        except (SandboxError, EngineError) as exc:
            return HookResult(exit_code=None, output=text, error=str(exc))
        code = state.get("ExitCode")
        return HookResult(exit_code=code if isinstance(code, int) else None, output=text)

    def _kill_marked(self, container: str, token: str) -> None:
        """SIGKILL, as root in the sidecar, every process whose environment holds the mark.

        Best effort: a hook that cleared its environment, or an image without ``tr`` and
        ``grep``, keeps running until the sidecar is removed with the trial.
        """
        script = (
            'for p in /proc/[0-9]*; do tr "\\0" "\\n" < "$p/environ" 2>/dev/null'
            ' | grep -qx "$1" && kill -9 "${p#/proc/}" 2>/dev/null; done; true'
        )
        try:
            created = call(
                self.client.api.exec_create,
                container,
                ["sh", "-c", script, "kill-hook", f"{HOOK_MARK}={token}"],
                user="0",
            )
            call(self.client.api.exec_start, created["Id"])
        except (SandboxError, EngineError):
            pass

    @override
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
        import docker.errors

        container = self._container_id(service)
        try:
            chunks, _stat = self.client.api.get_archive(container, source)
        except docker.errors.NotFound:
            return []
        except docker.errors.DockerException as exc:
            raise SandboxError(f"the sidecar {service!r} did not give {source}: {exc}") from None
        stream = _Capped(chunks, max_total_bytes + ARCHIVE_SLACK)
        try:
            return unpack(
                stream,
                source,
                dest,
                max_file_bytes=max_file_bytes,
                max_total_bytes=max_total_bytes,
                max_entries=max_entries,
                cut=lambda: stream.cut,
            )
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()

    @override
    def freeze_main(self) -> str | None:
        try:
            call(self.main.pause)
        except EngineError as exc:
            return f"the engine would not pause it: {exc}"
        return None

    @override
    def thaw_main(self) -> None:
        call(self.main.unpause)


def _write(member_file: IO[bytes], path: Path, size: int) -> None:
    """Create ``path`` (never through a link, never over a file) with ``size`` bytes."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as out:
        left = size
        while left > 0:
            block = member_file.read(min(left, 1 << 20))
            if not block:
                break
            out.write(block)
            left -= len(block)


def unpack(  # noqa: C901
    stream: Any,
    source: str,
    dest: Path,
    *,
    max_file_bytes: int,
    max_total_bytes: int,
    max_entries: int,
    cut: Any = lambda: False,
) -> list[EvidenceEvent]:
    """Unpack an engine archive of ``source`` into ``dest``: files and dirs only, capped.

    The archive's first component is the source's own name; what follows it lands under
    ``dest``. ``dest`` must not exist (its parent must).
    """
    events: list[EvidenceEvent] = []
    top = source.rstrip("/") or "/"
    total = entries = 0
    made_dest = False
    try:
        archive = tarfile.open(fileobj=stream, mode="r|")  # noqa: SIM115 - a stream, read once
        for member in archive:
            entries += 1
            if entries > max_entries:
                events.append(EvidenceEvent("limit", top, f"over {max_entries} entries", "entries"))
                break
            parts = PurePosixPath(member.name).parts
            shown = f"{top.rstrip('/')}/{'/'.join(parts[1:])}" if len(parts) > 1 else top
            if (
                not parts
                or member.name.startswith("/")
                or any(part in ("..", ".") for part in parts[1:])
                or "\0" in member.name
            ):
                events.append(EvidenceEvent("error", shown, "bad path in the archive (refused)"))
                continue
            target = dest.joinpath(*parts[1:]) if len(parts) > 1 else dest
            if target != dest and not made_dest:
                events.append(EvidenceEvent("error", shown, "outside the source (refused)"))
                continue
            if member.isdir():
                if target == dest:
                    dest.mkdir(mode=0o755)
                    made_dest = True
                elif target.parent.is_dir() and not target.parent.is_symlink():
                    target.mkdir(mode=0o755)
                continue
            if not member.isfile():
                kind = "symlink" if member.issym() or member.islnk() else "not_regular"
                events.append(EvidenceEvent(kind, shown, "not copied"))
                continue
            if member.size > max_file_bytes:
                events.append(
                    EvidenceEvent("too_large", shown, f"{member.size} bytes", "file_bytes")
                )
                continue
            if total + member.size > max_total_bytes:
                events.append(EvidenceEvent("limit", shown, "total bytes", "total_bytes"))
                break
            if not target.parent.is_dir() or target.parent.is_symlink():
                continue
            handle = archive.extractfile(member)
            if handle is None:
                continue
            _write(handle, target, member.size)
            total += member.size
            if target == dest:
                made_dest = True
    except (tarfile.TarError, OSError) as exc:
        events.append(EvidenceEvent("error", top, f"archive not read: {exc}"))
    if cut():
        events.append(EvidenceEvent("limit", top, "archive cut at the byte cap", "total_bytes"))
    return events


__all__ = ["DockerSidecars", "unpack"]
