"""The trial lifecycle (harness.trial) on FakeSandbox with real task dirs built in tmp_path."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.agents import Agent, AgentCommand, SandboxAgent
from harness.records import TrialRecord, TrialStatus
from harness.tasks import Task
from harness.trial import TrialPlan, TrialSettings, run_trial
from sandbox.backend import PhaseRequest, PhaseResult, Sandbox, SandboxSpec
from sandbox.errors import CLEANUP_FAILED, RUN_AND_CLEANUP_FAILED
from sandbox.fake import FakeSandbox, ok_result
from sandbox.inside.evidence import EvidenceEvent


class RecordingFake(FakeSandbox):
    """FakeSandbox that also logs reads, so the cleanup order is visible in ``calls``."""

    def read_file(self, path: str, *, max_bytes: int) -> tuple[bytes | None, EvidenceEvent | None]:
        self.calls.append(f"read_file:{path}")
        return super().read_file(path, max_bytes=max_bytes)


class GroupStopFake(RecordingFake):
    """A backend whose stop fails with a group, the way LocalSandbox.stop can."""

    def stop(self) -> None:
        super().stop()
        raise ExceptionGroup("local sandbox stop failed", [OSError("sweep"), OSError("rmtree")])


class ScriptAgent(SandboxAgent):
    """A subprocess agent; it logs ``dispose`` into the sandbox's call log."""

    name = "script"

    def __init__(
        self, *, session_file: str | None = None, dispose_error: Exception | None = None
    ) -> None:
        self.session_file = session_file
        self.dispose_error = dispose_error
        self.sandbox: Sandbox | None = None
        self.disposed = 0

    def prepare(self, task: Task, sandbox: Sandbox) -> None:
        self.sandbox = sandbox

    def command(self, task: Task, sandbox: Sandbox) -> AgentCommand:
        return AgentCommand(["true"])

    def dispose(self) -> None:
        self.disposed += 1
        if isinstance(self.sandbox, FakeSandbox):
            self.sandbox.calls.append("dispose")
        if self.dispose_error is not None:
            raise self.dispose_error


def grading_handler(
    agent: Callable[[PhaseRequest, FakeSandbox], PhaseResult] | None = None,
) -> Callable[[PhaseRequest, FakeSandbox], PhaseResult]:
    """Agent phase via ``agent`` (default: exit 0); verifier phase writes reward 1."""

    def handle(request: PhaseRequest, sandbox: FakeSandbox) -> PhaseResult:
        if request.role == "verifier":
            sandbox.files[f"{sandbox.paths.verifier}/reward.txt"] = b"1\n"
            return ok_result()
        return agent(request, sandbox) if agent else ok_result()

    return handle


def run(
    tmp_path: Path,
    task: Task,
    agent: Agent,
    *,
    fake_cls: type[FakeSandbox] = RecordingFake,
    handler: Callable[[PhaseRequest, FakeSandbox], PhaseResult] | None = None,
    fail_on: set[str] | None = None,
    secret_env: dict[str, str] | None = None,
) -> tuple[TrialRecord, FakeSandbox]:
    made: list[FakeSandbox] = []

    def make(spec: SandboxSpec) -> FakeSandbox:
        sandbox = fake_cls(spec, handler or grading_handler(), fail_on=fail_on)
        made.append(sandbox)
        return sandbox

    settings = TrialSettings(
        run_dir=tmp_path / "run",
        agent=agent,
        make_sandbox=make,
        secret_env=secret_env or {},
    )
    record = run_trial(TrialPlan(id="trial-1", task=task, rollout=0), settings)
    assert len(made) == 1
    return record, made[0]


def errors_of(record: TrialRecord) -> list[tuple[str, str, str]]:
    return [(e.type, e.phase or "", e.message) for e in record.errors]


def cleanup_events(record: TrialRecord) -> list[dict]:
    return [e for e in record.events if e.get("type") == "cleanup_failed"]


def test_happy_trial_runs_the_lifecycle_in_order(tmp_path: Path, make_task) -> None:
    record, fake = run(tmp_path, make_task(), ScriptAgent())
    assert record.status is TrialStatus.COMPLETED and record.ok
    assert record.reward == 1.0
    assert record.errors == []
    calls = fake.calls
    order = [
        "start",
        "put_file:/fake/instruction.md",
        "run_phase:agent",
        "reset_verifier_dir",
        "put_dir:/fake/tests",
        "run_phase:verifier",
        "dispose",
        "stop",
    ]
    assert [c for c in calls if c in order] == order
    assert calls[-1] == "stop"


def test_tests_enter_the_sandbox_only_after_the_agent_phase(tmp_path: Path, make_task) -> None:
    record, fake = run(tmp_path, make_task(), ScriptAgent())
    assert fake.calls.index("put_dir:/fake/tests") > fake.calls.index("run_phase:agent")
    assert fake.calls.index("reset_verifier_dir") < fake.calls.index("put_dir:/fake/tests")


