"""What a trial is given: its plan, the settings every trial of a run shares, its clock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from harness.agents.kinds import Agent
from harness.gateway import TrialGateway
from harness.records import TrialRecord
from harness.records.layout import OBJECTS_DIRNAME
from harness.tasks import Task
from harness.tasks.networks import RunNetwork
from sandbox.backend import Sandbox, SandboxSpec
from sandbox.evidence_diff import ObjectStore, seed_index
from sandbox.inside.evidence import DEFAULT_LIMITS, Limits
from sandbox.seeding import Fixture

if TYPE_CHECKING:
    from harness.judges import JudgePanel

SandboxFactory = Callable[[SandboxSpec], Sandbox]

#: Free bytes below which a trial's storage counts as filled.
STORAGE_FULL_SLACK = 1 << 20


@dataclass(frozen=True)
class TrialPlan:
    """One planned trial: a task, a rollout index and a stable id."""

    id: str
    task: Task
    rollout: int
    #: Where its evidence goes, relative to the run dir (default ``trials/<id>``); an
    #: episode's agents keep theirs inside the episode's dir.
    evidence: str | None = None


class TrialCountdown:
    """The run's trials not started yet, counted down as each one starts (thread-safe).

    Args:
        total: Trials the run will start (a retried attempt starts again and counts too:
            the count only ever errs low).
    """

    def __init__(self, total: int) -> None:
        self._left = total
        self._lock = threading.Lock()

    def start_one(self) -> int:
        """Count one trial as started; how many are left to start after it."""
        with self._lock:
            self._left = max(0, self._left - 1)
            return self._left


@dataclass
class TrialSettings:
    """What every trial of a run shares."""

    run_dir: Path
    agent: Agent
    make_sandbox: SandboxFactory
    model: str | None = None
    versions: Mapping[str, str] = field(default_factory=dict)
    #: Secrets given to the agent phase's environment (e.g. a per-trial gateway token).
    secret_env: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: Host paths the agent must never read (task sources, the output dir).
    protected_paths: tuple[Path, ...] = ()
    #: Host paths the local sandbox shows read-only (``expose``).
    expose: tuple[Path, ...] = ()
    max_evidence_file_bytes: int = 16 << 20
    max_evidence_total_bytes: int = 64 << 20
    #: The evidence walks' other caps (``[evidence_caps]``): every sandbox made through
    #: :attr:`make_sandbox` walks agent-written trees under them.
    evidence_limits: Limits = DEFAULT_LIMITS
    max_output_bytes: int = 4 << 20
    cancel: threading.Event = field(default_factory=threading.Event)
    on_phase: Callable[[str, str], None] | None = None
    #: The run's model gateway, when a model was selected (per-trial tokens and sockets):
    #: the gateway itself, or on a Ray worker a relay to the driver's.
    gateway: TrialGateway | None = None
    #: Bounds agent phases across the run's trials: ``agent_slot(trial_id)`` is held
    #: around the execute phase (``agent_concurrency``); None means no bound.
    agent_slot: Callable[[str], AbstractContextManager[object]] | None = None
    #: How the final workspace is kept: ``diff``, ``full`` or ``none``
    #: (:mod:`sandbox.evidence_diff`).
    evidence_mode: str = "diff"
    #: Trials per task in the run (a sandbox may be made ahead for the next rollout).
    rollouts: int = 1
    #: Counts the run's trials as they start (None: only the task's own rollouts are known
    #: to come): a backend may make sandboxes ahead while trials of any task are to come.
    trials_left: TrialCountdown | None = None
    _seeds: dict[str, dict[str, str]] = field(default_factory=dict, repr=False)
    #: What the run does with the tasks' network policies (``--network``, the modes the
    #: backend enforces): :mod:`harness.tasks.networks`.
    network: RunNetwork = field(default_factory=RunNetwork)
    #: The run's judges (``harness.judges``), run on each graded trial's evidence.
    judges: JudgePanel | None = None
    #: How an executor that runs attempts in this process runs one (None: a plain trial,
    #: :func:`~harness.trial.run_trial`). The runner sets it to an episode env's
    #: (docs/episodes.md); the executor calls it without knowing what it runs.
    attempt: AttemptRunner | None = None
    _active: set[Sandbox] = field(default_factory=set, repr=False)
    _active_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        make, limits = self.make_sandbox, self.evidence_limits

        def bounded(spec: SandboxSpec) -> Sandbox:
            sandbox = make(spec)
            sandbox.evidence_limits = limits
            return sandbox

        self.make_sandbox = bounded

    @property
    def objects(self) -> ObjectStore:
        """The run's content store of evidence files."""
        return ObjectStore(self.run_dir / OBJECTS_DIRNAME)

    def seed_of(self, task: Task, fixtures: Mapping[str, Fixture]) -> dict[str, str]:
        """The seed's index (path -> sha256), hashed once per task per run.

        The seed's own files are not stored: readers take unchanged files from the task's
        ``workspace/`` dir, checking each one's sha256.
        """
        with self._active_lock:
            known = self._seeds.get(task.key)
        if known is None:
            known = seed_index(fixtures)
            with self._active_lock:
                self._seeds[task.key] = known
        return known

    def track(self, sandbox: Sandbox | None, *, running: bool) -> None:
        """Register (or forget) a running trial's sandbox, so an abort can reach it."""
        if sandbox is None:
            return
        with self._active_lock:
            if running:
                self._active.add(sandbox)
            else:
                self._active.discard(sandbox)

    def abort_all(self) -> None:
        """Cancel the run and kill every running trial's sandbox now (any thread)."""
        self.cancel.set()
        with self._active_lock:
            active = list(self._active)
        for sandbox in active:
            try:
                sandbox.abort()
            except Exception:  # best effort: each trial's cleanup still removes it
                pass


AttemptRunner = Callable[[TrialPlan, TrialSettings, int], TrialRecord]
"""Runs one attempt to its record: ``(plan, settings, attempt number) -> record``."""


class Clock:
    """Seconds spent per phase name (a phase entered twice, e.g. per step, adds up)."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block under ``name``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)

    def add(self, name: str, seconds: float) -> None:
        """Add ``seconds`` to ``name``."""
        self.timings[name] = self.timings.get(name, 0.0) + seconds
