"""Hostile content: an agent that writes markup, script, links, entities, ANSI escapes and a
10 MB single line, shown by the report (file://) and by ``harness view`` (http).

The run is real: a task set whose scripted model (a faux model, through the gateway) makes
the builtin agent write hostile files and say hostile things, and whose verifier prints
them. A crafted 10 MB single-line message is then appended to the trial's transcript. Every
payload tries to reach a canary HTTP server on 127.0.0.1 or set ``window.__xss``; the
attack succeeds if the canary sees any request or the flag is set. The page must show each
payload as text and stay usable.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from browser_support import Watched, harness, start_view

BIG = 10_000_000
TASK_NAME = 'hostile/<img src=x onerror="window.__xss=9">'


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

    def payloads(self) -> dict[str, str]:
        url = f"http://127.0.0.1:{self.port}"
        return {
            "script": f"<script>window.__xss=1;fetch('{url}/script')</script>",
            "img": f'<img src="{url}/img" onerror="window.__xss=2">',
            "link": f"<a href=\"javascript:fetch('{url}/link')\">click me</a>"
            " [md](javascript:window.__xss=3)",
            "entity": "&lt;b&gt;not bold&lt;/b&gt; &amp;amp; &#x3C;script&#x3E;",
            "ansi": "\x1b[31mRED\x1b[0m",
            "bidi": "\u202eevil",
        }


@pytest.fixture(scope="module")
def canary() -> Iterator[Canary]:
    c = Canary()
    yield c
    c.server.shutdown()


def hostile_taskset(root: Path, p: dict[str, str]) -> Path:
    tasks = root / "tasks"
    task = tasks / "evil"
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text(
        f"[task]\nname = {json.dumps(TASK_NAME)}\n\n"
        f"[metadata]\ncategory = {json.dumps(p['script'])}\n"
        "\n[agent]\ntimeout_sec = 60\n\n[verifier]\ntimeout_sec = 60\n"
    )
    (task / "instruction.md").write_text(f"Do evil things. {p['script']}\n")
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\n"
        f"printf '%s\\n' {json.dumps(p['script'])} {json.dumps(p['link'])}\n"
        "printf '\\033[32mgreen\\033[0m\\n'\n"
        'echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
    )
    (task / "tests" / "test.sh").chmod(0o755)
    (task / "workspace").mkdir()
    (task / "workspace" / "keep.txt").write_text("initial\n")
    everything = "".join(p.values())
    script = {
        "tasks": {
            TASK_NAME: [
                {
                    "text": "Starting " + p["script"],
                    "tool_calls": [
                        {
                            "name": "write",
                            "arguments": {"path": "evil.html", "content": everything + "\n"},
                        },
                        {
                            "name": "write",
                            "arguments": {"path": "keep.txt", "content": p["img"] + "\n"},
                        },
                    ],
                },
                {
                    "tool_calls": [
                        {
                            "name": "shell",
                            "arguments": {
                                "command": "printf '\\033[31mRED\\033[0m <b>bold</b>\\n'; "
                                f"head -c {BIG} /dev/zero | tr '\\0' A > big.txt"
                            },
                        }
                    ]
                },
                {"text": "Done. " + everything},
            ]
        }
    }
    (tasks / "hostile.json").write_text(json.dumps(script))
    (tasks / "models.toml").write_text('[models."faux/hostile"]\nscript = "hostile.json"\n')
    return tasks


@pytest.fixture(scope="module")
def hostile_run(canary: Canary, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hostile")
    tasks = hostile_taskset(root, canary.payloads())
    result = harness(
        "run", tasks, "--agent", "builtin", "--model", "faux/hostile",
        "--output-dir", root / "runs", "--run-name", "hostile", "--display", "none",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = root / "runs" / "hostile"
    record = json.loads((run_dir / "trials.jsonl").read_text().splitlines()[0])
    transcript = run_dir / record["evidence_dir"] / "transcript.jsonl"
    # A crafted 10 MB single-line message, as a runaway agent could produce.
    crafted = {
        "type": "message",
        "role": "assistant",
        "content": "C" * BIG + canary.payloads()["script"],
        "timestamp": "2026-11-30T00:00:00Z",
    }
    with open(transcript, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(crafted) + "\n")
    return run_dir


@pytest.fixture(scope="module", params=["file", "http"])
def hostile_url(request: pytest.FixtureRequest, hostile_run: Path) -> Iterator[str]:
    if request.param == "file":
        out = hostile_run.parent.parent / "report.html"
        result = harness("report", hostile_run, "-o", out)
        assert result.returncode == 0, result.stdout + result.stderr
        yield out.as_uri()
        return
    view = start_view(hostile_run)
    try:
        yield view.url
    finally:
        view.stop()


def assert_nothing_ran(w: Watched, canary: Canary) -> None:
    assert w.page.evaluate("window.__xss") is None
    assert canary.hits == []
    assert w.page.locator("#app script, #app img, #app iframe, #app object").count() == 0
    hrefs = w.page.eval_on_selector_all("a", "els => els.map(e => e.getAttribute('href'))")
    assert all(h.startswith(("#/", "/api/")) for h in hrefs), hrefs
    assert w.problems() == []


def test_hostile_trial_renders_as_text(
    hostile_url: str, canary: Canary, watched: Callable[..., Watched], artifacts: Path
) -> None:
    p = canary.payloads()
    w = watched()
    w.goto(hostile_url + "#/run/0/trials")
    # The task name and category are the agent-side author's too: shown as text.
    assert TASK_NAME in w.text('[data-table="trials-0"] tbody')
    assert p["script"] in w.text('[data-table="trials-0"] tbody')
    w.page.click("a.trial-link")
    w.page.wait_for_selector(".trial[data-ready]", timeout=30_000)

    transcript = w.text("#transcript")
    for key in ("script", "img", "link", "entity"):
        assert p[key] in transcript, key
    assert "\\x1b[31mRED\\x1b[0m" in transcript  # ESC shown as a marked escape
    assert w.page.locator("#transcript span.ctl").count() >= 4
    assert "<U+202E>evil" in transcript  # a bidi override cannot reorder the text
    # The 10 MB line is clipped, says so, and can be unfolded a step at a time.
    assert f"{BIG + len(p['script']):,} chars in all" in transcript
    assert len(transcript) < 1_000_000
    huge = w.page.locator("#transcript .textblock", has_text="Clipped by the report").first
    before = len(huge.inner_text())
    huge.locator("button.more").click()
    assert len(huge.inner_text()) > before

    changes = w.text("#changes")
    assert "evil.html" in changes and p["script"] in changes and p["entity"] in changes
    assert "keep.txt" in changes and "-initial" in changes and "+" + p["img"] in changes
    assert "big.txt" in changes and "Too large for a line diff" in changes
    verifier = w.text("#verifier")
    assert p["script"] in verifier and "\\x1b[32mgreen" in verifier
    w.page.screenshot(path=artifacts / f"report-hostile-{hostile_url[:4]}.png", full_page=False)
    assert_nothing_ran(w, canary)

    # Still usable: the navigation works after all that.
    w.page.click("header nav a.sub >> nth=0")
    w.page.wait_for_selector('[data-table="trials-0"]')
    assert_nothing_ran(w, canary)


def test_hostile_overview_and_text_of_report(
    hostile_url: str, hostile_run: Path, canary: Canary, watched: Callable[..., Watched]
) -> None:
    w = watched()
    w.goto(hostile_url + "#/run/0")
    assert canary.payloads()["script"] in w.text("#tasks")  # the category column
    assert_nothing_ran(w, canary)
    if hostile_url.startswith("file:"):
        html = (hostile_run.parent.parent / "report.html").read_text()
        # No payload can open an element: the app, the index and the one trial's data only.
        assert html.count("<script") == 3


def test_view_serves_only_evidence(hostile_run: Path) -> None:
    view = start_view(hostile_run)
    port = urlsplit(view.url).port
    assert port is not None

    def get(path: str, host: str = f"127.0.0.1:{port}") -> tuple[int, bytes, dict[str, str]]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", path, headers={"Host": host})
        res = conn.getresponse()
        body = res.read()
        conn.close()
        return res.status, body, dict(res.getheaders())

    try:
        record = json.loads((hostile_run / "trials.jsonl").read_text().splitlines()[0])
        big = f"/api/raw?run=0&path={record['evidence_dir']}/workspace/big.txt"
        status, body, headers = get(big)
        assert status == 200 and len(body) == BIG
        assert headers["Content-Type"].startswith("text/plain")
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert "default-src 'none'" in headers["Content-Security-Policy"]
        for path in (
            "config.toml",
            "../../../etc/passwd",
            "trials/../config.toml",
            "trials/%2e%2e/config.toml",
            "/etc/passwd",
        ):
            assert get(f"/api/raw?run=0&path={path}")[0] == 404, path
        # DNS rebinding: a page served under another name cannot read the viewer.
        assert get("/api/index", host=f"evil.example:{port}")[0] == 403
        assert get("/api/index")[0] == 200
    finally:
        view.stop()
