"""What runs inside Ray worker processes: one trial attempt, and the per-node housekeeping.

:func:`run_job` is the body of a trial's Ray task. On the node it landed on it unpacks the
task (once per content hash), builds the agent, opens the run's sandbox backend in this
worker process (``attach``: other processes' trials of the run share the node; the process
keeps it for its next trial of the run, releasing it when a job of another run comes, or
at exit), runs the attempt exactly as the local executor would, and returns the
record and the evidence. The docker backend builds the task's image here, on the node that
needs it; images are named by content, so a node builds each one once.

:func:`prepare_node`, :func:`clean_node` and :func:`abort_node` run once per node, pinned to
it: before the first trial (what a dead invocation of the run left), after the last one
(leaks and the node's run dir) and on a second interrupt.
"""

from __future__ import annotations

import atexit
import dataclasses
import socket
import tempfile
from pathlib import Path

from filelock import FileLock

from harness.agents.registry import build_agent
from harness.backends.registry import SANDBOXES
from harness.config import RunConfig
from harness.errors import TaskError
from harness.executors.ray.jobs import (
    TrialJob,
    TrialResult,
    node_run_dir,
    pack_dir,
    unpack_dir,
)
from harness.executors.ray.relay import DriverLink, RelayedGateway, Watch
from harness.records import record_line
from harness.records.layout import trial_evidence_dir
from harness.tasks import Task, load_task
from harness.tasks.env_templates import map_env_tables
from harness.tasks.networks import RunNetwork
from harness.trial import TrialPlan, TrialSettings, run_trial
from sandbox.backend import CloseReport
from sandbox.plugin import BackendOptions, SandboxBackend
from sandbox.run_tmp import NODE_DIR_PREFIX, remove_tree


def node_address() -> str:
    """This node's address as Ray knows it."""
    import ray

    return str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]


