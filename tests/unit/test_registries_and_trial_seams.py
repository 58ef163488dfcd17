"""Issue 23's seams: the registries beside their concepts, the public Trial, the attempt
callable of TrialSettings and the one phase -> status table."""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import harness.plugins
from harness.agents import AgentCommand, SandboxAgent
from harness.agents.registry import AGENTS, build_agent
from harness.backends.registry import SANDBOXES, open_backend
from harness.config import RunConfig, resolve_config
from harness.episodes.registry import ENVS, env_class
from harness.episodes.trials import EpisodeTrial, JudgeTrial
from harness.errors import PluginError, VerifierError
from harness.executors import LocalExecutor
from harness.executors.base import ExecutorOptions
from harness.executors.registry import EXECUTORS, open_executor
from harness.judges.registry import JUDGES
from harness.records import TrialRecord, TrialStatus
from harness.registry import Registry
from harness.tasks import Task
from harness.trial import Trial, TrialPlan, TrialSettings, run_trial
from harness.trial.failures import FAILURE_STATUS, failure_status
from sandbox.backend import PhaseRequest, PhaseResult, Sandbox, SandboxSpec
from sandbox.errors import SandboxDied, SandboxError, SpaceFilledByAgent
from sandbox.fake import FakeSandbox, ok_result

ROOT = Path(__file__).resolve().parents[2]

#: Every name harness.plugins exported before the registries moved (docs/plugins.md).
PLUGINS_NAMES = [
    "AGENTS",
    "AGENTS_GROUP",
    "ENVS",
    "ENVS_GROUP",
    "EXECUTORS",
    "EXECUTORS_GROUP",
    "PYTHON_PREFIX",
    "SANDBOXES",
    "SANDBOXES_GROUP",
    "Plugin",
    "PluginInfo",
    "Registry",
    "build_agent",
    "env_class",
    "open_backend",
    "open_executor",
    "subclass_of",
]


def test_harness_plugins_still_exports_every_name_and_the_same_objects() -> None:
    for name in PLUGINS_NAMES:
        assert hasattr(harness.plugins, name), name
    assert sorted(harness.plugins.__all__) == sorted(PLUGINS_NAMES)
    assert harness.plugins.AGENTS is AGENTS and harness.plugins.build_agent is build_agent
    assert harness.plugins.SANDBOXES is SANDBOXES
    assert harness.plugins.open_backend is open_backend
    assert harness.plugins.EXECUTORS is EXECUTORS
    assert harness.plugins.open_executor is open_executor
    assert harness.plugins.ENVS is ENVS and harness.plugins.env_class is env_class
    assert harness.plugins.Registry is Registry and isinstance(JUDGES, Registry)


def test_each_registry_keeps_its_entry_point_group() -> None:
    groups = {
        AGENTS: "harness.agents",
        SANDBOXES: "harness.sandboxes",
        EXECUTORS: "harness.executors",
        ENVS: "harness.envs",
        JUDGES: "harness.judges",
    }
    for registry, group in groups.items():
        assert registry.group == group
    assert {"local", "docker"} <= set(SANDBOXES.names())
    assert {"oracle", "nop", "command"} <= set(AGENTS.names())
    assert {"single", "best-of-n", "user-sim", "judge"} <= set(ENVS.names())
    with pytest.raises(PluginError, match="not a concrete subclass of harness.episodes.env.Env"):
        ENVS.register("not-an-env", LocalExecutor)
    with pytest.raises(PluginError, match="not a concrete subclass of harness.episodes.env.Env"):
        env_class("python:harness.executors.local:LocalExecutor")


