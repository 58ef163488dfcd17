"""``python:module:Class`` agents: trusted code in the harness, actions in the sandbox.

Real local sandbox (root: the agent user is a dropped uid), real gateway with a faux model.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.workers import uid_base

from harness.config import AgentConfig, BudgetConfig
from harness.models.catalog import ModelSpec
from harness.models.selection import ModelChoice
from harness.plugins import build_agent
from harness.records import TrialStatus
from harness.runner.model_access import start_gateway
from harness.runner.plan import plan_trials
from harness.tasks import load_tasks
from harness.trial import TrialSettings, run_trial
from sandbox.credentials import CredentialStore
from sandbox.local.sandbox import IdentityPool, LocalSandbox, SupervisorPool

pytestmark = pytest.mark.root

AGENT_MODULE = '''
import json

SHELL = {"type": "function", "function": {"name": "shell", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}


class Solver:
    """Asks the model for shell commands and runs them in the sandbox."""

    name = "py-solver"

    def run(self, ctx):
        messages = [{"role": "user", "content": ctx.instruction}]
        for _ in range(5):
            answer = ctx.chat({"model": "x", "messages": messages, "tools": [SHELL]})
            message = answer["choices"][0]["message"]
            messages.append(message)
            calls = message.get("tool_calls") or []
            if not calls:
                return
            for call in calls:
                command = json.loads(call["function"]["arguments"])["command"]
                result = ctx.exec(command)
                messages.append({"role": "tool", "tool_call_id": call["id"],
                                 "content": result.stdout + result.stderr})
        raise RuntimeError("no answer within 5 turns")


class Sleeper:
    def run(self, ctx):
        ctx.exec("sleep 60")
        ctx.exec("echo never")


class Crasher:
    def run(self, ctx):
        raise ValueError("the agent gave up")
'''


@pytest.fixture
def agent_module(tmp_path: Path) -> Iterator[str]:
    name = f"py_agent_{os.getpid()}_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(AGENT_MODULE)
    sys.path.insert(0, str(tmp_path))
    yield name
    sys.path.remove(str(tmp_path))
    sys.modules.pop(name, None)


def _task(tmp_path: Path, timeout: float = 60) -> Path:
    task = tmp_path / "tasks" / "hello"
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text(
        f'[task]\nname = "py/hello"\n[agent]\ntimeout_sec = {timeout}\n'
    )
    (task / "instruction.md").write_text("Write hello.txt containing Hello, world!\n")
    (task / "tests" / "test.sh").write_text(
        '#!/bin/bash\ncd "$HARNESS_WORKSPACE"\n'
        'if [ "$(cat hello.txt)" = "Hello, world!" ]; then r=1; else r=0; fi\n'
        'echo $r > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
    )
    return task


def _run(tmp_path: Path, agent_name: str, script: dict[str, object] | None, timeout: float = 60):
    task = _task(tmp_path, timeout)
    (tasks,) = [load_tasks([task])]
    gateway = None
    if script is not None:
        path = tmp_path / "script.json"
        path.write_text(json.dumps(script))
        spec = ModelSpec("faux", "py", "py", "openai-chat", script=path)
        gateway = start_gateway(ModelChoice(spec, "--model"), CredentialStore(), BudgetConfig())
    pool, supervisors = (
        IdentityPool(uid_base(61300), uid_base(61300), max_slots=8),
        SupervisorPool(),
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    settings = TrialSettings(
        run_dir=run_dir,
        agent=build_agent(AgentConfig(name=agent_name)),
        make_sandbox=lambda spec: LocalSandbox(spec, identities=pool, supervisors=supervisors),
        model="faux/py" if gateway else None,
        gateway=gateway,
        protected_paths=(run_dir,),
    )
    try:
        (plan,) = plan_trials(tasks, rollouts=1)
        return run_trial(plan, settings), run_dir / "trials" / plan.id
    finally:
        supervisors.close()
        if gateway is not None:
            gateway.close()


def test_python_agent_drives_the_model_and_acts_as_the_agent_user(
    tmp_path: Path, agent_module: str
) -> None:
    script = {
        "responses": [
            {
                "tool_calls": [
                    {
                        "name": "shell",
                        "arguments": {
                            "command": "printf 'Hello, world!\\n' > hello.txt; id -u; echo $HOME"
                        },
                    }
                ]
            },
            {"text": "done"},
        ]
    }
    record, evidence = _run(tmp_path, f"python:{agent_module}:Solver", script)
    assert record.status is TrialStatus.COMPLETED, record.errors
    assert record.reward == 1.0
    assert record.agent.name == "py-solver"
    assert record.usage.calls == 2
    calls = [json.loads(line) for line in (evidence / "model_calls.jsonl").read_text().splitlines()]
    assert [c["via"] for c in calls] == ["in-process", "in-process"]
    tool_output = calls[1]["request"]["messages"][-1]["content"]
    uid = int(tool_output.split()[0])
    assert uid >= uid_base(61300)  # the command ran as the dropped agent user, not as root
    assert tool_output.split()[1] != os.environ.get("HOME")
    execs = [json.loads(line) for line in (evidence / "agent_exec.jsonl").read_text().splitlines()]
    assert len(execs) == 1 and execs[0]["exit_code"] == 0


def test_python_agent_timeout_stops_exec(tmp_path: Path, agent_module: str) -> None:
    record, evidence = _run(tmp_path, f"python:{agent_module}:Sleeper", None, timeout=2)
    assert record.status is TrialStatus.AGENT_TIMEOUT
    execs = [json.loads(line) for line in (evidence / "agent_exec.jsonl").read_text().splitlines()]
    assert len(execs) == 1 and execs[0]["timed_out"] is True  # "echo never" never ran
    assert record.timings["agent"] < 30


def test_python_agent_exception_is_an_agent_error(tmp_path: Path, agent_module: str) -> None:
    record, _ = _run(tmp_path, f"python:{agent_module}:Crasher", None)
    assert record.status is TrialStatus.AGENT_ERROR
    assert record.errors[0].message == "ValueError: the agent gave up"
    assert record.reward == 0.0


def test_bad_python_agent_specs_are_usage_errors(agent_module: str) -> None:
    from harness.errors import UsageError

    for spec, words in [
        ("python:nomodule_xyz:Foo", "cannot import"),
        (f"python:{agent_module}:Missing", "has no class Missing"),
        (f"python:{agent_module}", "write python:package.module:ClassName"),
        (f"python:{agent_module}:SHELL", "has no class SHELL"),
    ]:
        with pytest.raises(UsageError, match=words):
            build_agent(AgentConfig(name=spec))
