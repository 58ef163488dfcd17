"""The interface of a sandbox backend plug-in: one run's sandboxes, and what it leaves.

A backend class is registered under a name in the ``harness.sandboxes`` entry-point group.
For each run the harness constructs it with :class:`BackendOptions` (the constructor checks
the options and raises ``UsageError`` for bad ones: nothing has run yet), asks
:meth:`SandboxBackend.task_problems` about the selected tasks, hands it the run's progress
line (:meth:`SandboxBackend.report_progress`), calls :meth:`SandboxBackend.start` before the
first trial, :meth:`SandboxBackend.make_sandbox` once per trial, and
:meth:`SandboxBackend.close` after the last one.

An executor that runs trials in other processes or on other machines (``--executor ray``)
also opens a backend per trial there: :meth:`SandboxBackend.attach` instead of ``start``,
one ``make_sandbox``, then :meth:`SandboxBackend.release` instead of ``close``; the run's
``start`` and ``close`` still run once on every machine, before and after all its trials.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sandbox.backend import Capacity, CloseReport, Sandbox, SandboxSpec
from sandbox.options import SandboxConfig

#: How a refused task is left out of a run instead of refusing the whole run.
SKIP_HINT = "leave the task out with --skip-invalid"


@dataclass(frozen=True)
class TaskFacts:
    """What a backend is told about a task before the run (its up-front checks).

    The harness builds it from a loaded task (``harness.tasks.Task.facts``); a backend never
    reads a task dir's config itself.

    Attributes:
        key: The task's key in the run (what ``--skip-invalid`` leaves out).
        name: The task's name, for messages.
        path: The task dir.
        dockerfile: ``environment/Dockerfile`` when the task has one.
        compose_file: ``environment/docker-compose.yaml`` when the task has sidecars.
        docker_image: ``[environment].docker_image`` (None: built from the Dockerfile).
        cpus: ``[environment].cpus``.
        memory_mb: ``[environment].memory_mb``.
        gpus: ``[environment].gpus``.
        build_timeout_sec: ``[environment].build_timeout_sec``.
        verifier_user: ``[verifier].user`` (None: the default).
        agent_users: ``[agent].user`` of each phase that runs an agent, in order (one per
            step of a multi-step task); None where unset (the image's ``USER`` decides).
    """

    key: str
    name: str
    path: Path
    dockerfile: Path | None = None
    compose_file: Path | None = None
    docker_image: str | None = None
    cpus: float = 1.0
    memory_mb: int = 2048
    gpus: int = 0
    build_timeout_sec: float = 600.0
    verifier_user: str | int | None = None
    agent_users: tuple[str | int | None, ...] = (None,)

    @property
    def config_file(self) -> Path:
        """The task's ``task.toml``, where a refusal points."""
        return self.path / "task.toml"


@dataclass(frozen=True)
class Guarantee:
    """One guarantee of a backend where the doctor ran: whether it holds there, and how.

    Attributes:
        name: The guarantee (``network: public``, ``limit: memory_mb``, ...).
        holds: Whether trials there, run by this user, get it.
        how: What enforces it here, or why it does not hold and what happens instead.
    """

    name: str
    holds: bool
    how: str


@dataclass
class DoctorReport:
    """``harness doctor``: facts as (check, result) rows, guarantees, problems with fixes."""

    checks: list[tuple[str, str]] = field(default_factory=list)
    guarantees: list[Guarantee] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@dataclass
class Leftovers:
    """What a backend's part of ``harness sandbox cleanup`` removed, and what it could not.

    Attributes:
        removed: What was removed by kind, in the order the line names them: a singular noun
            (``container``, ``cgroup``) to the names of what went.
        errors: What could not be removed, each saying what and why.
        notes: Further lines for the user (e.g. a shared network no live run held).
    """

    removed: dict[str, list[str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class BackendOptions:
    """What a backend is opened with.

    Attributes:
        run_name: The run's name; a backend labels everything it creates with it, so a
            later invocation (``--resume``) can find what a dead one left.
        config: The run's ``[sandbox]`` section (``kwargs`` holds a plug-in's own options).
        concurrency: Trials that may run at once (``-j``); 0 for a backend a Ray worker
            holds between trials (nothing is kept running for a next trial).
    """

    run_name: str
    config: SandboxConfig
    concurrency: int = 1


class SandboxBackend(ABC):
    """One run's sandbox backend.

    Attributes:
        name: The name it is registered under (set by the registry).
        warnings: Things the user must know before trials run (e.g. not a security
            boundary), shown once at the start of a run.
    """

    name: str = "backend"

    def __init__(self, options: BackendOptions) -> None:
        self.options = options
        self.warnings: list[str] = []

    @abstractmethod
    def make_sandbox(self, spec: SandboxSpec) -> Sandbox:
        """A new, not yet started sandbox for one trial."""

    @classmethod  # noqa: B027 - a backend may check nothing
    def doctor(cls, report: DoctorReport) -> None:
        """Add this backend's rows to ``harness doctor``'s report (its admin verb).

        Facts as ``checks`` rows, each guarantee it gives here as a row, and what keeps it
        from running at all as ``problems`` (each saying how to fix it). Asked without a
        run: no backend is opened. Default: nothing.
        """

    @classmethod
    def remove_leftovers(cls, run: str | None) -> Leftovers:
        """Remove what runs of this backend left (``harness sandbox cleanup``; an admin verb).

        Args:
            run: Only what this run (its name) left; other runs are untouched. None: what
                every run left, no run of the harness being active.

        Raises:
            UsageError: What it would clean cannot be reached (e.g. the engine), saying how
                to reach it.
        """
        return Leftovers()

    @classmethod
    def mount_problem(cls, mount_points: Sequence[str]) -> str | None:
        """Why no sandbox here can show an agent host dirs at ``mount_points`` (None: it can).

        Asked before the backend is opened and before the agent's CLI is fetched (an
        installed agent's cache entry, :meth:`~harness.agents.Agent.mount_points`): a
        sandbox that cannot would refuse to start for every trial. Default: None.
        """
        return None

    def capacity(self) -> Capacity | None:
        """The most one trial can be given (None: the backend enforces no CPU or memory)."""
        return None

    def gpu_problem(self, gpus: int) -> str | None:
        """Why no trial here can be given ``gpus`` GPUs (None: it can, or cannot be known).

        Asked before the run (and by ``harness tasks check``) for each GPU count a task
        asks, so a GPU task is refused before its image is built. Default: None.
        """
        return None

    def describe(self) -> str | None:
        """What the tasks are checked against, for ``harness tasks check`` (one line).

        E.g. ``docker engine at unix:///var/run/docker.sock: 2 CPUs, 23.4 GB memory``;
        None when the backend has no capacity to speak of.
        """
        capacity = self.capacity()
        if capacity is None:
            return None
        address = self.engine_address()
        at = f" at {address}" if address else ""
        return (
            f"{self.name} engine{at}: {capacity.cpus:g} CPUs, "
            f"{capacity.memory_mb / 1024:.1f} GB memory"
        )

    def task_problems(self, tasks: Sequence[TaskFacts]) -> list[str]:
        """What keeps each task from running on this backend at all (checked before the run).

        A limit the engine cannot satisfy fails the same way on every attempt, so it is
        refused up front (exit 2; ``--skip-invalid`` leaves such a task out instead, see
        :meth:`problems_by_task`). Backends add their own checks. Network policies are
        checked by the run against :meth:`capacity` (``harness.runner.network``).
        """
        problems: list[str] = []
        capacity = self.capacity()
        gpus: dict[int, str | None] = {}
        for task in tasks:
            where = task.config_file
            if task.gpus > 0:
                if task.gpus not in gpus:
                    gpus[task.gpus] = self.gpu_problem(task.gpus)
                reason = gpus[task.gpus]
                if reason is not None:
                    problems.append(
                        f"{where}: [environment].gpus = {task.gpus}, but {reason}; run it "
                        f"where GPUs are, or {SKIP_HINT}"
                    )
            if capacity is None:
                continue
            if task.cpus > capacity.cpus:
                problems.append(
                    f"{where}: [environment].cpus = {task.cpus:g} is more than the {self.name} "
                    f"engine's {capacity.cpus:g} CPUs; lower it, run on a bigger machine, or "
                    f"{SKIP_HINT}"
                )
            if task.memory_mb > capacity.memory_mb:
                problems.append(
                    f"{where}: [environment].memory_mb = {task.memory_mb} is more than the "
                    f"{self.name} engine's {capacity.memory_mb} MB; lower it, run on a "
                    f"bigger machine, or {SKIP_HINT}"
                )
        return problems

    def problems_by_task(self, tasks: Sequence[TaskFacts]) -> dict[str, list[str]]:
        """:meth:`task_problems` of each task alone, by task key (only tasks with some).

        What ``--skip-invalid`` leaves out of a run and ``harness tasks check`` lists per
        task. Every backend's :meth:`task_problems` is asked one task at a time.
        """
        found: dict[str, list[str]] = {}
        for task in tasks:
            problems = self.task_problems([task])
            if problems:
                found[task.key] = problems
        return found

    def health(self) -> str | None:
        """None while the engine this backend drives answers; else why not, on one line.

        Asked about once a second while trials run: an answer other than None pauses the
        run (no trial starts) until the engine answers again or ``retry.engine_wait_sec``
        passes. Default: None (a backend with nothing that can go away).
        """
        return None

    def engine_address(self) -> str | None:
        """Where the engine :meth:`health` asks is (a socket, a URL), for messages; or None."""
        return None

    def outage_error(self, message: str) -> bool:
        """Whether a trial error's message is the engine's own failure, not the trial's.

        Such an attempt is rerun without spending a retry (see :meth:`health`). Asked only
        of retryable errors, while the engine answers its ping: decide from where the error
        came from (the engine's socket), never from words a registry's or a task's own
        message can hold (``connection refused``).
        """
        return False

    def report_progress(self, report: Callable[[str], None]) -> None:  # noqa: B027
        """Tell ``report`` how long preparations (e.g. image pulls) are getting on.

        Called before trials start (with the run's message line and log); the default
        reports nothing.
        """

    def start(self) -> list[str]:
        """Get ready for trials, removing what a dead invocation of this run left.

        Returns:
            The names of the leftovers removed.
        """
        return []

    def attach(self) -> None:  # noqa: B027 - a backend may share nothing on disk
        """Get ready to make one trial's sandbox beside other processes of the same run.

        Creates what the run shares on this machine if it is missing and removes nothing
        (other trials of the run may be using it). Default: nothing to do.
        """

    def release(self) -> None:  # noqa: B027 - a backend may hold nothing per process
        """Release what this instance holds in this process (idle helpers, staged copies).

        The run's sandboxes and shared dirs stay for :meth:`close`. Default: nothing.
        """

    def refuse_addresses(self, addresses: Sequence[str]) -> None:  # noqa: B027
        """Addresses no phase of the sandboxes made from now on may reach, whatever its policy.

        The Ray executor gives its cluster's node addresses before each trial on a worker:
        a node on a public address is neither the worker's host nor a private range, and
        its Ray ports must stay out of reach all the same. A backend whose
        ``Capacity.network_modes`` lists ``public`` or ``allowlist`` must refuse them
        (docs/security.md's promise); the default does nothing, which is right only for a
        backend whose sandboxes have no network.
        """

    def abort(self) -> list[str]:
        """Remove every sandbox of the run now (a second interrupt); any thread.

        Returns:
            The names of what was removed.
        """
        return []

    @abstractmethod
    def close(self) -> CloseReport:
        """Release the backend after the run (a failure to remove something is reported).

        Returns:
            The leaked objects it found and removed, and what it could not remove.
        """


__all__ = [
    "SKIP_HINT",
    "BackendOptions",
    "DoctorReport",
    "Guarantee",
    "Leftovers",
    "SandboxBackend",
    "TaskFacts",
]
