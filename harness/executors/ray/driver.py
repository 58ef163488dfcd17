"""The ``ray`` executor's driver side: a Ray task per trial attempt, results streamed back.

The harness process stays the driver: it plans, keeps the model gateway (the real key never
leaves it), writes ``trials.jsonl`` and ``status.json``, and decides retries. Each attempt
of a trial becomes one Ray task (:func:`~harness.executors.ray.worker.run_job`) that asks
Ray for the task's ``cpus`` and ``memory_mb``; Ray places it on a node with room, where it
runs in the run's sandbox backend. The run's ``-j`` bounds the attempts in flight.

A Ray failure that is not the trial's (the node or its worker process died, the object was
lost) ends the attempt as an ``environment_error``, which the run's retry rules retry.
Ray's own retries are off: every attempt is the harness's, and recorded.
"""

from __future__ import annotations

import logging
import os
import shutil
import tarfile
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from harness.errors import UsageError
from harness.executors.base import ExecutorOptions, TrialExecutor
from harness.executors.ray.bridge import Attempt, Bridge
from harness.executors.ray.jobs import TrialJob, TrialResult, pack_dir, unpack_dir
from harness.executors.ray.worker import abort_node, clean_node, prepare_node, run_job
from harness.gateway.hosted_tools import narrowest
from harness.records import (
    AgentRef,
    SandboxRef,
    TaskRef,
    TrialError,
    TrialRecord,
    TrialStatus,
    parse_record,
)
from harness.records.layout import MODEL_CALLS_FILENAME, trial_evidence_dir
from harness.records.transcript import write_transcript
from harness.tasks import Task
from harness.tasks.env_templates import env_tables
from harness.tasks.networks import step_networks
from harness.trial import TrialPlan, TrialSettings, usage_of
from sandbox.backend import CloseReport

