"""End-to-end: OpenHands (PyPI ``openhands-sdk``) on Debian's Python 3.13, in every backend.

``harness run TASK --agent openhands-sdk --model faux/...`` with the real agent (PyPI
``openhands-sdk`` and ``openhands-tools``) installed by the harness onto Debian 13's
``python3.13`` in its cache. The faux scripts are written in OpenHands' own tool protocol:
native tool calls over OpenAI chat completions (``terminal`` with a ``command``, the SDK's
``finish`` with a ``message``); its terminal is a pane of the entry's tmux running the
image's bash, in the sandbox itself (OpenHands' local workspace, no docker). Judged from
outside: the record, the evidence (OpenHands' own events, the transcript), the gateway's
log, the ATIF export, every file of the run dir, and a host listener the sandbox must not
reach.
"""

from __future__ import annotations

import json
import secrets
import shlex
from pathlib import Path
from typing import Any

import pytest
from conftest import read_run_dir, run_cli
from support.installed_agents import (
    BACKEND_PARAMS,
    RUNC_PARAMS,
    HostListener,
    assert_atif_tool_call,
    assert_probe,
    assert_told_once,
    files_holding,
    listed_with_version,
    listener,
    probe_command,
    run_agent,
    solved_by,
    task_set,
    zero_reward_run,
)
from test_agent_musl import _run_musl, _task_set, musl_image
from test_installed_agents import CANARY_PREFIX

from harness.agents.installed.base import INSTALL_MOUNT

AGENT = "openhands-sdk"
VERSION = "1.58.2"
#: OpenHands imports litellm on a cold interpreter (never asserted on).
AGENT_TIMEOUT_SEC = 900

__all__ = ["listener", "musl_image"]  # the fixtures, from tests/support and test_agent_musl


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A faux response calling one of OpenHands' tools."""
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def _events(evidence: Path) -> list[dict[str, Any]]:
    """OpenHands' own events, as the driver kept them (one JSON object a line)."""
    path = evidence / "agent-logs" / AGENT / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_openhands_sdk_solves_the_task_through_the_gateway(
    backend: str, tmp_path: Path, listener: HostListener
) -> None:
    canary = CANARY_PREFIX + secrets.token_hex(20)
    script = {
        "responses": [
            _call("terminal", {"command": "printf 'Hello, world!\\n' > hello.txt"}),
            _call("terminal", {"command": f"bash -c {shlex.quote(probe_command(listener.port))}"}),
            _call("finish", {"message": "hello.txt is written"}),
        ]
    }
    tasks = task_set(tmp_path, script, "openai-chat", agent_timeout_sec=AGENT_TIMEOUT_SEC)
    run_dir = run_agent(tmp_path, backend, AGENT, tasks, canary)
    record, evidence = solved_by(run_dir, AGENT, VERSION)
    agent = record["agent"]
    entry = Path(agent["install"]["path"])

    # Its own events: the terminal actions it ran, their observations, its final status.
    events = _events(evidence)
    actions = [e for e in events if e.get("kind") == "ActionEvent"]
    assert [a["tool_name"] for a in actions] == ["terminal", "terminal", "finish"]
    assert actions[0]["action"]["command"] == "printf 'Hello, world!\\n' > hello.txt"
    observations = [e for e in events if e.get("kind") == "ObservationEvent"]
    assert observations[0]["observation"]["exit_code"] == 0
    assert events[-1] == {"kind": "HarnessDriverStatus", "execution_status": "finished"}

    transcript = [json.loads(line) for line in (evidence / "transcript.jsonl").open()]
    assert transcript[0]["type"] == "message" and transcript[0]["role"] == "user"
    assert [e["name"] for e in transcript if e["type"] == "tool_call"] == [
        "terminal",
        "terminal",
        "finish",
    ]

    # The model was reached only through the gateway (chat completions), with the token.
    model_calls = [json.loads(line) for line in (evidence / "model_calls.jsonl").open()]
    assert {(c["method"], c["path"], c["status"]) for c in model_calls} == {
        ("POST", "/v1/chat/completions", 200)
    }
    assert len(model_calls) == 3
    assert_told_once(record, evidence)
    probe = assert_probe(evidence, listener, entry)
    # Its commands ran in a pane of the entry's tmux (Debian 13's 3.5a; the image has no
    # tmux), which passes on none of the runtime's settings, nor its PATH.
    assert "TERM_PROGRAM_VERSION=3.5a" in probe and "TERM_PROGRAM=tmux" in probe
    leaked = ("PYTHONHOME=", "LD_LIBRARY_PATH=", "LOCPATH=", f"PATH={INSTALL_MOUNT}")
    assert not [line for line in probe if line.startswith(leaked)]
    assert not [line for line in probe if line.startswith("PATH=") and INSTALL_MOUNT in line]
    assert_atif_tool_call(run_dir, evidence, "terminal", "hello.txt")
    assert files_holding(run_dir, canary.encode()) == []


