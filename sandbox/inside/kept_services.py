"""The services an agent phase leaves running (``agent_services = keep``; stdlib, 3.9).

At the end of an agent phase asked to keep them, the processes of the phase that hold a
listening socket (:mod:`listeners`) are kept: every other process of the phase is killed
as usual (those of the scan even inside a kept one's tree; what a kept one forks from
then on is its own), and they are adopted as *protected* services
(:data:`launch.PROTECTED`, :data:`launch.KEPT`): later phase kills spare them and their
tree. They keep exactly the user, capabilities and stdio they had. The phase's own
program is never kept: it ends with its phase.

They run only during the grading phases that follow (schema 1.4's collect hooks, the
verifier: ``verifier`` phases). Once nothing else of the agent's phase is alive they are
stopped (``SIGSTOP``, :func:`pause`; stopped earlier, gVisor would hang them up when the
rest of their process group exits), and stay so while the harness works between phases:
nothing of theirs races its moves and resets of ``/tmp`` or its uploads. They are
continued once a grading phase's process exists (:func:`resume`; a fork bomb then fails
the phase's own forks, never the harness's start of it), stopped again at its end, and
killed at the end of the verifier (:func:`end`), before its reward is read: nothing of
the agent's runs after the verdict. The next agent phase (a later step, another agent of
an episode) starts without them. Otherwise they die with the container.

Before a verifier, :func:`before_verifier` either lists what is alive (the record's
``agent_processes_alive``) or, when the harness says the verifier could not be kept out of
their reach (its user is theirs; gVisor shows every process its environment), kills them.
"""

from __future__ import annotations

import os
import select
import signal
import threading
from typing import Any, Dict, List, Optional, Set

try:  # in the harness: the sandbox.inside package; inside a sandbox: siblings on sys.path
    from sandbox.inside import launch, listeners, processes, services
except ImportError:  # pragma: no cover - inside a sandbox
    import launch  # type: ignore[no-redef,import-not-found]
    import listeners  # type: ignore[no-redef,import-not-found]
    import processes  # type: ignore[no-redef,import-not-found]
    import services  # type: ignore[no-redef,import-not-found]

#: How many kept processes a record lists.
MAX_LISTED = 50


