"""Multi-step trials, artifacts, healthchecks and a separate verifier, on FakeSandbox."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.agents import AgentCommand, SandboxAgent
from harness.agents.oracle import OracleAgent
from harness.errors import AgentConfigError
from harness.records import TrialRecord, TrialStatus
from harness.tasks import Task, TaskConfig, load_task
from harness.trial import TrialPlan, TrialSettings, run_trial
from harness.trial.healthcheck import HealthcheckFailed, wait_healthy
from harness.trial.steps import StepOutcome, aggregate_rewards
from sandbox.backend import PhaseRequest, PhaseResult, SandboxSpec
from sandbox.errors import SandboxError
from sandbox.fake import FakeSandbox, ok_result
from sandbox.network_policy import NetworkPolicy

Handler = Callable[[PhaseRequest, FakeSandbox], PhaseResult]


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def steps_task(tmp_path: Path, toml: str, **extra: str) -> Task:
    files = {
        "task.toml": toml,
        "tests/test.sh": "shared test\n",
        "tests/helper.sh": "shared helper\n",
        "steps/one/instruction.md": "first step\n",
        "steps/one/tests/test.sh": "step one test\n",
        "steps/one/solution/solve.sh": "solve one\n",
        "steps/one/workdir/data.txt": "data for one\n",
        "steps/two/instruction.md": "second step\n",
        "steps/two/solution/solve.sh": "solve two\n",
        "steps/two/workdir/setup.sh": "setup two\n",
    }
    files.update(extra)
    return load_task(write(tmp_path / "task", files))


TWO_STEPS = '[[steps]]\nname = "one"\n[[steps]]\nname = "two"\n'


class SeeingAgent(SandboxAgent):
    """Remembers each step's instruction and what the sandbox held when it ran."""

    name = "seeing"

    def __init__(self) -> None:
        self.instructions: list[str] = []

    def command(self, task: Task, sandbox: FakeSandbox) -> AgentCommand:  # type: ignore[override]
        self.instructions.append(task.instruction)
        return AgentCommand(["true"])


def rewards_by_step(rewards: dict[str, str]) -> Handler:
    """Verifier phases write the reward of the step whose tests are in /fake/tests."""

    def handle(request: PhaseRequest, sandbox: FakeSandbox) -> PhaseResult:
        if request.role == "verifier" and request.log_name is None:
            test = sandbox.files.get(f"{sandbox.paths.tests}/test.sh", b"").decode()
            step = "two" if "shared" in test else "one"
            sandbox.files[f"{sandbox.paths.verifier}/reward.txt"] = rewards[step].encode()
        return ok_result()

    return handle


def run(
    tmp_path: Path,
    task: Task,
    agent: SandboxAgent,
    handler: Handler,
) -> tuple[TrialRecord, list[FakeSandbox]]:
    made: list[FakeSandbox] = []

    def make(spec: SandboxSpec) -> FakeSandbox:
        sandbox = FakeSandbox(spec, handler)
        made.append(sandbox)
        return sandbox

    settings = TrialSettings(run_dir=tmp_path / "run", agent=agent, make_sandbox=make)
    return run_trial(TrialPlan(id="t1", task=task, rollout=0), settings), made


def test_steps_run_in_order_in_one_sandbox(tmp_path: Path) -> None:
    agent = SeeingAgent()
    task = steps_task(tmp_path, TWO_STEPS)
    record, made = run(tmp_path, task, agent, rewards_by_step({"one": "1", "two": "0"}))
    assert len(made) == 1
    fake = made[0]
    assert agent.instructions == ["first step\n", "second step\n"]
    assert record.status is TrialStatus.COMPLETED
    assert record.reward == 0.5 and record.rewards == {"reward": 0.5}  # mean by default
    steps = record.model_extra["steps"]
    assert [(s["name"], s["reward"]) for s in steps] == [("one", 1.0), ("two", 0.0)]
    calls = fake.calls
    # Before each agent: the last grading's files are gone; the step's workdir comes in.
    first_agent = calls.index("run_phase:agent")
    assert calls[:first_agent][-5:] == [
        "reset_dir:/fake/tests",
        "reset_dir:/fake/solution",
        "reset_verifier_dir",
        "upload:/fake/workspace",
        "put_file:/fake/instruction.md",
    ]
    rest = calls[first_agent + 1 :]
    assert rest.index("reset_dir:/fake/tests") > rest.index("run_phase:verifier")
    second_step = rest[rest.index("reset_dir:/fake/tests") :]
    assert second_step[:7] == [
        "reset_dir:/fake/tests",
        "reset_dir:/fake/solution",
        "reset_verifier_dir",
        "upload:/fake/workspace",
        "run_phase:agent",  # the step's setup.sh, run as the agent
        "put_file:/fake/instruction.md",
        "run_phase:agent",
    ]
    assert fake.files["/fake/workspace/data.txt"] == b"data for one\n"


