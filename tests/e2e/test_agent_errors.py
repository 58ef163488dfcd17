"""End-to-end: a failed installed CLI is data: exit code, last error line, typed cause.

The real Claude Code CLI (and Codex, for 401 and 429; aider, which exits 0 after a
provider's error, and mini-swe-agent, for 401), installed by the harness, runs against
faux scripts that make the gateway answer as a provider would when the key is bad (401),
the context is full (a ``prompt is too long`` 400), the rate limit is hit (429), the model
refuses (``stop_reason`` ``refusal``), and against the trial's own budget
(``budget.max_calls``), which the gateway enforces. The record's error must carry the
CLI's exit code, its own last error line and the cause; ``retry.on_causes`` must retry
exactly the attempts whose cause it names. Judged from the record.
"""

from __future__ import annotations

import json
import secrets
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, only_run_dir, read_run_dir, run_cli

pytestmark = pytest.mark.root  # the local sandbox's root view binds the CLI's cache entry

RUN_TIMEOUT = 900.0


APIS = {
    "claude-code": "anthropic-messages",
    "codex": "openai-responses",
    "aider": "openai-chat",
    "mini-swe-agent": "openai-chat",
}
#: The Python agents import litellm: seconds on an idle host, minutes on a loaded one (the
#: agent's timeout is raised for them; never asserted on).
SLOW_START = {"aider", "mini-swe-agent"}


def _tasks(
    tmp_path: Path, script: dict[str, Any], api: str = "anthropic-messages", *, slow: bool = False
) -> Path:
    tasks = tmp_path / "tasks"
    shutil.copytree(EXAMPLES / "hello-file", tasks / "hello-file")
    if slow:
        toml = tasks / "hello-file" / "task.toml"
        text = toml.read_text()
        assert "[agent]\ntimeout_sec = 60" in text
        toml.write_text(text.replace("[agent]\ntimeout_sec = 60", "[agent]\ntimeout_sec = 900"))
    (tasks / "script.json").write_text(json.dumps(script))
    (tasks / "models.toml").write_text(
        f'[models."faux/err"]\nscript = "script.json"\napi = "{api}"\n'
    )
    return tasks


def _run(
    tmp_path: Path, script: dict[str, Any], *sets: str, cli: str = "claude-code"
) -> list[dict[str, Any]]:
    out = tmp_path / "runs"
    tasks = _tasks(tmp_path, script, APIS[cli], slow=cli in SLOW_START)
    args: list[Any] = ["run", tasks, "--agent", cli]
    args += ["--model", "faux/err", "--sandbox", "local", "-o", out]
    for item in sets:
        args += ["--set", item]
    canary = "sk-ant-canary-" + secrets.token_hex(16)
    result = run_cli(
        *args,
        env={
            "ANTHROPIC_API_KEY": canary,
            "OPENAI_API_KEY": canary,
            "HARNESS_PROVIDER": "",
            "HARNESS_MODEL": "",
        },
        timeout=RUN_TIMEOUT,
    )
    assert result.code in (0, 1), result
    return read_run_dir(only_run_dir(out)).records


def _errors(status: int, message: str, times: int = 6) -> dict[str, Any]:
    # The CLI retries some answers (CLAUDE_CODE_MAX_RETRIES=2): each retry takes a turn.
    return {"responses": [{"error": {"status": status, "message": message}}] * times}


def _agent_error(record: dict[str, Any]) -> dict[str, Any]:
    assert record["status"] == "agent_error", record["errors"]
    error = record["errors"][0]
    assert error["type"] == "AgentRunError"
    assert isinstance(error["exit_code"], int) and error["exit_code"] != 0
    assert error["last_error"] and "\n" not in error["last_error"]
    return dict(error)


@pytest.mark.parametrize(
    ("status", "message", "cause", "source"),
    [
        pytest.param(401, "invalid x-api-key", "authentication", "gateway", id="authentication"),
        # A 400 is any bad request: the provider's own message, as the gateway recorded
        # it, says the context is full.
        pytest.param(
            400,
            "prompt is too long: 212000 tokens > 200000 maximum",
            "context_window",
            "gateway",
            id="context_window",
        ),
        pytest.param(
            429,
            "Number of requests has exceeded your rate limit",
            "rate_limit",
            "gateway",
            id="rate_limit",
        ),  # fmt: skip
    ],
)
def test_a_provider_error_is_typed_in_the_record(
    tmp_path: Path, status: int, message: str, cause: str, source: str
) -> None:
    [record] = _run(tmp_path, _errors(status, message), "retry.max_retries=0")
    error = _agent_error(record)
    assert error["cause"] == cause, error
    assert error["cause_source"] == source, error
    if cause == "context_window":
        assert "too long" in error["last_error"], error  # the CLI's own line, kept


