"""The gateway's fixes for real CLIs, judged with the real CLIs (issue 25, item 4).

``harness run`` with the pinned Claude Code and Codex, installed by the harness into its
cache (scripts/agents.sh), on a copy of examples/tasks/hello-file, local and docker, each
driven by a faux script written in the CLI's own protocol:

- an exhausted script is a 410 the CLI does not retry: Claude Code stops at once (the
  number of model calls recorded says so, never the time taken);
- Codex's ``apply_patch`` is a freeform Responses ``custom`` tool under a known model
  name: a scripted ``custom`` call edits the file (reward 1), the script's turn matched
  to the request that offers the tool;
- Codex against an OpenAI-compatible server on 127.0.0.1 that serves only chat
  completions (``serves = ["openai-chat"]``): the gateway translates, the patch goes out
  as a chat tool call and its output comes back, the server's usage is recorded.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, only_run_dir, read_run_dir, run_cli
from support.docker import docker_client, require_image

BACKEND_PARAMS = [
    pytest.param("local", marks=pytest.mark.root, id="local"),
    pytest.param("docker", marks=pytest.mark.docker, id="docker"),
]

RUN_TIMEOUT = 900.0  # the first run fetches the CLI from npm
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+Hello, world!\n*** End Patch\n"


def _task_set(tmp_path: Path, script: dict[str, Any], api: str, upstream: str) -> Path:
    tasks = tmp_path / "tasks"
    shutil.copytree(EXAMPLES / "hello-file", tasks / "hello-file")
    (tasks / "script.json").write_text(json.dumps(script))
    (tasks / "models.toml").write_text(
        f'[models."faux/cli-script"]\nscript = "script.json"\napi = "{api}"\nmodel = "{upstream}"\n'
    )
    return tasks


def _run(
    tmp_path: Path,
    cli: str,
    tasks: Path,
    backend: str,
    model: str = "faux/cli-script",
    *more: str | Path,
) -> Path:
    if backend == "docker":
        require_image(docker_client())
    out = tmp_path / "runs"
    result = run_cli(
        "run",
        tasks,
        "--agent",
        cli,
        "--model",
        model,
        "--sandbox",
        backend,
        "-o",
        out,
        *more,
        env={"HARNESS_PROVIDER": "", "HARNESS_MODEL": ""},
        timeout=RUN_TIMEOUT,
    )
    assert result.code in (0, 1), result
    assert "Traceback" not in result.stderr, result.stderr
    return only_run_dir(out)


def _model_calls(run_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    run = read_run_dir(run_dir)
    [record] = run.records
    evidence = run.evidence(record)
    lines = [json.loads(line) for line in (evidence / "model_calls.jsonl").open()]
    return record, lines


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_claude_code_stops_at_once_on_an_exhausted_script(tmp_path: Path, backend: str) -> None:
    # One scripted turn (a Bash call); the next call finds the script used up.
    turn = {"tool_calls": [{"name": "Bash", "arguments": {"command": "echo hi > seen.txt"}}]}
    tasks = _task_set(tmp_path, {"responses": [turn]}, "anthropic-messages", "claude-sonnet-4-5")
    record, lines = _model_calls(_run(tmp_path, "claude-code", tasks, backend))
    calls = [line for line in lines if line["method"] == "POST"]
    # The turn, then the one 410. A 5xx (or 408/409/429) Claude Code retried ten times
    # over minutes; a 400 invalid_request_error it retries six times with features off.
    assert [(c["status"], c["outcome"]) for c in calls] == [(200, "ok"), (410, "error")], calls
    assert calls[-1]["faux"] == {"exhausted": True, "turns": 1}
    trial_id = calls[-1]["trial_id"]
    assert f"No more faux responses queued for trial {trial_id}" in calls[-1]["reason"]
    assert record["status"] == "agent_error" and record["reward"] == 0
    # The CLI's own last error, which names the trial and says what to do.
    assert "No more faux responses queued" in record["errors"][0]["message"]


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_codex_applies_a_custom_apply_patch_call(tmp_path: Path, backend: str) -> None:
    script = {
        # Only requests that offer apply_patch consume a turn.
        "when": {"tool": "apply_patch"},
        "responses": [
            {"tool_calls": [{"name": "apply_patch", "input": PATCH}]},
            {"text": "Created hello.txt."},
        ],
    }
    tasks = _task_set(tmp_path, script, "openai-responses", "gpt-5.5")
    record, lines = _model_calls(_run(tmp_path, "codex", tasks, backend))
    assert record["status"] == "completed", record["errors"]
    assert record["reward"] == 1
    calls = [line for line in lines if line["method"] == "POST"]
    assert [c["faux"].get("turn") for c in calls] == [1, 2], calls
    # Codex offered apply_patch as a freeform tool and sent back the custom call's output.
    offered = {t.get("name"): t.get("type") for t in calls[0]["request"]["tools"]}
    assert offered["apply_patch"] == "custom"
    second = json.dumps(calls[1]["request"]["input"])
    assert "custom_tool_call_output" in second


class ChatOnlyServer:
    """An OpenAI-compatible server with chat completions only (streamed, as Codex asks).

    It answers like a model that knows the task: the apply_patch tool (a function taking
    ``input`` once translated) until a tool result is in the conversation, then text.
    """

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                outer.seen.append((self.path, body))
                if self.path != "/v1/chat/completions" or not body.get("stream"):
                    self._send(404, b'{"error": {"message": "chat streams only"}}', "json")
                    return
                self._send(200, outer.answer(body), "event-stream")

            def _send(self, status: int, data: bytes, kind: str) -> None:
                self.send_response(status)
                ctype = "text/event-stream" if kind == "event-stream" else "application/json"
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @staticmethod
    def answer(body: dict[str, Any]) -> bytes:
        base = {"id": "chatcmpl-local", "object": "chat.completion.chunk", "model": body["model"]}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return f"data: {json.dumps({**base, 'choices': [choice]})}\n\n".encode()

        done = any(m.get("role") == "tool" for m in body["messages"])
        out = chunk({"role": "assistant", "content": ""})
        if done:
            out += chunk({"content": "Created hello.txt."}) + chunk({}, "stop")
        else:
            args = json.dumps({"input": PATCH})
            function = {"name": "apply_patch", "arguments": args[:20]}
            call = {"index": 0, "id": "call_local_1", "type": "function", "function": function}
            out += chunk({"tool_calls": [call]})
            out += chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[20:]}}]})
            out += chunk({}, "tool_calls")
        usage = {"prompt_tokens": 1234, "completion_tokens": 56, "total_tokens": 1290}
        out += f"data: {json.dumps({**base, 'choices': [], 'usage': usage})}\n\n".encode()
        return out + b"data: [DONE]\n\n"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def chat_only() -> Iterator[ChatOnlyServer]:
    server = ChatOnlyServer()
    yield server
    server.close()


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_codex_runs_against_a_chat_only_server(
    tmp_path: Path, backend: str, chat_only: ChatOnlyServer
) -> None:
    tasks = tmp_path / "tasks"
    shutil.copytree(EXAMPLES / "hello-file", tasks / "hello-file")
    catalog = tmp_path / "models.toml"
    catalog.write_text(
        '[models."openai/local-chat"]\nmodel = "gpt-5.5"\n'
        f'base_url = "{chat_only.url}"\napi_key_env = ""\nserves = ["openai-chat"]\n'
    )
    run_dir = _run(tmp_path, "codex", tasks, backend, "openai/local-chat", "--models", catalog)
    record, lines = _model_calls(run_dir)
    assert record["status"] == "completed", record["errors"]
    assert record["reward"] == 1
    # Only chat completions reached the server; Codex's tool went out and came back.
    paths = {path for path, _ in chat_only.seen}
    assert paths == {"/v1/chat/completions"}
    first, last = chat_only.seen[0][1], chat_only.seen[-1][1]
    assert "apply_patch" in [t["function"]["name"] for t in first["tools"]]
    calls = [m for m in last["messages"] if m.get("tool_calls")]
    assert calls[-1]["tool_calls"][0]["id"] == "call_local_1"
    [result] = [m for m in last["messages"] if m.get("role") == "tool"]
    assert result["tool_call_id"] == "call_local_1"
    # The record: Codex's Responses calls, answered over chat, with the server's usage.
    posts = [line for line in lines if line["method"] == "POST"]
    assert len(posts) == len(chat_only.seen) >= 2
    for line in posts:
        assert (line["path"], line["status"], line["upstream_api"]) == (
            "/v1/responses",
            200,
            "openai-chat",
        )
        assert line["usage"]["input_tokens"] == 1234 and line["usage"]["output_tokens"] == 56