def test_step_tests_are_merged_over_the_shared_tests(tmp_path: Path) -> None:
    seen: list[dict[str, bytes]] = []

    def handle(request: PhaseRequest, sandbox: FakeSandbox) -> PhaseResult:
        if request.role == "verifier":
            seen.append({k: v for k, v in sandbox.files.items() if k.startswith("/fake/tests/")})
            sandbox.files[f"{sandbox.paths.verifier}/reward.txt"] = b"1"
        return ok_result()

    run(tmp_path, steps_task(tmp_path, TWO_STEPS), SeeingAgent(), handle)
    one, two = seen
    assert one == {
        "/fake/tests/test.sh": b"step one test\n",
        "/fake/tests/helper.sh": b"shared helper\n",
    }
    assert two == {
        "/fake/tests/test.sh": b"shared test\n",
        "/fake/tests/helper.sh": b"shared helper\n",
    }


def test_final_strategy_takes_the_last_step(tmp_path: Path) -> None:
    task = steps_task(tmp_path, 'multi_step_reward_strategy = "final"\n' + TWO_STEPS)
    record, _ = run(tmp_path, task, SeeingAgent(), rewards_by_step({"one": "1", "two": "0.25"}))
    assert record.reward == 0.25


def test_min_reward_ends_the_remaining_steps(tmp_path: Path) -> None:
    toml = TWO_STEPS.replace('name = "one"\n', 'name = "one"\nmin_reward = 1.0\n')
    agent = SeeingAgent()
    record, _ = run(
        tmp_path, steps_task(tmp_path, toml), agent, rewards_by_step({"one": "0.5", "two": "1"})
    )
    assert agent.instructions == ["first step\n"]
    assert record.status is TrialStatus.COMPLETED and record.reward == 0.5
    steps = record.model_extra["steps"]
    assert len(steps) == 1 and steps[0]["stopped"] == "reward = 0.5, below min_reward 1"
    assert {
        "type": "steps_stopped",
        "step": "one",
        "reason": steps[0]["stopped"],
        "skipped": ["two"],
    } in record.events


def test_a_failing_setup_ends_the_steps_as_an_environment_error(tmp_path: Path) -> None:
    def handle(request: PhaseRequest, sandbox: FakeSandbox) -> PhaseResult:
        if request.log_name == "setup":
            return ok_result(exit_code=3)
        return rewards_by_step({"one": "1", "two": "1"})(request, sandbox)

    agent = SeeingAgent()
    record, _ = run(tmp_path, steps_task(tmp_path, TWO_STEPS), agent, handle)
    assert agent.instructions == ["first step\n"]
    assert record.status is TrialStatus.ENVIRONMENT_ERROR
    assert [(e.type, e.phase, e.model_extra.get("step")) for e in record.errors] == [
        ("StepSetupFailed", "setup", "two")
    ]
    assert record.reward == 1.0  # the mean over the steps that were graded


def test_oracle_needs_every_steps_solution(tmp_path: Path) -> None:
    task = steps_task(tmp_path, TWO_STEPS)
    OracleAgent().check(task)
    (task.path / "steps/two/solution/solve.sh").unlink()
    with pytest.raises(AgentConfigError, match="steps/two/solution/solve.sh"):
        OracleAgent().check(task)


