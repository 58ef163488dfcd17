"""The built-in agent (sandbox/inside/agent_loop.py), run as a real process against real HTTP

Each test starts a scripted model server (OpenAI chat completions or Anthropic messages) on
127.0.0.1, runs ``python3 -I sandbox/inside/agent_loop.py config.json`` with the phase environment
of docs/model-access.md §1, and checks the workspace, session.jsonl, the exit code, stderr
and the requests the server saw.
"""

from __future__ import annotations

import ast
import json
import os
import resource
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psutil
import pytest

REPO = Path(__file__).resolve().parents[2]
AGENT = REPO / "sandbox" / "inside" / "agent_loop.py"
# The interpreter the agent runs on (CI may point this at a Python 3.9).
AGENT_PYTHON = os.environ.get("HARNESS_TEST_AGENT_PYTHON") or sys.executable
ALL_TOOLS = ["read", "write", "edit", "ls", "grep", "find", "shell"]

# A canned answer: a JSON body (status 200), (status, JSON body or raw text), or a callable
# taking the recorded request and returning one of those.
Canned = Any
#: A canned answer: close the connection without reading the request.
HANG_UP = "hang up"


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up (the request-timeout test) is expected


class ScriptedServer:
    """An HTTP server answering POSTs from a queue of canned responses, recording requests."""

    def __init__(self, responses: list[Canned]) -> None:
        self.responses = list(responses)
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                with server.lock:
                    canned = server.responses.pop(0) if server.responses else None
                if canned == HANG_UP:  # before reading the body: the client gets EPIPE
                    server.requests.append({"path": self.path, "hung_up": True})
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                request = {
                    "path": self.path,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "body": json.loads(raw),
                }
                with server.lock:
                    server.requests.append(request)
                if callable(canned):
                    canned = canned(request)
                if canned is None:
                    canned = (500, {"error": {"message": "No more scripted responses"}})
                status, body = canned if isinstance(canned, tuple) else (200, canned)
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# --- canned responses ---------------------------------------------------------------------


def oa_calls(*calls: tuple[str, Any], finish: str = "tool_calls") -> dict[str, Any]:
    """A chat completion calling tools; a str argument is sent raw (possibly invalid JSON)."""
    tool_calls = [
        {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": name, "arguments": a if isinstance(a, str) else json.dumps(a)},
        }
        for i, (name, a) in enumerate(calls, 1)
    ]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": tool_calls},
                "finish_reason": finish,
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def oa_text(text: str | None, finish: str = "stop", usage: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-2",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish,
            }
        ],
    }
    if usage:
        body["usage"] = {"prompt_tokens": 20, "completion_tokens": 3, "total_tokens": 23}
    return body


def an_calls(*calls: tuple[str, Any], stop: str = "tool_use") -> dict[str, Any]:
    content = [
        {"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": a}
        for i, (name, a) in enumerate(calls, 1)
    ]
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [{"type": "text", "text": "Working on it."}, *content],
        "stop_reason": stop,
        "usage": {"input_tokens": 11, "output_tokens": 6},
    }


def an_text(text: str, stop: str = "end_turn") -> dict[str, Any]:
    return {
        "id": "msg_2",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [{"type": "text", "text": text}] if text else [],
        "stop_reason": stop,
        "usage": {"input_tokens": 21, "output_tokens": 4},
    }


def calls_for(api: str, *calls: tuple[str, Any]) -> dict[str, Any]:
    return oa_calls(*calls) if api == "openai-chat" else an_calls(*calls)


def text_for(api: str, text: str) -> dict[str, Any]:
    return oa_text(text) if api == "openai-chat" else an_text(text)


# --- running the agent --------------------------------------------------------------------


@dataclass
class AgentRun:
    code: int
    stdout: str
    stderr: str
    session: list[dict[str, Any]]
    workspace: Path
    requests: list[dict[str, Any]]

    @property
    def results(self) -> list[dict[str, Any]]:
        return [e for e in self.session if e["type"] == "tool_result"]

    @property
    def end(self) -> dict[str, Any]:
        assert self.session[-1]["type"] == "end"
        return self.session[-1]

    def assert_strict_failure(self, message: str, turns: int) -> None:
        assert self.code == 3, self.stderr
        assert self.stderr.splitlines()[-1] == message
        assert {k: v for k, v in self.end.items() if k != "timestamp"} == {
            "type": "end",
            "ok": False,
            "error": message,
            "turns": turns,
        }


