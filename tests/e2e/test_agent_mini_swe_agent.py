"""End-to-end: mini-swe-agent, installed by the harness from PyPI, in every sandbox backend.

``harness run TASK --agent mini-swe-agent --model faux/...`` with the real CLI (PyPI
``mini-swe-agent``) on the harness's own relocated Python, in the cache
(``$HARNESS_AGENT_CACHE``, else the user's cache dir) shown read-only to the sandbox. The
faux scripts are written in mini-swe-agent's protocol: its model calls the ``bash`` tool
(``{"command": ...}``) through OpenAI chat completions, and ends the run by running
``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` alone. Judged from outside: the record, the
evidence, the ATIF export, every file of the run dir, and a host listener the sandbox must
not reach. One case runs it on a task image with no Python at all.
"""

from __future__ import annotations

import json
import secrets
import shlex
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, run_cli
from support.docker import docker_client, require_image
from support.installed_agents import (
    BACKEND_PARAMS,
    RUNC_PARAMS,
    HostListener,
    assert_atif_tool_call,
    assert_did_nothing,
    assert_probe,
    assert_told_once,
    assert_unknown_version_refused,
    files_holding,
    listed_with_version,
    listener,
    probe_command,
    run_agent,
    solved_by,
    task_set,
)
from test_installed_agents import CANARY_PREFIX

AGENT = "mini-swe-agent"
VERSION = "2.4.6"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
NO_PYTHON_IMAGE = "harness-test/no-python:bookworm"

#: The agent's own timeout in these tests: a Python CLI that imports litellm starts in
#: seconds on an idle host, in minutes on a loaded CI machine (never asserted on).
AGENT_TIMEOUT_SEC = 900

__all__ = ["listener"]  # the fixture, from tests/support/installed_agents.py


def _task_set(tmp_path: Path, script: dict[str, Any], api: str) -> Path:
    """The CLI tests' hello-file copy, with room for the interpreter's start."""
    return task_set(tmp_path, script, api, agent_timeout_sec=AGENT_TIMEOUT_SEC)


def _bash(command: str) -> dict[str, Any]:
    """A faux response calling mini-swe-agent's ``bash`` tool."""
    return {"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}


def _solving_script(port: int) -> dict[str, Any]:
    # mini-swe-agent runs each action with /bin/sh; the probe needs bash's /dev/tcp.
    return {
        "responses": [
            _bash("printf 'Hello, world!\\n' > hello.txt"),
            _bash(f"bash -c {shlex.quote(probe_command(port))}"),
            _bash(SUBMIT),
        ]
    }


def _no_python_image() -> str:
    """harness/base:bookworm with every python3 removed (built here, from local layers)."""
    client = docker_client()
    require_image(client)
    try:
        client.images.get(NO_PYTHON_IMAGE)
    except Exception:  # docker's NotFound; build it
        dockerfile = (
            "FROM harness/base:bookworm\n"
            "RUN rm -rf /usr/bin/python3* /usr/lib/python3* /usr/local/lib/python3* "
            "&& ! command -v python3\n"
        )
        import io

        client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=NO_PYTHON_IMAGE, rm=True)
    return NO_PYTHON_IMAGE


#: The hello-file check without python3: the file holds the text, one newline allowed.
CHECK_WITHOUT_PYTHON = """#!/bin/bash
VD=${HARNESS_VERIFIER_DIR:-/logs/verifier}
WS=${HARNESS_WORKSPACE:-$PWD}
mkdir -p "$VD"
if [ -f "$WS/hello.txt" ] && [ ! -L "$WS/hello.txt" ] && \\
   [ "$(cat "$WS/hello.txt")" = "$EXPECTED_TEXT" ]; then echo 1 > "$VD/reward.txt"
else echo 0 > "$VD/reward.txt"; fi
"""


def _on_image(tasks: Path, image: str) -> None:
    """Make the task's environment that image, and its check one that needs no python."""
    task = tasks / "hello-file"
    (task / "environment" / "Dockerfile").write_text(f"FROM {image}\n")
    (task / "tests" / "test.sh").write_text(CHECK_WITHOUT_PYTHON)


