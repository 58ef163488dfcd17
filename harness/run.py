"""A whole run: validate everything first, then schedule trials, persist, summarize."""

from __future__ import annotations

import platform
import secrets
import signal
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import harness
from harness.agents import Agent, make_agent
from harness.config import RunConfig, save_config
from harness.errors import UsageError
from harness.metrics import Summary, summarize
from harness.plan import plan_trials, select_tasks, slug
from harness.records import TrialRecord, TrialStore, write_json_atomic
from harness.tasks import Task, TaskSetError, load_tasks, taskset_name
from harness.trial import SandboxFactory, TrialPlan, TrialSettings, run_trial
from sandbox.backend import BackendRuntime, SandboxSpec
from sandbox.local import IdentityPool, LocalSandbox, SupervisorPool

EXIT_OK = 0
EXIT_TRIAL_ERRORS = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


@dataclass
class PreparedRun:
    """A validated run: tasks loaded, agent built, trials planned; nothing written yet."""

    config: RunConfig
    tasks: list[Task]
    agent: Agent
    plans: list[TrialPlan]
    taskset: str
    make_sandbox: SandboxFactory
    #: The run dir's name, also the label on everything the backend creates for the run.
    name: str
    #: Backend state shared by all trials, closed after the run.
    backend_runtime: BackendRuntime


@dataclass
class RunOutcome:
    """The result of a run."""

    run_dir: Path
    records: list[TrialRecord]
    summary: Summary
    exit_code: int
    interrupted: bool = False


def _sandbox_factory(
    config: RunConfig, run_label: str = "adhoc"
) -> tuple[SandboxFactory, BackendRuntime]:
    """The factory of the configured backend, and its shared runtime (if any)."""
    if config.sandbox == "local":
        if config.runtime:
            raise UsageError("--runtime applies to --sandbox docker only")
        pool = IdentityPool(config.sandbox_uid, config.sandbox_gid)
        supervisors = SupervisorPool(spares=min(config.concurrency, 4))

        def make_local(spec: SandboxSpec) -> LocalSandbox:
            return LocalSandbox(spec, identities=pool, supervisors=supervisors)

        return make_local, supervisors
    from sandbox.docker.backend import DockerRuntime, DockerSandbox
    from sandbox.docker.engine import connect
    from sandbox.docker.images import ImageResolver, parse_aliases
    from sandbox.errors import EngineUnavailable

    try:
        aliases = parse_aliases(config.base_aliases)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        client = connect()
    except EngineUnavailable as exc:
        raise UsageError(str(exc)) from None
    if config.runtime:
        runtimes = client.info().get("Runtimes") or {}
        if config.runtime not in runtimes:
            raise UsageError(
                f"--runtime {config.runtime} is not registered with the engine "
                f"(available: {', '.join(sorted(runtimes)) or 'none'}); "
                "`bash docker/start-engine.sh` registers runsc when Debian has it"
            )
    runtime = DockerRuntime(
        client,
        ImageResolver(client, aliases=aliases),
        runtime=config.runtime,
        run_label=run_label,
    )

    def make_docker(spec: SandboxSpec) -> DockerSandbox:
        return DockerSandbox(spec, runtime)

    return make_docker, runtime


def prepare_run(config: RunConfig) -> PreparedRun:
    """Load and check everything a run needs, writing nothing.

    Raises:
        UsageError: bad options, an agent that cannot run a task.
        TaskSetError: any invalid task (every problem listed).
    """
    paths = [Path(p) for p in config.paths]
    tasks = load_tasks(paths)
    agent = make_agent(config.agent, agent_cmd=config.agent_cmd)
    problems = []
    for task in tasks:
        try:
            agent.check(task)
        except UsageError as exc:
            problems.append(str(exc))
    if problems:
        raise UsageError("\n".join(problems))
    chosen = select_tasks(
        tasks, num_tasks=config.num_tasks, shuffle=config.shuffle, seed=config.seed
    )
    taskset = taskset_name(paths)
    name = run_name(taskset, config.model, agent.name)
    make_sandbox, backend_runtime = _sandbox_factory(config, name)
    return PreparedRun(
        config=config,
        tasks=chosen,
        agent=agent,
        plans=plan_trials(chosen, rollouts=config.rollouts),
        taskset=taskset,
        make_sandbox=make_sandbox,
        name=name,
        backend_runtime=backend_runtime,
    )


def run_name(taskset: str, model: str | None, agent: str) -> str:
    """``<taskset>--<model or none>--<agent>--<8 hex>`` (DESIGN §7)."""
    return f"{slug(taskset)}--{slug(model or 'none')}--{slug(agent)}--{secrets.token_hex(4)}"


def versions(config: RunConfig) -> dict[str, str]:
    """Versions that make a record reproducible."""
    return {
        "harness": harness.__version__,
        "python": platform.python_version(),
        "sandbox": config.sandbox,
        "platform": platform.platform(),
    }


