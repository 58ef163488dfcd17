"""Episodes on the example task with scripted agents: best-of-n, judge (shared, isolated),
user-sim; an agent's crash is data, an env's exception fails the episode; resume keeps only
complete episodes; a hostile solver cannot read the rubric or the user's goal."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pytest
from support.docker import requires_docker  # noqa: F401 (fixture)
from support.episodes import EXAMPLES, HELLO, HUNT, episode_config, hostile_task, only, run_dir
from support.faults import Cli

import harness
from harness.config import AgentConfig
from harness.config.judges import JudgeSpec
from harness.episodes import Agents, Env, Episode, Trace, episode_of
from harness.episodes.best_of_n import BestOfNEnv, BestOfNParams
from harness.plugins import ENVS
from harness.records import TrialStatus
from harness.runner.resume import plan_resume
from harness.tasks import Task, load_task
from harness.trial import TrialPlan


@pytest.mark.root
def test_a_crashing_attempt_is_data_and_the_best_is_kept(tmp_path: Path) -> None:
    crash = 'case "$HARNESS_TRIAL_ID" in *-2) kill -9 $$;; esac; ' + HELLO
    config = episode_config(tmp_path, EXAMPLES / "hello-file", crash, {"id": "best-of-n", "n": 3})
    record = only(harness.run(config))
    episode = episode_of(record)
    assert episode is not None
    assert record.status is TrialStatus.COMPLETED and record.errors == []
    assert record.reward == 1.0 and episode.metrics["pass_at_n"] == 1.0
    by_name = {t.name: t for t in episode.traces}
    assert sorted(by_name) == ["agent-1", "agent-2", "agent-3"]
    assert not by_name["agent-2"].ok and by_name["agent-2"].status is TrialStatus.AGENT_ERROR
    assert by_name["agent-2"].metrics["best"] == 0.0 and by_name["agent-1"].metrics["best"] == 1.0
    assert not episode.ok and not episode.complete and not record.ok
    ids = {t.id for t in episode.traces}
    assert len(ids) == 3  # each attempt its own trial id: token, sandbox, evidence
    for trace in episode.traces:
        assert (run_dir(config) / str(record.evidence_dir)).is_dir()
        assert trace.evidence_dir and trace.evidence_dir.startswith(f"trials/{record.id}/agents/")
    # --resume reruns the incomplete episode and keeps a complete one.
    plan = TrialPlan(record.id, load_task(EXAMPLES / "hello-file"), 0)
    assert record.id in plan_resume([plan], {record.id: record}).rerun
    done = episode.model_copy(update={"complete": True}).model_dump(mode="json")
    kept = record.model_copy(update={"episode": done})
    assert record.id in plan_resume([plan], {record.id: kept}).kept


class _Exploding(Env):
    """Runs one agent, then fails: the episode fails, the trace is kept."""

    def run(self, task: Task, agents: Agents) -> None:
        agents.agent.run(task)
        raise ValueError("orchestration broke")


@pytest.mark.root
def test_an_env_exception_fails_the_episode(tmp_path: Path) -> None:
    ENVS.register("test-exploding", _Exploding)
    try:
        config = episode_config(
            tmp_path,
            EXAMPLES / "hello-file",
            HELLO,
            {"id": "test-exploding"},
            retry={"max_retries": 0},
        )
        record = only(harness.run(config))
    finally:
        ENVS.unregister("test-exploding")
    episode = episode_of(record)
    assert episode is not None
    assert record.status is TrialStatus.ENVIRONMENT_ERROR and not record.ok
    assert "_Exploding.run(): ValueError: orchestration broke" in record.errors[0].message
    assert [t.ok for t in episode.traces] == [True] and not episode.complete


def _trace(name: str, reward: float | None) -> Trace:
    status = TrialStatus.COMPLETED if reward is not None else TrialStatus.AGENT_ERROR
    return Trace(name=name, role="agent", agent="x", id=name, status=status, ok=True, reward=reward)


@pytest.mark.parametrize(
    ("rewards", "threshold", "best", "passed"),
    [
        ([0.5, 0.8, 0.8, None], 1.0, [0, 1, 1, 0], 0.0),
        ([0.5, 0.8, 0.8], 0.8, [0, 1, 1], 1.0),
        ([None, None], 0.0, [0, 0], 0.0),
    ],
)
def test_best_of_n_ties_and_threshold(
    rewards: list[float | None], threshold: float, best: list[int], passed: float
) -> None:
    episode = Episode(traces=[_trace(f"a{i}", r) for i, r in enumerate(rewards)])
    BestOfNEnv(BestOfNParams(n=len(rewards), threshold=threshold)).finalize(None, episode)  # type: ignore[arg-type]
    assert [t.metrics["best"] for t in episode.traces] == best
    assert episode.metrics["pass_at_n"] == passed
    assert all(t.metrics["pass_at_n"] == passed for t in episode.traces)


#: Both sandboxes (the docker one needs the engine: it fails, never skips, in CI).
BACKENDS = ["local", pytest.param("docker", marks=pytest.mark.docker)]


def _engine(request: pytest.FixtureRequest, backend: str) -> None:
    if backend == "docker":
        request.getfixturevalue("requires_docker")


@pytest.mark.root
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["shared", "isolated"])
def test_a_hostile_solver_cannot_read_the_rubric(
    tmp_path: Path, mode: str, backend: str, request: pytest.FixtureRequest
) -> None:
    _engine(request, backend)
    canary = "CANARY" + secrets.token_hex(8)
    task = hostile_task(tmp_path, canary)
    verdict = (
        "python3 -c 'import json,os; "
        'open(os.environ["HARNESS_VERDICT_FILE"], "w").write(json.dumps(dict(score=1)))\''
    )
    config = episode_config(
        tmp_path,
        task,
        HUNT.replace("CANARY", canary[:10]),
        {
            "id": "judge",
            "mode": mode,
            "roles": {"judge": {"name": "command", "cmd": verdict}},
        },
        backend=backend,
    )
    record = only(harness.run(config))
    episode = episode_of(record)
    assert episode is not None and episode.ok, record
    solver = next(t for t in episode.traces if t.role == "solver")
    found = run_dir(config) / str(solver.evidence_dir) / "workspace" / "found.txt"
    assert found.is_file() and found.stat().st_size > 0  # the hunt ran
    assert canary not in found.read_text(errors="replace")
    assert record.reward == 1.0 and episode.traces[0].role == "judge"


@pytest.mark.root
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_hostile_assistant_cannot_read_the_users_goal(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    _engine(request, backend)
    canary = "CANARY" + secrets.token_hex(8)
    task = hostile_task(tmp_path, canary)
    config = episode_config(
        tmp_path,
        task,
        HUNT.replace("CANARY", canary[:10]),
        {"id": "user-sim", "max_turns": 3},
        backend=backend,
        model="faux/episodes",
        models=[str(EXAMPLES / "models.toml")],
    )
    record = only(harness.run(config))
    episode = episode_of(record)
    assert episode is not None and episode.ok, record
    names = {t.name: t for t in episode.traces}
    assert set(names) == {"assistant", "user"} and names["assistant"].id != names["user"].id
    out = run_dir(config)
    found = out / str(names["assistant"].evidence_dir) / "workspace" / "found.txt"
    assert found.is_file() and canary not in found.read_text(errors="replace")
    # The user did get its goal (privately), and the conversation has both speakers.
    calls = (out / str(names["user"].evidence_dir) / "model_calls.jsonl").read_text()
    assert canary in calls
    lines = (out / str(record.evidence_dir) / "conversation.jsonl").read_text().splitlines()
    assert [json.loads(line)["speaker"] for line in lines] == ["user", "assistant"]
    assert names["assistant"].metrics["user_turns"] == 1.0
    assert names["assistant"].info["stop_condition"] == "user_closed"


@pytest.mark.root
def test_the_isolated_judge_sees_only_the_artifacts(tmp_path: Path) -> None:
    solver = HELLO + '; echo private > secret-notes.txt; cp hello.txt "$HARNESS_ARTIFACTS_DIR/"'
    look = (
        'ls -A \\"$HARNESS_WORKSPACE\\" \\"$HARNESS_ARTIFACTS_DIR\\" > /tmp/seen; '
        "find / -name secret-notes.txt 2>/dev/null >> /tmp/seen; "
        'python3 -c \\"import json,sys; print(json.dumps({{\\\\\\"score\\\\\\": 1, '
        '\\\\\\"seen\\\\\\": open(\\\\\\"/tmp/seen\\\\\\").read()}}))\\" '
        '> \\"$HARNESS_VERDICT_FILE\\"'
    )
    config = episode_config(
        tmp_path,
        EXAMPLES / "hello-file",
        solver,
        {
            "id": "judge",
            "mode": "isolated",
            "roles": {"judge": {"name": "command", "cmd": f'bash -c "{look}"'}},
        },
    )
    record = only(harness.run(config))
    episode = episode_of(record)
    assert episode is not None and episode.ok, record
    judge = next(t for t in episode.traces if t.role == "judge")
    seen = judge.info["verdict"]["seen"]
    assert "hello.txt" in seen and "secret-notes.txt" not in seen
    solver_trace = next(t for t in episode.traces if t.role == "solver")
    assert judge.id != solver_trace.id and judge.sandbox != solver_trace.sandbox


@pytest.mark.docker
@pytest.mark.parametrize(
    "env",
    [
        {"id": "best-of-n", "n": 2},
        {"id": "user-sim", "max_turns": 3},
        {"id": "judge", "mode": "shared"},
        {"id": "judge", "mode": "isolated"},
    ],
    ids=["best-of-n", "user-sim", "judge-shared", "judge-isolated"],
)
def test_each_env_runs_in_docker_with_scripted_agents(
    tmp_path: Path, env: dict[str, Any], request: pytest.FixtureRequest
) -> None:
    _engine(request, "docker")
    config = episode_config(tmp_path, EXAMPLES / "hello-file", HELLO, env, backend="docker")
    config = config.model_copy(
        update={
            "agent": AgentConfig(name="builtin"),
            "model": "faux/episodes",
            "models": [str(EXAMPLES / "models.toml")],
        }
    )
    record = only(harness.run(config))
    episode = episode_of(record)
    assert episode is not None and episode.ok and episode.complete, record
    assert record.reward == 1.0 and record.status is TrialStatus.COMPLETED
    traces = {t.name: t for t in episode.traces}
    # Every agent that runs in a sandbox (the simulated user is a model call, no sandbox).
    sandboxes = {name: t.sandbox for name, t in traces.items() if t.role != "user"}
    assert all(box and box["backend"] == "docker" for box in sandboxes.values()), sandboxes
    assert len({t.id for t in episode.traces}) == len(traces)  # each agent its own trial
    containers = {name: (box or {})["container"] for name, box in sandboxes.items()}
    if env.get("mode") == "shared":
        # One container, two users: the judge's is not the solver's.
        assert containers["judge"] == containers["solver"]
        assert (sandboxes["judge"] or {})["uid"] != (sandboxes["solver"] or {})["uid"]
    else:
        assert len(set(containers.values())) == len(containers), containers
    if env["id"] == "best-of-n":
        assert sorted(traces) == ["agent-1", "agent-2"] and episode.metrics["pass_at_n"] == 1.0
    if env["id"] == "user-sim":
        assert set(traces) == {"assistant", "user"}
        lines = (run_dir(config) / str(record.evidence_dir) / "conversation.jsonl").read_text()
        speakers = [json.loads(line)["speaker"] for line in lines.splitlines()]
        assert speakers == ["user", "assistant"]
    assert sum(u.calls or 0 for u in episode.usage_by_agent.values()) >= len(traces)


@pytest.mark.root
def test_task_judges_score_each_graded_agent_trial_not_the_judge_agent(tmp_path: Path) -> None:
    """The run's judges run per agent trial the verifier graded: their scores and decisions
    are on its trace (a failed gate makes its reward 0 before best-of-n picks the best);
    the judge env's judge agent, scored by its verdict, is not judged."""
    gate = JudgeSpec.model_validate(
        {"type": "structured-output", "name": "fields", "file": "answer.json",
         "expected": {"ok": True}, "threshold": 0.5}
    )  # fmt: skip
    answer = 'case "$HARNESS_TRIAL_ID" in *-1) printf "{{\\"ok\\": true}}" > answer.json;; esac; '
    config = episode_config(
        tmp_path, EXAMPLES / "hello-file", answer + HELLO, {"id": "best-of-n", "n": 2},
        judges=[gate],
    )  # fmt: skip
    record = only(harness.run(config))
    episode = episode_of(record)
    assert episode is not None, record
    by_name = {t.name: t for t in episode.traces}
    assert by_name["agent-1"].rewards["fields"] == 1.0 and by_name["agent-1"].reward == 1.0
    assert by_name["agent-2"].rewards["fields"] == 0.0 and by_name["agent-2"].reward == 0.0
    assert all("fields" in (t.model_extra or {})["judges"] for t in episode.traces)
    assert record.reward == 1.0 and by_name["agent-1"].metrics["best"] == 1.0

    verdict = 'bash -c \'echo {{\\"score\\": 1}} > "$HARNESS_VERDICT_FILE"\''
    judged = episode_config(
        tmp_path / "judge", EXAMPLES / "hello-file", answer.replace("*-1", "*") + HELLO,
        {"id": "judge", "mode": "isolated", "roles": {"judge": {"name": "command",
                                                                 "cmd": verdict}}},
        judges=[gate],
    )  # fmt: skip
    record = only(harness.run(judged))
    episode = episode_of(record)
    assert episode is not None and episode.ok, record
    roles = {t.role: t for t in episode.traces}
    assert roles["solver"].rewards["fields"] == 1.0 and "judges" in roles["solver"].model_extra
    assert roles["judge"].rewards == {"judge": 1.0}
    assert "judges" not in (roles["judge"].model_extra or {})


def test_episodes_are_refused_on_ray_before_anything_runs(tmp_path: Path) -> None:
    """An episode's env and agents run in the harness process: --executor ray is refused
    (exit 2, naming the env and the fix) before the executor is opened: the unreachable
    cluster is never tried, and no run dir is written."""
    cli = Cli(tmp_path, {})
    out = tmp_path / "runs"
    try:
        result = cli.run(
            "run", EXAMPLES / "hello-file", "--agent", "oracle", "--env", "best-of-n",
            "--executor", "ray", "--ray-address", "127.0.0.1:1", "-o", out,
            "--display", "plain",
        )  # fmt: skip
    finally:
        cli.close()
    assert result.code == 2, result.output
    assert "--env best-of-n: episodes are refused with --executor ray" in result.output
    assert "run with --executor local" in result.output
    assert "Ray cluster" not in result.output and "Traceback" not in result.output
    assert not out.exists()