def cluster_addresses() -> list[str]:
    """Every IP address of the cluster's nodes this node knows: the GCS's and each node's.

    The nodes Ray lists (alive or dead: a node may come back at its address) and the GCS
    address this worker joined through, host names resolved. A trial's network refuses
    them all (:meth:`SandboxBackend.refuse_addresses`): a head on a public address is
    neither this host nor a private range.
    """
    import ray

    nodes = ray.nodes()  # type: ignore[no-untyped-call]
    names = {str(node.get("NodeManagerAddress") or "") for node in nodes}
    names.add(str(ray.get_runtime_context().gcs_address or "").rpartition(":")[0])
    found: set[str] = set()
    for name in filter(None, names):
        try:
            infos = socket.getaddrinfo(name.strip("[]"), None, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            continue
        found.update(str(info[4][0]) for info in infos)
    return sorted(found)


def _backend(config: RunConfig, run_name: str) -> SandboxBackend:
    # concurrency 0: no supervisor is kept ready, so an idle worker process holds no
    # process of the run after its last trial (a trial's supervisor starts when it does).
    options = BackendOptions(run_name=run_name, config=config.sandbox, concurrency=0)
    backend = SANDBOXES.get(config.sandbox.backend)(options)
    backend.name = config.sandbox.backend
    return backend


_HELD: dict[str, tuple[str, SandboxBackend]] = {}
"""This worker process's backend, by run name, with the config it was opened for."""


def _trial_backend(config: RunConfig, config_json: str, run_name: str) -> SandboxBackend:
    """This process's backend for the run (opening one costs more than a no-op trial)."""
    held = _HELD.get(run_name)
    if held is not None and held[0] == config_json:
        return held[1]
    release_held()
    backend = _backend(config, run_name)
    _HELD[run_name] = (config_json, backend)
    return backend


def release_held() -> None:
    """Release the backends this process holds (another run's job came, or it exits)."""
    while _HELD:
        _name, (_config, backend) = _HELD.popitem()
        try:
            backend.release()
        except Exception:  # a half-released backend is still let go
            pass


atexit.register(release_held)


def materialize_task(home: Path, job: TrialJob, archive: bytes) -> Task:
    """The job's task, unpacked under the node's run dir once per content hash.

    Its env tables are the driver's (``${VAR}`` resolved from the run's environment,
    never this node's), and its key the driver's.

    Raises:
        TaskError: The unpacked copy does not hash to the driver's (a damaged transfer).
    """
    tasks = home / "tasks"
    tasks.mkdir(mode=0o700, exist_ok=True)
    target = tasks / job.task_hash / job.task_dirname
    with FileLock(str(tasks / f"{job.task_hash}.lock")):
        if not target.is_dir():
            staging = Path(tempfile.mkdtemp(prefix="unpack-", dir=tasks))
            unpack_dir(archive, staging / job.task_dirname)
            staging.rename(tasks / job.task_hash)
    task = load_task(target)
    if task.hash != job.task_hash:
        raise TaskError(target, f"the copy on this node hashes to {task.hash}, not {job.task_hash}")
    task = map_env_tables(task, lambda _table, name: dict(job.task_env[name]))
    return dataclasses.replace(task, key=job.task_key)


def _driver_network(config: RunConfig, job: TrialJob) -> RunNetwork:
    """The run's network as the driver planned and checked it (its backend's modes).

    Not this node's: a node whose host cannot install the egress filter would quietly
    run a task's unstated ``public`` phase as ``no-network``; with the driver's modes the
    phase keeps its policy, and the node's sandbox refuses it, saying why.
    """
    modes = frozenset(job.network_modes) if job.network_modes is not None else None
    return RunNetwork(agent=config.network, enforced=modes)


def run_job(job: TrialJob, archive: bytes) -> TrialResult:
    """Run one attempt on this node; the record and ``trials/<id>/`` go back to the driver."""
    node = node_address()
    config = RunConfig.model_validate_json(job.config)
    home = node_run_dir(job.run_name)
    task = materialize_task(home, job, archive)
    agent = build_agent(config.agent)
    if job.model is not None:
        agent.bind_model(job.model)
    if job.agent_install is not None:
        # What the driver checked before any trial: this node's install must be the same.
        agent.expect_install(job.agent_install)
    link = DriverLink(job.bridge, job.trial_id)
    gateway = None
    if job.model is not None and job.gateway_token is not None:
        gateway = RelayedGateway(link, job.model, job.gateway_token)
    scratch = Path(tempfile.mkdtemp(prefix="trial-", dir=home))
    backend = _trial_backend(config, job.config, job.run_name)
    # Asked per trial: a node that joined since the last one is refused too.
    backend.refuse_addresses(cluster_addresses())
    settings = TrialSettings(
        run_dir=scratch,
        agent=agent,
        make_sandbox=backend.make_sandbox,
        model=job.model.id if job.model is not None else None,
        gateway=gateway,
        versions=job.versions,
        protected_paths=(scratch, home),
        expose=tuple(Path(path) for path in config.sandbox.expose),
        max_evidence_file_bytes=config.evidence_caps.file_bytes,
        max_evidence_total_bytes=config.evidence_caps.total_bytes,
        evidence_limits=config.evidence_caps.limits(),
        network=_driver_network(config, job),
    )
    watch = Watch(link, on_signal=lambda _signal: settings.abort_all())
    settings.on_phase = watch.phase
    try:
        backend.attach()
        watch.open(node)
        plan = TrialPlan(job.trial_id, task, job.rollout)
        record = run_trial(plan, settings, attempt=job.attempt)
        evidence = pack_dir(scratch / trial_evidence_dir(job.trial_id))
    finally:
        watch.close()
        if gateway is not None:
            gateway.close()
        remove_tree(scratch)
    return TrialResult(record_line(record).decode("utf-8"), evidence, node)


def prepare_node(config_json: str, run_name: str) -> list[str]:
    """Before the first trial: remove what a dead invocation of the run left on this node."""
    backend = _backend(RunConfig.model_validate_json(config_json), run_name)
    try:
        return backend.start()
    finally:
        backend.release()


def clean_node(config_json: str, run_name: str) -> CloseReport:
    """After the last trial: the run's leaks on this node (and failures), then its node dir."""
    backend = _backend(RunConfig.model_validate_json(config_json), run_name)
    report = backend.close()
    home = Path(tempfile.gettempdir()) / f"{NODE_DIR_PREFIX}{run_name}"
    if home.exists():
        remove_tree(home)
    return report


def abort_node(config_json: str, run_name: str) -> list[str]:
    """A second interrupt: every sandbox of the run on this node goes now."""
    backend = _backend(RunConfig.model_validate_json(config_json), run_name)
    try:
        return backend.abort()
    finally:
        backend.release()


__all__ = [
    "abort_node",
    "clean_node",
    "cluster_addresses",
    "materialize_task",
    "node_address",
    "prepare_node",
    "release_held",
    "run_job",
]
