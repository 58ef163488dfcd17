"""Schema 1.4's collection before grading: ``[[verifier.collect]]`` hooks, sidecar artifacts.

After the agent phase and before the verifier, as Harbor 0.22 orders it:

1. the hooks of ``main`` run in the agent's container, each a supervised verifier phase
   (the verifier's user, its fresh HOME and scratch dirs, none of the agent's processes or
   environment): task code, confined as the tests are; their ``user`` is not applied
   (recorded), since only the verifier's identity is trusted there;
2. for a separate verifier, the main container is then frozen (``docker pause``), as
   Harbor stops it, so nothing left of the agent runs while the sidecars are asked;
3. the sidecars' hooks run (``sh -c`` in the service, as its ``user``, each bounded by
   its ``timeout_sec`` capped at :data:`~harness.tasks.model.MAX_COLLECT_TIMEOUT_SEC`;
   every hook before one grading shares :data:`MAX_COLLECT_TOTAL_SEC`, and those left
   when it is spent are skipped);
4. the artifacts with a ``service`` are copied out of their sidecar (files and dirs only,
   no link kept or followed, the evidence caps) into a host dir the trial holds; the main
   container is thawed.

Every hook is best effort, as in Harbor: a failing, timed-out or refused hook is a
``collect_hook`` record event, never a trial error. The copies reach a separate verifier
at their ``source`` path (:class:`~harness.trial.separate.SeparateVerifier`) and the
trial's ``artifacts/`` with a ``service`` in ``manifest.json``
(:meth:`Collected.place`). A shared verifier does not see a sidecar's files (nor on
Harbor); its hooks still run before it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.tasks import Task
from harness.tasks.model import MAIN_SERVICE, MAX_COLLECT_TIMEOUT_SEC, Artifact, CollectHook
from harness.trial.artifacts import Caps, prune_excluded
from harness.trial.env import grader_env
from sandbox.backend import PhaseRequest, Sandbox
from sandbox.inside.evidence import EvidenceEvent
from sandbox.sidecars import SidecarAccess

#: How much of a hook's output its record event keeps.
OUTPUT_TAIL = 2000
#: Entries one sidecar artifact may hold.
MAX_ENTRIES = 10_000
#: The time every collect hook before one grading may take together; the hooks left when
#: it is spent are skipped (a task may declare 32 hooks per table, each up to 600 s).
MAX_COLLECT_TOTAL_SEC = 1200.0


class Budget:
    """The collect hooks' time before one grading: each hook's, capped, out of a total."""

    def __init__(self, total: float = MAX_COLLECT_TOTAL_SEC) -> None:
        self.left = total

    def allot(self, asked: float) -> float | None:
        """The time a hook asking ``asked`` seconds gets (None: the total is spent)."""
        if self.left <= 0:
            return None
        return min(asked, MAX_COLLECT_TIMEOUT_SEC, self.left)

    def spend(self, seconds: float) -> None:
        """Count ``seconds`` a hook took."""
        self.left -= max(0.0, seconds)


_SPENT = f"the collect hooks' total time ({MAX_COLLECT_TOTAL_SEC:g} s) is spent"


@dataclass
class Collected:
    """What the collection before one grading left: events and the sidecars' files."""

    events: list[dict[str, Any]] = field(default_factory=list)
    evidence: list[EvidenceEvent] = field(default_factory=list)
    #: Index in the view's ``artifacts`` -> its host copy (present only when copied).
    files: dict[int, Path] = field(default_factory=dict)
    manifest: list[dict[str, Any]] = field(default_factory=list)
    #: Index in the view's ``artifacts`` of each ``manifest`` entry.
    manifest_indices: list[int] = field(default_factory=list)
    hold: Path | None = None

    def place(self, artifacts: list[Artifact], dest: Path) -> list[dict[str, Any]]:
        """Move the copies into the trial's ``artifacts/`` (never over what is there).

        What is there is the agent's (its ``/logs/artifacts``): a destination, or a parent
        of one, it already holds is a ``failed`` entry, never an error of the trial.
        """
        entries = []
        for index, entry in zip(self.manifest_indices, self.manifest, strict=True):
            copy = self.files.get(index)
            target = dest.joinpath(*artifacts[index].target.split("/"))
            if copy is not None:
                if target.exists() or target.is_symlink():
                    entry = {**entry, "status": "failed", "detail": "destination already taken"}
                else:
                    try:
                        target.parent.mkdir(parents=True, exist_ok=True)
                        shutil.move(str(copy), target)
                    except OSError as exc:  # the agent's own artifacts hold a parent (a file)
                        detail = f"destination already taken: {exc.strerror or exc}"
                        entry = {**entry, "status": "failed", "detail": detail}
            entries.append(entry)
        self.discard()
        return entries

    def discard(self) -> None:
        """Remove the held copies."""
        if self.hold is not None:
            shutil.rmtree(self.hold, ignore_errors=True)
            self.hold = None
        self.files = {}


