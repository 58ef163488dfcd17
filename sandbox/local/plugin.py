"""The ``local`` backend: trials as host processes (``sandbox.local.sandbox``).

As root each trial runs as its own uid in a confined view of the host; otherwise it cannot
drop privileges and is not a security boundary (a warning says so). The run's trial roots
and trial filesystems live in its private temp dir (:mod:`sandbox.run_tmp`), so
whatever a killed run left there is removed by the next invocation (``--resume``).

Every trial's ``memory_mb``, ``cpus`` and ``pids`` are enforced in a cgroup of its own
(:mod:`sandbox.local.cgroups`), named for the run so that the next invocation (``--resume``, or
``harness sandbox cleanup``) removes what a killed one left. Where no cgroup can be made the
run is refused, or runs with a warning under ``[sandbox] local_limits = "warn"``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from typing_extensions import override

from sandbox.agent_root import announcement
from sandbox.backend import Capacity, CloseReport, SandboxSpec
from sandbox.errors import UsageError
from sandbox.local.cgroups import Support, probe, sweep
from sandbox.local.sandbox import (
    AGENT_MOUNTS_NEED_ROOT,
    NOT_A_BOUNDARY,
    ROOT_VERIFIER_REFUSED,
    IdentityPool,
    LocalSandbox,
    SupervisorPool,
    layout_trial_fs,
)
from sandbox.local.sandbox import (
    NETWORK_MODES as LOCAL_NETWORK_MODES,
)
from sandbox.local.sandbox import (
    NETWORK_PROBLEM as LOCAL_NETWORK_PROBLEM,
)
from sandbox.plugin import (
    BackendOptions,
    DoctorReport,
    Leftovers,
    SandboxBackend,
    TaskFacts,
)
from sandbox.run_tmp import (
    ensure_private_dir,
    fresh_private_dir,
    remove_private_dir,
    run_tmp_dir,
)
from sandbox.storage import StorageBudget
from sandbox.storage_pool import StoragePool
from sandbox.users import is_root, is_root_user

logger = logging.getLogger(__name__)


def _mem_total_mb() -> int:
    """``MemTotal`` of ``/proc/meminfo`` in MiB (0 when unknown: nothing is refused)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) >> 10
    except (OSError, ValueError, IndexError):
        pass
    return 0


