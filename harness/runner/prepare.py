"""Preparing a run: load and check everything it needs before anything is written.

Tasks are loaded and selected, the agent is built and checked against every selected task,
the model is chosen (explicitly), trials are planned, the run dir is checked (a new run's
must be empty; a resume's is locked and its records planned against), and the sandbox
backend and the trial executor are opened. Any problem is a ``UsageError`` (exit 2) and
nothing has been written.
"""

from __future__ import annotations

import os
import platform
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock

from harness._version import __version__
from harness.agents.kinds import Agent
from harness.agents.registry import build_agent
from harness.backends.registry import SANDBOXES, open_backend
from harness.config import RunConfig
from harness.datasets import DatasetsLock, Resolved, materialize, read_lock, resolve
from harness.datasets.cache import TaskCache
from harness.datasets.lock import lock_path
from harness.datasets.metrics import (
    DeclaredMetric,
    LocalMetricPin,
    check_local_pin,
    local_dataset_metric,
    local_pin,
    store_script,
    task_set_key,
    unique_names,
    unpinned_metric,
)
from harness.episodes.run import EnvSetup
from harness.errors import CorruptRecordError, ResumeError, UsageError
from harness.executors.base import TrialExecutor
from harness.executors.registry import open_executor
from harness.judges import JudgePanel, build_panel
from harness.models.selection import ModelChoice
from harness.records import StoreSnapshot
from harness.records.layout import DATASETS_LOCK_FILENAME
from harness.runner.env_check import (
    check_tasks,
    is_single,
    model_agent,
    prepare_env,
    refuse_executor,
)
from harness.runner.model_access import resolve_model
from harness.runner.network import network_lines, network_problems, run_network
from harness.runner.plan import plan_trials, select_tasks, slug
from harness.runner.refusals import refuse_places
from harness.runner.resume import DEFAULT_RERUN_STATUSES, ResumePlan, read_for_resume
from harness.runner.rundir import hold_run_name, lock_run_dir, refuse_non_empty
from harness.tasks import Task, TaskError, taskset_name
from harness.tasks.runnable import SkippedTasks, load_runnable_tasks, resolve_tasks_env
from harness.trial import TrialPlan
from sandbox.credentials import CredentialStore
from sandbox.plugin import SandboxBackend


@dataclass
class PreparedRun:
    """A validated run: tasks loaded, agent built, trials planned; nothing written yet."""

    config: RunConfig
    tasks: list[Task]
    agent: Agent
    plans: list[TrialPlan]
    taskset: str
    #: The run dir's name, also the label on everything the backend creates for the run.
    name: str
    #: The run's sandbox backend (opened, not started), closed after the run.
    backend: SandboxBackend
    #: The run dir (``<output_dir>/<name>``, or the dir given to ``--resume``).
    run_dir: Path
    #: Where trials run (``--executor``), opened; closed after the run.
    executor: TrialExecutor
    #: What a resume keeps and reruns (None for a new run).
    resume: ResumePlan | None = None
    #: ``trials.jsonl`` as read for the resume plan (compacted from, without a reread).
    resume_snapshot: StoreSnapshot | None = None
    #: The run's model (chosen explicitly), if the agent uses one.
    model: ModelChoice | None = None
    #: Where the gateway takes the real provider key from (in memory only).
    credentials: CredentialStore = field(default_factory=CredentialStore, repr=False)
    #: The judges of the run's tasks and of the run, checked (None: no judge anywhere).
    judges: JudgePanel | None = None
    #: Problems of the invalid tasks ``tasks.skip_invalid`` left out of the run.
    skipped: list[TaskError] = field(default_factory=list)
    #: The run's episode env (None for the default ``single``: plain trials).
    env: EnvSetup | None = None
    #: The dataset tasks' pins, written into the run dir as ``datasets.lock.json``.
    datasets_lock: DatasetsLock | None = None
    #: Task key → the ``NAME@VERSION`` of the dataset it came from (its metrics count it).
    task_datasets: dict[str, str] = field(default_factory=dict)
    #: The metrics the datasets declare: the lock's, then each local task set's
    #: ``metric.py`` (``harness.datasets.metrics``), computed into ``summary.json``.
    dataset_metrics: list[DeclaredMetric] = field(default_factory=list)
    lock: FileLock | None = field(default=None, repr=False)
    #: The run's name held on this host (:func:`~harness.runner.rundir.hold_run_name`).
    name_lock: FileLock | None = field(default=None, repr=False)
    closed: bool = field(default=False, repr=False)

    def release(self) -> None:
        """Release the run dir's lock and the run's name (if held). Idempotent."""
        for lock in (self.lock, self.name_lock):
            if lock is not None and lock.is_locked:
                lock.release()

    def close(self) -> None:
        """Give up a prepared run that will not be executed: close backend and executor, unlock."""
        if not self.closed:
            self.closed = True
            try:
                self.backend.close()
            finally:
                self.executor.close()
        self.release()


