"""Whole-trial retries, attempt history and the agent-concurrency gate, on FakeSandbox."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from harness.agents.nop import NopAgent
from harness.config import RetryConfig
from harness.errors import TrialCancelled
from harness.records import (
    AgentRef,
    AttemptSummary,
    SandboxRef,
    TaskRef,
    TrialError,
    TrialRecord,
    TrialStatus,
    TrialStore,
)
from harness.records.status import RunState
from harness.runner.scheduler import AgentGate, NotRun, TrialRunner
from harness.tasks import Task
from harness.trial import TrialPlan, TrialSettings
from sandbox.backend import PhaseRequest, PhaseResult, SandboxSpec
from sandbox.errors import HostToolInterrupted
from sandbox.fake import FakeSandbox, ok_result

FAST = {"backoff_sec": 0.01, "backoff_max_sec": 0.02, "jitter": 0.0}


def grading(request: PhaseRequest, sandbox: FakeSandbox) -> PhaseResult:
    if request.role == "verifier":
        sandbox.files[f"{sandbox.paths.verifier}/reward.txt"] = b"1\n"
    return ok_result()


class Harness:
    """A TrialRunner on FakeSandbox whose sandboxes fail as a script says."""

    def __init__(
        self,
        tmp_path: Path,
        task: Task,
        *,
        retry: RetryConfig,
        fail_starts: int = 0,
        handler: Callable[[PhaseRequest, FakeSandbox], PhaseResult] = grading,
        agent_limit: int | None = None,
    ) -> None:
        self.run_dir = tmp_path / "run"
        self.run_dir.mkdir()
        self.task = task
        self.made: list[FakeSandbox] = []
        self.fail_starts = fail_starts
        self.state = RunState(name="r", run_dir=self.run_dir, planned=1)
        self.cancel = threading.Event()
        self.retries: list[tuple[str, int, float]] = []
        self.phases: list[tuple[str, str]] = []
        lock = threading.Lock()

        def make(spec: SandboxSpec) -> FakeSandbox:
            with lock:
                fail = {"start"} if len(self.made) < self.fail_starts else set()
                sandbox = FakeSandbox(spec, handler, fail_on=fail)
                self.made.append(sandbox)
            return sandbox

        def on_wait(trial_id: str, waiting: bool) -> None:
            self.phases.append((trial_id, "waiting" if waiting else "execute"))

        self.settings = TrialSettings(
            run_dir=self.run_dir,
            agent=NopAgent(),
            make_sandbox=make,
            cancel=self.cancel,
            agent_slot=AgentGate(agent_limit, self.cancel, on_wait),
        )
        self.store = TrialStore(self.run_dir)
        self.runner = TrialRunner(
            settings=self.settings,
            store=self.store,
            retry=retry,
            state=self.state,
            on_retry=lambda record, delay: self.retries.append((record.id, record.attempt, delay)),
        )

    def plan(self, rollout: int = 0) -> TrialPlan:
        return TrialPlan(id=f"trial.r{rollout}", task=self.task, rollout=rollout)


def test_environment_error_is_retried_and_history_kept(tmp_path: Path, make_task: Any) -> None:
    h = Harness(tmp_path, make_task(), retry=RetryConfig(max_retries=2, **FAST), fail_starts=1)
    record = h.runner.run(h.plan())
    assert record.status is TrialStatus.COMPLETED and record.ok and record.reward == 1.0
    assert record.attempt == 2 and record.errors == []
    (first,) = record.previous_attempts
    assert first.attempt == 1 and first.status is TrialStatus.ENVIRONMENT_ERROR
    assert first.errors[0].message == "fake failure in start"
    assert first.evidence_dir == "attempts/trial.r0/1"
    assert (h.run_dir / "attempts" / "trial.r0" / "1").is_dir()
    assert (h.run_dir / "trials" / "trial.r0").is_dir()
    # Every attempt was appended as it ended; the latest wins.
    assert [(r.attempt, r.status) for r in h.store.load()] == [
        (1, TrialStatus.ENVIRONMENT_ERROR),
        (2, TrialStatus.COMPLETED),
    ]
    assert h.retries == [("trial.r0", 1, 0.01)]
    counts = h.state.snapshot()["counts"]
    assert counts["retries"] == 1 and counts["done"] == 1 and counts["running"] == 0


def test_retries_stop_at_max_with_every_error_oldest_first(tmp_path: Path, make_task: Any) -> None:
    h = Harness(tmp_path, make_task(), retry=RetryConfig(max_retries=2, **FAST), fail_starts=99)
    record = h.runner.run(h.plan())
    assert record.status is TrialStatus.ENVIRONMENT_ERROR and not record.ok
    assert record.attempt == 3
    assert [a.attempt for a in record.previous_attempts] == [1, 2]
    assert all(a.errors and a.errors[0].phase == "reset" for a in record.previous_attempts)
    assert len(h.made) == 3


def test_agent_errors_are_not_retried_by_default(tmp_path: Path, make_task: Any) -> None:
    def crash(request: PhaseRequest, sandbox: FakeSandbox) -> PhaseResult:
        return ok_result(exit_code=3) if request.role == "agent" else grading(request, sandbox)

    h = Harness(tmp_path, make_task(), retry=RetryConfig(**FAST), handler=crash)
    record = h.runner.run(h.plan())
    assert record.status is TrialStatus.AGENT_ERROR and record.attempt == 1
    assert record.previous_attempts == [] and len(h.made) == 1


@pytest.mark.parametrize(
    ("include", "exclude", "attempts"),
    [
        (["RuntimeError"], [], 2),  # by error type name
        (["environment_error"], ["RuntimeError"], 1),  # excluded by error type
        (["agent_error"], [], 1),  # a status that did not happen
    ],
)
def test_include_and_exclude_by_status_or_error_type(
    tmp_path: Path, make_task: Any, include: list[str], exclude: list[str], attempts: int
) -> None:
    retry = RetryConfig(max_retries=1, include=include, exclude=exclude, **FAST)
    h = Harness(tmp_path, make_task(), retry=retry, fail_starts=99)
    assert h.runner.run(h.plan()).attempt == attempts


def test_an_interrupt_during_backoff_ends_the_trial_at_once(tmp_path: Path, make_task: Any) -> None:
    retry = RetryConfig(max_retries=3, backoff_sec=60, jitter=0)
    h = Harness(tmp_path, make_task(), retry=retry, fail_starts=99)
    threading.Timer(0.3, h.cancel.set).start()
    started = time.monotonic()
    record = h.runner.run(h.plan())
    assert time.monotonic() - started < 30
    assert record.attempt == 1 and record.status is TrialStatus.ENVIRONMENT_ERROR
    assert record.evidence_dir == "trials/trial.r0"  # not moved: no next attempt
    assert (h.run_dir / "trials" / "trial.r0").is_dir()
    assert [r.attempt for r in h.store.load()] == [1]


class GroupInterrupt:
    """The first agent phase's host tool dies of a Ctrl-C sent to the whole process group.

    Args:
        heard_after: Seconds until the harness's own handler sets ``heard`` (None: the
            signal was sent to the tool alone and never reaches the harness).
    """

    def __init__(self, heard_after: float | None) -> None:
        self.heard_after = heard_after
        self.heard = threading.Event()
        self.fired = False

    def __call__(self, request: PhaseRequest, sandbox: FakeSandbox) -> PhaseResult:
        if request.role != "agent" or self.fired:
            return grading(request, sandbox)
        self.fired = True
        if self.heard_after is not None:
            threading.Timer(self.heard_after, self.heard.set).start()
        raise HostToolInterrupted("iptables was interrupted (killed by SIGINT)")


def test_a_trial_a_group_interrupt_cancelled_starts_no_next_trial_in_its_thread(
    tmp_path: Path, make_task: Any
) -> None:
    """Its thread waits for the run to hear the signal, then the next plan never starts."""
    interrupt = GroupInterrupt(heard_after=0.1)
    h = Harness(tmp_path, make_task(), retry=RetryConfig(**FAST), handler=interrupt)
    h.runner.interrupted = interrupt.heard
    first = h.runner.run(h.plan(0))
    assert first.status is TrialStatus.CANCELLED, first.errors
    with pytest.raises(NotRun):
        h.runner.run(h.plan(1))
    assert len(h.made) == 1, "a trial started after the interrupt"
    assert [r.id for r in h.store.load()] == ["trial.r0"]


def test_a_signal_only_a_host_tool_got_does_not_stop_the_run(
    tmp_path: Path, make_task: Any
) -> None:
    interrupt = GroupInterrupt(heard_after=None)
    h = Harness(tmp_path, make_task(), retry=RetryConfig(**FAST), handler=interrupt)
    h.runner.interrupted = interrupt.heard
    assert h.runner.run(h.plan(0)).status is TrialStatus.CANCELLED
    second = h.runner.run(h.plan(1))
    assert second.status is TrialStatus.COMPLETED and len(h.made) == 2


def test_no_trial_starts_once_the_interrupt_signal_came(tmp_path: Path, make_task: Any) -> None:
    h = Harness(tmp_path, make_task(), retry=RetryConfig(**FAST))
    h.runner.interrupted.set()
    with pytest.raises(NotRun):
        h.runner.run(h.plan())
    assert h.made == [] and h.store.load() == []


def test_a_resumed_trial_continues_the_attempt_count(tmp_path: Path, make_task: Any) -> None:
    h = Harness(tmp_path, make_task(), retry=RetryConfig(**FAST))
    evidence = h.run_dir / "trials" / "trial.r0"
    evidence.mkdir(parents=True)
    (evidence / "agent.log").write_text("from the crashed invocation\n")
    earlier = AttemptSummary(attempt=1, status=TrialStatus.ENVIRONMENT_ERROR)
    prior = TrialRecord(
        id="trial.r0",
        task=TaskRef(name="t", key="t", hash="h", path="/t"),
        agent=AgentRef(name="nop"),
        sandbox=SandboxRef(backend="fake"),
        attempt=2,
        status=TrialStatus.CANCELLED,
        ok=False,
        errors=[TrialError(type="TrialCancelled", message="run interrupted", phase="execute")],
        previous_attempts=[earlier],
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
        finished_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    record = h.runner.run(h.plan(), prior)
    assert record.attempt == 3 and record.ok
    assert [(a.attempt, a.status) for a in record.previous_attempts] == [
        (1, TrialStatus.ENVIRONMENT_ERROR),
        (2, TrialStatus.CANCELLED),
    ]
    assert record.previous_attempts[1].errors[0].type == "TrialCancelled"
    kept = h.run_dir / "attempts" / "trial.r0" / "2" / "agent.log"
    assert kept.read_text() == "from the crashed invocation\n"


def _concurrency_probe() -> tuple[Callable[[PhaseRequest, FakeSandbox], PhaseResult], list[int]]:
    lock = threading.Lock()
    running = [0]
    peak = [0]

    def handler(request: PhaseRequest, sandbox: FakeSandbox) -> PhaseResult:
        if request.role == "agent":
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            time.sleep(0.15)
            with lock:
                running[0] -= 1
        return grading(request, sandbox)

    return handler, peak


@pytest.mark.parametrize(("limit", "bounded"), [(2, True), (None, False)])
def test_agent_gate_bounds_agent_phases_across_trials(
    tmp_path: Path, make_task: Any, limit: int | None, bounded: bool
) -> None:
    handler, peak = _concurrency_probe()
    h = Harness(
        tmp_path, make_task(), retry=RetryConfig(**FAST), handler=handler, agent_limit=limit
    )
    with ThreadPoolExecutor(max_workers=6) as pool:
        records = list(pool.map(lambda r: h.runner.run(h.plan(r)), range(6)))
    assert all(r.ok for r in records)
    if bounded:
        assert peak[0] == 2
        assert any(phase == "waiting" for _id, phase in h.phases)
    else:
        assert peak[0] > 2  # six trials at once really overlap without a gate


def test_a_trial_waiting_for_an_agent_slot_gives_up_when_cancelled(
    tmp_path: Path, make_task: Any
) -> None:
    gate_cancel = threading.Event()
    gate = AgentGate(1, gate_cancel)
    with gate("holder"):
        threading.Timer(0.3, gate_cancel.set).start()
        with pytest.raises(TrialCancelled), gate("waiter"):
            pass
    with gate("after"):  # the slot was released by the holder
        pass
