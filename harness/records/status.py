"""A run's live state, and ``status.json``: what another process sees of a running run.

:class:`RunState` is updated by the scheduler (from the trial threads) as trials start,
change phase and finish; the display reads it, and :class:`StatusWriter` writes its
snapshot to ``<run-dir>/status.json`` atomically (temp file + rename), at most every
``min_interval`` seconds while things change, and always for the final state.

``status.json`` (keys may be added, never renamed)::

    {
      "run": "<run name>", "run_dir": "...", "pid": 1234, "invocation": 2,
      "state": "running" | "finished" | "interrupted" | "stopped",
      "started_at": "...", "updated_at": "...",
      "paused": null | {"reason": "docker engine unreachable: ...", "since": "...",
                        "until": "..."},
      "stopped": null | "stopped: no space left on device (ENOSPC) at ...; ...",
      "counts": {"planned": 40, "done": 12, "running": 4, "pending": 24, "kept": 8,
                 "retries": 1, "by_status": {"completed": 11, "agent_error": 1}},
      "success": {"threshold": 1.0, "graded": 11, "successes": 7, "rate": 0.636,
                  "mean_reward": 0.7, "rate_done": 0.583, "mean_reward_done": 0.642},
      "running": [{"id": "...", "task": "...", "attempt": 1, "phase": "execute",
                   "started_at": "...", "phase_started_at": "..."}]
    }

``success``'s ``rate`` and ``mean_reward`` are over the graded trials; ``rate_done`` and
``mean_reward_done`` over every trial done so far, an ungraded one counting 0, as
``summary.json``'s headline counts it.

A ``running`` state whose ``pid`` is gone means the harness died (``kill -9``, a crash): the
run can be continued with ``harness run --resume RUN_DIR``. ``paused`` is set while the run
waits for an unreachable sandbox engine (no trial starts until ``until``); ``stopped`` is
the state of a run a fault of the machine stopped in order (``stopped`` says which and how
to go on).

:func:`read_status` never fails on a damaged file (a disk that filled up, a hand edit):
it is live information only, rewritten whole by the next invocation.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from harness.records.atomic import write_json_atomic
from harness.records.layout import STATUS_FILENAME
from harness.records.model import TrialRecord, TrialStatus

RunStateName = Literal["running", "finished", "interrupted", "stopped"]


def _iso(when: datetime) -> str:
    return when.isoformat().replace("+00:00", "Z")


@dataclass
class RunningTrial:
    """A trial that is running now.

    Attributes:
        id: Trial id.
        task: Task key.
        attempt: Attempt number.
        phase: Current phase (``prepare``, ``reset``, ``execute``, ``collect``, ``grade``,
            ``backoff`` between attempts, ``waiting`` for an agent slot).
        started_at: When the attempt started.
        phase_started_at: When the phase started.
        agents: An episode's agents so far: name → phase (``done`` once finished).
    """

    id: str
    task: str
    attempt: int
    phase: str
    started_at: datetime
    phase_started_at: datetime
    agents: dict[str, str] = field(default_factory=dict)


class RunState:
    """Thread-safe counters and running trials of one run invocation.

    Args:
        name: The run's name.
        run_dir: The run directory.
        planned: Trials in the plan (kept ones included).
        kept: Final records kept from earlier invocations (``--resume``).
        threshold: Reward at or above which a graded trial is a success.
        invocation: Which invocation of the run this is (1 for the first).
    """

    def __init__(
        self,
        *,
        name: str,
        run_dir: Path,
        planned: int,
        kept: Iterable[TrialRecord] = (),
        threshold: float = 1.0,
        invocation: int = 1,
    ) -> None:
        self.name = name
        self.run_dir = run_dir
        self.planned = planned
        self.threshold = threshold
        self.invocation = invocation
        self.started_at = datetime.now(UTC)
        self.started_monotonic = time.monotonic()
        self.state: RunStateName = "running"
        self.paused: dict[str, str] | None = None
        self.stopped: str | None = None
        self._lock = threading.Lock()
        self._running: dict[str, RunningTrial] = {}
        self._by_status: dict[str, int] = {}
        self._done = 0
        self._kept = 0
        self._retries = 0
        self._graded = 0
        self._successes = 0
        self._reward_sum = 0.0
        self._finished_now = 0
        self.version = 0
        for record in kept:
            self._count(record)
            self._kept += 1

    # -- updates (any thread) -----------------------------------------------------------------

    def _count(self, record: TrialRecord) -> None:
        status = str(record.status)
        self._by_status[status] = self._by_status.get(status, 0) + 1
        self._done += 1
        reward = record.reward
        if reward is not None and math.isfinite(reward):
            self._graded += 1
            self._reward_sum += reward
            if reward >= self.threshold:
                self._successes += 1

    def trial_started(self, trial_id: str, task: str, attempt: int) -> None:
        """An attempt of a trial starts."""
        now = datetime.now(UTC)
        with self._lock:
            self._running[trial_id] = RunningTrial(trial_id, task, attempt, "prepare", now, now)
            self.version += 1

    def phase(self, trial_id: str, phase: str) -> None:
        """A running trial enters ``phase``."""
        with self._lock:
            running = self._running.get(trial_id)
            if running is not None and running.phase != phase:
                running.phase = phase
                running.phase_started_at = datetime.now(UTC)
                self.version += 1

    def agent_phase(self, trial_id: str, agent: str, phase: str) -> None:
        """An agent of a running episode enters ``phase`` (the episode's phase follows)."""
        with self._lock:
            running = self._running.get(trial_id)
            if running is None:
                return
            running.agents[agent] = phase
            self.version += 1
        if phase != "done":
            self.phase(trial_id, f"{agent}:{phase}")

    def retrying(self, trial_id: str) -> None:
        """A trial's attempt failed and it waits before its next attempt."""
        with self._lock:
            self._retries += 1
            self.version += 1
        self.phase(trial_id, "backoff")

    def trial_finished(self, record: TrialRecord) -> None:
        """A trial has its final record for this invocation."""
        with self._lock:
            self._running.pop(record.id, None)
            self._count(record)
            self._finished_now += 1
            self.version += 1

    def trial_dropped(self, trial_id: str) -> None:
        """A trial stopped without a record (it stays pending for ``--resume``)."""
        with self._lock:
            if self._running.pop(trial_id, None) is not None:
                self.version += 1

    def pause(self, reason: str, since: datetime, until: datetime) -> None:
        """The run waits for its engine until ``until``: no trial starts meanwhile."""
        with self._lock:
            self.paused = {"reason": reason, "since": _iso(since), "until": _iso(until)}
            self.version += 1

    def unpause(self) -> None:
        """The engine answers again: trials start again."""
        with self._lock:
            self.paused = None
            self.version += 1

    def finish(self, state: RunStateName, stopped: str | None = None) -> None:
        """Set the run's final state (and, for ``stopped``, the message saying why)."""
        with self._lock:
            self.state = state
            self.stopped = stopped
            self.paused = None
            self.version += 1

    # -- reads --------------------------------------------------------------------------------

    @property
    def done(self) -> int:
        """Trials with a final record (kept ones included)."""
        with self._lock:
            return self._done

    @property
    def finished_now(self) -> int:
        """Trials finished by this invocation."""
        with self._lock:
            return self._finished_now

    def running(self) -> list[RunningTrial]:
        """The running trials, oldest first (copies)."""
        with self._lock:
            items = [
                RunningTrial(**{**vars(r), "agents": dict(r.agents)})
                for r in self._running.values()
            ]
        return sorted(items, key=lambda r: r.started_at)

    def snapshot(self) -> dict[str, Any]:
        """The ``status.json`` document (see the module docstring)."""
        with self._lock:
            running = sorted(self._running.values(), key=lambda r: r.started_at)
            done = self._done
            pending = max(self.planned - done - len(running), 0)
            return {
                "run": self.name,
                "run_dir": str(self.run_dir),
                "pid": os.getpid(),
                "invocation": self.invocation,
                "state": self.state,
                "started_at": _iso(self.started_at),
                "updated_at": _iso(datetime.now(UTC)),
                "paused": dict(self.paused) if self.paused is not None else None,
                "stopped": self.stopped,
                "counts": {
                    "planned": self.planned,
                    "done": done,
                    "running": len(running),
                    "pending": pending,
                    "kept": self._kept,
                    "retries": self._retries,
                    "by_status": dict(sorted(self._by_status.items())),
                },
                "success": {
                    "threshold": self.threshold,
                    "graded": self._graded,
                    "successes": self._successes,
                    "rate": self._successes / self._graded if self._graded else None,
                    "mean_reward": self._reward_sum / self._graded if self._graded else None,
                    "rate_done": self._successes / done if done else None,
                    "mean_reward_done": self._reward_sum / done if done else None,
                },
                "running": [
                    {
                        "id": r.id,
                        "task": r.task,
                        "attempt": r.attempt,
                        "phase": r.phase,
                        "started_at": _iso(r.started_at),
                        "phase_started_at": _iso(r.phase_started_at),
                        **({"agents": dict(r.agents)} if r.agents else {}),
                    }
                    for r in running
                ],
            }

    def ok_so_far(self) -> dict[str, int]:
        """Completed trials and error counts so far: ``{"completed": n, "errors": m}``."""
        with self._lock:
            completed = self._by_status.get(str(TrialStatus.COMPLETED), 0)
            return {"completed": completed, "errors": self._done - completed}


class StatusWriter:
    """Writes a :class:`RunState` to ``status.json``, throttled, never losing the last state.

    Args:
        path: ``<run-dir>/status.json``.
        state: The state to write.
        min_interval: Least seconds between two writes of changes (the final one is forced).
    """

    def __init__(self, path: Path, state: RunState, *, min_interval: float = 0.5) -> None:
        self.path = path
        self.state = state
        self.min_interval = min_interval
        self._lock = threading.Lock()
        self._written_version = -1
        self._written_at = 0.0

    def flush(self, *, force: bool = False) -> bool:
        """Write the state if it changed and the interval passed (or ``force``).

        Returns:
            Whether the file was written.
        """
        with self._lock:
            version = self.state.version
            now = time.monotonic()
            if not force and (
                version == self._written_version or now - self._written_at < self.min_interval
            ):
                return False
            write_json_atomic(self.path, self.state.snapshot())
            self._written_version = version
            self._written_at = now
            return True


def read_status(run_dir: Path) -> dict[str, Any] | None:
    """Read a run dir's ``status.json``: None when there is none or it is damaged.

    It is written atomically, so only a hand edit or a broken disk damages it; it is live
    information only, and the next invocation of the run rewrites it whole.
    """
    import json

    path = Path(run_dir) / STATUS_FILENAME
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


__all__ = [
    "STATUS_FILENAME",
    "RunState",
    "RunningTrial",
    "StatusWriter",
    "read_status",
]