class Harness:
    """Builds the phase environment around one tmp dir and runs the agent in it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.workspace = root / "workspace"
        self.session_dir = root / "session"
        self.workspace.mkdir()
        self.session_dir.mkdir()
        self.token = "hgw-" + secrets.token_hex(16)
        self.servers: list[ScriptedServer] = []

    def server(self, responses: list[Canned]) -> ScriptedServer:
        server = ScriptedServer(responses)
        self.servers.append(server)
        return server

    def command(
        self,
        base_url: str,
        *,
        api: str = "openai-chat",
        instruction: str = "Do the task.",
        env: dict[str, str] | None = None,
        **config: Any,
    ) -> tuple[list[str], dict[str, str]]:
        (self.root / "instruction.md").write_text(instruction)
        cfg = {"api": api, "model": "demo-model", "model_label": "faux/demo", **config}
        (self.root / "config.json").write_text(json.dumps(cfg))
        full_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.root),
            "HARNESS_INSTRUCTION_FILE": str(self.root / "instruction.md"),
            "HARNESS_WORKSPACE": str(self.workspace),
            "HARNESS_SESSION_DIR": str(self.session_dir),
            "HARNESS_MODEL": "faux/demo",
            "HARNESS_MODEL_API": api,
            "OPENAI_BASE_URL": base_url + "/v1",
            "OPENAI_API_KEY": self.token,
            "ANTHROPIC_BASE_URL": base_url,
            "ANTHROPIC_API_KEY": self.token,
            **(env or {}),
        }
        argv = [AGENT_PYTHON, "-I", str(AGENT), str(self.root / "config.json")]
        return argv, full_env

    def session(self) -> list[dict[str, Any]]:
        path = self.session_dir / "session.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def run(self, responses: list[Canned], **kwargs: Any) -> AgentRun:
        server = self.server(responses)
        return self.run_against(server.url, server, **kwargs)

    def run_against(
        self, base_url: str, server: ScriptedServer | None = None, **kwargs: Any
    ) -> AgentRun:
        argv, env = self.command(base_url, **kwargs)
        proc = subprocess.run(
            argv, env=env, cwd=self.workspace, capture_output=True, text=True, timeout=60
        )
        return AgentRun(
            code=proc.returncode,
            stdout=proc.stdout,
            stderr=proc.stderr,
            session=self.session(),
            workspace=self.workspace,
            requests=server.requests if server else [],
        )


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    h = Harness(tmp_path)
    yield h
    for server in h.servers:
        server.close()


def strip_ts(event: dict[str, Any]) -> dict[str, Any]:
    assert isinstance(event.pop("timestamp"), str)
    return event


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "it") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# --- a whole run, both APIs ---------------------------------------------------------------


def test_openai_write_then_finish(harness: Harness) -> None:
    run = harness.run(
        [
            oa_calls(("write", {"path": "hello.txt", "content": "hi\n"})),
            oa_text("I wrote hello.txt.", usage=False),
        ],
        instruction="Write hi to hello.txt.",
    )
    assert run.code == 0, run.stderr
    assert (run.workspace / "hello.txt").read_text() == "hi\n"
    events = [strip_ts(e) for e in run.session]
    assert events[0] == {
        "type": "session",
        "version": 1,
        "agent": "builtin",
        "api": "openai-chat",
        "model": "faux/demo",
        "tools": ALL_TOOLS,
        "max_turns": 30,
    }
    assert events[1]["role"] == "system" and str(run.workspace) in events[1]["content"]
    assert events[2] == {"type": "message", "role": "user", "content": "Write hi to hello.txt."}
    assert events[3] == {
        "type": "message",
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_1", "name": "write", "arguments": {"path": "hello.txt", "content": "hi\n"}}
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    assert isinstance(events[4].pop("duration_ms"), float)
    assert events[4] == {
        "type": "tool_result",
        "tool_call_id": "call_1",
        "name": "write",
        "content": "wrote 3 bytes",
        "is_error": False,
    }
    assert events[5] == {
        "type": "message",
        "role": "assistant",
        "content": "I wrote hello.txt.",
        "tool_calls": [],
        "stop_reason": "stop",
        "usage": {"input_tokens": None, "output_tokens": None},
    }
    assert events[6] == {"type": "end", "ok": True, "error": None, "turns": 2}
    assert len(events) == 7

    first, second = run.requests
    assert first["path"] == second["path"] == "/v1/chat/completions"
    assert first["headers"]["authorization"] == f"Bearer {harness.token}"
    assert first["body"]["model"] == "demo-model"
    assert [t["function"]["name"] for t in first["body"]["tools"]] == ALL_TOOLS
    assert [m["role"] for m in first["body"]["messages"]] == ["system", "user"]
    assert second["body"]["messages"][2]["tool_calls"][0]["id"] == "call_1"
    assert second["body"]["messages"][3] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "wrote 3 bytes",
    }
    assert run.stderr == ""


def test_anthropic_write_then_finish(harness: Harness) -> None:
    run = harness.run(
        [
            an_calls(("write", {"path": "sub/dir/hello.txt", "content": "hi\n"})),
            an_calls(("edit", {"path": "sub/dir/hello.txt", "old": "h", "new": "H"})),
            an_text("Done."),
        ],
        api="anthropic-messages",
        tools=["write", "edit"],
        max_tokens=1000,
    )
    assert run.code == 0, run.stderr
    assert (run.workspace / "sub" / "dir" / "hello.txt").read_text() == "Hi\n"
    events = run.session
    assert events[0]["api"] == "anthropic-messages" and events[0]["tools"] == ["write", "edit"]
    assistant = [e for e in events if e.get("role") == "assistant"]
    assert [a["stop_reason"] for a in assistant] == ["tool_use", "tool_use", "stop"]
    assert assistant[0]["content"] == "Working on it."
    assert assistant[0]["tool_calls"][0]["id"] == "toolu_1"
    assert assistant[2]["usage"] == {"input_tokens": 21, "output_tokens": 4}
    assert [r["content"] for r in run.results] == [
        "wrote 3 bytes",
        "edited sub/dir/hello.txt: replaced 1 occurrence",
    ]
    assert run.end["ok"] is True and run.end["turns"] == 3

    first, second, third = run.requests
    assert first["path"] == "/v1/messages"
    assert first["headers"]["x-api-key"] == harness.token
    assert first["headers"]["anthropic-version"] == "2023-06-01"
    assert "authorization" not in first["headers"]
    assert first["body"]["max_tokens"] == 1000
    assert first["body"]["system"] == events[1]["content"]
    assert first["body"]["messages"] == [{"role": "user", "content": "Do the task."}]
    assert [t["name"] for t in first["body"]["tools"]] == ["write", "edit"]
    assert "input_schema" in first["body"]["tools"][0]
    # The assistant turn is replayed as sent, then the results as tool_result blocks.
    assert (
        second["body"]["messages"][1]["content"]
        == an_calls(("write", {"path": "sub/dir/hello.txt", "content": "hi\n"}))["content"]
    )
    assert third["body"]["messages"][-1] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": "edited sub/dir/hello.txt: replaced 1 occurrence",
                "is_error": False,
            }
        ],
    }


def test_anthropic_error_results_are_flagged(harness: Harness) -> None:
    (harness.workspace / "a.txt").write_text("x x\n")
    run = harness.run(
        [an_calls(("edit", {"path": "a.txt", "old": "x", "new": "y"})), an_text("Gave up.")],
        api="anthropic-messages",
    )
    assert run.code == 0, run.stderr
    block = run.requests[1]["body"]["messages"][-1]["content"][0]
    assert block["is_error"] is True
    assert "found 2 times" in block["content"]


# --- tools --------------------------------------------------------------------------------


def test_every_file_tool(harness: Harness, tmp_path: Path) -> None:
    ws = harness.workspace
    (ws / "notes.txt").write_text("alpha\nbeta\nalpha\n")
    (ws / "src").mkdir()
    (ws / "src" / "app.py").write_text("print('hi')\n")
    (ws / "blob.bin").write_bytes(b"alpha\0\1\2")
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text("alpha\n")
    outside = tmp_path / "outside.txt"
    outside.write_text("from outside\n")
    calls = [
        ("write", {"path": "out/new.txt", "content": "hello\n"}),
        ("read", {"path": "notes.txt"}),
        ("read", {"path": "notes.txt", "offset": 2, "limit": 1, "line_numbers": True}),
        ("read", {"path": str(outside)}),
        ("read", {"path": "missing.txt"}),
        ("read", {"path": "blob.bin"}),
        ("edit", {"path": "notes.txt", "old": "alpha", "new": "x"}),
        ("edit", {"path": "notes.txt", "old": "beta", "new": "gamma"}),
        ("edit", {"path": "notes.txt", "old": "zeta", "new": "x"}),
        ("ls", {}),
        ("ls", {"path": "src"}),
        ("grep", {"pattern": "alp"}),
        ("grep", {"pattern": "print", "glob": "*.py"}),
        ("grep", {"pattern": "("}),
        ("find", {"pattern": "*.py"}),
        ("find", {"pattern": "*"}),
        ("write", "{not json"),
        ("write", {"path": "a.txt"}),
        ("read", {"path": "notes.txt", "offset": "two"}),
        ("rm", {"path": "notes.txt"}),
    ]
    run = harness.run([oa_calls(*calls), oa_text("All done.")])
    assert run.code == 0, run.stderr
    got = {i: (r["content"], r["is_error"]) for i, r in enumerate(run.results)}
    assert [r["tool_call_id"] for r in run.results] == [f"call_{i}" for i in range(1, 21)]
    assert got[0] == ("wrote 6 bytes", False)
    assert (ws / "out" / "new.txt").read_text() == "hello\n"
    assert got[1] == ("alpha\nbeta\nalpha\n", False)
    assert got[2] == ("     2\tbeta\n[more lines follow: continue with offset=3]", False)
    assert got[3] == ("from outside\n", False)
    assert got[4][1] is True and "No such file or directory" in got[4][0]
    assert got[5][1] is True and "binary" in got[5][0]
    assert got[6] == (
        "edit: old text found 2 times in notes.txt; it must match exactly once: "
        "include more surrounding text",
        True,
    )
    assert got[7] == ("edited notes.txt: replaced 1 occurrence", False)
    assert got[8][1] is True and "not found" in got[8][0]
    assert (ws / "notes.txt").read_text() == "alpha\ngamma\nalpha\n"
    assert got[9] == (".git/\nblob.bin\nnotes.txt\nout/\nsrc/", False)
    assert got[10] == ("app.py", False)
    # Binary files and .git are skipped.
    assert got[11] == ("notes.txt:1:alpha\nnotes.txt:3:alpha", False)
    assert got[12] == ("src/app.py:1:print('hi')", False)
    assert got[13][1] is True and "invalid regular expression" in got[13][0]
    assert got[14] == ("src/app.py", False)
    assert got[15] == ("out/\nsrc/\nblob.bin\nnotes.txt\nout/new.txt\nsrc/app.py", False)
    assert got[16][1] is True
    assert got[16][0].startswith("Invalid arguments for write: arguments are not valid JSON")
    assert got[17] == ("Invalid arguments for write: missing required field 'content'.", True)
    assert got[18] == (
        "Invalid arguments for read: field 'offset' must be an integer, got str.",
        True,
    )
    assert got[19] == (f"Unknown tool 'rm' (available: {', '.join(ALL_TOOLS)}).", True)
    # The unparseable arguments are recorded as sent.
    assistant = run.session[3]
    assert assistant["tool_calls"][16]["arguments"] == "{not json"
    # Every call got its answer, in order, in the next request.
    tool_msgs = [m for m in run.requests[1]["body"]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == [f"call_{i}" for i in range(1, 21)]


def test_only_enabled_tools_run_and_fifos_never_block(harness: Harness) -> None:
    os.mkfifo(harness.workspace / "pipe")
    (harness.workspace / "a.txt").write_text("needle\n")
    run = harness.run(
        [
            oa_calls(
                ("shell", {"command": "touch ran"}),
                ("read", {"path": "pipe"}),
                ("grep", {"pattern": "needle"}),
                ("edit", {"path": "pipe", "old": "a", "new": "b"}),
            ),
            oa_text("ok"),
        ],
        tools=["read", "grep"],
    )
    assert run.code == 0, run.stderr
    got = [(r["content"], r["is_error"]) for r in run.results]
    assert got == [
        ("Unknown tool 'shell' (available: read, grep).", True),
        ("read: pipe is not a regular file", True),
        ("a.txt:1:needle", False),
        ("Unknown tool 'edit' (available: read, grep).", True),
    ]
    assert not (harness.workspace / "ran").exists()
    assert [t["function"]["name"] for t in run.requests[0]["body"]["tools"]] == ["read", "grep"]


def test_shell_runs_in_workspace_without_the_token(harness: Harness) -> None:
    run = harness.run(
        [
            oa_calls(("shell", {"command": "pwd; env; echo to-stderr >&2; exit 7"})),
            oa_text("ok"),
        ]
    )
    assert run.code == 0, run.stderr
    (result,) = run.results
    out = result["content"]
    assert out.splitlines()[0] == str(harness.workspace)
    assert "HARNESS_WORKSPACE=" in out and "OPENAI_BASE_URL=" in out
    assert "OPENAI_API_KEY" not in out and "ANTHROPIC_API_KEY" not in out
    assert harness.token not in out
    assert "to-stderr" in out
    assert result["is_error"] is True and out.endswith("[exit code 7]")


def test_no_variable_holding_the_token_reaches_a_tool(harness: Harness) -> None:
    run = harness.run(
        [oa_calls(("shell", {"command": "env"})), oa_text("ok")],
        env={"SOME_COPY": f"prefix-{harness.token}"},
    )
    assert run.code == 0, run.stderr
    out = run.results[0]["content"]
    assert harness.token not in out and "SOME_COPY" not in out
    assert harness.token not in (harness.session_dir / "session.jsonl").read_text()


def test_shell_timeout_kills_the_process_group(harness: Harness) -> None:
    started = time.monotonic()
    run = harness.run(
        [
            oa_calls(("shell", {"command": "sleep 60 & echo $! > bg.pid; echo begun; wait"})),
            oa_text("ok"),
        ],
        tool_timeout_sec=1,
    )
    assert run.code == 0, run.stderr
    assert time.monotonic() - started < 10
    (result,) = run.results
    assert result["is_error"] is True
    assert result["content"] == (
        "begun\n[command timed out after 1s; its process group was killed]"
    )
    assert 900 < result["duration_ms"] < 5000
    pid = int((harness.workspace / "bg.pid").read_text())
    wait_for(lambda: gone(pid), what=f"background child {pid} to die")


def test_shell_background_child_does_not_hang_the_tool(harness: Harness) -> None:
    # The background job keeps the output pipe open; the tool still returns soon after sh.
    command = "(sleep 30; echo late) & echo $! > bg.pid; echo started"
    run = harness.run([oa_calls(("shell", {"command": command})), oa_text("ok")])
    pid = int((harness.workspace / "bg.pid").read_text())
    try:
        assert run.code == 0, run.stderr
        (result,) = run.results
        assert result == {**result, "content": "started", "is_error": False}
        assert result["duration_ms"] < 3000
    finally:
        try:
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_shell_closing_its_output_early_is_waited_for_without_spinning(harness: Harness) -> None:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = harness.run(
        [oa_calls(("shell", {"command": "exec >/dev/null 2>&1; sleep 1"})), oa_text("ok")]
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert run.code == 0, run.stderr
    assert run.results[0]["content"] == "(no output)"
    assert run.results[0]["duration_ms"] > 900
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert cpu < 0.8, f"the agent busy-waited: {cpu:.2f}s of CPU"


def test_tool_output_is_capped(harness: Harness) -> None:
    ws = harness.workspace
    (ws / "big.txt").write_text("".join(f"line {i}\n" for i in range(1, 5001)))
    run = harness.run(
        [
            oa_calls(
                ("shell", {"command": "head -c 100000 /dev/zero | tr '\\0' x"}),
                ("read", {"path": "big.txt"}),
                ("grep", {"pattern": "line"}),
            ),
            oa_text("ok"),
        ],
        tool_output_bytes=2000,
    )
    assert run.code == 0, run.stderr
    shell, read, grep = (r["content"] for r in run.results)
    for content in (shell, read, grep):
        assert len(content.encode()) <= 2000
    assert shell.startswith("xxxx")
    assert shell.endswith(f"\n[output truncated: {100000 - 1904} of 100000 bytes cut]")
    assert read.startswith("line 1\nline 2\n")
    last_shown = int(read.splitlines()[-2].split()[1])
    assert read.splitlines()[-1].endswith(f"continue with offset={last_shown + 1}]")
    assert "[output truncated:" in read
    assert "bytes cut]" in grep


# --- strict completion --------------------------------------------------------------------

STRICT_CASES = [
    (
        "openai-chat",
        {"id": "x", "choices": []},
        "Agent run completed without an assistant message.",
    ),
    ("openai-chat", oa_text(""), "Agent run produced no assistant text."),
    ("openai-chat", oa_text("  \n"), "Agent run produced no assistant text."),
    ("openai-chat", oa_text(None), "Agent run produced no assistant text."),
    (
        "openai-chat",
        oa_text("partial", finish="length"),
        "Agent run ended with unexpected stop reason: length.",
    ),
    (
        "openai-chat",
        oa_text("", finish="content_filter"),
        "Agent run ended with unexpected stop reason: content_filter.",
    ),
    (
        "openai-chat",
        {**oa_text("", finish="error"), "error": {"message": "upstream overloaded"}},
        "upstream overloaded",
    ),
    (
        "openai-chat",
        (429, {"error": {"message": "Trial budget exhausted", "type": "budget"}}),
        "Model call failed: HTTP 429: Trial budget exhausted.",
    ),
    ("openai-chat", (502, "bad\ngateway"), "Model call failed: HTTP 502: bad gateway."),
    (
        "openai-chat",
        (200, "not json"),
        "Model call failed: HTTP 200: response is not JSON: not json.",
    ),
    (
        "anthropic-messages",
        {"type": "error", "error": {"type": "x", "message": "m"}},
        "Agent run completed without an assistant message.",
    ),
    ("anthropic-messages", an_text(""), "Agent run produced no assistant text."),
    (
        "anthropic-messages",
        an_text("cut", stop="max_tokens"),
        "Agent run ended with unexpected stop reason: length.",
    ),
    (
        "anthropic-messages",
        an_text("no", stop="refusal"),
        "Agent run ended with unexpected stop reason: refusal.",
    ),
    (
        "anthropic-messages",
        (429, {"type": "error", "error": {"type": "rate_limit_error", "message": "Slow down"}}),
        "Model call failed: HTTP 429: Slow down.",
    ),
]


@pytest.mark.parametrize(("api", "response", "message"), STRICT_CASES)
def test_strict_completion(harness: Harness, api: str, response: Canned, message: str) -> None:
    run = harness.run([response], api=api)
    run.assert_strict_failure(message, turns=1)
    assert len(run.requests) == 1
    kinds = [e["type"] for e in run.session]
    assert kinds[:3] == ["session", "message", "message"]
    no_message = message.startswith(("Model call failed", "Agent run completed without"))
    assert kinds[3:] == (["end"] if no_message else ["message", "end"])


def test_strict_failure_after_tools_counts_turns(harness: Harness) -> None:
    run = harness.run([oa_calls(("ls", {})), oa_text("", finish="length")])
    run.assert_strict_failure("Agent run ended with unexpected stop reason: length.", turns=2)
    assert len(run.results) == 1


@pytest.mark.parametrize("api", ["openai-chat", "anthropic-messages"])
def test_max_turns(harness: Harness, api: str) -> None:
    responses = [calls_for(api, ("shell", {"command": f"echo {i}"})) for i in range(3)]
    run = harness.run([*responses, text_for(api, "never reached")], api=api, max_turns=2)
    run.assert_strict_failure("Agent run reached max_turns (2) without finishing.", turns=2)
    assert len(run.requests) == 2
    assert [r["content"] for r in run.results] == ["0", "1"]
    assert run.session[0]["max_turns"] == 2


def test_tool_use_without_a_tool_call_ends_the_run(harness: Harness) -> None:
    run = harness.run([oa_text("hmm", finish="tool_calls")])
    run.assert_strict_failure("Agent run ended with unexpected stop reason: tool_use.", turns=1)


def test_connection_refused_is_a_model_call_failure(harness: Harness) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = harness.run_against(f"http://127.0.0.1:{port}")
    message = run.stderr.splitlines()[-1]
    assert message == (
        f"Model call failed: connection to http://127.0.0.1:{port}/v1/chat/completions "
        "failed: [Errno 111] Connection refused."
    )
    run.assert_strict_failure(message, turns=1)


def test_request_timeout_is_a_model_call_failure(harness: Harness) -> None:
    release = threading.Event()

    def stall(request: dict[str, Any]) -> Canned:
        release.wait(10)
        return oa_text("too late")

    server = harness.server([stall])
    try:
        run = harness.run_against(server.url, server, request_timeout_sec=0.5)
    finally:
        release.set()
    message = run.stderr.splitlines()[-1]
    assert message == (
        f"Model call failed: no answer within 0.5s from {server.url}/v1/chat/completions."
    )
    run.assert_strict_failure(message, turns=1)


# --- configuration and robustness ---------------------------------------------------------


def test_bad_config_exits_4(harness: Harness) -> None:
    run = harness.run([], api="bogus")
    assert run.code == 4
    last = run.stderr.splitlines()[-1]
    assert last.startswith("Agent configuration error: api must be one of openai-chat")
    assert run.session == [
        {"type": "end", "ok": False, "error": last, "turns": 0, "timestamp": run.end["timestamp"]}
    ]


def test_missing_token_exits_4(harness: Harness) -> None:
    run = harness.run([], env={"OPENAI_API_KEY": ""})
    assert run.code == 4
    assert run.stderr.splitlines()[-1] == "Agent configuration error: OPENAI_API_KEY is not set"
    assert run.requests == []


def test_session_is_a_valid_prefix_while_running(harness: Harness) -> None:
    release = threading.Event()

    def stall(request: dict[str, Any]) -> Canned:
        release.wait(10)
        return oa_text("late")

    server = harness.server([oa_calls(("write", {"path": "a.txt", "content": "1"})), stall])
    argv, env = harness.command(server.url)
    proc = subprocess.Popen(
        argv, env=env, cwd=harness.workspace, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for(lambda: len(server.requests) == 2, what="the second model call")
        proc.kill()
        proc.wait(10)
    finally:
        release.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    kinds = [e["type"] for e in harness.session()]
    assert kinds == ["session", "message", "message", "message", "tool_result"]


def test_runs_on_python_3_9_syntax() -> None:
    ast.parse(AGENT.read_text(), feature_version=(3, 9))


IN_PROCESS = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
import agent_loop  # preloaded, as the supervisor does before the privilege drop
import signal
signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # as the supervisor leaves it for agents
env, cwd, config = json.loads(sys.stdin.read())
os.environ.clear()
os.environ.update(env)
os.chdir(cwd)
code = agent_loop.main(config)
print("exit", code)
sys.stdout.flush()
os._exit(code)
"""