def test_the_registry_mechanism_imports_only_errors_and_the_stdlib() -> None:
    tree = ast.parse((ROOT / "harness" / "registry.py").read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    foreign = {
        name
        for name in imported
        if name.split(".")[0] not in sys.stdlib_module_names and name != "__future__"
    }
    assert foreign == {"harness.errors"}


def test_no_harness_module_below_the_cli_imports_the_plugins_face() -> None:
    # harness.plugins imports every concept's registry: a concept importing it back would
    # close a cycle. Only the CLI and the run's entry points (above all of them) may.
    allowed = {"cli", "runner", "plugins.py"}
    offenders = []
    for path in (ROOT / "harness").rglob("*.py"):
        rel = path.relative_to(ROOT / "harness")
        if rel.parts[0] in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "harness.plugins":
                offenders.append(str(rel))
            if isinstance(node, ast.Import) and any(
                alias.name == "harness.plugins" for alias in node.names
            ):
                offenders.append(str(rel))
    assert offenders == []


def test_the_episodes_trials_subclass_the_public_trial() -> None:
    assert issubclass(EpisodeTrial, Trial) and issubclass(JudgeTrial, Trial)
    doc = Trial.__doc__ or ""
    for point in ("run_phases", "execute", "artifacts", "judge", "cleanup_steps", "fail"):
        assert f":meth:`{point}`" in doc, point
        assert callable(getattr(Trial, point)), point


@pytest.mark.parametrize(
    ("phase", "exc", "status"),
    [
        ("prepare", RuntimeError("x"), TrialStatus.ENVIRONMENT_ERROR),
        ("reset", SandboxError("x"), TrialStatus.ENVIRONMENT_ERROR),
        ("setup", ValueError("x"), TrialStatus.ENVIRONMENT_ERROR),
        ("execute", SandboxDied("x", "agent"), TrialStatus.AGENT_ERROR),
        ("execute", SandboxError("x"), TrialStatus.ENVIRONMENT_ERROR),
        ("execute", OSError("x"), TrialStatus.ENVIRONMENT_ERROR),
        ("execute", RuntimeError("x"), TrialStatus.AGENT_ERROR),
        ("grade", VerifierError("x"), TrialStatus.VERIFIER_ERROR),
        ("grade", SandboxDied("x", "verifier"), TrialStatus.VERIFIER_ERROR),
        ("grade", OSError("x"), TrialStatus.ENVIRONMENT_ERROR),
        ("grade", UnicodeError("x"), TrialStatus.ENVIRONMENT_ERROR),
        ("grade", RuntimeError("x"), TrialStatus.VERIFIER_ERROR),
        ("grade", KeyboardInterrupt(), TrialStatus.INTERNAL_ERROR),
        # A space a root agent filled broke a harness step: the agent's, in every phase.
        ("reset", SpaceFilledByAgent("x"), TrialStatus.AGENT_ERROR),
        ("setup", SpaceFilledByAgent("x"), TrialStatus.AGENT_ERROR),
        ("execute", SpaceFilledByAgent("x"), TrialStatus.AGENT_ERROR),
        ("grade", SpaceFilledByAgent("x"), TrialStatus.AGENT_ERROR),
        # The container died of what a phase left (OOM) between phases: never retried.
        ("setup", SandboxDied("x", "agent"), TrialStatus.AGENT_ERROR),
        ("collect", SandboxDied("x", "agent"), TrialStatus.AGENT_ERROR),
        ("artifacts", SandboxDied("x", "verifier"), TrialStatus.AGENT_ERROR),
        ("collect", SandboxError("x"), TrialStatus.ENVIRONMENT_ERROR),
        ("artifacts", SandboxError("x"), TrialStatus.ENVIRONMENT_ERROR),
    ],
)
def test_the_phase_status_table(phase: str, exc: BaseException, status: TrialStatus) -> None:
    assert failure_status(phase, exc) is status


def test_the_table_names_every_phase_the_trial_runs() -> None:
    assert set(FAILURE_STATUS) == {
        "prepare",
        "build",
        "reset",
        "setup",
        "execute",
        "grade",
        "collect",
        "artifacts",
    }


class _TrueAgent(SandboxAgent):
    """Runs ``true``."""

    name = "true"

    def command(self, task: Task, sandbox: Sandbox) -> AgentCommand:
        return AgentCommand(["true"])


def _settings(
    tmp_path: Path, handler: Callable[[PhaseRequest, FakeSandbox], PhaseResult]
) -> TrialSettings:
    def make(spec: SandboxSpec) -> FakeSandbox:
        return FakeSandbox(spec, handler)

    return TrialSettings(run_dir=tmp_path / "run", agent=_TrueAgent(), make_sandbox=make)


def _grading(request: PhaseRequest, sandbox: FakeSandbox) -> PhaseResult:
    if request.role == "verifier":
        sandbox.files[f"{sandbox.paths.verifier}/reward.txt"] = b"1\n"
    return ok_result()


def test_the_local_executor_runs_settings_attempt_when_the_run_sets_it(
    tmp_path: Path, make_task: Callable[..., Task]
) -> None:
    task = make_task()
    plan = TrialPlan(id="t-1", task=task, rollout=0)
    settings = _settings(tmp_path, _grading)
    executor = LocalExecutor(ExecutorOptions(run_name="run", config=_config(tmp_path)))
    plain = executor.run_attempt(plan, settings, 1)
    assert plain.status is TrialStatus.COMPLETED and plain.reward == 1.0
    seen: list[tuple[str, int]] = []

    def twice(plan: TrialPlan, settings: TrialSettings, attempt: int) -> TrialRecord:
        seen.append((plan.id, attempt))
        record = run_trial(plan, settings, attempt=attempt)
        return record.model_copy(update={"reward": 0.25})

    settings.attempt = twice
    record = executor.run_attempt(plan, settings, 3)
    assert seen == [("t-1", 3)]
    assert record.attempt == 3 and record.reward == 0.25


def test_an_agent_killing_its_sandbox_is_the_agents_failure_scored_zero(
    tmp_path: Path, make_task: Callable[..., Task]
) -> None:
    def dies(request: PhaseRequest, sandbox: FakeSandbox) -> PhaseResult:
        if request.role == "agent":
            raise SandboxDied("the sandbox stopped while the agent ran", "agent")
        return _grading(request, sandbox)

    record = run_trial(TrialPlan(id="t-2", task=make_task(), rollout=0), _settings(tmp_path, dies))
    assert record.status is TrialStatus.AGENT_ERROR
    assert record.reward == 0.0
    assert [(e.type, e.phase) for e in record.errors] == [("SandboxDied", "execute")]


@pytest.mark.parametrize("role", ["agent", "verifier"])
def test_a_space_a_root_agent_filled_is_its_failure_scored_zero_never_retried(
    tmp_path: Path, make_task: Callable[..., Task], role: str
) -> None:
    def full(request: PhaseRequest, sandbox: FakeSandbox) -> PhaseResult:
        if request.role == role:
            raise SpaceFilledByAgent("supervisor op put failed: [Errno 28] No space left")
        return _grading(request, sandbox)

    record = run_trial(TrialPlan(id="t-3", task=make_task(), rollout=0), _settings(tmp_path, full))
    assert record.status is TrialStatus.AGENT_ERROR and record.reward == 0.0
    phase = "execute" if role == "agent" else "grade"
    (error,) = record.errors
    assert (error.type, error.phase) == ("SpaceFilledByAgent", phase)
    extra = error.model_extra or {}
    assert extra.get("retryable") is False and extra.get("cause") == "agent", extra


def _config(tmp_path: Path) -> RunConfig:
    return resolve_config(options={"tasks": {"paths": ["t"]}}, cwd=tmp_path)