def test_oracle_runs_each_steps_solution(tmp_path: Path) -> None:
    ran: list[bytes] = []

    def handle(request: PhaseRequest, sandbox: FakeSandbox) -> PhaseResult:
        if request.role == "agent" and request.log_name is None:
            ran.append(sandbox.files[request.argv[1]])
        return rewards_by_step({"one": "1", "two": "1"})(request, sandbox)

    run(tmp_path, steps_task(tmp_path, TWO_STEPS), OracleAgent(), handle)
    assert ran == [b"solve one\n", b"solve two\n"]


DIFFERING = (
    '[environment]\nnetwork_mode = "no-network"\n'
    '[environment.healthcheck]\ncommand = "true"\ninterval_sec = 0\n'
    '[verifier]\nnetwork_mode = "public"\n'
    '[[steps]]\nname = "one"\n'
    '[[steps]]\nname = "two"\n'
    '[steps.agent]\nnetwork_mode = "allowlist"\nallowed_hosts = ["pypi.org"]\n'
    '[steps.verifier]\nnetwork_mode = "no-network"\n'
    '[steps.healthcheck]\ncommand = "true"\ninterval_sec = 0\n'
)


def test_each_steps_phases_get_their_own_network_policy(tmp_path: Path) -> None:
    """Steps whose policies differ: one sandbox, each phase its own step's policy."""
    record, made = run(
        tmp_path, steps_task(tmp_path, DIFFERING), OracleAgent(),
        rewards_by_step({"one": "1", "two": "1"}),
    )  # fmt: skip
    assert record.status is TrialStatus.COMPLETED, record.errors
    [fake] = made
    spec = fake.spec
    listed = NetworkPolicy("allowlist", ("pypi.org",))
    closed, public = NetworkPolicy("no-network"), NetworkPolicy("public")
    # Up front the sandbox knows every step's policies (the union is what it prepares for).
    assert spec.step_networks == (
        {"agent": closed, "verifier": public},
        {"agent": listed, "verifier": closed},
    )
    assert spec.allow_internet and set(spec.all_networks()) == {closed, public, listed}
    got = [(r.role, r.log_name, r.step, policy) for r, policy in fake.phases]
    assert got == [
        ("verifier", "healthcheck", None, public),  # the task's, before any step: step one's
        ("agent", None, 0, closed),  # step one's oracle
        ("verifier", None, 0, public),
        ("agent", "setup", 1, listed),  # step two's setup.sh, as its agent
        ("verifier", "healthcheck-two", 1, closed),
        ("agent", None, 1, listed),  # exactly its own hosts
        ("verifier", None, 1, closed),
    ]
    steps = record.model_extra["steps"]
    assert [step["network"] for step in steps] == [
        {"agent": closed.to_json(), "verifier": public.to_json()},
        {"agent": listed.to_json(), "verifier": closed.to_json()},
    ]
    # The old per-role fields: the first step's.
    assert record.posture is not None and record.posture["network"] == closed.to_json()
    assert record.verifier_posture is not None
    assert record.verifier_posture["network"] == public.to_json()


def test_a_phase_naming_a_step_the_sandbox_was_not_made_for_is_refused() -> None:
    spec = SandboxSpec(trial_id="x", step_networks=({"agent": NetworkPolicy("public")},))
    fake = FakeSandbox(spec)
    assert fake.spec.network_for("agent", 0) == NetworkPolicy("public")
    assert fake.spec.network_for("verifier", 0) == NetworkPolicy("no-network")
    with pytest.raises(SandboxError, match="step 1"):
        fake.run_phase(PhaseRequest(role="agent", argv=["true"], step=1))


def test_aggregate_rewards() -> None:
    steps = [
        StepOutcome("a", 0, {"reward": 1.0, "x": 1.0}),
        StepOutcome("b", 1, None),
        StepOutcome("c", 2, {"reward": 0.0}),
    ]
    assert aggregate_rewards(steps, "mean") == {"reward": 0.5, "x": 0.5}
    assert aggregate_rewards(steps, None) == {"reward": 0.5, "x": 0.5}
    assert aggregate_rewards(steps, "final") == {"reward": 0.0}
    assert aggregate_rewards(steps[:2], "final") is None
    assert aggregate_rewards([StepOutcome("b", 0)], "mean") is None


# -- artifacts -----------------------------------------------------------------------------