def _hook_event(index: int, hook: CollectHook, step: str | None, **facts: Any) -> dict[str, Any]:
    return {
        "type": "collect_hook",
        "index": index,
        "service": hook.service,
        **({"step": step} if step is not None else {}),
        **facts,
    }


def run_collection(  # noqa: C901
    sandbox: Sandbox,
    view: Task,
    *,
    trial_id: str,
    separate: bool,
    caps: Caps,
    max_output_bytes: int,
    step_index: int | None,
) -> Collected:
    """Run the view's collect hooks and copy its sidecar artifacts out (best effort)."""
    done = Collected()
    budget = Budget()
    hooks = view.collect_hooks
    step = view.step.name if view.step is not None else None
    sidecar_artifacts = [(i, a) for i, a in enumerate(view.artifacts) if a.sidecar is not None]
    if not hooks and not sidecar_artifacts:
        return done
    for index, hook in enumerate(hooks):
        if hook.service == MAIN_SERVICE:
            timeout = budget.allot(hook.timeout_sec)
            if timeout is None:
                done.events.append(_hook_event(index, hook, step, status="skipped", detail=_SPENT))
                continue
            started = time.monotonic()
            done.events.append(
                _main_hook(
                    sandbox, view, hook, index, trial_id, max_output_bytes, step_index, timeout
                )
                | ({"step": step} if step is not None else {})
            )
            budget.spend(time.monotonic() - started)
    sidecar_hooks = [(i, h) for i, h in enumerate(hooks) if h.service != MAIN_SERVICE]
    if not sidecar_hooks and not sidecar_artifacts:
        return done
    access = sandbox.sidecars()
    if access is None:
        for index, hook in sidecar_hooks:
            done.events.append(_hook_event(index, hook, step, status="skipped", detail=_NONE))
        for index, artifact in sidecar_artifacts:
            done.manifest_indices.append(index)
            done.manifest.append(_entry(artifact, status="failed", detail=_NONE))
        return done
    frozen = False
    if separate:
        why = access.freeze_main()
        frozen = why is None
        done.events.append(
            {"type": "main_frozen", "frozen": frozen, **({"detail": why} if why else {})}
            | ({"step": step} if step is not None else {})
        )
    try:
        for index, hook in sidecar_hooks:
            timeout = budget.allot(hook.timeout_sec)
            if timeout is None:
                done.events.append(_hook_event(index, hook, step, status="skipped", detail=_SPENT))
                continue
            started = time.monotonic()
            done.events.append(_sidecar_hook(access, hook, index, step, timeout))
            budget.spend(time.monotonic() - started)
        if sidecar_artifacts:
            done.hold = Path(tempfile.mkdtemp(prefix="harness-sidecar-artifacts-"))
        left = _Left(caps.total_bytes, MAX_ENTRIES)
        for index, artifact in sidecar_artifacts:
            done.manifest_indices.append(index)
            if left.spent():
                done.manifest.append(_entry(artifact, type=None, status="failed", detail=_CAP))
                done.evidence.append(EvidenceEvent("limit", artifact.source, _CAP, "total_bytes"))
                continue
            done.manifest.append(_copy(access, artifact, index, done, caps, left))
    finally:
        if frozen:
            access.thaw_main()
    return done


_NONE = "this sandbox has no compose sidecars"
_CAP = "the sidecar artifacts' share of the evidence cap is spent (not copied)"


@dataclass
class _Left:
    """What the sidecar artifacts of one collection may still copy, all of them together.

    One evidence cap for them all: a task listing the same sidecar dir under many
    destinations never multiplies it.
    """

    total: int
    entries: int

    def spent(self) -> bool:
        """Whether nothing more may be copied."""
        return self.total <= 0 or self.entries <= 0

    def take(self, tree: Path) -> None:
        """Count what was copied into ``tree`` (the harness's own: files and dirs only)."""
        if not tree.is_dir():
            self.total -= tree.lstat().st_size
            self.entries -= 1
            return
        for dirpath, dirs, files in os.walk(tree):
            self.entries -= len(dirs) + len(files)
            for name in files:
                self.total -= os.lstat(os.path.join(dirpath, name)).st_size


