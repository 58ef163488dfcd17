"""End-to-end: aider, installed by the harness from PyPI, in every sandbox backend.

``harness run TASK --agent aider --model faux/...`` with the real CLI (PyPI ``aider-chat``)
on the harness's own relocated Python, in the cache shown read-only to the sandbox. The
faux scripts are written in aider's protocol: its model answers in aider's ``whole`` edit
format (the file's path on a line, then its whole new content in a fence) through OpenAI
chat completions, and aider applies the edit. Judged from outside: the record, the
evidence, the ATIF export, every file of the run dir, and a host listener the sandbox
must not reach.

aider never runs a command its model suggests (it asks explicitly, and is told no), so the
probe from inside the trial is its own test command: the task's ``[environment].env`` sets
``AIDER_AUTO_TEST`` and ``AIDER_TEST_CMD`` (aider's variables outrank its config file), and
aider runs the probe after it applied the edit, as the agent, from the workspace.
"""

from __future__ import annotations

import json
import secrets
import shlex
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, run_cli
from support.installed_agents import (
    RUNC_PARAMS,
    HostListener,
    assert_atif_tool_call,
    assert_did_nothing,
    assert_probe,
    assert_told_once,
    files_holding,
    listed_with_version,
    listener,
    probe_command,
    run_agent,
    solved_by,
    task_set,
)
from test_installed_agents import CANARY_PREFIX

AGENT = "aider"
VERSION = "0.86.2"

#: The agent's own timeout in these tests: a Python CLI that imports litellm starts in
#: seconds on an idle host, in minutes on a loaded CI machine (never asserted on).
AGENT_TIMEOUT_SEC = 900

__all__ = ["listener"]  # the fixture, from tests/support/installed_agents.py


def _task_set(
    tmp_path: Path,
    script: dict[str, Any],
    api: str,
    *,
    env: dict[str, str] | None = None,
    instruction: str | None = None,
) -> Path:
    """The CLI tests' hello-file copy, with room for the interpreter's start."""
    return task_set(
        tmp_path,
        script,
        api,
        agent_timeout_sec=AGENT_TIMEOUT_SEC,
        env=env,
        instruction=instruction,
    )


def _probe_after_edits(port: int) -> dict[str, str]:
    """aider's variables that have it run the probe (in bash: /dev/tcp) after its edits."""
    return {
        "AIDER_AUTO_TEST": "true",
        "AIDER_TEST_CMD": f"bash -c {shlex.quote(probe_command(port))}",
    }


def _whole(path: str, content: str) -> dict[str, Any]:
    """A faux reply in aider's ``whole`` edit format: the path, then the file in a fence."""
    return {"text": f"I will create {path}.\n\n{path}\n```\n{content}```\n"}


@pytest.mark.parametrize("backend", RUNC_PARAMS)
def test_aider_solves_the_task_through_the_gateway(
    backend: str, tmp_path: Path, listener: HostListener
) -> None:
    canary = CANARY_PREFIX + secrets.token_hex(20)
    script = {"responses": [_whole("hello.txt", "Hello, world!\n")]}
    tasks = _task_set(tmp_path, script, "openai-chat", env=_probe_after_edits(listener.port))
    run_dir = run_agent(tmp_path, backend, AGENT, tasks, canary)
    record, evidence = solved_by(run_dir, AGENT, VERSION)
    agent = record["agent"]
    assert len(agent["install"]["key"]) == 64 and len(agent["install"]["tree"]) == 64

    # Its own chat and LLM histories are kept, and converted: the transcript holds the edit.
    history = (evidence / "agent-logs" / AGENT / "chat-history.md").read_text()
    assert "Applied edit to hello.txt" in history
    assert (evidence / "agent-logs" / AGENT / "llm-history.txt").stat().st_size
    transcript = [json.loads(line) for line in (evidence / "transcript.jsonl").open()]
    first = transcript[0]
    assert first["type"] == "message" and first["role"] == "user"
    assert first["content"] == (EXAMPLES / "hello-file" / "instruction.md").read_text()
    replies = [e for e in transcript if e["type"] == "message" and e["role"] == "assistant"]
    # The model's reply, and nothing of aider's start-up output (its echoed command line).
    assert [r["content"] for r in replies if r["content"]] == [
        "I will create hello.txt.\n\nhello.txt\n```\nHello, world!\n```"
    ]
    calls = [e for e in transcript if e["type"] == "tool_call"]
    assert [c["name"] for c in calls] == ["edit"]
    assert calls[0]["arguments"] == {"path": "hello.txt", "content": "Hello, world!\n"}
    assert [e["type"] for e in transcript].count("model_call") == 1
    results = [e for e in transcript if e["type"] == "tool_result"]
    assert len(results) == 1 and "error" not in results[0]

    assert_atif_tool_call(run_dir, evidence, "edit", "hello.txt")
    assert_told_once(record, evidence)

    # The model was reached only through the gateway (chat completions): aider's own
    # traffic (analytics, update and model-metadata checks) is off or had no network.
    model_calls = [json.loads(line) for line in (evidence / "model_calls.jsonl").open()]
    assert {(c["method"], c["path"], c["status"]) for c in model_calls} == {
        ("POST", "/v1/chat/completions", 200)
    }
    # From inside, as the agent: the gateway only (the probe's command is in the
    # environment it dumps, as AIDER_TEST_CMD: judged on whole lines).
    assert_probe(evidence, listener, Path(agent["install"]["path"]))
    assert files_holding(run_dir, canary.encode()) == []


@pytest.mark.parametrize("backend", RUNC_PARAMS)
def test_aider_that_does_nothing_gets_zero(backend: str, tmp_path: Path) -> None:
    canary = CANARY_PREFIX + secrets.token_hex(20)
    # An instruction that starts with "!" is aider's shell command, one with "/" its
    # in-chat command: it must reach the model as the prompt (told once), and nothing run.
    instruction = "!touch hello.txt\n"
    script = {"responses": [{"text": "I will not do anything."}]}
    tasks = _task_set(tmp_path, script, "openai-chat", instruction=instruction)
    run_dir = run_agent(tmp_path, backend, AGENT, tasks, canary)
    record, evidence = assert_did_nothing(run_dir, canary, "I will not do anything.")
    assert_told_once(record, evidence)


def test_aider_is_listed_with_its_version() -> None:
    result = run_cli("agents", "list", timeout=120)
    assert result.code == 0, result
    assert listed_with_version(result.stdout, AGENT, VERSION), result.stdout
