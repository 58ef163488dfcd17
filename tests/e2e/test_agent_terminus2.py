"""End-to-end: Harbor's Terminus-2 on Debian's Python 3.13, in its tmux, in every backend.

``harness run TASK --agent terminus-2 --model faux/...`` with the real agent (PyPI
``harbor``) installed by the harness onto Debian 13's ``python3.13`` in its cache, with
Debian's tmux from that entry (nothing installed into the image). The faux script is
written in Terminus-2's own protocol: each answer is its JSON (``analysis``, ``plan``,
``commands`` of keystrokes, ``task_complete``), sent to its tmux session; it asks to
confirm completion once, so ``task_complete`` comes twice. Judged from outside: the
record, the evidence (Harbor's own ATIF trajectory, the transcript), the gateway's log,
every file of the run dir, and a host listener the sandbox must not reach.
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
    BACKEND_PARAMS,
    RUNC_PARAMS,
    HostListener,
    assert_atif_tool_call,
    assert_probe,
    assert_unknown_version_refused,
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

AGENT = "terminus-2"
VERSION = "0.26.0"
#: Terminus-2 imports litellm on a cold interpreter (never asserted on).
AGENT_TIMEOUT_SEC = 900

__all__ = ["listener", "musl_image"]  # the fixtures, from tests/support and test_agent_musl


def _answer(keystrokes: list[str], *, complete: bool = False) -> dict[str, Any]:
    """A faux response in Terminus-2's JSON format."""
    body = {
        "analysis": "faux analysis",
        "plan": "faux plan",
        "commands": [{"keystrokes": k, "duration": 0.5} for k in keystrokes],
        "task_complete": complete,
    }
    return {"text": json.dumps(body)}


def _solving_script(port: int) -> dict[str, Any]:
    return {
        "responses": [
            _answer(["printf 'Hello, world!\\n' > hello.txt\n"]),
            _answer([f"bash -c {shlex.quote(probe_command(port))}\n"]),
            _answer([], complete=True),
            _answer([], complete=True),  # its confirmation
        ]
    }


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_terminus2_solves_the_task_through_the_gateway(
    backend: str, tmp_path: Path, listener: HostListener
) -> None:
    canary = CANARY_PREFIX + secrets.token_hex(20)
    script = _solving_script(listener.port)
    tasks = task_set(tmp_path, script, "openai-chat", agent_timeout_sec=AGENT_TIMEOUT_SEC)
    run_dir = run_agent(tmp_path, backend, AGENT, tasks, canary)
    record, evidence = solved_by(run_dir, AGENT, VERSION)
    agent = record["agent"]
    entry = Path(agent["install"]["path"])

    # Its own trajectory: Harbor's ATIF, as it wrote it, with its tmux keystrokes.
    atif = json.loads((evidence / "agent-logs" / AGENT / "trajectory.json").read_text())
    assert atif["schema_version"].startswith("ATIF-") and atif["agent"]["name"] == "terminus-2"
    calls = [c for s in atif["steps"] for c in s.get("tool_calls") or []]
    assert calls[0]["function_name"] == "bash_command"
    assert "hello.txt" in calls[0]["arguments"]["keystrokes"]
    assert calls[-1]["function_name"] == "mark_task_complete"
    instruction = (EXAMPLES / "hello-file" / "instruction.md").read_text().strip()
    assert instruction in atif["steps"][0]["message"]  # its own prompt around the task

    transcript = [json.loads(line) for line in (evidence / "transcript.jsonl").open()]
    assert transcript[0]["type"] == "message" and transcript[0]["role"] == "user"
    tool_calls = [e for e in transcript if e["type"] == "tool_call"]
    assert tool_calls[0]["name"] == "bash_command"

    # The model was reached only through the gateway (chat completions), with the token.
    model_calls = [json.loads(line) for line in (evidence / "model_calls.jsonl").open()]
    assert {(c["method"], c["path"], c["status"]) for c in model_calls} == {
        ("POST", "/v1/chat/completions", 200)
    }
    assert len(model_calls) == 4
    assert record["usage"]["source"] == "gateway"
    probe = assert_probe(evidence, listener, entry)
    # Its commands ran in a pane of the entry's tmux (Debian 13's 3.5a; the image has no
    # tmux), which passes on none of the runtime's settings (not even its locale dir).
    assert "TERM_PROGRAM_VERSION=3.5a" in probe and "TERM_PROGRAM=tmux" in probe
    leaked = ("PYTHONHOME=", "LD_LIBRARY_PATH=", "LOCPATH=", f"PATH={INSTALL_MOUNT}")
    assert not [line for line in probe if line.startswith(leaked)]
    assert_atif_tool_call(run_dir, evidence, "bash_command", "hello.txt")
    assert files_holding(run_dir, canary.encode()) == []


def test_terminus2_is_listed_with_its_version() -> None:
    result = run_cli("agents", "list", timeout=120)
    assert result.code == 0, result
    assert listed_with_version(result.stdout, AGENT, VERSION), result.stdout


@pytest.mark.parametrize("backend", RUNC_PARAMS)
def test_terminus2_that_does_nothing_gets_zero(backend: str, tmp_path: Path) -> None:
    canary = CANARY_PREFIX + secrets.token_hex(20)
    script = {"responses": [_answer([], complete=True), _answer([], complete=True)]}
    tasks = task_set(tmp_path, script, "openai-chat", agent_timeout_sec=AGENT_TIMEOUT_SEC)
    run_dir = run_agent(tmp_path, backend, AGENT, tasks, canary)
    _record, evidence, transcript = zero_reward_run(run_dir)
    names = [e["name"] for e in transcript if e["type"] == "tool_call"]
    assert names == ["mark_task_complete", "mark_task_complete"]
    assert not (evidence / "workspace" / "hello.txt").exists()
    assert files_holding(run_dir, canary.encode()) == []


def test_a_terminus2_version_that_cannot_be_had_fails_before_any_trial(tmp_path: Path) -> None:
    tasks = task_set(tmp_path, {"responses": [{"text": "x"}]}, "openai-chat")
    assert_unknown_version_refused(tasks, tmp_path / "runs", AGENT, "harbor==0.0.0.999")


@pytest.mark.docker
def test_terminus2_runs_on_a_musl_image_with_no_python_and_no_tmux(
    tmp_path: Path, musl_image: str
) -> None:
    """The image has musl, busybox and a static bash: the entry brings Python, tmux, glibc."""
    script = {
        "responses": [
            _answer(["printf 'Hello, world!\\n' > hello.txt\n"]),
            _answer([], complete=True),
            _answer([], complete=True),
        ]
    }
    tasks = _task_set(tmp_path, musl_image, script, api="openai-chat", memory_mb=2048)
    record, evidence = _run_musl(tmp_path, tasks, AGENT, "OPENAI_API_KEY", libc=None)
    assert record["sandbox"]["image"] == musl_image
    atif = json.loads((evidence / "agent-logs" / AGENT / "trajectory.json").read_text())
    calls = [c for s in atif["steps"] for c in s.get("tool_calls") or []]
    assert calls[0]["function_name"] == "bash_command"
    assert "hello.txt" in calls[0]["arguments"]["keystrokes"]