def test_stop_failure_alone_is_that_error_in_the_record(tmp_path: Path, make_task) -> None:
    record, fake = run(tmp_path, make_task(), ScriptAgent(), fail_on={"stop"})
    assert record.status is TrialStatus.ENVIRONMENT_ERROR
    assert not record.ok
    assert errors_of(record) == [("RuntimeError", "cleanup:remove_root", "fake failure in stop")]
    # One cleanup error is that error: no aggregate.
    assert cleanup_events(record) == []
    assert record.reward == 1.0  # partial results survive
    assert fake.calls[-1] == "stop"


def test_run_error_then_cleanup_error_run_first_with_aggregate_event(
    tmp_path: Path, make_task
) -> None:
    record, fake = run(tmp_path, make_task(), ScriptAgent(), fail_on={"run_phase:agent", "stop"})
    assert errors_of(record) == [
        ("RuntimeError", "execute", "fake failure in run_phase:agent"),
        ("RuntimeError", "cleanup:remove_root", "fake failure in stop"),
    ]
    assert record.status is TrialStatus.AGENT_ERROR
    assert [e["message"] for e in cleanup_events(record)] == [RUN_AND_CLEANUP_FAILED]
    assert "dispose" in fake.calls and fake.calls[-1] == "stop"


def test_several_cleanup_errors_keep_step_order_and_aggregate_message(
    tmp_path: Path, make_task
) -> None:
    agent = ScriptAgent(dispose_error=RuntimeError("dispose broke"))
    record, fake = run(tmp_path, make_task(), agent, fail_on={"stop"})
    assert errors_of(record) == [
        ("RuntimeError", "cleanup:dispose", "dispose broke"),
        ("RuntimeError", "cleanup:remove_root", "fake failure in stop"),
    ]
    assert [e["message"] for e in cleanup_events(record)] == [CLEANUP_FAILED]
    assert record.status is TrialStatus.ENVIRONMENT_ERROR
    assert fake.calls.index("dispose") < fake.calls.index("stop")


def test_a_grouped_stop_error_is_flattened_into_the_record(tmp_path: Path, make_task) -> None:
    record, _ = run(tmp_path, make_task(), ScriptAgent(), fake_cls=GroupStopFake)
    assert errors_of(record) == [
        ("OSError", "cleanup:remove_root", "sweep"),
        ("OSError", "cleanup:remove_root", "rmtree"),
    ]


def test_missing_session_file_is_a_cleanup_error_and_later_steps_still_run(
    tmp_path: Path, make_task
) -> None:
    agent = ScriptAgent(session_file="transcript.jsonl")
    record, fake = run(tmp_path, make_task(), agent)
    assert [(t, p) for t, p, _ in errors_of(record)] == [
        ("SessionFileMissing", "cleanup:snapshot_session")
    ]
    assert "Agent produced no session file" in record.errors[0].message
    assert any(e.get("type") == "evidence" and e.get("kind") == "missing" for e in record.events)
    # The agent's doing (it removed or swapped its session file): never retried.
    assert record.status is TrialStatus.AGENT_ERROR
    assert not record.errors[0].retryable
    assert record.reward == 1.0
    snapshot = fake.calls.index("read_file:/fake/session/transcript.jsonl")
    assert snapshot < fake.calls.index("dispose") < fake.calls.index("stop")
    assert fake.calls[-1] == "stop" and fake.stopped
    assert agent.disposed == 1


def test_session_file_is_snapshotted_into_the_evidence(tmp_path: Path, make_task) -> None:
    body = b'{"role": "user"}\n{"role": "assistant"}\n'

    def agent_phase(request: PhaseRequest, sandbox: FakeSandbox) -> PhaseResult:
        sandbox.files[f"{sandbox.paths.session}/transcript.jsonl"] = body
        return ok_result()

    record, _ = run(
        tmp_path,
        make_task(),
        ScriptAgent(session_file="transcript.jsonl"),
        handler=grading_handler(agent_phase),
    )
    assert record.ok, record.errors
    assert (tmp_path / "run" / record.evidence_dir / "session.jsonl").read_bytes() == body


def test_failed_start_still_stops_the_sandbox(tmp_path: Path, make_task) -> None:
    record, fake = run(tmp_path, make_task(), ScriptAgent(), fail_on={"start"})
    assert record.status is TrialStatus.ENVIRONMENT_ERROR
    assert errors_of(record) == [("RuntimeError", "reset", "fake failure in start")]
    assert "run_phase:agent" not in fake.calls
    assert fake.calls[-1] == "stop"


