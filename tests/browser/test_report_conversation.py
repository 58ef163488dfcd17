"""The trial page's conversation view of an installed CLI's session, with hostile content.

A real run: the real Claude Code CLI, installed by the harness, driven by a faux script in
its own tool protocol (its ``Bash`` tool), whose command prints a script tag, an image
with an ``onerror`` and ANSI colour codes into the tool's result, and whose last answer
says the same. Its stream-json log, converted into ``session.jsonl``, must appear on the
report's trial page as a conversation (the user's instruction, the assistant's turns with
their usage, the tool call with its arguments and its result) with every payload drawn as
text: nothing runs, nothing is fetched from the canary server, ESC is shown as an escape.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from browser_support import REPO, Watched, harness

pytestmark = pytest.mark.root  # the local sandbox's root view binds the CLI's cache entry


class Canary:
    """A loopback HTTP server that records every request it gets."""

    def __init__(self) -> None:
        hits: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hits.append(self.path)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.hits = hits
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def canary() -> Iterator[Canary]:
    c = Canary()
    yield c
    c.server.shutdown()


def _script_tag(port: int) -> str:
    return f"<script>window.__xss=1;fetch('http://127.0.0.1:{port}/s')</script>"


def _img(port: int) -> str:
    return f'<img src="http://127.0.0.1:{port}/i" onerror="window.__xss=2">'


@pytest.fixture(scope="module")
def report(canary: Canary, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("conversation")
    tasks = root / "tasks"
    shutil.copytree(REPO / "examples" / "tasks" / "hello-file", tasks / "hello-file")
    tag, img = _script_tag(canary.port), _img(canary.port)
    command = (
        f"printf '%s %s \\033[31mRED\\033[0m\\n' {json.dumps(tag)} {json.dumps(img)}; "
        "printf 'Hello, world!\\n' > hello.txt"
    )
    script = {
        "responses": [
            {"tool_calls": [{"name": "Bash", "arguments": {"command": command}}]},
            {"text": "Done. " + tag + img},
        ]
    }
    (tasks / "script.json").write_text(json.dumps(script))
    (tasks / "models.toml").write_text(
        '[models."faux/cc"]\nscript = "script.json"\napi = "anthropic-messages"\n'
    )
    result = harness(
        "run", tasks, "--agent", "claude-code", "--model", "faux/cc", "--sandbox", "local",
        "--output-dir", root / "runs", "--run-name", "conv", "--display", "none",
        timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = root / "runs" / "conv"
    [record] = [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]
    assert record["reward"] == 1, record
    assert record["usage"]["source"] == "gateway"
    out = root / "report.html"
    made = harness("report", run_dir, "-o", out)
    assert made.returncode == 0, made.stdout + made.stderr
    return out


def test_the_trial_page_shows_the_session_as_an_inert_conversation(
    report: Path, canary: Canary, watched: Callable[..., Watched]
) -> None:
    w = watched()
    w.goto(report.as_uri() + "#/run/0/trials")
    w.page.click("a.trial-link")
    w.page.wait_for_selector(".trial[data-ready]", timeout=30_000)
    conv = w.page.locator("#conversation")
    text = conv.inner_text()

    instruction = (REPO / "examples" / "tasks" / "hello-file" / "instruction.md").read_text()
    assert conv.locator(".turn.role-user").count() == 1
    assert instruction.strip().splitlines()[0] in text
    assert conv.locator(".turn.role-assistant").count() == 2
    assert "stop tool_use" in text and "tokens" in text
    # The tool call, its arguments and its result, paired.
    call = conv.locator(".event.tool-call").first
    assert "Bash" in call.locator(".who").first.inner_text()
    call_text = call.inner_text()
    assert "hello.txt" in call_text  # the arguments
    result = call.locator(".event.tool-result").inner_text()
    assert _script_tag(canary.port) in result and _img(canary.port) in result
    assert "\\x1b[31mRED\\x1b[0m" in result  # ESC shown as a marked escape
    assert call.locator("span.ctl").count() >= 2
    assert "Done. " + _script_tag(canary.port) in text
    assert "Usage is the gateway's count" in text

    # Nothing ran, nothing was fetched, no element was made from the agent's text.
    assert w.page.evaluate("window.__xss") is None
    assert canary.hits == []
    assert w.page.locator("#app script, #app img, #app iframe, #app object").count() == 0
    assert w.problems() == []
    html = report.read_text()
    assert html.count("<script") == 3  # the app, the index, the one trial's data
