"""The executor seam: the registry, [executor] in the config, the local executor in a run,
and what a Ray worker makes of a job."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.config import RetryConfig, RunConfig, TasksConfig, config_diff, resolve_config
from harness.config.judges import JudgeSpec
from harness.errors import EXIT_DISK_FULL, PluginError, UsageError
from harness.executors import LocalExecutor, TrialExecutor
from harness.executors.base import ExecutorOptions
from harness.executors.ray import RayExecutor
from harness.executors.ray.driver import receive
from harness.executors.ray.jobs import BridgeAddress, TrialJob, TrialResult, pack_dir, unpack_dir
from harness.executors.ray.worker import materialize_task
from harness.plugins import EXECUTORS, open_executor
from harness.records import TrialRecord, TrialStore
from harness.records.status import RunState
from harness.runner.faults import DiskGuard, Halting
from harness.runner.scheduler import NotRun, TrialRunner
from harness.tasks import Task, load_task
from harness.tasks.env_templates import env_tables, resolve_task_env
from harness.trial import TrialPlan, TrialSettings

CONFORMANCE = Path(__file__).resolve().parents[1] / "conformance" / "harbor"


def test_the_built_in_executors_are_registered_through_entry_points() -> None:
    plugins = {p.name: p for p in EXECUTORS.plugins()}
    assert plugins["local"].target == "harness.executors.local:LocalExecutor"
    assert plugins["ray"].target == "harness.executors.ray:RayExecutor"
    assert plugins["local"].distribution == "harness"
    assert EXECUTORS.get("local") is LocalExecutor and EXECUTORS.get("ray") is RayExecutor
    with pytest.raises(PluginError, match="unknown executor 'nosuch'; installed: local, ray"):
        EXECUTORS.get("nosuch")
    with pytest.raises(PluginError, match="not a concrete subclass"):
        EXECUTORS.register("half", TrialExecutor)


def test_the_executor_section_defaults_to_local_and_has_a_shorthand(tmp_path: Path) -> None:
    config = resolve_config(options={"tasks": {"paths": ["t"]}}, cwd=tmp_path)
    assert config.executor.name == "local" and config.executor.ray_address is None
    assert open_executor(config, "run").name == "local"
    short = resolve_config(options={"tasks": {"paths": ["t"]}, "executor": "ray"}, cwd=tmp_path)
    assert short.executor.name == "ray"
    # Where trials run is no part of what they measure: a resume may change it.
    moved = short.model_copy(
        update={"executor": short.executor.model_copy(update={"ray_address": "auto"})}
    )
    assert config_diff(config, moved) == []


class _Counting(TrialExecutor):
    """Runs nothing: every attempt's record is made up and counted."""

    def __init__(self) -> None:
        self.attempts: list[tuple[str, int]] = []

    def run_attempt(self, plan: TrialPlan, settings: TrialSettings, attempt: int) -> TrialRecord:
        self.attempts.append((plan.id, attempt))
        if attempt > 1:
            return _record(plan.id, attempt)
        lost = {"type": "NodeDied", "message": "lost", "phase": "execute"}
        return _record(plan.id, attempt, status="environment_error", ok=False, errors=[lost])


def _record(trial_id: str, attempt: int, **fields: object) -> TrialRecord:
    """A made-up record of a completed, passing attempt (``fields`` override)."""
    return TrialRecord.model_validate(
        {
            "id": trial_id,
            "task": {"name": "t", "key": "t", "hash": "h", "path": "/t"},
            "agent": {"name": "a"},
            "sandbox": {"backend": "fake"},
            "attempt": attempt,
            "status": "completed",
            "ok": True,
            "reward": 1.0,
            "started_at": "2026-01-01T00:00:00Z",
            "finished_at": "2026-01-01T00:00:01Z",
            **fields,
        }
    )


def test_the_runner_sends_every_attempt_through_the_executor_and_retries_its_losses(
    tmp_path: Path, make_task
) -> None:
    executor = _Counting()
    settings = TrialSettings(run_dir=tmp_path, agent=None, make_sandbox=None)  # type: ignore[arg-type]
    state = RunState(name="r", run_dir=tmp_path, planned=1, kept=[], threshold=1.0)
    runner = TrialRunner(
        settings=settings,
        store=TrialStore(tmp_path),
        retry=RetryConfig(max_retries=1, backoff_sec=0),
        state=state,
        run_attempt=executor.run_attempt,
    )
    record = runner.run(TrialPlan("t.r0", make_task("t"), 0))
    assert executor.attempts == [("t.r0", 1), ("t.r0", 2)]
    assert record.status == "completed" and record.attempt == 2
    assert [a.status for a in record.previous_attempts] == ["environment_error"]


def test_evidence_archives_cannot_write_outside_their_dir(tmp_path: Path) -> None:
    source = tmp_path / "evidence"
    (source / "verifier").mkdir(parents=True)
    (source / "verifier" / "reward.txt").write_text("1\n")
    (source / "link").symlink_to("verifier/reward.txt")
    unpack_dir(pack_dir(source), tmp_path / "copy")
    assert (tmp_path / "copy" / "verifier" / "reward.txt").read_text() == "1\n"
    assert (tmp_path / "copy" / "link").is_symlink()

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name in ("../escaped.txt", "/abs.txt"):
            info = tarfile.TarInfo(name)
            info.size = 2
            archive.addfile(info, io.BytesIO(b"x\n"))
        link = tarfile.TarInfo("out")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        archive.addfile(link)
    with pytest.raises(tarfile.TarError):
        unpack_dir(buffer.getvalue(), tmp_path / "hostile")
    assert not (tmp_path / "escaped.txt").exists() and not Path("/abs.txt").exists()