POLL_SEC = 0.2
"""How often a waiting attempt looks at the run's cancel event."""
NODE_TASK_TIMEOUT_SEC = 300.0
"""The longest a node's housekeeping (removing leftovers) may take."""
LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Set to 0, Ray puts every node on 127.0.0.1 (for clusters of one machine)."""
CANCEL_GRACE_SEC = 30.0
"""After an interrupt, how long an attempt that had not started may take to be withdrawn."""
_Result = TypeVar("_Result")


#: Judges run in the trial's process, which on Ray is a worker's: this executor does not
#: carry them there (an llm judge's gateway and key belong to the driver).
JUDGES_REFUSED = (
    "{where}: judges are refused with --executor ray (they are not carried to worker nodes); "
    "run with --executor local, or regrade the run with --judge and --set executor.name=local"
)


class RayExecutor(TrialExecutor):
    """Each trial attempt is a Ray task on a Ray cluster, placed by the task's cpus and memory."""

    def __init__(self, options: ExecutorOptions) -> None:
        super().__init__(options)
        config = options.config
        if config.agent_concurrency is not None:
            raise UsageError(
                "--agent-concurrency applies to --executor local only: on Ray, each trial "
                "holds its task's cpus and memory on its node for its whole run"
            )
        if config.sandbox.expose:
            raise UsageError(
                "sandbox.expose is refused with --executor ray: it names paths of this "
                "machine, and a worker node's sandbox would show that node's own files under "
                "them (its task copies among them); run with --executor local"
            )
        if config.judges:
            raise UsageError(JUDGES_REFUSED.format(where="judges"))
        if config.executor.ray_address is None:
            # A private one-node cluster needs no other address than loopback: Ray reads
            # this switch once, when it is first imported.
            os.environ.setdefault(LOOPBACK_SWITCH, "0")
        try:
            import ray
        except ImportError:
            raise UsageError(
                "--executor ray needs Ray on every node: pip install 'harness[ray]'"
            ) from None
        self._ray: Any = ray
        self._connect(config.executor.ray_address)
        self._lock = threading.Lock()
        self._archives: dict[str, Any] = {}
        self._bridge: Bridge | None = None
        self._log: Callable[[str], None] = lambda _line: None
        self._closed = False
        self._driver_node = str(ray.get_runtime_context().get_node_id())
        self._run_job: Any = None

    def _connect(self, address: str | None) -> None:
        ray = self._ray
        settings: dict[str, Any] = {
            "logging_level": logging.WARNING,
            "log_to_driver": False,
            "configure_logging": True,
        }
        if address is None:
            settings.update(address="local", include_dashboard=False)
        else:
            settings["address"] = address
        try:
            ray.init(**settings)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise UsageError(
                f"cannot join the Ray cluster at {address or 'a new local cluster'}: {exc} "
                "(start one with `ray start --head`, then pass --ray-address auto or HOST:PORT)"
            ) from None

    # -- before the run ----------------------------------------------------------------------

    def network_refusal(self, role: str, mode: str, enforced: frozenset[str] | None) -> str | None:
        """An internet phase runs on a worker only behind a filter its backend enforces.

        The workers open the run's backend as the driver does; a mode it enforces keeps
        the host and the private ranges out (docs/security.md), the nodes' Ray ports among
        them, and a worker whose host cannot install the filter refuses the trial itself
        (the docker backend's sandbox does, saying why). Where the backend declares no
        filter for the mode, a phase with it could reach those ports: refused.
        """
        return network_refusal(role, mode, enforced)

    def _nodes(self) -> list[dict[str, Any]]:
        return [node for node in self._ray.nodes() if node.get("Alive")]

    def task_problems(self, tasks: Sequence[Task]) -> list[str]:
        """Tasks no node can hold, and tasks with compose sidecars (networks: below)."""
        nodes = self._nodes()
        most = {
            resource: max((float(n["Resources"].get(resource, 0)) for n in nodes), default=0.0)
            for resource in ("CPU", "GPU", "memory")
        }
        problems = []
        for task in tasks:
            problems += _unplaceable(task, most["CPU"], int(most["memory"]) >> 20, most["GPU"])
            problems += _networked(task)
            if task.config.verifier.judges:
                problems.append(
                    JUDGES_REFUSED.format(where=f"{task.path / 'task.toml'}: [[verifier.judges]]")
                )
        return problems

    def start(self, settings: TrialSettings, log: Callable[[str], None]) -> None:
        """Open the bridge; clear what a dead invocation of the run left on the other nodes."""
        self._log = log
        ray = self._ray
        host = next(
            str(node["NodeManagerAddress"])
            for node in self._nodes()
            if node["NodeID"] == self._driver_node
        )
        self._run_job = ray.remote(run_job)
        self._bridge = Bridge(host, settings.gateway)
        self._bridge.start()
        nodes = self._nodes()
        log(
            f"ray: {len(nodes)} node(s), {ray.cluster_resources().get('CPU', 0):g} CPUs; "
            f"bridge on {host}:{self._bridge.port}"
        )
        removed = [
            f"{item} ({address})"
            for address, items in self._on_other_nodes(prepare_node)
            for item in items
        ]
        if removed:
            log(f"ray: removed leftovers of an earlier invocation: {', '.join(removed)}")

    def _on_other_nodes(
        self, function: Callable[[str, str], _Result], failed: list[str] | None = None
    ) -> list[tuple[str, _Result]]:
        """Run ``function`` once on every live node but the driver's; (address, its answer).

        A node that died or hangs is added to ``failed`` (logged without it), and the rest
        go on.
        """
        ray = self._ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        config, name = self.options.config.model_dump_json(), self.options.run_name
        remote = ray.remote(function)
        refs = {
            remote.options(
                num_cpus=0,
                max_retries=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
            ).remote(config, name): node["NodeManagerAddress"]
            for node in self._nodes()
            if node["NodeID"] != self._driver_node
        }
        answers: list[tuple[str, _Result]] = []
        for ref, address in refs.items():
            try:
                answers.append((address, ray.get(ref, timeout=NODE_TASK_TIMEOUT_SEC)))
            except Exception as exc:  # a node that died or hangs: say so, go on
                message = f"ray: {function.__name__} on node {address} failed: {exc}"
                if failed is None:
                    self._log(message)
                else:  # the caller reports it
                    failed.append(message)
        return answers

    # -- one attempt -------------------------------------------------------------------------

    def _archive(self, task: Task) -> Any:
        """The task dir in the object store (put once per content hash)."""
        with self._lock:
            ref = self._archives.get(task.hash)
            if ref is None:
                ref = self._archives[task.hash] = self._ray.put(pack_dir(task.path))
            return ref

    def run_attempt(self, plan: TrialPlan, settings: TrialSettings, attempt: int) -> TrialRecord:
        """Dispatch the attempt as a Ray task, wait for it, bring its evidence home."""
        assert self._bridge is not None, "start() first"
        started_at = datetime.now(UTC)
        evidence = settings.run_dir / trial_evidence_dir(plan.id)
        if evidence.exists():
            shutil.rmtree(evidence)
        evidence.mkdir(parents=True)
        gateway, agent, task = settings.gateway, settings.agent, plan.task
        access = None
        if gateway is not None and agent.model_use != "none":
            # The worker cannot tell the driver's gateway which step runs: the trial's calls
            # are held to the narrowest of its agent phases' policies.
            steps = [step.config for step in task.steps]
            agents = [t["agent"] for t in step_networks(task.config, settings.network, steps)]
            access = gateway.open_trial(
                plan.id, task.name, evidence / MODEL_CALLS_FILENAME, network=narrowest(agents)
            )
        slot, address = self._bridge.issue(plan.id, access, settings.on_phase)
        config = self.options.config
        job = TrialJob(
            run_name=self.options.run_name,
            config=config.model_dump_json(),
            versions=dict(settings.versions),
            trial_id=plan.id,
            rollout=plan.rollout,
            attempt=attempt,
            task_key=task.key,
            task_hash=task.hash,
            task_dirname=task.path.name,
            task_env=env_tables(task),
            bridge=address,
            model=access.model if access is not None else agent.model,
            gateway_token=access.token if access is not None else None,
            network_modes=_modes(settings.network.enforced),
            agent_install=agent.describe().get("install"),
        )
        usage = None
        try:
            env = task.config.environment
            ref = self._run_job.options(
                num_cpus=float(env.cpus),
                num_gpus=env.gpus,
                memory=int(env.memory_mb) << 20,
                max_retries=0,
                name=f"trial {plan.id}",
            ).remote(job, self._archive(task))
            outcome = self._wait(ref, slot, settings)
        finally:
            self._bridge.withdraw(slot)
            if access is not None and gateway is not None:
                usage = gateway.revoke(plan.id)
        if isinstance(outcome, TrialResult):
            record = receive(outcome, plan, evidence)
            self._log(f"trial {plan.id} attempt {attempt} ran on node {outcome.node}")
        else:
            record = self._lost(plan, settings, attempt, started_at, outcome, slot)
        if usage is not None and record.usage.calls == 0 and usage.calls:
            record = record.model_copy(update={"usage": usage_of(usage)})
        refused = gateway.network_events(plan.id) if access is not None and gateway else []
        if refused:
            record = record.model_copy(update={"events": [*record.events, *refused]})
        return record

    def _wait(
        self, ref: Any, slot: Attempt, settings: TrialSettings
    ) -> TrialResult | tuple[TrialStatus, TrialError]:
        """The attempt's result, or why there is none (a status and an error)."""
        ray = self._ray
        cancelled_at: float | None = None
        while True:
            ready, _ = ray.wait([ref], timeout=POLL_SEC)
            if ready:
                break
            if settings.cancel.is_set() and not slot.started.is_set():
                if cancelled_at is None:
                    cancelled_at = time.monotonic()
                    ray.cancel(ref)  # queued: it never starts; just starting: it stops
                elif time.monotonic() > cancelled_at + CANCEL_GRACE_SEC:
                    ray.cancel(ref, force=True)
                    return _cancelled("run interrupted before the trial started on a node")
        try:
            result = ray.get(ref)
        except ray.exceptions.TaskCancelledError:
            return _cancelled("run interrupted before the trial started on a node")
        except ray.exceptions.RayTaskError as exc:
            # The harness's own code failed on the worker: an internal error, as locally.
            cause = exc.as_instanceof_cause()
            raise cause from None
        except ray.exceptions.RayError as exc:
            where = f" on node {slot.node}" if slot.node else ""
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            return TrialStatus.ENVIRONMENT_ERROR, TrialError(
                type=type(exc).__name__,
                message=f"the Ray task running the trial{where} was lost: {detail}",
                phase="execute" if slot.started.is_set() else "prepare",
            )
        assert isinstance(result, TrialResult)
        return result

    def _lost(
        self,
        plan: TrialPlan,
        settings: TrialSettings,
        attempt: int,
        started_at: datetime,
        why: tuple[TrialStatus, TrialError],
        slot: Attempt,
    ) -> TrialRecord:
        """The record of an attempt whose Ray task returned nothing."""
        status, error = why
        self._log(f"trial {plan.id} attempt {attempt}: {error.type}: {error.message}")
        finished_at = datetime.now(UTC)
        return TrialRecord(
            id=plan.id,
            task=_task_ref(plan.task),
            agent=AgentRef(model=settings.model, **settings.agent.describe()),
            sandbox=SandboxRef.model_validate(
                {"backend": self.options.config.sandbox.backend, "node": slot.node or None}
            ),
            rollout=plan.rollout,
            attempt=attempt,
            status=status,
            ok=False,
            errors=[error],
            timings={"total": (finished_at - started_at).total_seconds()},
            versions=dict(settings.versions),
            started_at=started_at,
            finished_at=finished_at,
            evidence_dir=trial_evidence_dir(plan.id),
        )

    # -- interrupts and the end --------------------------------------------------------------

    def stop(self) -> None:
        """First interrupt: every attempt in flight is told to cancel (it still cleans up)."""
        if self._bridge is not None:
            self._bridge.signal_all("cancel")

    def abort(self) -> None:
        """Second interrupt: attempts abort now; every node removes the run's sandboxes."""
        if self._bridge is not None:
            self._bridge.signal_all("abort")
        threading.Thread(target=self._on_other_nodes, args=(abort_node,), daemon=True).start()

    def close(self) -> CloseReport:
        """Remove the run's leftovers on every other live node, then leave the cluster."""
        report = CloseReport()
        if self._closed:
            return report
        self._closed = True
        try:
            if self._bridge is not None:
                for address, node in self._on_other_nodes(clean_node, report.failed):
                    report.removed += [f"{item} ({address})" for item in node.removed]
                    report.failed += [f"{item} ({address})" for item in node.failed]
        finally:
            if self._bridge is not None:
                self._bridge.close()
            self._archives.clear()
            self._ray.shutdown()
        return report