def test_openhands_sdk_is_listed_with_its_version() -> None:
    result = run_cli("agents", "list", timeout=120)
    assert result.code == 0, result
    assert listed_with_version(result.stdout, AGENT, VERSION), result.stdout


@pytest.mark.parametrize("backend", RUNC_PARAMS)
def test_openhands_sdk_that_does_nothing_gets_zero(backend: str, tmp_path: Path) -> None:
    canary = CANARY_PREFIX + secrets.token_hex(20)
    script = {"responses": [{"text": "I will not do it."}]}
    tasks = task_set(tmp_path, script, "openai-chat", agent_timeout_sec=AGENT_TIMEOUT_SEC)
    run_dir = run_agent(tmp_path, backend, AGENT, tasks, canary)
    _record, evidence, transcript = zero_reward_run(run_dir)
    assert [e for e in transcript if e["type"] == "tool_call"] == []
    said = [e["content"] for e in transcript if e["type"] == "message" and e["role"] == "assistant"]
    assert said == ["I will not do it."]
    assert not (evidence / "workspace" / "hello.txt").exists()
    assert files_holding(run_dir, canary.encode()) == []


@pytest.mark.root
def test_a_provider_error_ends_the_trial_with_openhands_own_message(tmp_path: Path) -> None:
    message = "faux says no: bad request"
    script = {"responses": [{"error": {"status": 400, "message": message}}] * 3}
    tasks = task_set(tmp_path, script, "openai-chat", agent_timeout_sec=AGENT_TIMEOUT_SEC)
    canary = CANARY_PREFIX + secrets.token_hex(20)
    run_dir = run_agent(tmp_path, "local", AGENT, tasks, canary)
    [record] = read_run_dir(run_dir).records
    assert record["status"] == "agent_error" and record["reward"] == 0
    # Its ConversationErrorEvent's code and detail (the provider's message) are the error.
    [error] = record["errors"]
    assert error["type"] == "AgentRunError" and error["exit_code"] == 1, error
    assert "LLMBadRequestError" in error["last_error"] and message in error["last_error"]
    evidence = read_run_dir(run_dir).evidence(record)
    assert _events(evidence)[-1] == {"kind": "HarnessDriverStatus", "execution_status": "error"}


@pytest.mark.docker
def test_openhands_sdk_runs_on_a_musl_image_with_no_python_and_no_tmux(
    tmp_path: Path, musl_image: str
) -> None:
    """The image has musl, busybox and a static bash: the entry brings Python, tmux, glibc."""
    script = {
        "responses": [
            _call("terminal", {"command": "printf 'Hello, world!\\n' > hello.txt"}),
            _call("finish", {"message": "done"}),
        ]
    }
    tasks = _task_set(tmp_path, musl_image, script, api="openai-chat", memory_mb=2048)
    record, evidence = _run_musl(tmp_path, tasks, AGENT, "OPENAI_API_KEY", libc=None)
    assert record["sandbox"]["image"] == musl_image
    actions = [e for e in _events(evidence) if e.get("kind") == "ActionEvent"]
    assert [a["tool_name"] for a in actions] == ["terminal", "finish"]
