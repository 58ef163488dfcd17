"""Every attempt is recorded, and only faults of the machine are retried (issue 22).

On FakeSandbox with the real TrialRunner and TrialStore: an attempt that raises, or whose
record cannot be serialized, leaves a fallback ``internal_error`` record (never retried
within the run, rerun by resume with its history); a failure that the agent's tree caused
while the harness walked it (RecursionError, ELOOP, ENAMETOOLONG, EMFILE...) is never an
``environment_error`` and never retried.
"""

from __future__ import annotations

import errno
import threading
from pathlib import Path
from typing import Any

import pytest

from harness.agents.nop import NopAgent
from harness.config import RetryConfig
from harness.records import TrialRecord, TrialStatus, TrialStore
from harness.records.status import RunState
from harness.runner.resume import plan_resume
from harness.runner.scheduler import ATTEMPT_RAISED, RECORD_NOT_WRITTEN, AgentGate, TrialRunner
from harness.tasks import Task
from harness.trial import TrialPlan, TrialSettings, run_trial
from sandbox.backend import PhaseRequest, PhaseResult, SandboxSpec
from sandbox.fake import FakeSandbox, ok_result
from sandbox.inside.evidence import EvidenceEvent

RETRY = RetryConfig(max_retries=3, backoff_sec=0.01, backoff_max_sec=0.02, jitter=0.0)


def grading(request: PhaseRequest, sandbox: FakeSandbox) -> PhaseResult:
    if request.role == "verifier":
        sandbox.files[f"{sandbox.paths.verifier}/reward.txt"] = b"1\n"
    return ok_result()


class TreeFailure(FakeSandbox):
    """A sandbox whose workspace copy out fails as a hostile tree makes it fail."""

    raises: BaseException = RecursionError("maximum recursion depth exceeded")

    def copy_out(
        self, path: str, dest: Path, *, max_file_bytes: int, max_total_bytes: int
    ) -> list[EvidenceEvent]:
        if path == self.paths.workspace:
            raise self.raises
        return super().copy_out(
            path, dest, max_file_bytes=max_file_bytes, max_total_bytes=max_total_bytes
        )


def _runner(
    tmp_path: Path, sandbox_type: type[FakeSandbox] = FakeSandbox, **kw: Any
) -> tuple[TrialRunner, TrialStore, list[FakeSandbox]]:
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    made: list[FakeSandbox] = []

    def make(spec: SandboxSpec) -> FakeSandbox:
        sandbox = sandbox_type(spec, grading)
        made.append(sandbox)
        return sandbox

    cancel = threading.Event()
    settings = TrialSettings(
        run_dir=run_dir,
        agent=NopAgent(),
        make_sandbox=make,
        cancel=cancel,
        agent_slot=AgentGate(None, cancel),
    )
    store = TrialStore(run_dir)
    runner = TrialRunner(
        settings=settings,
        store=store,
        retry=RETRY,
        state=RunState(name="r", run_dir=run_dir, planned=1),
        **kw,
    )
    return runner, store, made


def _plan(task: Task) -> TrialPlan:
    return TrialPlan(id="trial.r0", task=task, rollout=0)


def test_an_attempt_that_raises_is_recorded_and_not_retried(tmp_path: Path, make_task: Any) -> None:
    def broken(plan: TrialPlan, settings: TrialSettings, attempt: int) -> TrialRecord:
        raise KeyError("a bug in the harness \udcff")

    runner, store, _ = _runner(tmp_path, run_attempt=broken)
    record = runner.run(_plan(make_task()))
    assert record.status is TrialStatus.INTERNAL_ERROR and record.attempt == 1
    (stored,) = store.load()  # one record, no retry although 3 were allowed
    assert stored.status is TrialStatus.INTERNAL_ERROR
    assert stored.errors[0].type == ATTEMPT_RAISED and not stored.errors[0].retryable
    assert "a bug in the harness" in stored.errors[0].message


