"""Model selection and the builtin agent through the real CLI.

The done-when of the model gateway issue: ``harness run examples/tasks --agent builtin
--model faux/demo`` solves the examples in the local and the docker sandbox, each trial
with its ``model_calls.jsonl`` and ``session.jsonl``; every selection error exits 2 before
any trial starts, with the contract message word for word.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import EXAMPLE_KEYS, EXAMPLES, read_run_dir, run_cli
from support.docker import docker_client, require_image

NO_MODEL_ENV = {"HARNESS_PROVIDER": "", "HARNESS_MODEL": "", "OPENAI_API_KEY": ""}


def _errors(stderr: str) -> list[str]:
    return [line.removeprefix("error: ") for line in stderr.splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (
            [],
            {},
            "Select a model explicitly with --model provider/name, "
            "or set both HARNESS_PROVIDER and HARNESS_MODEL.",
        ),
        (
            [],
            {"HARNESS_PROVIDER": "faux"},
            "Set both HARNESS_PROVIDER and HARNESS_MODEL, or neither.",
        ),
        ([], {"HARNESS_MODEL": "demo"}, "Set both HARNESS_PROVIDER and HARNESS_MODEL, or neither."),
        (
            ["--model", "openai/gpt-9"],
            {},
            "Model not found: openai/gpt-9. Add it to a model catalog (--models FILE, see "
            "docs/model-access.md) or pick a known one (harness models list).",
        ),
        (
            ["--model", "openai/gpt-4o"],
            {},
            "Model has no configured authentication: openai/gpt-4o. "
            "Set OPENAI_API_KEY in the environment that starts harness.",
        ),
        (
            ["--model", "gpt-4o"],
            {},
            "Model must be written provider/name (e.g. openai/gpt-4o), got 'gpt-4o'.",
        ),
    ],
)
def test_model_selection_errors_exit_2_before_any_trial(
    tmp_path: Path, args: list[str], env: dict[str, str], message: str
) -> None:
    out = tmp_path / "runs"
    result = run_cli(
        "run", EXAMPLES, "--agent", "builtin", *args, "-o", out, env={**NO_MODEL_ENV, **env}
    )
    assert result.code == 2, str(result)
    assert _errors(result.stderr) == [message], str(result)
    assert not out.exists() or not any(out.iterdir())


def test_model_from_environment_pair(tmp_path: Path) -> None:
    result = run_cli(
        "run",
        EXAMPLES / "hello-file",
        "--agent",
        "builtin",
        "-o",
        tmp_path,
        "--json",
        env={**NO_MODEL_ENV, "HARNESS_PROVIDER": "faux", "HARNESS_MODEL": "demo"},
        timeout=120,
    )
    # hello-file alone: its models.toml is the task set's, not the task's, so it is unknown.
    assert result.code == 2, str(result)
    assert "Model not found: faux/demo." in result.stderr
    result = run_cli(
        "run",
        EXAMPLES,
        "-n",
        "1",
        "--agent",
        "builtin",
        "-o",
        tmp_path,
        "--json",
        "--task-name",
        "*hello-file",
        env={**NO_MODEL_ENV, "HARNESS_PROVIDER": "faux", "HARNESS_MODEL": "demo"},
        timeout=120,
    )
    assert result.code == 0, str(result)
    run = read_run_dir(Path(result.json()["run_dir"]))
    assert [r["agent"]["model"] for r in run.records] == ["faux/demo"]
    assert run.path.name.split("--")[1] == "faux-demo"


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_builtin_agent_solves_the_examples_with_the_faux_model(
    tmp_path: Path, backend: str
) -> None:
    if backend == "docker":
        require_image(docker_client())
    result = run_cli(
        "run",
        EXAMPLES,
        "--agent",
        "builtin",
        "--model",
        "faux/demo",
        "--sandbox",
        backend,
        "-j",
        "2",
        "-o",
        tmp_path,
        "--json",
        env=NO_MODEL_ENV,
        timeout=600,
    )
    assert result.code == 0, str(result)
    summary = result.json()
    assert summary["mean_reward"] == 1.0
    run = read_run_dir(Path(summary["run_dir"]))
    assert sorted(run.by_task()) == sorted(EXAMPLE_KEYS)
    for record in run.records:
        assert record["status"] == "completed" and record["reward"] == 1.0
        assert record["agent"] == {"name": "builtin", "model": "faux/demo", "max_turns": 30}
        evidence = run.evidence(record)
        session = [json.loads(x) for x in (evidence / "session.jsonl").read_text().splitlines()]
        assert session[0]["type"] == "session" and session[-1] == {**session[-1], "ok": True}
        calls = [json.loads(x) for x in (evidence / "model_calls.jsonl").read_text().splitlines()]
        assert calls and all(c["outcome"] == "ok" for c in calls)
        assistant = [m for m in session if m.get("role") == "assistant"]
        assert len(assistant) == len(calls) == record["usage"]["calls"]
        assert record["usage"]["input_tokens"] == sum(c["usage"]["input_tokens"] for c in calls)
        assert record["usage"]["cost_usd"] is None  # faux models have no price
        transcript = (evidence / "transcript.jsonl").read_text().splitlines()
        kinds = {json.loads(x)["type"] for x in transcript}
        assert {"message", "tool_call", "tool_result", "model_call"} <= kinds
    exported = run_cli("export", "--format", "atif", run.path)
    assert exported.code == 0, str(exported)
    for record in run.records:
        trajectory = json.loads((run.evidence(record) / "agent" / "trajectory.json").read_text())
        assert trajectory["schema_version"] == "ATIF-v1.7"
        assert trajectory["agent"]["model_name"] in ("faux/demo", "demo")


def test_strict_completion_failure_is_an_agent_error_with_its_message(tmp_path: Path) -> None:
    script = tmp_path / "empty.json"
    script.write_text(json.dumps({"responses": [{"text": ""}]}))
    catalog = tmp_path / "models.toml"
    catalog.write_text(f'[models."faux/mute"]\nscript = "{script}"\n')
    result = run_cli(
        "run",
        EXAMPLES / "hello-file",
        "--agent",
        "builtin",
        "--model",
        "faux/mute",
        "--models",
        catalog,
        "-o",
        tmp_path / "runs",
        "--json",
        env=NO_MODEL_ENV,
        timeout=120,
    )
    assert result.code == 1, str(result)
    (record,) = read_run_dir(Path(result.json()["run_dir"])).records
    assert record["status"] == "agent_error"
    assert record["errors"][0]["message"] == "Agent run produced no assistant text."


def test_builtin_agent_against_an_openai_compatible_server_on_loopback(tmp_path: Path) -> None:
    """No faux: a real HTTP server speaks chat completions; the gateway forwards to it."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    answers = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {
                        "name": "write",
                        "arguments": json.dumps(
                            {"path": "hello.txt", "content": "Hello, world!\n"}
                        ),
                    },
                }
            ],
        },
        {"role": "assistant", "content": "Wrote hello.txt."},
    ]
    seen: list[dict[str, object]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            seen.append({"path": self.path, "auth": self.headers["authorization"], "body": body})
            message = answers[min(len(seen), len(answers)) - 1]
            finish = "tool_calls" if message.get("tool_calls") else "stop"
            data = json.dumps(
                {
                    "id": f"c{len(seen)}",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
                }
            ).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        catalog = tmp_path / "models.toml"
        catalog.write_text(
            '[models."openai/local-llm"]\nmodel = "org/llm-7b"\n'
            f'base_url = "http://127.0.0.1:{server.server_address[1]}/v1"\n'
            'api_key_env = "LOCAL_LLM_KEY"\ninput_price = 0.5\noutput_price = 1.5\n'
        )
        result = run_cli(
            "run",
            EXAMPLES / "hello-file",
            "--agent",
            "builtin",
            "--model",
            "openai/local-llm",
            "--models",
            catalog,
            "-o",
            tmp_path / "runs",
            "--json",
            env={**NO_MODEL_ENV, "LOCAL_LLM_KEY": "sk-local-secret-1234"},
            timeout=120,
        )
    finally:
        server.shutdown()
        server.server_close()
    assert result.code == 0, str(result)
    (record,) = read_run_dir(Path(result.json()["run_dir"])).records
    assert record["reward"] == 1.0
    assert record["usage"]["calls"] == 2 and record["usage"]["input_tokens"] == 200
    assert record["usage"]["cost_usd"] == pytest.approx((200 * 0.5 + 20 * 1.5) / 1e6)
    assert [s["path"] for s in seen] == ["/v1/chat/completions"] * 2
    assert all(s["auth"] == "Bearer sk-local-secret-1234" for s in seen)
    assert all(s["body"]["model"] == "org/llm-7b" for s in seen)  # type: ignore[index]