def network_refusal(role: str, mode: str, enforced: frozenset[str] | None) -> str | None:
    """Why a phase of ``role`` with ``mode`` cannot run on Ray workers (None: it can).

    ``enforced`` is the run's backend's ``Capacity.network_modes`` (None: it declares none).
    """
    if mode == "no-network" or (enforced is not None and mode in enforced):
        return None
    declared = ", ".join(sorted(enforced)) if enforced is not None else "none declared"
    return (
        f"the {role} phase's network_mode = {mode!r} is refused with --executor ray: "
        f"the sandbox backend enforces no egress filter for {mode!r} here (it "
        f"enforces: {declared}), and without one the phase could reach the cluster's "
        "Ray ports (docs/scale-out.md); internet phases run on Ray workers where the "
        "backend enforces the filter (--sandbox docker, as root with iptables). Run it "
        "so, with --executor local, or with --network none if only the agent phase "
        "has the internet"
    )


def _unplaceable(task: Task, cpus: float, memory_mb: int, gpus: float) -> list[str]:
    """Why no node of the cluster (``cpus``, ``memory_mb``, ``gpus`` at most) can hold ``task``."""
    env, where = task.config.environment, task.path / "task.toml"
    problems = []
    if env.cpus > cpus:
        problems.append(
            f"{where}: [environment].cpus = {env.cpus:g}, but no node of the Ray "
            f"cluster has more than {cpus:g} CPUs; lower it or add a bigger node"
        )
    if env.memory_mb > memory_mb:
        problems.append(
            f"{where}: [environment].memory_mb = {env.memory_mb}, but no node of the "
            f"Ray cluster offers more than {memory_mb} MB; lower it or add a bigger node"
        )
    if env.gpus > gpus:
        problems.append(
            f"{where}: [environment].gpus = {env.gpus}, but no node of the Ray cluster has "
            f"more than {gpus:g} GPUs; add a node with GPUs (`ray start --num-gpus N`) or "
            "run it with --executor local on a machine that has them"
        )
    return problems