def test_artifacts_are_collected_with_a_manifest(tmp_path: Path) -> None:
    toml = (
        'artifacts = ["/fake/workspace/out", { source = "/fake/workspace/r.txt", '
        'destination = "res/final.txt" }, "/nowhere"]\n'
    )
    task = load_task(
        write(tmp_path / "t", {"task.toml": toml, "instruction.md": "x\n", "tests/test.sh": ""})
    )

    def handle(request: PhaseRequest, sandbox: FakeSandbox) -> PhaseResult:
        if request.role == "agent":
            sandbox.files["/fake/workspace/out/a.txt"] = b"A"
            sandbox.files["/fake/workspace/out/skip.tmp"] = b"T"
            sandbox.files["/fake/workspace/r.txt"] = b"R"
            sandbox.files["/fake/artifacts/log.txt"] = b"L"
        else:
            sandbox.files["/fake/verifier/reward.txt"] = b"1"
        return ok_result()

    record, _ = run(tmp_path, task, SeeingAgent(), handle)
    out = tmp_path / "run" / "trials" / "t1" / "artifacts"
    assert (out / "out/a.txt").read_bytes() == b"A"
    assert (out / "res/final.txt").read_bytes() == b"R"
    assert (out / "log.txt").read_bytes() == b"L"  # the /logs/artifacts convention dir
    manifest = json.loads((out / "manifest.json").read_text())
    assert [(m["source"], m["status"]) for m in manifest] == [
        ("/fake/artifacts", "ok"),
        ("/fake/workspace/out", "ok"),
        ("/fake/workspace/r.txt", "ok"),
        ("/nowhere", "missing"),
    ]
    assert record.ok


def test_artifact_exclude_patterns(tmp_path: Path) -> None:
    toml = 'artifacts = [{ source = "/fake/workspace/out", exclude = ["*.tmp", "cache"] }]\n'
    task = load_task(
        write(tmp_path / "t", {"task.toml": toml, "instruction.md": "x\n", "tests/test.sh": ""})
    )

    def handle(request: PhaseRequest, sandbox: FakeSandbox) -> PhaseResult:
        if request.role == "agent":
            for name in ("keep.txt", "skip.tmp", "cache/big.bin", "sub/deep.tmp"):
                sandbox.files[f"/fake/workspace/out/{name}"] = b"x"
        else:
            sandbox.files["/fake/verifier/reward.txt"] = b"1"
        return ok_result()

    run(tmp_path, task, SeeingAgent(), handle)
    out = tmp_path / "run" / "trials" / "t1" / "artifacts" / "out"
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "keep.txt"
    ]


# -- separate verifier ---------------------------------------------------------------------


def test_a_separate_verifier_gets_only_the_artifacts(tmp_path: Path) -> None:
    toml = (
        'artifacts = ["/fake/workspace/answer.txt"]\n[verifier]\nenvironment_mode = "separate"\n'
        "[verifier.environment]\ncpus = 0.5\n"
    )
    task = load_task(
        write(
            tmp_path / "t",
            {
                "task.toml": toml,
                "instruction.md": "x\n",
                "tests/Dockerfile": "FROM x\n",
                "tests/test.sh": "t\n",
            },
        )
    )

    def handle(request: PhaseRequest, sandbox: FakeSandbox) -> PhaseResult:
        if request.role == "agent":
            sandbox.files["/fake/workspace/answer.txt"] = b"42"
            sandbox.files["/fake/workspace/private.txt"] = b"no"
        else:
            got = sandbox.files.get("/fake/workspace/answer.txt")
            leaked = "/fake/workspace/private.txt" in sandbox.files
            good = got == b"42" and not leaked and "/fake/tests/test.sh" in sandbox.files
            sandbox.files["/fake/verifier/reward.txt"] = b"1" if good else b"0"
        return ok_result()

    record, made = run(tmp_path, task, SeeingAgent(), handle)
    assert len(made) == 2
    agent_box, verifier_box = made
    assert record.reward == 1.0, record
    assert "run_phase:verifier" not in agent_box.calls
    assert verifier_box.spec.image_tests and verifier_box.spec.resources.cpus == 0.5
    assert verifier_box.spec.dockerfile == task.path / "tests" / "Dockerfile"
    assert verifier_box.stopped and verifier_box.spec.gateway_socket is None
    assert (tmp_path / "run/trials/t1/verifier/reward.txt").read_bytes() == b"1"