def run_name(taskset: str, model: str | None, agent: str) -> str:
    """``<taskset>--<model or none>--<agent>--<8 hex>``."""
    return f"{slug(taskset)}--{slug(model or 'none')}--{slug(agent)}--{secrets.token_hex(4)}"


def versions(config: RunConfig) -> dict[str, str]:
    """Versions that make a record reproducible."""
    return {
        "harness": __version__,
        "python": platform.python_version(),
        "sandbox": config.sandbox.backend,
        "platform": platform.platform(),
    }


def _refuse_mounts(config: RunConfig, agents: Sequence[Agent]) -> None:
    """Refuse an agent whose host dirs the run's backend cannot show, before any fetch.

    An installed agent's CLI is shown from the host (its cache entry); a backend that
    cannot (the local sandbox of a harness that is not root) would fail every trial at
    its start. Checked only where trials run in this process (the local executor): a
    worker node's sandbox checks its own privileges when it starts.

    Raises:
        UsageError: One line: the agent, why, and what to do.
    """
    if config.executor.name != "local":
        return
    backend = SANDBOXES.get(config.sandbox.backend)
    for agent in agents:
        problem = backend.mount_problem(agent.mount_points())
        if problem is not None:
            raise UsageError(
                f"agent {agent.name} cannot run in the {config.sandbox.backend} sandbox: {problem}"
            )


def _check_agent(agent: Agent, tasks: list[Task]) -> None:
    """Only the tasks that will run must suit the agent; every problem is listed."""
    problems = []
    for task in tasks:
        try:
            agent.check(task)
        except UsageError as exc:
            problems.append(str(exc))
    if problems:
        raise UsageError("\n".join(problems))


def _read_resume(
    run_dir: Path, plans: list[TrialPlan], rerun: frozenset[str]
) -> tuple[ResumePlan, StoreSnapshot]:
    """Plan a locked run dir's resume (tolerant of a torn tail: the run repairs it)."""
    try:
        return read_for_resume(run_dir, plans, statuses=rerun)
    except CorruptRecordError as exc:
        raise ResumeError(
            f"{exc}; only the last line can be a crash's torn write: this file was "
            "edited or damaged, fix or remove that line by hand"
        ) from None


def _open_places(
    config: RunConfig, name: str, tasks: list[Task]
) -> tuple[SandboxBackend, TrialExecutor, dict[str, list[TaskError]]]:
    """Open the sandbox backend and the executor; refuse (or skip) tasks either cannot run."""
    backend = open_backend(config, name)
    try:
        executor = open_executor(config, name)
    except BaseException:
        backend.close()
        raise
    capacity = backend.capacity()
    run = run_network(config.network, capacity)

    def network(some: Sequence[Task]) -> list[str]:
        return network_problems(some, run, capacity, backend.name, executor)

    try:
        refused = refuse_places(
            backend, executor, tasks, skip_invalid=config.tasks.skip_invalid, more=network
        )
    except BaseException:
        try:
            backend.close()
        finally:
            executor.close()
        raise
    kept = [task for task in tasks if task.key not in refused]
    backend.warnings.extend(network_lines(kept, run))
    return backend, executor, refused