def test_posture_failure_aborts_before_tests_are_copied_in(tmp_path: Path, make_task) -> None:
    def posture_fails(request: PhaseRequest, sandbox: FakeSandbox) -> PhaseResult:
        return ok_result(
            127, posture=None, error={"type": "PostureError", "message": "NoNewPrivs is 0"}
        )

    record, fake = run(tmp_path, make_task(), ScriptAgent(), handler=grading_handler(posture_fails))
    assert record.status is TrialStatus.ENVIRONMENT_ERROR
    assert [(t, p) for t, p, _ in errors_of(record)] == [("PostureCheckFailed", "execute")]
    assert "NoNewPrivs is 0" in record.errors[0].message
    assert "put_dir:/fake/tests" not in fake.calls
    assert "run_phase:verifier" not in fake.calls
    assert record.reward is None
    assert fake.calls[-1] == "stop"


def test_agent_timeout_and_survivors_are_recorded(tmp_path: Path, make_task) -> None:
    survivor = {"pid": 4242, "ppid": 1, "uid": 61000, "cmdline": "sleep 1000"}

    def times_out(request: PhaseRequest, sandbox: FakeSandbox) -> PhaseResult:
        return ok_result(None, signal=9, timed_out=True, survivors=[survivor])

    record, _ = run(tmp_path, make_task(), ScriptAgent(), handler=grading_handler(times_out))
    assert record.status is TrialStatus.AGENT_TIMEOUT
    assert [(t, p) for t, p, _ in errors_of(record)] == [("TimeoutError", "execute")]
    survivors = [e for e in record.events if e.get("type") == "survivors"]
    assert survivors and survivors[0]["processes"] == [survivor]
    assert record.reward == 1.0  # still graded


@pytest.mark.parametrize(
    ("result", "needle"),
    [(ok_result(3), "exited with code 3"), (ok_result(None, signal=9), "signal 9")],
)
def test_agent_crash_is_an_agent_error(
    tmp_path: Path, make_task, result: PhaseResult, needle: str
) -> None:
    record, _ = run(
        tmp_path, make_task(), ScriptAgent(), handler=grading_handler(lambda r, s: result)
    )
    assert record.status is TrialStatus.AGENT_ERROR
    assert needle in record.errors[0].message


def test_interrupt_still_cleans_up_then_propagates(tmp_path: Path, make_task) -> None:
    def interrupted(request: PhaseRequest, sandbox: FakeSandbox) -> PhaseResult:
        raise KeyboardInterrupt

    made: list[FakeSandbox] = []
    agent = ScriptAgent()

    def make(spec: SandboxSpec) -> FakeSandbox:
        made.append(RecordingFake(spec, grading_handler(interrupted)))
        return made[0]

    settings = TrialSettings(run_dir=tmp_path / "run", agent=agent, make_sandbox=make)
    with pytest.raises(KeyboardInterrupt):
        run_trial(TrialPlan(id="t", task=make_task(), rollout=0), settings)
    assert made[0].stopped and made[0].calls[-1] == "stop"
    assert agent.disposed == 1


def test_run_trial_leaves_os_environ_untouched(tmp_path: Path, make_task) -> None:
    before = dict(os.environ)
    run(tmp_path, make_task(), ScriptAgent(), fail_on={"run_phase:agent", "stop"})
    assert dict(os.environ) == before


def test_agent_env_is_isolated_and_secrets_travel_separately(
    tmp_path: Path, make_task, canary: str
) -> None:
    seen: list[PhaseRequest] = []

    def capture(request: PhaseRequest, sandbox: FakeSandbox) -> PhaseResult:
        seen.append(request)
        return ok_result()

    record, _ = run(
        tmp_path,
        make_task(),
        ScriptAgent(),
        handler=grading_handler(capture),
        secret_env={"GATEWAY_TOKEN": canary},
    )
    (request,) = seen
    assert request.secret_env == {"GATEWAY_TOKEN": canary}
    assert canary not in repr(request)
    assert all(canary not in v for v in request.env.values())
    assert request.env["HARNESS_WORKSPACE"] == "/fake/workspace"
    assert request.env["HOME"] == "/fake/home"
    assert not {k for k in request.env if k.startswith("HARNESS_")} - {
        "HARNESS_WORKSPACE",
        "HARNESS_TRIAL_ID",
        "HARNESS_SESSION_DIR",
        "HARNESS_ARTIFACTS_DIR",
        "HARNESS_INSTRUCTION_FILE",
    }
    assert canary not in record.model_dump_json()


def test_workspace_fixtures_of_the_task_are_seeded(tmp_path: Path, make_task) -> None:
    task = make_task(workspace={"data/input.txt": b"hello"})
    _, fake = run(tmp_path, task, ScriptAgent())
    assert fake.files["/fake/workspace/data/input.txt"] == b"hello"
