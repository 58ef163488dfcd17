"""Judges on a trial's evidence: structured-output, tool-call, llm; the panel; malformed output."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from harness.agents import AgentCommand, SandboxAgent
from harness.config.judges import JudgeSpec, judge_spec, parse_judge_option
from harness.errors import ConfigError, JudgeError, ModelSelectionError, TaskError
from harness.judges import JudgePanel, task_judge_specs
from harness.judges.base import JudgeInput, ModelReply, ModelRequest
from harness.judges.evidence import TrialEvidence
from harness.judges.models import JudgeModels
from harness.judges.registry import JUDGES
from harness.models.catalog import ModelCatalog, load_catalog_file
from harness.records import TrialRecord, TrialStatus
from harness.tasks import Task, load_task
from harness.trial import TrialPlan, TrialSettings, run_trial
from sandbox.backend import PhaseRequest, PhaseResult, Sandbox, SandboxSpec
from sandbox.credentials import CredentialStore
from sandbox.fake import FakeSandbox, ok_result

FINAL = 'Done. The answer:\n```json\n{"city": "Paris", "count": 3}\n```\n'


def session_lines(final: str = FINAL, calls: list[dict[str, Any]] | None = None) -> str:
    calls = calls or [
        {"id": "c1", "name": "write", "arguments": {"path": "hello.txt", "content": "hi"}}
    ]
    lines = [
        {"type": "session", "version": 1},
        {"type": "message", "role": "user", "content": "do it"},
        {"type": "message", "role": "assistant", "content": "", "tool_calls": calls},
        *(
            {
                "type": "tool_result",
                "tool_call_id": c["id"],
                "name": c["name"],
                "content": "ok",
                "is_error": c.get("fails", False),
            }
            for c in calls
        ),
        {"type": "message", "role": "assistant", "content": final},
    ]
    return "".join(json.dumps(line) + "\n" for line in lines)


def evidence(
    tmp_path: Path, *, session: str | None = None, files: Mapping[str, str] = {}
) -> TrialEvidence:
    directory = tmp_path / "trials" / "t.r0"
    (directory / "workspace").mkdir(parents=True)
    for rel, text in files.items():
        (directory / "workspace" / rel).write_text(text)
    if session is not None:
        (directory / "session.jsonl").write_text(session)
    return TrialEvidence(directory)


@pytest.fixture
def task(tmp_path: Path) -> Task:
    root = tmp_path / "task"
    (root / "tests").mkdir(parents=True)
    (root / "task.toml").write_text('[task]\nname = "t/hello"\n')
    (root / "instruction.md").write_text("Say hello.\n")
    (root / "tests" / "test.sh").write_text("true\n")
    return load_task(root)


def score(spec: dict[str, Any], ev: TrialEvidence, task: Task, models: Any = None) -> Any:
    parsed = judge_spec(spec, "test")
    judge = JUDGES.get(parsed.type).from_spec(parsed, "test")
    return judge.score(JudgeInput(ev, task, "t.r0", models))


# ------------------------------------------------------------------------ structured-output


def test_structured_output_file_fields_and_partial_credit(tmp_path: Path, task: Task) -> None:
    ev = evidence(tmp_path, files={"answer.json": '{"a": 1, "b": [1, 2], "c": true, "x": 0}'})
    full = score(
        {"type": "structured-output", "file": "answer.json", "expected": {"a": 1.0, "b": [1, 2]}},
        ev,
        task,
    )
    assert full.score == 1.0 and full.detail["matched"] == 2
    half = score(
        {"type": "structured-output", "file": "answer.json", "expected": {"a": 1, "c": 1}}, ev, task
    )
    assert half.score == 0.5  # true is not 1
    assert half.detail["mismatched"] == {"c": {"expected": 1, "found": True}}
    strict = score(
        {
            "type": "structured-output",
            "file": "answer.json",
            "strict": True,
            "expected": {"a": 1, "b": [1, 2], "c": True},
        },
        ev,
        task,
    )
    assert strict.score == 3 / 4 and strict.detail["unexpected"] == ["x"]


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "answer.json missing"),
        ("not json {", "answer.json holds no JSON object"),
        ("[1, 2]", "answer.json holds JSON list, not an object"),
    ],
)
def test_malformed_agent_output_is_a_low_score_not_an_error(
    tmp_path: Path, task: Task, content: str | None, reason: str
) -> None:
    ev = evidence(tmp_path, files={} if content is None else {"answer.json": content})
    verdict = score(
        {"type": "structured-output", "file": "answer.json", "expected": {"a": 1}}, ev, task
    )
    assert verdict.score == 0.0 and verdict.detail["reason"] == reason


def test_structured_output_reads_the_final_answer(tmp_path: Path, task: Task) -> None:
    ev = evidence(tmp_path, session=session_lines())
    verdict = score(
        {"type": "structured-output", "expected": {"city": "Paris", "count": 3}}, ev, task
    )
    assert verdict.score == 1.0 and verdict.detail["source"] == "final answer"
    no_transcript = evidence(tmp_path / "other")
    with pytest.raises(JudgeError, match="no transcript"):
        score({"type": "structured-output", "expected": {"a": 1}}, no_transcript, task)


def test_a_workspace_link_is_not_followed(tmp_path: Path, task: Task) -> None:
    ev = evidence(tmp_path)
    secret = tmp_path / "secret.json"
    secret.write_text('{"a": 1}')
    (ev.directory / "workspace" / "answer.json").symlink_to(secret)
    verdict = score(
        {"type": "structured-output", "file": "answer.json", "expected": {"a": 1}}, ev, task
    )
    assert verdict.score == 0.0 and "not a regular file" in verdict.detail["reason"]


# ------------------------------------------------------------------------------- tool-call


def test_tool_call_subset_exact_and_succeeded(tmp_path: Path, task: Task) -> None:
    calls = [
        {"id": "c1", "name": "write", "arguments": {"path": "hello.txt", "content": "hi"}},
        {"id": "c2", "name": "shell", "arguments": {"command": "rm -rf x"}, "fails": True},
    ]
    ev = evidence(tmp_path, session=session_lines(calls=calls))
    base = {"type": "tool-call", "tool": "write", "arguments": {"path": "hello.txt"}}
    assert score(base, ev, task).score == 1.0
    assert score({**base, "match": "exact"}, ev, task).score == 0.0
    assert (
        score({**base, "match": "exact", "arguments": calls[0]["arguments"]}, ev, task).score == 1.0
    )
    assert score({**base, "min_calls": 2}, ev, task).score == 0.0
    shell = {"type": "tool-call", "tool": "shell"}
    assert score(shell, ev, task).score == 1.0
    failed = score({**shell, "succeeded": True}, ev, task)
    assert failed.score == 0.0 and failed.detail["calls_of_tool"] == 1
    other = score({**base, "arguments": {"path": "bye.txt"}}, ev, task)
    assert other.score == 0.0 and other.detail["seen_arguments"] == [calls[0]["arguments"]]


def test_tool_call_without_a_transcript_is_a_judge_error(tmp_path: Path, task: Task) -> None:
    with pytest.raises(
        JudgeError, match="tool-call judge 'tool-call': the trial has no transcript"
    ):
        score({"type": "tool-call", "tool": "write"}, evidence(tmp_path), task)


# ------------------------------------------------------------------------------------- llm


class FakeModels:
    """ModelAccess answering every call with ``body`` (and recording the requests)."""

    def __init__(self, status: int, text: str | None) -> None:
        self.status, self.text = status, text
        self.requests: list[ModelRequest] = []

    def api(self, model: str) -> str:
        return "openai-chat"

    def upstream(self, model: str) -> str:
        return model.split("/", 1)[1]

    def call(self, request: ModelRequest) -> ModelReply:
        self.requests.append(request)
        body = (
            {"choices": [{"message": {"content": self.text}}]}
            if self.status < 400
            else {"error": "no"}
        )
        return ModelReply(self.status, body)


LLM = {"type": "llm", "name": "quality", "model": "faux/judge", "rubric": "Is it right?"}


def test_llm_judge_records_prompt_answer_and_reasoning(tmp_path: Path, task: Task) -> None:
    ev = evidence(tmp_path, session=session_lines())
    models = FakeModels(200, '```json\n{"score": 0.8, "reasoning": "close"}\n```')
    verdict = score({**LLM, "max_calls": 2}, ev, task, models)
    assert verdict.score == 0.8 and verdict.detail["reasoning"] == "close"
    request = models.requests[0]
    assert request.model == "faux/judge" and request.budget["max_calls"] == 2
    assert request.task_name == "t/hello" and request.path == "/v1/chat/completions"
    user = request.body["messages"][1]["content"]
    assert "Say hello." in user and "Is it right?" in user and '"city": "Paris"' in user
    saved = json.loads((ev.directory / "judges" / "quality.json").read_text())
    assert saved["answer"].startswith("```json") and saved["reasoning"] == "close"
    assert saved["prompt"]["messages"][1]["content"] == user


@pytest.mark.parametrize(
    ("status", "text", "message"),
    [
        (200, "I think it is fine.", "malformed answer: it holds no JSON object"),
        (200, '{"reasoning": "no score"}', "'score' is not a number"),
        (200, '{"score": 7}', "'score' 7 is not in \\[0, 1\\]"),
        (200, '{"score": true}', "'score' is not a number"),
        (200, None, "the model's answer has no text"),
        (502, None, "model call failed: HTTP 502"),
    ],
)
def test_malformed_llm_output_is_a_judge_error_and_still_recorded(
    tmp_path: Path, task: Task, status: int, text: str | None, message: str
) -> None:
    ev = evidence(tmp_path, session=session_lines())
    with pytest.raises(JudgeError, match=message):
        score(LLM, ev, task, FakeModels(status, text))
    saved = json.loads((ev.directory / "judges" / "quality.json").read_text())
    assert saved["error"].startswith("llm judge 'quality'") and saved["status"] == status


def test_llm_judge_calls_a_faux_model_through_its_own_gateway(tmp_path: Path, task: Task) -> None:
    script = tmp_path / "judge.json"
    script.write_text(
        json.dumps(
            {
                "responses": [{"text": '{"score": 0.25, "reasoning": "weak"}'}],
                "tasks": {"t/hello": [{"text": '{"score": 1, "reasoning": "hello said"}'}]},
            }
        )
    )
    catalog_file = tmp_path / "models.toml"
    catalog_file.write_text('[models."faux/judge"]\nscript = "judge.json"\n')
    catalog = ModelCatalog()
    catalog.add(load_catalog_file(catalog_file))
    models = JudgeModels(catalog, CredentialStore())
    ev = evidence(tmp_path, session=session_lines())
    verdict = score(LLM, ev, task, models)
    assert verdict.score == 1.0 and verdict.detail["reasoning"] == "hello said"
    calls = (ev.directory / "judges" / "quality.model_calls.jsonl").read_text().splitlines()
    assert len(calls) == 1 and json.loads(calls[0])["outcome"] == "ok"
    with pytest.raises(ModelSelectionError, match="Model not found: faux/none"):
        score({**LLM, "model": "faux/none"}, ev, task, models)
    # Through the panel, a judge whose call cannot be made is a judge error of that judge.
    panel = JudgePanel([JudgeSpec.model_validate({**LLM, "model": "faux/none"})], models)
    result = panel.judge(task, "t.r0", ev.directory, {})
    assert result is not None and "ModelSelectionError: Model not found" in str(result.errors[0])


# ---------------------------------------------------------------------------- specs, panel


def test_judge_specs_and_options_are_checked() -> None:
    assert (
        parse_judge_option('{"type": "tool-call", "tool": "w", "threshold": null}')["threshold"]
        is None
    )
    assert parse_judge_option('{type = "tool-call", arguments = {path = "a"}}')["arguments"] == {
        "path": "a"
    }
    with pytest.raises(ConfigError, match="not a JSON object or TOML inline table"):
        parse_judge_option("type=tool-call")
    with pytest.raises(ConfigError, match="verifier's main reward"):
        judge_spec({"type": "tool-call", "name": "reward"}, "x")
    with pytest.raises(ConfigError, match="threshold"):
        judge_spec({"type": "tool-call", "threshold": "high"}, "x")
    spec = judge_spec({"type": "llm", "model": "gpt", "rubric": "r"}, "x")
    with pytest.raises(ConfigError, match="provider/name"):
        JUDGES.get("llm").from_spec(spec, "x")
    with pytest.raises(ConfigError, match="bogus"):
        JUDGES.get("tool-call").from_spec(
            judge_spec({"type": "tool-call", "tool": "w", "bogus": 1}, "x"), "x"
        )


def _task_with(tmp_path: Path, judges: str) -> Task:
    root = tmp_path / "judged"
    (root / "tests").mkdir(parents=True)
    (root / "task.toml").write_text(f'[task]\nname = "t/judged"\n\n{judges}')
    (root / "instruction.md").write_text("Do it.\n")
    (root / "tests" / "test.sh").write_text("true\n")
    return load_task(root)


def test_task_judges_and_run_judges_of_the_same_name(tmp_path: Path) -> None:
    task = _task_with(
        tmp_path,
        '[[verifier.judges]]\ntype = "tool-call"\nname = "wrote"\ntool = "write"\n'
        "threshold = 1.0\n\n"
        '[[verifier.judges]]\ntype = "tool-call"\nname = "listed"\ntool = "ls"\n',
    )
    assert [s.key for s in task_judge_specs(task)] == ["wrote", "listed"]
    panel = JudgePanel([JudgeSpec(type="tool-call", name="listed", tool="read")])
    judges = panel.for_task(task)
    assert [(j.name, j.options.tool) for j in judges] == [("wrote", "write"), ("listed", "read")]  # type: ignore[attr-defined]
    ev = evidence(tmp_path, session=session_lines())
    result = panel.judge(task, "t.r0", ev.directory, {"reward": 1.0})
    assert result is not None
    assert result.scores == {"wrote": 1.0, "listed": 0.0}
    assert result.details["wrote"]["passed"] is True and "passed" not in result.details["listed"]
    assert result.gates_failed == [] and result.errors == []
    clash = panel.judge(task, "t.r0", ev.directory, {"reward": 1.0, "wrote": 0.5})
    assert clash is not None and "already has 'wrote'" in str(clash.errors[0])


def test_a_gate_below_its_threshold_is_reported(tmp_path: Path, task: Task) -> None:
    panel = JudgePanel([JudgeSpec(type="tool-call", name="read-it", tool="read", threshold=0.5)])
    result = panel.judge(task, "t.r0", evidence(tmp_path, session=session_lines()).directory, {})
    assert result is not None and result.gates_failed == ["read-it"]
    assert result.details["read-it"] == {
        "type": "tool-call",
        "threshold": 0.5,
        "score": 0.0,
        "passed": False,
        "tool": "read",
        "matching_calls": 0,
        "needed": 1,
        "calls_of_tool": 0,
    }


@pytest.mark.parametrize(
    ("judges", "message"),
    [
        ('[[verifier.judges]]\ntool = "w"\n', "type"),
        ('[[verifier.judges]]\ntype = "nope"\n', "unknown judge type 'nope'"),
        (
            '[[verifier.judges]]\ntype = "tool-call"\ntool = "a"\n'
            '[[verifier.judges]]\ntype = "tool-call"\ntool = "b"\n',
            "used twice",
        ),
    ],
)
def test_bad_task_judges_are_task_errors(tmp_path: Path, judges: str, message: str) -> None:
    task = _task_with(tmp_path, judges)
    with pytest.raises((TaskError, ConfigError), match=message) as caught:
        JudgePanel([]).for_task(task)
    assert "task.toml" in str(caught.value)


def test_task_judges_are_a_known_key_of_the_task_only(tmp_path: Path) -> None:
    """``verifier.judges`` is the task's (never warned about); a step's is refused."""
    task = _task_with(tmp_path, '[[verifier.judges]]\ntype = "tool-call"\ntool = "w"\n')
    assert task.unknown_keys == [] and task.config.verifier.judges == [
        {"type": "tool-call", "tool": "w"}
    ]
    with pytest.raises(TaskError, match=r"verifier.judges: Input should be a valid list"):
        _task_with(tmp_path / "not-a-list", '[verifier]\njudges = "x"\n')
    (tmp_path / "step" / "judged" / "steps" / "one").mkdir(parents=True)
    (tmp_path / "step" / "judged" / "steps" / "one" / "instruction.md").write_text("Go.\n")
    refused = r"steps\[0\]\.verifier\.judges: not supported: judges score the trial's final"
    with pytest.raises(TaskError, match=refused):
        _task_with(
            tmp_path / "step",
            '[[steps]]\nname = "one"\n\n[[steps.verifier.judges]]\ntype = "tool-call"\n'
            'tool = "w"\n',
        )


# ----------------------------------------------------------------- in a trial (FakeSandbox)


class SessionAgent(SandboxAgent):
    """Keeps a session (its phase below writes one), so the trial has a transcript."""

    name = "session"
    session_file = "session.jsonl"

    def command(self, task: Task, sandbox: Sandbox) -> AgentCommand:
        return AgentCommand(["true"])


def _handler(reward: bytes | None = b"1\n"):
    def handle(request: PhaseRequest, sandbox: FakeSandbox) -> PhaseResult:
        if request.role == "verifier":
            if reward is not None:
                sandbox.files[f"{sandbox.paths.verifier}/reward.txt"] = reward
            return ok_result()
        sandbox.files[f"{sandbox.paths.session}/session.jsonl"] = session_lines().encode()
        return ok_result()

    return handle


def _run(
    tmp_path: Path, task: Task, panel: JudgePanel, reward: bytes | None = b"1\n"
) -> TrialRecord:
    def make(spec: SandboxSpec) -> FakeSandbox:
        return FakeSandbox(spec, _handler(reward))

    settings = TrialSettings(
        run_dir=tmp_path / "run",
        agent=SessionAgent(),
        make_sandbox=make,
        judges=panel,
    )
    return run_trial(TrialPlan(id="trial-1", task=task, rollout=0), settings)


WROTE = JudgeSpec(type="tool-call", name="wrote", tool="write", arguments={"path": "hello.txt"})
READ_GATE = JudgeSpec(type="tool-call", name="read", tool="read", threshold=1.0)
LLM_SPEC = JudgeSpec(type="llm", name="quality", model="faux/judge", rubric="Good?")


def test_scores_join_rewards_and_details_the_record(tmp_path: Path, make_task) -> None:
    record = _run(tmp_path, make_task(), JudgePanel([WROTE]))
    assert record.status is TrialStatus.COMPLETED and record.ok
    assert record.reward == 1.0 and record.rewards == {"reward": 1.0, "wrote": 1.0}
    judges = (record.model_extra or {})["judges"]
    assert judges["wrote"]["score"] == 1.0 and judges["wrote"]["threshold"] is None
    assert "judges" in record.timings
    assert (tmp_path / "run" / "trials" / "trial-1" / "transcript.jsonl").is_file()


def test_a_gate_below_threshold_makes_the_reward_zero(tmp_path: Path, make_task) -> None:
    record = _run(tmp_path, make_task(), JudgePanel([WROTE, READ_GATE]))
    assert record.status is TrialStatus.COMPLETED and record.ok
    assert record.reward == 0.0
    assert record.rewards == {"reward": 1.0, "wrote": 1.0, "read": 0.0}
    assert (record.model_extra or {})["judges"]["read"]["passed"] is False


def test_malformed_judge_output_is_a_verifier_error_with_the_reason(
    tmp_path: Path, make_task
) -> None:
    panel = JudgePanel([WROTE, LLM_SPEC], FakeModels(200, "looks fine to me"))
    record = _run(tmp_path, make_task(), panel)
    assert record.status is TrialStatus.VERIFIER_ERROR and not record.ok
    assert record.reward is None  # not graded: one of its graders failed
    assert record.rewards == {"reward": 1.0, "wrote": 1.0}
    [error] = record.errors
    assert (error.type, error.phase) == ("JudgeError", "judge")
    assert error.message.startswith("llm judge 'quality': malformed answer")
    assert "error" in (record.model_extra or {})["judges"]["quality"]


def test_judges_do_not_run_when_the_verifier_gave_no_reward(tmp_path: Path, make_task) -> None:
    record = _run(tmp_path, make_task(), JudgePanel([WROTE]), reward=None)
    assert record.status is TrialStatus.VERIFIER_ERROR
    assert "judges" not in (record.model_extra or {}) and "wrote" not in record.rewards


# ------------------------------------------------------------------------- multi-step tasks


def _two_step_task(tmp_path: Path, judges: str) -> Task:
    root = tmp_path / "steps-task"
    for rel, text in {
        "task.toml": f'[task]\nname = "t/steps"\n\n{judges}\n'
        '[[steps]]\nname = "one"\n[[steps]]\nname = "two"\n',
        "tests/test.sh": "true\n",
        "steps/one/instruction.md": "first\n",
        "steps/two/instruction.md": "second\n",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return load_task(root)


def _steps_handler(step_rewards: list[bytes]) -> Any:
    """Each agent phase writes ``answer.json`` = its step's number; each step has a reward."""
    agents: list[int] = []

    def handle(request: PhaseRequest, sandbox: FakeSandbox) -> PhaseResult:
        if request.role == "verifier":
            reward = step_rewards[len(agents) - 1]
            sandbox.files[f"{sandbox.paths.verifier}/reward.txt"] = reward
        elif request.role == "agent":
            agents.append(1)
            answer = json.dumps({"step": len(agents)}).encode()
            sandbox.files[f"{sandbox.paths.workspace}/answer.json"] = answer
            sandbox.files[f"{sandbox.paths.session}/session.jsonl"] = session_lines().encode()
        return ok_result()

    return handle


