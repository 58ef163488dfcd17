"""Registries through entry points; the agent seam's two kinds; building agents from [agent]."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.agents import AgentCommand, AgentContext, HarnessAgent, SandboxAgent
from harness.agents.builtin import BuiltinAgent
from harness.agents.python_agent import PythonAgent
from harness.config import AgentConfig, RunConfig, SandboxConfig
from harness.errors import AgentConfigError, PluginError
from harness.plugins import AGENTS, EXECUTORS, SANDBOXES, build_agent, open_backend
from harness.registry import plain_text
from harness.tasks import Task
from sandbox.backend import CloseReport, Sandbox, SandboxSpec
from sandbox.fake import FakeSandbox
from sandbox.local.plugin import LocalBackend
from sandbox.plugin import BackendOptions, SandboxBackend


def test_the_built_ins_are_registered_through_harness_own_entry_points() -> None:
    sandboxes = {p.name: p for p in SANDBOXES.plugins()}
    agents = {p.name: p for p in AGENTS.plugins()}
    assert {"local", "docker"} <= set(sandboxes)
    assert {"oracle", "nop", "command", "builtin"} <= set(agents)
    for plugin in [sandboxes["local"], sandboxes["docker"], agents["oracle"], agents["builtin"]]:
        assert plugin.distribution == "harness" and plugin.version
    assert sandboxes["local"].target == "sandbox.local.plugin:LocalBackend"
    assert agents["builtin"].target == "harness.agents.builtin:BuiltinAgent"
    assert SANDBOXES.get("local") is LocalBackend and AGENTS.get("builtin") is BuiltinAgent


def test_an_unknown_name_lists_what_is_installed() -> None:
    with pytest.raises(PluginError) as info:
        SANDBOXES.get("nosuch")
    assert "unknown sandbox backend 'nosuch'; installed: docker, local" in str(info.value)
    listed = (
        "aider, builtin, claude-code, cline, codex, command, gemini-cli, mini-swe-agent, nop, "
        "opencode, openhands-sdk, oracle, qwen-code, replay, terminus-2"
    )
    with pytest.raises(PluginError, match=f"unknown agent 'nosuch'.*{listed}"):
        build_agent(AgentConfig(name="nosuch"))


class _EchoAgent(SandboxAgent):
    """Echoes its greeting."""

    def __init__(self, *, greeting: str = "hi") -> None:
        self.greeting = greeting

    def command(self, task: Task, sandbox: Sandbox) -> AgentCommand:
        return AgentCommand(["echo", self.greeting])


class _FakeBackend(SandboxBackend):
    """Fake sandboxes in memory."""

    def make_sandbox(self, spec: SandboxSpec) -> Sandbox:
        return FakeSandbox(spec)

    def close(self) -> CloseReport:
        return CloseReport()


def test_in_process_registration_builds_by_name_and_passes_kwargs() -> None:
    AGENTS.register("echo", _EchoAgent)
    SANDBOXES.register("fake", _FakeBackend)
    try:
        agent = build_agent(AgentConfig(name="echo", kwargs={"greeting": "hello"}))
        assert isinstance(agent, _EchoAgent) and agent.greeting == "hello"
        assert agent.name == "echo" and agent.describe() == {"name": "echo"}
        listed = {p.name: p for p in AGENTS.plugins()}["echo"]
        assert listed.distribution is None and listed.target.endswith(":_EchoAgent")
        backend = open_backend(RunConfig(paths=["/t"], sandbox="fake", concurrency=3), "r1")
        assert isinstance(backend, _FakeBackend) and backend.name == "fake"
        assert backend.options == BackendOptions("r1", SandboxConfig(backend="fake"), 3)
        [info] = [i for i in AGENTS.describe() if i.plugin.name == "echo"]
        assert info.summary == "Echoes its greeting." and info.error is None
    finally:
        AGENTS.unregister("echo")
        SANDBOXES.unregister("fake")
    assert "echo" not in AGENTS.names()


def test_only_concrete_subclasses_register() -> None:
    with pytest.raises(PluginError, match="not a concrete subclass of harness.agents.kinds.Agent"):
        AGENTS.register("bad", object)  # type: ignore[arg-type]
    with pytest.raises(PluginError, match="not a concrete subclass"):
        AGENTS.register("abstract", SandboxAgent)
    with pytest.raises(PluginError, match="sandbox.plugin.SandboxBackend"):
        SANDBOXES.register("bad", _EchoAgent)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (AgentConfig(name="nop", kwargs={"max_turns": 3}), "--agent nop has no option max_turns"),
        (AgentConfig(name="oracle", cmd="x"), "--agent-cmd is only used with --agent command"),
        (AgentConfig(name="command"), "--agent command needs --agent-cmd"),
        (AgentConfig(name="command", cmd="x", kwargs={"a": 1}), "command has no option a"),
        (AgentConfig(name="builtin", kwargs={"max_turns": 0}), "max_turns must be a whole"),
        (AgentConfig(name="builtin", kwargs={"turns": 3}), "(its options: max_turns)"),
        (AgentConfig(name="python:os:Foo", kwargs={"a": 1}), "has no option a"),
    ],
)
def test_agent_options_are_checked_before_any_trial(config: AgentConfig, message: str) -> None:
    with pytest.raises(AgentConfigError) as info:
        build_agent(config)
    assert message in str(info.value)


def test_builtin_takes_max_turns_from_kwargs() -> None:
    agent = build_agent(AgentConfig(name="builtin", kwargs={"max_turns": 7}))
    assert isinstance(agent, BuiltinAgent) and agent.describe() == {
        "name": "builtin",
        "max_turns": 7,
    }


class _Runner:
    def __init__(self) -> None:
        self.ran: list[str] = []

    def run_in_sandbox(self, agent: SandboxAgent) -> None:
        self.ran.append(f"sandbox:{agent.name}")

    def run_in_harness(self, agent: HarnessAgent) -> None:
        self.ran.append(f"harness:{agent.name}")


class _Trusted(HarnessAgent):
    name = "trusted"

    def run(self, context: AgentContext) -> None:
        raise AssertionError("not run here")


def test_each_kind_is_run_its_own_way_and_only_a_sandbox_agent_gets_the_socket() -> None:
    runner = _Runner()
    _EchoAgent().run_by(runner)
    _Trusted().run_by(runner)
    assert runner.ran == ["sandbox:agent", "harness:trusted"]
    socket = Path("/run/harness/gateway/t/gw.sock")
    assert _EchoAgent().gateway_socket(socket) == socket
    assert _Trusted().gateway_socket(socket) is None
    assert PythonAgent.kind == "harness" and BuiltinAgent.kind == "sandbox"


def test_listings_show_docstrings_as_plain_text() -> None:
    # `harness agents list` (and the sandbox and executor lists) print the first docstring
    # line: a terminal shows reST markup as it is, so none may be left in it.
    summaries = [info.summary for r in (AGENTS, SANDBOXES, EXECUTORS) for info in r.describe()]
    assert summaries and all(summaries)
    assert [s for s in summaries if "``" in s or re.search(r":\w+:`", s)] == []
    assert plain_text("Runs ``solution/solve.sh``; see :class:`~harness.agents.Agent`.") == (
        "Runs solution/solve.sh; see Agent."
    )
    assert plain_text(":py:meth:`a.b` and `single`") == "a.b and `single`"