def prepare_run(
    config: RunConfig,
    *,
    resume_dir: Path | None = None,
    rerun: Iterable[str] = DEFAULT_RERUN_STATUSES,
    credentials: CredentialStore | None = None,
    environ: Mapping[str, str] | None = None,
) -> PreparedRun:
    """Load and check everything a run needs, writing nothing.

    Args:
        config: The resolved config (for a resume: the saved one, see
            :func:`harness.config.load_saved_config`).
        resume_dir: Continue this run dir instead of creating one (its lock is taken here
            and held until :func:`~harness.runner.execute.execute_run` ends or
            :meth:`PreparedRun.close`).
        rerun: Statuses a resume reruns (see :func:`harness.runner.resume.rerun_statuses`).
        credentials: Provider keys (in memory) for the model gateway.
        environ: Where HARNESS_PROVIDER/HARNESS_MODEL, provider base URLs and the tasks'
            ``${VAR}`` templates are read (default: ``os.environ``).

    Raises:
        UsageError: Bad options, an unknown agent or backend, an agent that cannot run a
            task, any invalid task (with ``tasks.skip_invalid``: no valid one), a task's
            ``${VAR}`` unset or naming a credential the harness took, a run dir in use or
            (without ``--resume``) not empty, records that do not match the plan.
    """
    paths = [Path(p) for p in config.tasks.paths]
    # The resumed run's lock, read once: its dataset tasks and its local sets' pins.
    resume_lock = (
        read_lock(resume_dir)
        if resume_dir is not None and lock_path(resume_dir).is_file()
        else None
    )
    fetched = _dataset_tasks(config, resume_lock)
    local_metrics, local_pins = _local_metrics(paths, config, resume_dir, resume_lock, fetched)
    tasks, skipped = load_runnable_tasks(
        paths + (fetched.task_dirs if fetched else []), skip_invalid=config.tasks.skip_invalid
    )
    agent = build_agent(config.agent)
    env: EnvSetup | None = None
    role_agents = [agent]
    if not is_single(config):
        refuse_executor(config)
        env, role_agents = prepare_env(config)
    _refuse_mounts(config, role_agents)
    credentials = credentials if credentials is not None else CredentialStore()
    environ = os.environ if environ is None else environ
    tasks = resolve_tasks_env(tasks, environ, credentials, allowed=config.tasks.env_allow)
    choice = resolve_model(config, model_agent(role_agents), credentials, environ)
    if env is not None and choice is not None:
        env.model = choice.spec
    # The model is part of what the run is: pin one chosen through the environment, so
    # config.toml (and a --resume) names it explicitly.
    if choice is not None and config.model != choice.spec.id:
        config = config.model_copy(update={"model": choice.spec.id})
    selection = config.tasks
    chosen = select_tasks(
        tasks,
        num_tasks=selection.num_tasks,
        shuffle=selection.shuffle,
        seed=selection.seed,
        names=selection.names,
        exclude=selection.exclude,
        categories=selection.categories,
    )
    if env is None:
        _check_agent(agent, chosen)
    else:
        check_tasks(env, role_agents, chosen)
    judges = build_panel(config, chosen, credentials, environ)
    taskset = taskset_name(paths) if paths or fetched is None else _dataset_label(fetched)
    lock: FileLock | None = None
    resume: ResumePlan | None = None
    snapshot: StoreSnapshot | None = None
    if resume_dir is not None:
        run_dir = Path(resume_dir).absolute()
        name = run_dir.name
        # Locked before the backend opens: closing it removes what is labelled with the run.
        lock = lock_run_dir(run_dir)
    else:
        model = choice.spec.id if choice is not None else None
        name = config.run_name or run_name(taskset, model, agent.name)
        run_dir = Path(config.output_dir).absolute() / name
        refuse_non_empty(run_dir)
    try:
        # Before the backend opens: starting, it removes what is labelled with the name.
        name_lock = hold_run_name(name)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    try:
        backend, executor, refused = _open_places(config, name, chosen)
    except BaseException:
        for held in (lock, name_lock):
            if held is not None:
                held.release()
        raise
    # Tasks the engine cannot run (cpus, memory, GPUs) are skipped like invalid ones.
    chosen = [task for task in chosen if task.key not in refused]
    skipped = SkippedTasks([*skipped, *(e for errors in refused.values() for e in errors)])
    plans = plan_trials(chosen, rollouts=config.rollouts, only=selection.trial_ids)
    if lock is not None:
        try:
            resume, snapshot = _read_resume(run_dir, plans, frozenset(rerun))
        except BaseException:
            lock.release()
            name_lock.release()
            try:
                backend.close()
            finally:
                executor.close()
            raise
    return PreparedRun(
        config=config,
        tasks=chosen,
        agent=agent,
        plans=plans,
        taskset=taskset,
        name=name,
        backend=backend,
        run_dir=run_dir,
        executor=executor,
        resume=resume,
        resume_snapshot=snapshot,
        model=choice,
        credentials=credentials,
        judges=judges,
        skipped=list(skipped),
        env=env,
        datasets_lock=_run_lock(fetched, local_pins),
        task_datasets={**_local_task_sets(paths, chosen), **_task_datasets(fetched, chosen)},
        dataset_metrics=unique_names([*(fetched.lock.metrics if fetched else []), *local_metrics]),
        lock=lock,
        name_lock=name_lock,
    )


def _dataset_tasks(config: RunConfig, resume_lock: DatasetsLock | None) -> Resolved | None:
    """The dataset tasks of the run, on disk: a resume's from its lock, else resolved anew."""
    if not config.tasks.datasets.wanted:
        return None
    if resume_lock is not None:
        fetched = materialize(resume_lock, hub_url=config.tasks.datasets.hub_url)
    else:
        fetched = resolve(config.tasks.datasets)
    if not fetched.task_dirs and not config.tasks.paths:
        raise UsageError(
            "the datasets give no task (a lock of a run of local task sets pins only their "
            "metric.py): give the task sets' paths too, or a dataset run's lock"
        )
    return fetched