class LocalBackend(SandboxBackend):
    """Host processes; as root, one uid and a confined view of the host per trial."""

    def __init__(self, options: BackendOptions) -> None:
        super().__init__(options)
        config = options.config
        if config.runtime:
            raise UsageError("--runtime applies to --sandbox docker only")
        if config.agent_root != "never":
            raise UsageError(
                f"--agent-root {config.agent_root}: the local sandbox runs agents as host "
                "processes, with no second boundary around a root agent (its root would be "
                "the host's); use --sandbox docker (with --runtime runsc for isolated), or "
                "--agent-root never"
            )
        if config.agent_services == "keep":
            raise UsageError(
                "--agent-services keep: the local sandbox runs each phase in namespaces of "
                "its own (network included), so a service the agent left running could not "
                "answer the verifier; use --sandbox docker, or --agent-services kill"
            )
        # Before anything is started: a refused run leaves nothing behind.
        self._cgroups = self._limits_support(config.local_limits)
        self.tmp_dir = run_tmp_dir(options.run_name)
        self.exposed = [Path(path).resolve() for path in config.expose]
        self._identities = IdentityPool(config.uid, config.gid)
        self._supervisors = SupervisorPool(spares=min(options.concurrency, 4))
        self._storage = StorageBudget(self.tmp_dir)
        self._storage_pool = StoragePool(
            self.tmp_dir, self._storage, spares=min(options.concurrency, 4), layout=layout_trial_fs
        )
        self._closed = False
        if not is_root():
            self.warnings.append(NOT_A_BOUNDARY)

    @classmethod
    def mount_problem(cls, mount_points: Sequence[str]) -> str | None:
        """Host dirs are shown only in a root view, which only a root harness makes."""
        if not mount_points or is_root():
            return None
        return (
            f"it runs from a host dir shown read-only in the sandbox ({', '.join(mount_points)}), "
            "which the local sandbox can do only in the root view it makes when the harness "
            f"runs as root, and this one runs as uid {os.geteuid()}. {AGENT_MOUNTS_NEED_ROOT}"
        )

    def capacity(self) -> Capacity:
        """The host's CPUs (those this process may run on) and memory (``MemTotal``).

        A task asking for more is refused before the run, as on docker: no trial of it
        could get what it asks for. Networks: ``no-network`` only (docs/tasks.md).
        """
        try:
            cpus = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cpus = os.cpu_count() or 1
        return Capacity(
            cpus=float(cpus),
            memory_mb=_mem_total_mb() or 1 << 40,
            # A phase gets its own network namespace with loopback and the gateway only:
            # the host's network is never shared, so neither internet mode is offered.
            network_modes=LOCAL_NETWORK_MODES,
            network_problem=LOCAL_NETWORK_PROBLEM,
        )

    def gpu_problem(self, gpus: int) -> str | None:
        """The local sandbox gives no trial a GPU: a GPU task is refused before the run."""
        return "the local sandbox gives no trial a GPU (run it with --sandbox docker)"

    def describe(self) -> str:
        """The host this process runs on, its CPUs and memory."""
        capacity = self.capacity()
        return (
            f"local sandbox on this host: {capacity.cpus:g} CPUs, "
            f"{capacity.memory_mb / 1024:.1f} GB memory, no GPU"
        )

    def _limits_support(self, policy: str) -> Support:
        """How trials' limits are enforced here; refused (or warned) where they cannot be.

        Raises:
            UsageError: No cgroup can be made and ``local_limits`` is ``require``.
        """
        support = probe()
        if support.version is not None:
            return support
        message = (
            f"the local sandbox cannot enforce the tasks' memory_mb, cpus and pids: "
            f"{support.problem}"
        )
        if policy == "require":
            raise UsageError(
                f"{message}. Fix that, run with --sandbox docker, or set [sandbox] "
                'local_limits = "warn" to run without these limits'
            )
        self.warnings.append(f"{message} (local_limits = warn: the limits are NOT enforced)")
        return support  # its problem goes into every record

    @classmethod
    @override
    def doctor(cls, report: DoctorReport) -> None:
        """Whether the local sandbox can run here, and enforce memory_mb / cpus / pids.

        It needs root (docs/deployments.md); as root, a trial cgroup is made and removed.
        """
        if not is_root():
            report.checks.append(("local sandbox", "needs root (use --sandbox docker)"))
            return
        support = probe()
        if support.version is not None:
            where = ", ".join(sorted(support.parents))
            report.checks.append(("local sandbox limits", f"{support.mechanism} ({where})"))
            return
        report.checks.append(("local sandbox limits", "unavailable"))
        report.problems.append(
            f"the local sandbox cannot enforce memory_mb, cpus and pids: {support.problem} "
            '(local runs are refused unless [sandbox] local_limits = "warn")'
        )

    @classmethod
    @override
    def remove_leftovers(cls, run: str | None) -> Leftovers:
        """The trial cgroups runs left (of ``run``, or all), their processes killed first."""
        removed, failed = sweep(run)
        return Leftovers(removed={"cgroup": removed}, errors=failed)

    def task_problems(self, tasks: Sequence[TaskFacts]) -> list[str]:
        """The base checks (CPUs, memory); an exposed path showing a task its own files."""
        problems = super().task_problems(tasks)
        line = announcement(tasks, "never", "none", images=False)
        if line is not None and line not in self.warnings:
            self.warnings.append(line)
        for task in tasks:
            for exposed in self.exposed:
                if task.path.is_relative_to(exposed) or exposed.is_relative_to(task.path):
                    problems.append(
                        f"expose: {exposed} would show the agent task {task.name}'s own files "
                        "(its tests and solution); expose a narrower path"
                    )
            if is_root_user(task.verifier_user):
                where = task.config_file
                problems.append(f"{where}: [verifier].user = root: {ROOT_VERIFIER_REFUSED}")
        return problems

    @override
    def make_sandbox(self, spec: SandboxSpec) -> LocalSandbox:
        return LocalSandbox(
            replace(
                spec,
                cpu_policy=self.options.config.cpu_policy,
                memory_policy=self.options.config.memory_policy,
            ),
            identities=self._identities,
            supervisors=self._supervisors,
            tmp_dir=self.tmp_dir,
            storage_budget=self._storage,
            storage_pool=self._storage_pool,
            cgroups=self._cgroups,
            run_label=self.options.run_name,
        )

    def start(self) -> list[str]:
        """Create the run's private temp dir, emptying what a dead invocation left in it.

        The trial cgroups a dead invocation of this run left are killed and removed too.
        """
        left = fresh_private_dir(self.tmp_dir)
        removed, errors = sweep(self.options.run_name, self._cgroups)
        for error in errors:
            logger.warning("%s", error)
        return left + [f"cgroup {name}" for name in removed]

    def attach(self) -> None:
        """Create the run's temp dir if no other process of the run has."""
        ensure_private_dir(self.tmp_dir)

    def release(self) -> None:
        """Stop this process's spare supervisors and filesystems (idempotent)."""
        for failure in self._release():
            logger.warning("%s", failure)

    def _release(self) -> list[str]:
        """Stop the spares and wait for the trial filesystems' removal; what failed."""
        if self._closed:
            return []
        self._closed = True
        self._supervisors.close()
        return self._storage_pool.close()

    def close(self) -> CloseReport:
        """Stop the spares, wait for the trial filesystems' removal, remove the temp dir.

        Returns:
            The trial roots left in the temp dir (removed), and what could not be removed.
        """
        failed = self._release()
        return CloseReport(removed=remove_private_dir(self.tmp_dir), failed=failed)


__all__ = ["LocalBackend"]