def _check_solved(run_dir: Path, listener: HostListener, canary: str) -> dict[str, Any]:
    record, evidence = solved_by(run_dir, AGENT, VERSION)
    agent = record["agent"]
    assert len(agent["install"]["key"]) == 64 and len(agent["install"]["tree"]) == 64

    # Its own trajectory is kept, and converted: the transcript holds the bash calls.
    trajectory = json.loads((evidence / "agent-logs" / AGENT / "trajectory.json").read_text())
    assert trajectory["info"]["exit_status"] == "Submitted"
    transcript = [json.loads(line) for line in (evidence / "transcript.jsonl").open()]
    first = transcript[0]
    assert first["type"] == "message" and first["role"] == "user"
    assert first["content"] == (EXAMPLES / "hello-file" / "instruction.md").read_text()
    calls = [e for e in transcript if e["type"] == "tool_call"]
    assert [c["name"] for c in calls] == ["bash"] * 3
    assert "hello.txt" in calls[0]["arguments"]["command"]
    assert calls[2]["arguments"]["command"] == SUBMIT
    assert [e["type"] for e in transcript].count("model_call") == 3
    results = [e for e in transcript if e["type"] == "tool_result"]
    assert len(results) == 3 and "error" not in results[0]

    assert_atif_tool_call(run_dir, evidence, "bash", "hello.txt")
    assert_told_once(record, evidence)

    # The model was reached only through the gateway (chat completions), with the token.
    model_calls = [json.loads(line) for line in (evidence / "model_calls.jsonl").open()]
    assert {(c["method"], c["path"], c["status"]) for c in model_calls} == {
        ("POST", "/v1/chat/completions", 200)
    }
    probe = "\n".join(assert_probe(evidence, listener, Path(agent["install"]["path"])))
    assert "OPENAI_API_KEY=hgw-" in probe and "LITELLM_LOCAL_MODEL_COST_MAP=True" in probe
    # The harness's interpreter leaks nothing into the agent's commands.
    assert "PYTHONHOME=" not in probe and "LD_LIBRARY_PATH=" not in probe
    assert files_holding(run_dir, canary.encode()) == []
    return record


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_mini_swe_agent_solves_the_task_through_the_gateway(
    backend: str, tmp_path: Path, listener: HostListener
) -> None:
    canary = CANARY_PREFIX + secrets.token_hex(20)
    tasks = _task_set(tmp_path, _solving_script(listener.port), "openai-chat")
    _check_solved(run_agent(tmp_path, backend, AGENT, tasks, canary), listener, canary)


@pytest.mark.docker
def test_mini_swe_agent_runs_on_an_image_with_no_python(
    tmp_path: Path, listener: HostListener
) -> None:
    canary = CANARY_PREFIX + secrets.token_hex(20)
    tasks = _task_set(tmp_path, _solving_script(listener.port), "openai-chat")
    _on_image(tasks, _no_python_image())
    _check_solved(run_agent(tmp_path, "docker", AGENT, tasks, canary), listener, canary)


@pytest.mark.parametrize("backend", RUNC_PARAMS)
def test_mini_swe_agent_that_does_nothing_gets_zero(backend: str, tmp_path: Path) -> None:
    canary = CANARY_PREFIX + secrets.token_hex(20)
    # No tool call is a format error to mini-swe-agent; three in a row end its run.
    nothing = {"text": "I will not do anything."}
    tasks = _task_set(tmp_path, {"responses": [nothing] * 3}, "openai-chat")
    run_dir = run_agent(tmp_path, backend, AGENT, tasks, canary)
    assert_did_nothing(run_dir, canary, "I will not do anything.")


def test_mini_swe_agent_is_listed_with_its_version() -> None:
    result = run_cli("agents", "list", timeout=120)
    assert result.code == 0, result
    assert listed_with_version(result.stdout, AGENT, VERSION), result.stdout


def test_a_mini_swe_agent_version_that_cannot_be_had_fails_before_any_trial(
    tmp_path: Path,
) -> None:
    tasks = _task_set(tmp_path, {"responses": [{"text": "x"}]}, "openai-chat")
    assert_unknown_version_refused(tasks, tmp_path / "runs", AGENT, "mini-swe-agent==0.0.0.999")