def _entry(artifact: Artifact, **facts: Any) -> dict[str, Any]:
    return {
        "source": artifact.source,
        "service": artifact.service,
        "destination": artifact.target,
        **facts,
    }


def _main_hook(
    sandbox: Sandbox,
    view: Task,
    hook: CollectHook,
    index: int,
    trial_id: str,
    max_output_bytes: int,
    step_index: int | None,
    timeout: float,
) -> dict[str, Any]:
    facts: dict[str, Any] = {"timeout_sec": timeout, "user": "verifier"}
    if hook.user is not None:
        facts["user_not_applied"] = str(hook.user)
    try:
        result = sandbox.run_phase(
            PhaseRequest(
                role="verifier",
                argv=["sh", "-c", hook.command],
                env=grader_env(sandbox, view, trial_id),
                timeout_sec=timeout,
                max_output_bytes=max_output_bytes,
                confidential_env=tuple(view.verifier_env),
                log_name=f"collect-{index}",
                step=step_index,
            )
        )
    except Exception as exc:  # best effort, as in Harbor
        detail = str(exc)[:OUTPUT_TAIL]
        return _hook_event(index, hook, None, status="failed", detail=detail, **facts)
    status = "ok" if result.exit_code == 0 and not result.timed_out else "failed"
    return _hook_event(
        index,
        hook,
        None,
        status=status,
        exit_code=result.exit_code,
        timed_out=result.timed_out,
        **facts,
        output=_phase_output(sandbox, f"collect-{index}"),
    )


def _phase_output(sandbox: Sandbox, name: str) -> str:
    """The tail of a main hook's stdout and stderr (its phase's log files)."""
    parts = []
    for stream in ("stdout", "stderr"):
        try:
            data, _event = sandbox.read_file(
                f"{sandbox.paths.logs}/{name}.{stream}", max_bytes=1 << 16
            )
        except Exception:  # best effort: the output is a courtesy
            continue
        if data:
            parts.append(data.decode("utf-8", "replace"))
    return "".join(parts)[-OUTPUT_TAIL:]


def _sidecar_hook(
    access: SidecarAccess, hook: CollectHook, index: int, step: str | None, timeout: float
) -> dict[str, Any]:
    user = None if hook.user is None else str(hook.user)
    try:
        result = access.run_hook(
            hook.service, hook.command, user=user, timeout_sec=timeout, max_output=OUTPUT_TAIL
        )
    except Exception as exc:  # best effort, as in Harbor
        return _hook_event(index, hook, step, status="failed", detail=str(exc)[:OUTPUT_TAIL])
    ok = result.error is None and not result.timed_out and result.exit_code == 0
    return _hook_event(
        index,
        hook,
        step,
        status="ok" if ok else "failed",
        exit_code=result.exit_code,
        timed_out=result.timed_out,
        timeout_sec=timeout,
        **({"user": user} if user is not None else {}),
        **({"detail": result.error} if result.error else {}),
        output=result.output[-OUTPUT_TAIL:],
    )


def _copy(
    access: SidecarAccess, artifact: Artifact, index: int, done: Collected, caps: Caps, left: _Left
) -> dict[str, Any]:
    assert done.hold is not None and artifact.sidecar is not None
    staged = done.hold / str(index)
    try:
        events = access.copy_out(
            artifact.sidecar,
            artifact.source,
            staged,
            max_file_bytes=caps.file_bytes,
            max_total_bytes=left.total,
            max_entries=left.entries,
        )
    except Exception as exc:  # best effort, as in Harbor
        if staged.exists():
            left.take(staged)
        return _entry(artifact, type=None, status="failed", detail=str(exc)[:OUTPUT_TAIL])
    if staged.exists():
        left.take(staged)
    done.evidence += events
    if not staged.exists():
        if events:  # a link, a device...: nothing of it is copied
            kinds = ", ".join(sorted({event.kind for event in events}))
            return _entry(artifact, type=None, status="failed", detail=f"not copied: {kinds}")
        return _entry(artifact, type=None, status="missing")
    prune_excluded(staged, artifact.exclude)
    done.files[index] = staged
    entry = _entry(artifact, type="directory" if staged.is_dir() else "file", status="ok")
    if events:
        entry["events"] = [event.as_dict() for event in events]
    return entry


__all__ = ["Collected", "run_collection"]