def test_a_worker_takes_the_task_env_the_driver_resolved_not_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``${VAR}`` is resolved from the run's environment: a worker node's is another."""
    source = load_task(CONFORMANCE / "multi-step")
    driver = resolve_task_env(source, {"HARNESS_CONFORMANCE_GREETING": "from-the-driver"})
    monkeypatch.setenv("HARNESS_CONFORMANCE_GREETING", "from-the-node")
    job = TrialJob(
        run_name="r",
        config="{}",
        versions={},
        trial_id="multi-step.r0",
        rollout=0,
        attempt=1,
        task_key="the-driver-key",
        task_hash=driver.hash,
        task_dirname=driver.path.name,
        task_env=env_tables(driver),
        bridge=BridgeAddress("127.0.0.1", 1, "ticket"),
    )
    home = tmp_path / "node"
    home.mkdir()
    task = materialize_task(home, job, pack_dir(driver.path))
    assert task.path.is_relative_to(home) and task.hash == driver.hash
    assert task.key == "the-driver-key"
    assert env_tables(task) == env_tables(driver)
    assert task.config.verifier.env == {"GREETING": "from-the-driver"}
    assert [view.verifier_env for view in task.views()] == [{"GREETING": "from-the-driver"}] * 2
    assert [step.name for step in task.steps] == ["create", "extend"]


def test_judges_are_refused_on_ray_before_a_cluster_is_reached(tmp_path: Path) -> None:
    """Judges run in the trial's process (a worker's on Ray) and are not carried there."""
    config = RunConfig(
        tasks=TasksConfig(paths=[str(tmp_path)]), judges=[JudgeSpec(type="tool-call", tool="write")]
    )
    with pytest.raises(UsageError, match=r"^judges: judges are refused with --executor ray"):
        RayExecutor(ExecutorOptions(run_name="r", config=config))


@pytest.mark.root
def test_a_full_run_dir_while_the_driver_unpacks_evidence_halts_the_run(
    tmp_path: Path, make_task: Callable[..., Task], small_fs: Callable[[str], Path]
) -> None:
    """A worker's evidence that the driver's full disk cannot take: the run halts (exit 74).

    The attempt ran on its node; its evidence (1 MB) comes home to a 256 KB run dir. The
    unpack meets ENOSPC: the attempt's record says so (never an internal error, no retry
    spent) and the run halts with the disk's message and the --resume command.
    """
    run_dir = small_fs("256k")
    source = tmp_path / "evidence"
    (source / "verifier").mkdir(parents=True)
    (source / "verifier" / "reward.txt").write_text("1\n")
    (source / "workspace.bin").write_bytes(os.urandom(1 << 20))
    plan = TrialPlan("t.r0", make_task("t"), 0)
    result = TrialResult(
        record=_record(plan.id, 1).model_dump_json(), evidence=pack_dir(source), node="10.9.8.7"
    )
    received: list[TrialRecord] = []

    def on_the_driver(plan: TrialPlan, settings: TrialSettings, attempt: int) -> TrialRecord:
        received.append(receive(result, plan, settings.run_dir / "trials" / plan.id))
        return received[-1]

    halting = Halting()
    runner = TrialRunner(
        settings=TrialSettings(run_dir=run_dir, agent=None, make_sandbox=None),  # type: ignore[arg-type]
        store=TrialStore(run_dir),
        retry=RetryConfig(max_retries=2, backoff_sec=0),
        state=RunState(name="r", run_dir=run_dir, planned=1),
        run_attempt=on_the_driver,
        disk=DiskGuard(run_dir, halting),
    )
    try:
        final: TrialRecord | None = runner.run(plan)
    except NotRun:  # the record did not fit either: --resume runs the trial
        final = None

    [record] = received  # one attempt: a full disk is no retry's business
    assert final is None or final == record
    assert record.status == "environment_error" and not record.ok and record.reward == 1.0
    [error] = record.errors
    assert error.phase == "collect" and "[Errno 28]" in error.message, error
    assert f"from node 10.9.8.7 into {run_dir / 'trials' / plan.id}" in error.message
    assert record.sandbox.node == "10.9.8.7"
    # Had the record fitted, it would have halted the run by itself.
    alone = Halting()
    assert DiskGuard(run_dir, alone).check_record(record) and alone.halt is not None
    assert alone.halt.reason == f"no space left on device (ENOSPC) at {run_dir}"
    halt = halting.halt
    assert halt is not None and halt.exit_code == EXIT_DISK_FULL == 74
    said = halt.message(0, 1, run_dir)
    assert said.startswith(f"stopped: no space left on device (ENOSPC) at {run_dir}"), said
    assert said.endswith(f"free space there, then continue with: harness run --resume {run_dir}")
