"""End-to-end: ``--agent opencode``, the real OpenCode fetched by the harness, in each backend.

The CLI (npm ``opencode-ai``) is a native executable per platform, fetched on the host into
the harness's cache and shown read-only to the sandbox. It calls the gateway's chat
completions API (its provider config names the gateway, with the trial token); the faux
script is written in its own tool protocol: its ``bash`` tool with ``command`` and
``description`` arguments, rendered by the gateway as chat ``tool_calls``. Judged from
outside: the record, the evidence, the ATIF export, every file of the run dir, and a host
listener the sandbox must not reach.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pytest
from conftest import read_run_dir, run_cli
from support.installed_agents import (
    RUNC_PARAMS,
    HostListener,
    assert_atif_tool_call,
    assert_did_nothing,
    assert_hello_transcript,
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

__all__ = ["listener"]  # the fixture, from tests/support/installed_agents.py

VERSION = "1.18.33"
CANARY_PREFIX = "sk-canary-"
MEMORY_MB = 2048
AGENT_TIMEOUT = 600


def shell(command: str) -> dict[str, Any]:
    """A faux response calling OpenCode's shell tool."""
    arguments = {"command": command, "description": "Runs a command"}
    return {"tool_calls": [{"name": "bash", "arguments": arguments}]}


def hello_tasks(tmp_path: Path, script: dict[str, Any]) -> Path:
    """hello-file for ``script``, with room for the CLI: memory (docs/agents.md) and time."""
    return task_set(
        tmp_path, script, "openai-chat", memory_mb=MEMORY_MB, agent_timeout_sec=AGENT_TIMEOUT
    )


def run(tmp_path: Path, backend: str, tasks: Path, canary: str) -> Path:
    return run_agent(tmp_path, backend, "opencode", tasks, canary)


@pytest.mark.parametrize("backend", RUNC_PARAMS)
def test_opencode_solves_the_task_through_the_gateway(
    backend: str, tmp_path: Path, listener: HostListener
) -> None:
    canary = CANARY_PREFIX + secrets.token_hex(20)
    script = {
        "responses": [
            shell("printf 'Hello, world!\\n' > hello.txt"),
            shell(probe_command(listener.port)),
            {"text": "Created hello.txt."},
        ]
    }
    run_dir = run(tmp_path, backend, hello_tasks(tmp_path, script), canary)
    record, evidence = solved_by(run_dir, "opencode", VERSION)
    agent = record["agent"]
    assert len(agent["install"]["key"]) == 64

    # Its JSON events are kept and converted: the transcript holds the tool calls.
    assert (evidence / "agent.log").read_text().startswith('{"type":"step_start"')
    kept = [p for p in (evidence / "agent-logs").rglob("*") if p.is_file() and p.stat().st_size]
    assert kept, "the CLI's own session files are in the evidence"
    assert_hello_transcript(evidence, "bash")

    assert_atif_tool_call(run_dir, evidence, "bash", "hello.txt")
    assert_told_once(record, evidence)

    # The model was reached only through the gateway's chat API, with the trial token; no
    # background call (a title) took a turn of the script.
    model_calls = [json.loads(line) for line in (evidence / "model_calls.jsonl").open()]
    assert [(c["method"], c["path"], c["status"]) for c in model_calls] == [
        ("POST", "/v1/chat/completions", 200)
    ] * 3
    probe = assert_probe(evidence, listener, Path(agent["install"]["path"]))
    assert any(line.startswith("OPENAI_BASE_URL=http://127.0.0.1:") for line in probe), probe
    # Its update check, models.dev fetch and sharing are off (its tools inherit its env).
    for switch in ("AUTOUPDATE", "MODELS_FETCH", "SHARE"):
        assert f"OPENCODE_DISABLE_{switch}=1" in probe, (switch, probe)
    assert files_holding(run_dir, canary.encode()) == []


@pytest.mark.parametrize("backend", RUNC_PARAMS)
def test_opencode_that_does_nothing_gets_zero(backend: str, tmp_path: Path) -> None:
    canary = CANARY_PREFIX + secrets.token_hex(20)
    script = {"responses": [{"text": "I will not do anything."}]}
    run_dir = run(tmp_path, backend, hello_tasks(tmp_path, script), canary)
    assert_did_nothing(run_dir, canary, "I will not do anything.")


def test_opencode_is_listed_with_its_version() -> None:
    listed = run_cli("agents", "list", timeout=120)
    assert listed.code == 0, listed
    assert listed_with_version(listed.stdout, "opencode", VERSION), listed.stdout


@pytest.mark.root
def test_a_failed_opencode_run_is_an_agent_error_with_its_own_message(tmp_path: Path) -> None:
    canary = CANARY_PREFIX + secrets.token_hex(20)
    script = {"responses": [{"error": {"status": 400, "message": "scripted refusal"}}]}
    run_dir = run(tmp_path, "local", hello_tasks(tmp_path, script), canary)
    result = read_run_dir(run_dir)
    [record] = result.records
    assert record["status"] == "agent_error" and record["reward"] == 0
    message = record["errors"][0]["message"]
    # The CLI's last error, from its own log, not a bare exit code.
    assert "agent exited with code" not in message
    assert "scripted refusal" in message or "No more faux responses queued" in message
    session = [json.loads(line) for line in (result.evidence(record) / "session.jsonl").open()]
    assert session[-1]["type"] == "end" and session[-1]["ok"] is False
    assert files_holding(run_dir, canary.encode()) == []