def run_in_process(
    harness: Harness, base_url: str, config: Any, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    """Call ``main(config)`` inside a child the way the supervisor does (no exec)."""
    _, env = harness.command(base_url, **kwargs)
    return subprocess.run(
        [AGENT_PYTHON, "-I", "-c", IN_PROCESS, str(AGENT.parent)],
        input=json.dumps([env, str(harness.workspace), config]),
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_main_in_process_like_the_supervisor(harness: Harness) -> None:
    server = harness.server([oa_calls(("shell", {"command": "env > env.txt"})), oa_text("done")])
    proc = run_in_process(harness, server.url, {"api": "openai-chat", "model": "m"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "exit 0"
    env_seen = (harness.workspace / "env.txt").read_text()
    assert harness.token not in env_seen and "HARNESS_SESSION_DIR=" in env_seen
    session = harness.session()
    # model_label falls back to $HARNESS_MODEL.
    assert session[0]["model"] == "faux/demo" and session[-1]["ok"] is True


def test_gateway_hanging_up_is_a_model_call_failure_not_sigpipe(harness: Harness) -> None:
    server = harness.server([HANG_UP])
    big = "x" * (8 << 20)  # far more than the socket buffers: the send hits the closed peer
    proc = run_in_process(
        harness, server.url, {"api": "openai-chat", "model": "m"}, instruction=big
    )
    assert proc.returncode == 3, proc.stderr
    last = proc.stderr.splitlines()[-1]
    assert last.startswith(f"Model call failed: connection to {server.url}/v1/chat/completions")
    assert harness.session()[-1]["error"] == last


def test_main_never_raises_on_garbage(harness: Harness) -> None:
    proc = run_in_process(harness, "http://127.0.0.1:9", ["not", "a", "dict"])
    assert proc.returncode == 4
    assert proc.stdout.splitlines()[-1] == "exit 4"
    last = proc.stderr.splitlines()[-1]
    assert last == "Agent configuration error: the config must be a JSON object"