def _log_line(run_dir: Path, text: str) -> None:
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    with (run_dir / "eval.log").open("a") as fh:
        fh.write(f"{stamp} {text}\n")


def _sigterm_as_interrupt() -> Callable[[], None]:
    """Treat SIGTERM like Ctrl-C while a run executes (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous)

    return restore


def _install_abort_handler(
    settings: TrialSettings, say: Callable[[str], None] | None
) -> Callable[[], None]:
    """Make further SIGINT/SIGTERM abort the running trials instead of raising."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def abort(signum: int, frame: object) -> None:
        if say is not None:
            say("aborting running trials; their sandboxes are still removed")
        settings.abort_all()

    previous = {sig: signal.signal(sig, abort) for sig in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore


def _close_backend(runtime: BackendRuntime, run_dir: Path) -> None:
    """Close the run's backend state, logging anything it had to remove as leaked."""
    leaked = runtime.close()
    if leaked:
        _log_line(run_dir, f"removed leaked sandbox objects: {', '.join(leaked)}")


def execute_run(
    prepared: PreparedRun,
    *,
    on_record: Callable[[TrialRecord, int, int], None] | None = None,
    on_phase: Callable[[str, str], None] | None = None,
    on_interrupt: Callable[[str], None] | None = None,
) -> RunOutcome:
    """Run every planned trial, append each record as it finishes, write the summary."""
    config = prepared.config
    output = Path(config.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    run_dir = output / prepared.name
    run_dir.mkdir(mode=0o700)
    run_dir = run_dir.resolve()
    vers = versions(config)
    save_config(config, run_dir / "config.toml", extra={"versions": vers})
    store = TrialStore(run_dir)
    cancel = threading.Event()
    settings = TrialSettings(
        run_dir=run_dir,
        agent=prepared.agent,
        make_sandbox=prepared.make_sandbox,
        model=config.model,
        versions=vers,
        protected_paths=(run_dir,),
        cancel=cancel,
        on_phase=on_phase,
    )
    _log_line(run_dir, f"run started: {len(prepared.plans)} trials, {config.concurrency} at once")
    records: list[TrialRecord] = []
    interrupted = False
    total = len(prepared.plans)
    pool = ThreadPoolExecutor(max_workers=config.concurrency, thread_name_prefix="trial")
    pending: set[Future[TrialRecord]] = set()
    restore_term = _sigterm_as_interrupt()
    try:
        pending = {pool.submit(run_trial, plan, settings) for plan in prepared.plans}
        while pending:
            done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for future in done:
                if future.cancelled():
                    continue
                record = future.result()
                store.append(record)
                records.append(record)
                _log_line(
                    run_dir,
                    f"trial {record.id} {record.status} reward={record.reward} ok={record.ok}",
                )
                if on_record is not None:
                    on_record(record, len(records), total)
    except KeyboardInterrupt:
        interrupted = True
        cancel.set()
        for future in pending:
            future.cancel()
        # From here on a signal never unwinds the cleanup: a second one aborts the running
        # trials (their sandboxes are killed, then removed by their own cleanup).
        restore = _install_abort_handler(settings, on_interrupt)
        _log_line(run_dir, "interrupted: waiting for running trials to clean up")
        if on_interrupt is not None:
            on_interrupt(
                "interrupted: cleaning up running trials (press Ctrl-C again to abort them)"
            )
        try:
            for future in pending:
                if future.cancelled():
                    continue
                try:
                    record = future.result()
                except Exception:  # already interrupting; keep cleaning up
                    continue
                store.append(record)
                records.append(record)
            pool.shutdown(wait=True, cancel_futures=True)
            _close_backend(prepared.backend_runtime, run_dir)
        finally:
            restore()
    else:
        pool.shutdown(wait=True, cancel_futures=True)
        _close_backend(prepared.backend_runtime, run_dir)
    finally:
        restore_term()
    summary = summarize(records, threshold=config.threshold)
    write_json_atomic(
        run_dir / "summary.json",
        {"run": run_dir.name, "interrupted": interrupted, **summary.model_dump(mode="json")},
    )
    _log_line(run_dir, "run finished" if not interrupted else "run interrupted")
    if interrupted:
        code = EXIT_INTERRUPTED
    elif any(not r.ok for r in records) or (
        config.fail_under is not None
        and (summary.mean_reward is None or summary.mean_reward < config.fail_under)
    ):
        code = EXIT_TRIAL_ERRORS
    else:
        code = EXIT_OK
    return RunOutcome(run_dir, records, summary, code, interrupted)


__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TRIAL_ERRORS",
    "EXIT_USAGE",
    "PreparedRun",
    "RunOutcome",
    "TaskSetError",
    "execute_run",
    "prepare_run",
]