def _local_metrics(
    paths: Sequence[Path],
    config: RunConfig,
    resume_dir: Path | None,
    resume_lock: DatasetsLock | None,
    fetched: Resolved | None,
) -> tuple[list[DeclaredMetric], list[LocalMetricPin]]:
    """Each local task set's ``metric.py``, checked against its pin; the run's pins.

    A new run pins each set's script by its digest (the lock's ``local_metrics``), its
    script kept in the cache. A resume checks each against the run dir's pins, and
    ``--from-lock`` against the lock's: a script that is not the pinned one (changed, gone,
    a link now) refuses the run. A resumed run's set that its run did not pin keeps its
    metric with why, and its script never runs.

    Raises:
        MetricPinError: A set's ``metric.py`` is not the script pinned for it.
        DatasetError: The run dir's (or ``--from-lock``'s) lock is not a valid lock.
    """
    if not paths:
        return [], []
    pinned, where, fix = _local_pins(config, resume_dir, resume_lock, fetched)
    metrics: list[DeclaredMetric] = []
    pins: list[LocalMetricPin] = []
    for path in paths:
        declared = local_dataset_metric(path)
        pin = None if pinned is None else pinned.get(task_set_key(path))
        if pin is not None:
            now = None if declared is None else declared[0]
            check_local_pin(path, now, pin, where=where, fix=fix)
        if declared is None:
            continue
        metric, data = declared
        if pin is None and resume_dir is not None:
            metrics.append(unpinned_metric(metric, where))
            continue
        if data is not None:
            store_script(TaskCache(), data)
        metrics.append(metric)
        pins.append(pin or local_pin(path, metric))
    return metrics, pins


def _local_pins(
    config: RunConfig,
    resume_dir: Path | None,
    resume_lock: DatasetsLock | None,
    fetched: Resolved | None,
) -> tuple[dict[str, LocalMetricPin] | None, str, str]:
    """The local sets' pins to hold the run to (None: a new run's own), where, the fix.

    From the locks :func:`prepare_run` and :func:`_dataset_tasks` read already: a
    resume's, else ``--from-lock``'s (its ``local_metrics`` kept by ``materialize``).
    """
    if resume_dir is not None:
        where = str(Path(resume_dir) / DATASETS_LOCK_FILENAME)
        if resume_lock is None and os.path.lexists(where):
            resume_lock = read_lock(resume_dir)  # not a regular file: refused, saying why
        found = resume_lock.local_metrics if resume_lock is not None else []
        return {pin.task_set: pin for pin in found}, where, "start a new run"
    from_lock = config.tasks.datasets.from_lock
    if from_lock is not None:
        assert fetched is not None  # --from-lock asks for dataset tasks: they were read
        return (
            {pin.task_set: pin for pin in fetched.lock.local_metrics},
            f"the lock {from_lock}",
            "run without --from-lock",
        )
    return None, "", ""


def _run_lock(fetched: Resolved | None, pins: list[LocalMetricPin]) -> DatasetsLock | None:
    """What a new run writes as ``datasets.lock.json``: its dataset tasks and its pins."""
    if fetched is None:
        return DatasetsLock(local_metrics=pins) if pins else None
    return fetched.lock.model_copy(update={"local_metrics": pins})


def _local_task_sets(paths: Sequence[Path], tasks: list[Task]) -> dict[str, str]:
    """Task key → ``<set>@local`` for the tasks of a local task set with a ``metric.py``."""
    sets = {
        path.resolve(): metric.dataset
        for path in paths
        if (declared := local_dataset_metric(path)) is not None
        for metric in [declared[0]]
    }
    return {
        task.key: sets[task.path.resolve().parent]
        for task in tasks
        if task.path.resolve().parent in sets
    }


def _task_datasets(fetched: Resolved | None, tasks: list[Task]) -> dict[str, str]:
    """Task key → the dataset its cached dir was fetched for (dataset tasks only)."""
    if fetched is None:
        return {}
    pairs = zip(fetched.task_dirs, fetched.lock.tasks, strict=True)
    by_dir = {Path(d).resolve(): t.dataset for d, t in pairs}
    return {
        task.key: by_dir[task.path.resolve()] for task in tasks if task.path.resolve() in by_dir
    }


def _dataset_label(fetched: Resolved) -> str:
    """A dataset run's task-set name: its datasets (or its first task's)."""
    lock = fetched.lock
    return "+".join(lock.datasets) or (lock.tasks[0].dataset or lock.tasks[0].name)


__all__ = ["PreparedRun", "prepare_run", "run_name", "versions"]
