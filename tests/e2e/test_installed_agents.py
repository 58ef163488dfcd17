"""End-to-end: installed agent CLIs, fetched by the harness, run in every sandbox backend.

``harness run TASK --agent claude-code|codex|qwen-code|cline --model faux/...`` with the
real CLI, installed by the harness from npm into its cache (``$HARNESS_AGENT_CACHE``, else
the user's cache dir) and shown read-only to the sandbox. The faux scripts are written in
each CLI's own tool protocol (Claude Code's ``Bash`` tool, Codex's ``exec_command``, Qwen
Code's ``run_shell_command``, Cline's ``run_commands``), rendered by the gateway's faux
provider in the API the CLI speaks (Anthropic messages, OpenAI Responses, OpenAI chat). Judged
from outside: the record, the evidence, the ATIF export, every file of the run dir, and a
host listener the sandbox must not reach.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, REPO, read_run_dir, run_cli
from support.docker import prerequisite_missing
from support.installed_agents import (
    BACKEND_PARAMS,
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

__all__ = ["listener"]  # the fixture

CANARY_PREFIX = "sk-ant-canary-"
#: The agent's cap, never asserted on: a CLI's first start under gVisor on a loaded CI
#: machine once took over the example's 60 s.
AGENT_TIMEOUT_SEC = 600


@dataclass(frozen=True)
class Cli:
    """An installed agent as these tests drive it: its shell tool, its API, what it shows."""

    name: str
    version: str
    api: str
    path: str
    #: (tool name, argument name) of the CLI's shell tool, as its model calls it.
    shell: tuple[str, str]
    #: The tool name the converted transcript gives a shell call.
    logged_tool: str
    #: Lines of the environment the CLI's shell tool must show.
    env_shows: tuple[str, ...]
    #: The task's memory instead of the example's 512 MB (a CLI on Node needs more).
    memory_mb: int | None = None
    #: Whether the shell tool's argument is a list of commands (Cline's), not one.
    listed: bool = False
    #: The CLI's own session files, under ``agent-logs/``.
    session_files: str = "*.jsonl"

    def shell_call(self, command: str) -> dict[str, Any]:
        """A faux response calling the shell tool with ``command``."""
        tool, arg = self.shell
        value: str | list[str] = [command] if self.listed else command
        return {"tool_calls": [{"name": tool, "arguments": {arg: value}}]}


CLIS = {
    "claude-code": Cli(
        "claude-code",
        "2.1.332",
        "anthropic-messages",
        "/v1/messages",
        ("Bash", "command"),
        "Bash",
        ("ANTHROPIC_API_KEY=hgw-", "DISABLE_TELEMETRY=1", "DISABLE_AUTOUPDATER=1"),
    ),
    # Codex's shell tool hides variables named like keys from commands: the base URL shows.
    "codex": Cli(
        "codex",
        "0.171.0",
        "openai-responses",
        "/v1/responses",
        ("exec_command", "cmd"),
        "shell",
        ("OPENAI_BASE_URL=http://127.0.0.1:",),
    ),
    # Qwen Code: a JavaScript bundle on Node from PyPI, over chat completions.
    "qwen-code": Cli(
        "qwen-code",
        "0.24.4",
        "openai-chat",
        "/v1/chat/completions",
        ("run_shell_command", "command"),
        "run_shell_command",
        ("OPENAI_BASE_URL=http://127.0.0.1:", "QWEN_USAGE_STATISTICS_ENABLED=false"),
        memory_mb=2048,
    ),
    # Cline: a native executable (Bun), over chat completions; its shell tool runs a list.
    "cline": Cli(
        "cline",
        "3.0.65",
        "openai-chat",
        "/v1/chat/completions",
        ("run_commands", "commands"),
        "run_commands",
        ("OPENAI_BASE_URL=http://127.0.0.1:", "CLINE_SESSION_BACKEND_MODE=local"),
        memory_mb=2048,
        listed=True,
        session_files="*.messages.json",
    ),
}
CLI_PARAMS = [pytest.param(cli, id=cli) for cli in CLIS]


#: Debian 12's gVisor (runsc 20221219) now and then never wakes Codex's child-reaper
#: thread for its finished shell command (a zombie child, Codex asleep: docs/agents.md,
#: "Known issues"), so Codex solves under runc here; its runsc trial is the do-nothing one.
SOLVE_PARAMS = [
    pytest.param(backend, cli, marks=bp.marks, id=f"{bp.id}-{cli}")
    for bp in BACKEND_PARAMS
    for cli in CLIS
    for backend in bp.values
    if not (backend == "runsc" and cli == "codex")
]


@pytest.mark.parametrize(("backend", "cli"), SOLVE_PARAMS)
def test_cli_solves_the_task_through_the_gateway(
    backend: str, cli: str, tmp_path: Path, listener: HostListener
) -> None:
    spec = CLIS[cli]
    canary = CANARY_PREFIX + secrets.token_hex(20)
    write = "printf 'Hello, world!\\n' > hello.txt"
    script = {
        "responses": [
            spec.shell_call(write),
            spec.shell_call(probe_command(listener.port)),
            {"text": "Created hello.txt."},
        ]
    }
    tasks = task_set(
        tmp_path, script, spec.api, memory_mb=spec.memory_mb, agent_timeout_sec=AGENT_TIMEOUT_SEC
    )
    run_dir = run_agent(tmp_path, backend, cli, tasks, canary)
    record, evidence = solved_by(run_dir, cli, spec.version)
    agent = record["agent"]
    assert len(agent["install"]["key"]) == 64 and len(agent["install"]["tree"]) == 64

    # The CLI's own logs are kept, and converted: the transcript holds the tool call.
    first_event = json.loads((evidence / "agent.log").read_text().splitlines()[0])
    assert "type" in first_event, first_event
    kept = [p for p in (evidence / "agent-logs").rglob(spec.session_files) if p.stat().st_size]
    assert kept, "the CLI's own session file is in the evidence"
    transcript = [json.loads(line) for line in (evidence / "transcript.jsonl").open()]
    first = transcript[0]
    assert first["type"] == "message" and first["role"] == "user"
    assert first["content"] == (EXAMPLES / "hello-file" / "instruction.md").read_text()
    calls = [e for e in transcript if e["type"] == "tool_call"]
    assert [c["name"] for c in calls] == [spec.logged_tool] * 2
    assert "hello.txt" in json.dumps(calls[0]["arguments"])
    assert [e["type"] for e in transcript].count("model_call") == 3
    results = [e for e in transcript if e["type"] == "tool_result"]
    assert len(results) == 2 and "error" not in results[0]

    assert_atif_tool_call(run_dir, evidence, spec.logged_tool, "hello.txt")
    assert_told_once(record, evidence)

    # The model was reached only through the gateway, with the trial token.
    model_calls = [json.loads(line) for line in (evidence / "model_calls.jsonl").open()]
    assert {(c["method"], c["path"], c["status"]) for c in model_calls} == {
        ("POST", spec.path, 200)
    }
    # The record's usage is the gateway's count of those calls, whatever the CLI logged.
    usage = record["usage"]
    assert usage["output_tokens"] == sum(c["usage"]["output_tokens"] for c in model_calls)
    if cli == "claude-code":
        # Its stream-json logs each message's usage as its stream began (no output tokens
        # yet): the record keeps that figure beside the gateway's, which wins.
        assert usage["agent_log"]["output_tokens"] == 0 < usage["output_tokens"], usage
    probe = "\n".join(assert_probe(evidence, listener, Path(agent["install"]["path"])))
    for shown in spec.env_shows:
        assert shown in probe, (shown, probe)
    # No file of the run holds the real key (the canary the harness was given).
    assert files_holding(run_dir, canary.encode()) == []


@pytest.mark.parametrize("cli", CLI_PARAMS)
@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_cli_that_does_nothing_gets_zero(backend: str, cli: str, tmp_path: Path) -> None:
    canary = CANARY_PREFIX + secrets.token_hex(20)
    script = {"responses": [{"text": "I will not do anything."}]}
    spec = CLIS[cli]
    tasks = task_set(
        tmp_path, script, spec.api, memory_mb=spec.memory_mb, agent_timeout_sec=AGENT_TIMEOUT_SEC
    )
    run_dir = run_agent(tmp_path, backend, cli, tasks, canary)
    assert_did_nothing(run_dir, canary, "I will not do anything.")


def test_a_cli_version_that_cannot_be_had_fails_before_any_trial(tmp_path: Path) -> None:
    tasks = task_set(tmp_path, {"responses": [{"text": "x"}]}, "anthropic-messages")
    unknown = "0.0.0-no-such-version"
    assert_unknown_version_refused(tasks, tmp_path / "runs", "claude-code", unknown, unknown)


@pytest.mark.parametrize(
    ("cli", "api"), [("claude-code", "anthropic-messages"), ("aider", "openai-chat")]
)
def test_a_cli_whose_registry_is_unreachable_fails_before_any_trial(
    cli: str, api: str, tmp_path: Path
) -> None:
    """Offline: an empty cache, and npm's and pip's registries a closed port on loopback."""
    with socket.socket() as sock:  # a port nothing listens on: every connection refused
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    tasks = task_set(tmp_path, {"responses": [{"text": "x"}]}, api)
    out = tmp_path / "runs"
    offline = {
        "HARNESS_AGENT_CACHE": str(tmp_path / "empty-cache"),
        "npm_config_registry": f"{dead}/",
        "npm_config_cache": str(tmp_path / "npm-cache"),  # nothing cached to fall back on
        "npm_config_fetch_retries": "0",
        "PIP_INDEX_URL": f"{dead}/simple",
        "PIP_NO_CACHE_DIR": "1",
        "PIP_RETRIES": "0",
        "HARNESS_PROVIDER": "",
        "HARNESS_MODEL": "",
    }
    result = run_cli(
        "run", tasks, "--agent", cli, "--model", "faux/cli-script", "-o", out,
        env=offline, timeout=600,
    )  # fmt: skip
    assert result.code == 2, result
    errors = result.error_lines()
    assert len([line for line in errors if f"cannot install agent {cli}" in line]) == 1, errors
    assert "registry is reachable" in result.stderr, result.stderr
    assert not out.exists() or not list(out.glob("*/trials.jsonl"))


#: The uid and gid a run that is not root is made with (``nobody``, ``nogroup``).
NOBODY = 65534


@pytest.mark.root  # to become nobody
def test_a_local_run_that_is_not_root_is_refused_before_the_cli_is_fetched() -> None:
    """The README's ``harness run tasks/ --agent claude-code`` on the local sandbox, not root.

    Its sandbox shows the CLI only in a root view, so every trial would fail as it starts:
    the run is refused once, before anything is fetched or written, saying what to do.
    """
    # Not tmp_path: its parents are private to root, and nobody must write here.
    home = Path(tempfile.mkdtemp(prefix="harness-not-root-"))
    try:
        os.chown(home, NOBODY, NOBODY)
        become = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "HARNESS_AGENT_CACHE": str(home / "cache"),
            "HARNESS_PROVIDER": "",
            "HARNESS_MODEL": "",
            "COLUMNS": "200",
            "NO_COLOR": "1",
        }

        def harness(*args: str) -> subprocess.CompletedProcess[str]:
            argv = [*become, sys.executable, "-m", "harness", *args]
            return subprocess.run(
                argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300
            )

        if harness("--version").returncode != 0:
            prerequisite_missing(f"uid {NOBODY} cannot run this checkout's harness")
        tasks = task_set(home, {"responses": [{"text": "x"}]}, "anthropic-messages")
        out = home / "runs"
        result = harness(
            "run", str(tasks), "--agent", "claude-code", "--model", "faux/cli-script",
            "--sandbox", "local", "-o", str(out),
        )  # fmt: skip
        assert result.returncode == 2, result
        errors = [line for line in result.stderr.splitlines() if line.strip()]
        refused = [line for line in errors if "cannot run in the local sandbox" in line]
        assert len(refused) == 1, errors
        assert "agent claude-code" in refused[0] and f"uid {NOBODY}" in refused[0], refused
        assert "as root" in refused[0] and "--sandbox docker" in refused[0], refused
        assert not out.exists()
        assert not (home / "cache").exists()  # refused before the CLI was fetched
    finally:
        shutil.rmtree(home)


def test_the_installed_agents_are_listed_with_their_versions() -> None:
    result = run_cli("agents", "list", timeout=120)
    assert result.code == 0, result
    for name, spec in CLIS.items():
        assert listed_with_version(result.stdout, name, spec.version), result.stdout


@pytest.mark.root
@pytest.mark.parametrize("cli", CLI_PARAMS)
def test_a_failed_cli_run_is_an_agent_error_with_the_clis_own_message(
    cli: str, tmp_path: Path
) -> None:
    canary = CANARY_PREFIX + secrets.token_hex(20)
    script = {"responses": [{"error": {"status": 400, "message": "scripted refusal"}}]}
    run_dir = run_agent(
        tmp_path,
        "local",
        cli,
        task_set(
            tmp_path,
            script,
            CLIS[cli].api,
            memory_mb=CLIS[cli].memory_mb,
            agent_timeout_sec=AGENT_TIMEOUT_SEC,
        ),
        canary,
    )
    run = read_run_dir(run_dir)
    [record] = run.records
    assert record["status"] == "agent_error" and record["reward"] == 0
    message = record["errors"][0]["message"]
    # The CLI's last error, from its own log (a retry may have met the exhausted script).
    assert "agent exited with code" not in message
    assert "scripted refusal" in message or "No more faux responses queued" in message
    session = [json.loads(line) for line in (run.evidence(record) / "session.jsonl").open()]
    assert session[-1]["type"] == "end" and session[-1]["ok"] is False


@pytest.mark.parametrize("cli", CLI_PARAMS)
def test_an_instruction_that_looks_like_an_option_is_the_prompt(cli: str, tmp_path: Path) -> None:
    """An instruction starting with "-" reaches the model as the prompt, not as a flag."""
    spec = CLIS[cli]
    canary = CANARY_PREFIX + secrets.token_hex(20)
    script = {
        "responses": [
            spec.shell_call("printf 'Hello, world!\\n' > hello.txt"),
            {"text": "Created hello.txt."},
        ]
    }
    tasks = task_set(
        tmp_path, script, spec.api, memory_mb=spec.memory_mb, agent_timeout_sec=AGENT_TIMEOUT_SEC
    )
    instruction = "--version -p: write hello.txt containing 'Hello, world!'\n"
    (tasks / "hello-file" / "instruction.md").write_text(instruction)
    run_dir = run_agent(tmp_path, "local", cli, tasks, canary)
    run = read_run_dir(run_dir)
    [record] = run.records
    assert record["status"] == "completed", record["errors"]
    assert record["reward"] == 1
    evidence = run.evidence(record)
    [first, *_] = [json.loads(line) for line in (evidence / "model_calls.jsonl").open()]
    assert "--version -p: write hello.txt" in json.dumps(first["request"]), first