@pytest.mark.parametrize(
    ("status", "message", "cause"),
    [
        pytest.param(401, "Incorrect API key provided", "authentication", id="authentication"),
        pytest.param(429, "Rate limit reached for requests", "rate_limit", id="rate_limit"),
    ],
)
def test_codexs_provider_errors_are_typed_in_the_record(
    tmp_path: Path, status: int, message: str, cause: str
) -> None:
    [record] = _run(tmp_path, _errors(status, message), "retry.max_retries=0", cli="codex")
    error = _agent_error(record)
    assert error["cause"] == cause and error["cause_source"] == "gateway", error


@pytest.mark.parametrize(
    ("cli", "exit_code", "own_words"),
    [
        # aider prints the provider's error and ends its one-message run with status 0:
        # the gateway's record of its last call (failed: nothing the model said came
        # after it) makes the trial an agent_error like any other.
        pytest.param("aider", 0, "AuthenticationError", id="aider-exits-0"),
        pytest.param("mini-swe-agent", 1, "AuthenticationError", id="mini-swe-agent"),
    ],
)
def test_the_python_agents_provider_errors_are_typed_in_the_record(
    tmp_path: Path, cli: str, exit_code: int, own_words: str
) -> None:
    script = _errors(401, "Incorrect API key provided", times=3)
    [record] = _run(tmp_path, script, "retry.max_retries=0", cli=cli)
    assert record["status"] == "agent_error", record["errors"]
    assert record["reward"] == 0  # graded on what it left, as any agent_error
    [error] = record["errors"]
    assert error["type"] == "AgentRunError" and error["exit_code"] == exit_code, error
    assert error["cause"] == "authentication" and error["cause_source"] == "gateway", error
    if exit_code == 0:
        assert "exited 0 after its last model call failed (HTTP 401" in error["message"], error
    # The CLI's own words, from its converted log's end.
    assert own_words in error["last_error"], error


def test_a_refusal_is_typed_in_the_record(tmp_path: Path) -> None:
    # Anthropic's API ends a refused answer with stop_reason "refusal"; the CLI notes it
    # and goes on once, and then meets the end of the script.
    script = {"responses": [{"text": "I can't help with that.", "stop_reason": "refusal"}]}
    [record] = _run(tmp_path, script, "retry.max_retries=0")
    error = _agent_error(record)
    assert error["cause"] == "refusal" and error["cause_source"] == "log", error
    assert "refused" in error["last_error"]


def test_a_spent_budget_is_typed_in_the_record(tmp_path: Path) -> None:
    script = {
        "responses": [
            {"tool_calls": [{"name": "Bash", "arguments": {"command": "echo hi"}}]},
            {"text": "never reached: the budget is one call"},
        ]
    }
    [record] = _run(tmp_path, script, "budget.max_calls=1", "retry.max_retries=0")
    error = _agent_error(record)
    assert error["cause"] == "budget_spent" and error["cause_source"] == "gateway", error
    # The gateway's count is the record's usage, and says so.
    assert record["usage"]["source"] == "gateway"
    assert record["usage"]["calls"] == 1  # the budget's one call; the refused ones cost nothing


def test_retry_on_causes_retries_only_the_causes_it_names(tmp_path: Path) -> None:
    rate_limited = _errors(429, "rate limit exceeded", times=12)
    sets = ("retry.max_retries=1", "retry.backoff_sec=0", "retry.jitter=0")
    [retried] = _run(tmp_path / "a", rate_limited, *sets, 'retry.on_causes=["rate_limit"]')
    assert retried["attempt"] == 2, retried
    [earlier] = retried["previous_attempts"]
    assert earlier["errors"][0]["cause"] == "rate_limit"
    assert _agent_error(retried)["cause"] == "rate_limit"

    [final] = _run(tmp_path / "b", rate_limited, *sets, 'retry.on_causes=["authentication"]')
    assert final["attempt"] == 1 and not final.get("previous_attempts"), final
    assert _agent_error(final)["cause"] == "rate_limit"


def test_an_unknown_cause_in_retry_on_causes_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    result = run_cli(
        "run", _tasks(tmp_path, {"responses": [{"text": "x"}]}), "--agent", "claude-code",
        "--model", "faux/err", "-o", out, "--set", 'retry.on_causes=["flaky"]',
        env={"HARNESS_PROVIDER": "", "HARNESS_MODEL": ""}, timeout=300,
    )  # fmt: skip
    assert result.code == 2, result
    assert "retry.on_causes" in result.stderr and "rate_limit" in result.stderr