def test_a_separate_verifiers_tmp_artifact_is_uploaded_by_its_phase(tmp_path: Path) -> None:
    """An artifact at ``/tmp`` waits for the verifier phase, whose scratch is fresh."""
    toml = 'artifacts = ["/tmp/configured.txt"]\n[verifier]\nenvironment_mode = "separate"\n'
    task = load_task(
        write(
            tmp_path / "t",
            {
                "task.toml": toml,
                "instruction.md": "x\n",
                "tests/Dockerfile": "FROM x\n",
                "tests/test.sh": "t\n",
            },
        )
    )

    def handle(request: PhaseRequest, sandbox: FakeSandbox) -> PhaseResult:
        if request.role == "agent":
            sandbox.files["/tmp/configured.txt"] = b"ok"
        else:
            assert [dest for _src, dest in request.scratch_uploads] == ["/tmp"]
            good = sandbox.files.get("/tmp/configured.txt") == b"ok"
            sandbox.files["/fake/verifier/reward.txt"] = b"1" if good else b"0"
        return ok_result()

    record, made = run(tmp_path, task, SeeingAgent(), handle)
    assert record.reward == 1.0, record
    calls = made[1].calls
    assert calls.index("upload:/tmp") > calls.index("run_phase:verifier"), calls


# -- healthchecks --------------------------------------------------------------------------


class Ticker:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def check_results(results: list[int], ticker: Ticker, step: float = 1.0) -> Handler:
    def handle(request: PhaseRequest, sandbox: FakeSandbox) -> PhaseResult:
        assert request.role == "verifier" and request.argv[:2] == ["bash", "-c"]
        sandbox.files[f"{sandbox.paths.logs}/healthcheck.stdout"] = b"not ready yet"
        ticker.now += step
        return ok_result(exit_code=results.pop(0))

    return handle


def hc(**fields: object) -> object:
    config = TaskConfig.model_validate(
        {
            "environment": {
                "healthcheck": {
                    "command": "probe",
                    "interval_sec": 0,
                    "start_interval_sec": 0,
                    **fields,
                }
            }
        }
    )
    return config.environment.healthcheck


def test_healthcheck_failures_in_the_start_period_do_not_count() -> None:
    ticker = Ticker()
    sandbox = FakeSandbox(SandboxSpec(trial_id="x"), check_results([1, 1, 1, 1, 0], ticker))
    tries = wait_healthy(
        sandbox, hc(start_period_sec=3.5, retries=2), {}, cancel=threading.Event(), clock=ticker
    )  # type: ignore[arg-type]
    assert tries == 5


def test_healthcheck_fails_after_its_retries_with_the_last_output() -> None:
    ticker = Ticker()
    sandbox = FakeSandbox(SandboxSpec(trial_id="x"), check_results([1, 1, 1, 0], ticker))
    with pytest.raises(
        HealthcheckFailed, match="(?s)failed 3 time.*exit code 1.*not ready yet"
    ) as info:
        wait_healthy(sandbox, hc(retries=3), {}, cancel=threading.Event(), clock=ticker)  # type: ignore[arg-type]
    assert info.value.retryable


def test_a_failing_healthcheck_is_an_environment_error_and_no_agent_runs(tmp_path: Path) -> None:
    toml = '[environment.healthcheck]\ncommand = "false"\nretries = 2\ninterval_sec = 0\n'
    task = load_task(
        write(tmp_path / "t", {"task.toml": toml, "instruction.md": "x\n", "tests/test.sh": ""})
    )

    def handle(request: PhaseRequest, sandbox: FakeSandbox) -> PhaseResult:
        sandbox.files[f"{sandbox.paths.logs}/healthcheck.stderr"] = b"connection refused"
        return ok_result(exit_code=7)

    agent = SeeingAgent()
    record, _ = run(tmp_path, task, agent, handle)
    assert agent.instructions == []
    assert record.status is TrialStatus.ENVIRONMENT_ERROR
    assert record.errors[0].type == "HealthcheckFailed" and record.errors[0].phase == "reset"
    assert "connection refused" in record.errors[0].message