def _networked(task: Task) -> list[str]:
    """Why ``task``'s containers would share a network on a worker (refused: Ray's ports).

    A phase's internet is checked with the run's policies (:meth:`network_refusal`).
    """
    problems = []
    if task.compose_file is not None:
        problems.append(
            f"{task.compose_file}: compose sidecars (and MCP servers among them) are refused "
            "with --executor ray: the trial's containers share a network, and a container "
            "on even an internal Docker network reaches its node's own ports, Ray's among "
            "them (docs/scale-out.md); run the task with --executor local"
        )
    return problems


def _modes(enforced: frozenset[str] | None) -> tuple[str, ...] | None:
    return tuple(sorted(enforced)) if enforced is not None else None


def _cancelled(message: str) -> tuple[TrialStatus, TrialError]:
    return TrialStatus.CANCELLED, TrialError(type="Cancelled", message=message, phase="prepare")


def receive(result: TrialResult, plan: TrialPlan, evidence: Path) -> TrialRecord:
    """The record a worker sent back, its evidence unpacked into ``evidence`` (the driver's).

    Evidence that cannot be unpacked fails the attempt as a local trial's evidence copy
    does: its record keeps the worker's outcome and gains a ``collect`` error naming
    ``evidence`` (an ``environment_error``), so a full or read-only run dir halts the run
    (:class:`~harness.runner.faults.DiskGuard`) instead of losing the attempt.
    """
    record = parse_record(result.record)
    update: dict[str, Any] = {
        "task": _task_ref(plan.task),
        "sandbox": record.sandbox.model_copy(update={"node": result.node}),
    }
    try:
        unpack_dir(result.evidence, evidence)
    except (OSError, tarfile.TarError) as exc:
        error = TrialError(
            type=type(exc).__name__,
            message=f"cannot unpack the evidence from node {result.node} into {evidence}: {exc}",
            phase="collect",
        )
        completed = record.status == TrialStatus.COMPLETED
        update["status"] = TrialStatus.ENVIRONMENT_ERROR if completed else record.status
        return record.model_copy(update={**update, "ok": False, "errors": [*record.errors, error]})
    events = list(record.events)
    try:
        write_transcript(evidence)  # now with the model calls recorded here
    except Exception as exc:  # evidence is kept as is; the failure is recorded
        events.append({"type": "transcript_failed", "detail": f"{type(exc).__name__}: {exc}"})
    return record.model_copy(update={**update, "events": events})


def _task_ref(task: Task) -> TaskRef:
    return TaskRef(name=task.name, key=task.key, hash=task.hash, path=str(task.path))


__all__ = ["RayExecutor", "network_refusal", "receive"]