def test_a_record_that_cannot_be_written_leaves_a_fallback_which_resume_retries(
    tmp_path: Path, make_task: Any
) -> None:
    task = make_task()

    def unwritable(plan: TrialPlan, settings: TrialSettings, attempt: int) -> TrialRecord:
        record = run_trial(plan, settings, attempt=attempt)
        deep: list[Any] = []
        for _ in range(200_000):  # deeper than any JSON writer recurses
            deep = [deep]
        return record.model_copy(update={"events": [{"type": "deep", "value": deep}]})

    runner, store, _ = _runner(tmp_path, run_attempt=unwritable)
    record = runner.run(_plan(task))
    assert record.status is TrialStatus.INTERNAL_ERROR
    (fallback,) = store.load()
    assert fallback.errors[0].type == RECORD_NOT_WRITTEN and fallback.errors[0].phase == "persist"
    assert "status completed, reward 1.0" in fallback.errors[0].message
    assert fallback.evidence_dir == "trials/trial.r0"

    resume = plan_resume([_plan(task)], {fallback.id: fallback})
    assert list(resume.rerun) == ["trial.r0"] and resume.missing == []
    runner, store, _ = _runner(tmp_path)
    again = runner.run(_plan(task), resume.prior("trial.r0"))
    assert again.status is TrialStatus.COMPLETED and again.attempt == 2
    (earlier,) = again.previous_attempts
    assert earlier.status is TrialStatus.INTERNAL_ERROR
    assert earlier.errors[0].type == RECORD_NOT_WRITTEN
    assert earlier.evidence_dir == "attempts/trial.r0/1"
    assert [r.status for r in store.load()] == [
        TrialStatus.INTERNAL_ERROR,
        TrialStatus.COMPLETED,
    ]


@pytest.mark.parametrize(
    "raised",
    [
        RecursionError("maximum recursion depth exceeded"),
        OSError(errno.ELOOP, "Too many levels of symbolic links", "/ws/l"),
        OSError(errno.ENAMETOOLONG, "File name too long", "/ws/" + "d/" * 3000),
        OSError(errno.EMFILE, "Too many open files", "/ws/wide/x"),
        UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
        ValueError("nobody expected this"),
    ],
    ids=["recursion", "eloop", "enametoolong", "emfile", "unicode", "unexpected"],
)
def test_a_collect_failure_the_agent_caused_is_graded_not_retried(
    tmp_path: Path, make_task: Any, raised: BaseException
) -> None:
    sandbox_type = type("Failing", (TreeFailure,), {"raises": raised})
    runner, store, made = _runner(tmp_path, sandbox_type)
    record = runner.run(_plan(make_task()))
    assert len(made) == 1, "an attempt the agent's tree broke was retried"
    assert record.status is TrialStatus.COMPLETED and record.reward == 1.0
    (event,) = [e for e in record.events if e["type"] == "evidence_incomplete"]
    assert event["phase"] == "collect" and event["error"] == type(raised).__name__
    assert [r.attempt for r in store.load()] == [1]


def test_the_engine_failing_a_collect_is_still_retried(tmp_path: Path, make_task: Any) -> None:
    from sandbox.errors import SandboxError

    sandbox_type = type("Failing", (TreeFailure,), {"raises": SandboxError("engine gone")})
    runner, _, made = _runner(tmp_path, sandbox_type)
    record = runner.run(_plan(make_task()))
    assert record.status is TrialStatus.ENVIRONMENT_ERROR and len(made) == 4


def test_a_full_run_dir_is_the_machines_not_the_agents(tmp_path: Path) -> None:
    from harness.errors import agent_fault

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    inside = OSError(errno.ENOSPC, "No space left on device", str(run_dir / "trials" / "x"))
    outside = OSError(errno.ENOSPC, "No space left on device", "/trial-root/ws/x")
    unnamed = OSError(errno.ENOSPC, "No space left on device")
    assert agent_fault(inside, run_dir) is None
    assert agent_fault(unnamed, run_dir) is None
    assert agent_fault(outside, run_dir) == "the trial's own storage is full"
    assert agent_fault(OSError(errno.EIO, "I/O error"), run_dir) is None