def _signal(pids: Set[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _facts(
    pids: List[int], entries: List[Dict[str, Any]], found: Dict[int, List[str]]
) -> List[Dict[str, Any]]:
    """Record-ready ``{pid, uid, comm, listening}`` of ``pids``."""
    by_pid = {e["pid"]: e for e in entries}
    return [
        {
            "pid": pid,
            "uid": by_pid[pid]["uid"],
            "comm": listeners.comm(pid),
            "listening": found.get(pid, []),
        }
        for pid in sorted(pids)[:MAX_LISTED]
        if pid in by_pid
    ]


def keep_listeners(
    phase: Any,
    entries: List[Dict[str, Any]],
    user: Optional[Dict[str, Any]],
    reaper: Any,
    unread: Optional[Dict[str, Any]] = None,
) -> List[Dict[str, Any]]:
    """Mark the phase's listening processes as kept (its kill spares them).

    ``phase`` is the agent's :class:`launch.Launch` (not in a pid namespace of its own),
    ``entries`` a scan taken after its program ended, ``user`` its user. Returns the
    record of what is kept. ``unread``, if given and some were, gets how many processes
    the scan's bounds left unread (:func:`listeners.listening_processes`) and the record
    of the first :data:`MAX_LISTED`, with the bounds (``{count, processes, bounds}``):
    they are killed with the phase.
    """
    candidates = phase.processes(entries) - {phase.pid}
    skipped: Set[int] = set()
    found = listeners.listening_processes(sorted(candidates), user, reaper, skipped)
    if unread is not None and skipped:
        unread.update(
            count=len(skipped),
            processes=_facts(sorted(skipped), entries, {}),
            bounds={"users": listeners.MAX_USERS, "processes": listeners.MAX_PIDS},
        )
    kept = set(found)
    if not kept:
        return []
    phase.keep = kept
    phase.doomed = candidates - kept
    return _facts(sorted(kept), entries, found)


def adopt(phase: Any) -> None:
    """After the phase's kill: its kept processes become protected services, stopped."""
    if not phase.keep:
        return
    launch.PROTECTED.update(phase.keep)
    launch.KEPT.update(phase.keep)
    pause()


def resume() -> None:
    """A grading phase's process exists: continue the kept services and their trees."""
    if launch.KEPT:
        _signal(_kept_trees(processes.live_entries()), signal.SIGCONT)


def pause() -> None:
    """Stop every kept service and its tree again (a grading phase is over).

    Stopped top-down until a scan finds nothing new: a stopped process forks no more,
    and a child forked meanwhile is found by the next scan. A process that left the tree
    (a double fork) is the phase's, killed with it.
    """
    stopped: Set[int] = set()
    for _ in range(1000):
        tree = _kept_trees(processes.live_entries()) - stopped
        if not tree:
            return
        _signal(tree, signal.SIGSTOP)
        stopped |= tree


def end(reaper: Any) -> int:
    """Kill every kept service and its tree (stopped first: none forks meanwhile).

    Returns how many signals were sent. Raises RuntimeError if some survive SIGKILL.
    """
    if not launch.KEPT:
        return 0
    roots = set(launch.KEPT)
    launch.PROTECTED.difference_update(roots)
    launch.KEPT.clear()

    def find() -> Set[int]:
        live = processes.live_entries()
        alive = {e["pid"] for e in live}
        found: Set[int] = set()
        for root in roots:
            if root in alive:
                found |= processes.descendants(root, live) | {root}
        return found

    _signal(find(), signal.SIGSTOP)
    return int(processes.kill_all(find, reaper))


def drain_beside(captures: List[Any]) -> None:
    """The phase's output pipes, which kept processes still hold: never waited on.

    What the phase wrote before its end is in the pipes: it is read into the captures,
    which are then closed. From then on a daemon thread reads and discards what the kept
    processes write there (they would get ``EPIPE`` from a closed pipe, and a server that
    logs each request would stop serving).
    """
    open_caps = [c for c in captures if c.fd >= 0]
    while open_caps:
        ready, _, _ = select.select([c.fd for c in open_caps], [], [], 0.05)
        if not ready:
            break
        for cap in [c for c in open_caps if c.fd in ready]:
            if not cap.feed():
                open_caps.remove(cap)
    sinks = []
    for cap in open_caps:
        sinks.append(launch.Capture(cap.fd, None, 0))
        cap.fd = -1  # the sink's now
    for cap in captures:
        cap.close()
    if sinks:
        threading.Thread(
            target=services.drain_pipes, args=(sinks,), name="kept-output", daemon=True
        ).start()


def _kept_trees(entries: List[Dict[str, Any]]) -> Set[int]:
    alive = {e["pid"] for e in entries}
    found: Set[int] = set()
    for root in launch.KEPT:
        if root in alive:
            found |= processes.descendants(root, entries) | {root}
    return found


def before_verifier(req: Dict[str, Any], reaper: Any) -> Dict[str, Any]:
    """What of the kept services a verifier about to start runs beside.

    ``req["agent_services"]``: ``{"user": {uid, gid} of the kept processes, "drop": a
    reason to kill them first, or null}``. Returns the result's fields:
    ``agent_processes_alive`` (each ``{pid, uid, comm, listening}``), and
    ``agent_services_dropped`` {reason, killed} when they were killed.
    """
    spec = req.get("agent_services") or {}
    entries = processes.live_entries()
    tree = _kept_trees(entries)
    if spec.get("drop") and launch.KEPT:
        try:
            killed = end(reaper)
        except RuntimeError as exc:
            killed = -1
            spec = dict(spec, drop="%s (%s)" % (spec["drop"], exc))
        return {
            "agent_processes_alive": [],
            "agent_services_dropped": {"reason": str(spec["drop"]), "killed": killed},
        }
    if not tree:
        launch.KEPT.clear()
        return {"agent_processes_alive": []}
    user = spec.get("user")
    try:
        found = listeners.listening_processes(sorted(tree), user, reaper)
    except (OSError, RuntimeError, ValueError):
        found = {}
    return {"agent_processes_alive": _facts(sorted(tree), entries, found)}