def _run_steps(tmp_path: Path, task: Task, panel: JudgePanel, rewards: list[bytes]) -> TrialRecord:
    def make(spec: SandboxSpec) -> FakeSandbox:
        return FakeSandbox(spec, _steps_handler(rewards))

    settings = TrialSettings(
        run_dir=tmp_path / "run", agent=SessionAgent(), make_sandbox=make, judges=panel
    )
    return run_trial(TrialPlan(id="trial-1", task=task, rollout=0), settings)


FINAL_STEP = (
    '[[verifier.judges]]\ntype = "structured-output"\nname = "final"\nfile = "answer.json"\n'
    "expected = { step = 2 }\n"
)


def test_judges_score_a_multi_step_trials_final_state_once(tmp_path: Path) -> None:
    """After the last step, on the workspace it left; the steps' rewards stay the verifier's."""
    task = _two_step_task(tmp_path, FINAL_STEP)
    record = _run_steps(tmp_path, task, JudgePanel([]), [b"1", b"0"])
    assert record.status is TrialStatus.COMPLETED and record.ok
    assert record.rewards == {"reward": 0.5, "final": 1.0}  # the steps' mean, then the judge
    assert record.reward == 0.5
    steps = (record.model_extra or {})["steps"]
    assert [s["rewards"] for s in steps] == [{"reward": 1.0}, {"reward": 0.0}]
    assert (record.model_extra or {})["judges"]["final"]["score"] == 1.0


def test_a_multi_step_trials_judge_error_and_gate_are_the_trials(tmp_path: Path) -> None:
    gate = JudgeSpec(type="tool-call", name="read", tool="read", threshold=1.0)
    task = _two_step_task(tmp_path, FINAL_STEP)
    gated = _run_steps(tmp_path / "gated", task, JudgePanel([gate]), [b"1", b"1"])
    assert gated.ok and gated.reward == 0.0 and gated.rewards["read"] == 0.0
    assert [s["reward"] for s in (gated.model_extra or {})["steps"]] == [1.0, 1.0]
    panel = JudgePanel([LLM_SPEC], FakeModels(200, "looks fine to me"))
    failed = _run_steps(tmp_path / "failed", task, panel, [b"1", b"1"])
    assert failed.status is TrialStatus.VERIFIER_ERROR and failed.reward is None
    [error] = failed.errors
    assert (error.type, error.phase) == ("JudgeError", "judge")
    assert "step" not in (error.model_extra or {})  # the trial's, not its last step's
    assert all(s["errors"] == [] for s in (failed.model_extra or {})["steps"])
