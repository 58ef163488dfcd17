"""What the browser tests share: the chromium flags, the CLI, a watched page.

The fixtures (in conftest.py):
    browser: one chromium for the session (``/usr/bin/chromium``, installed by
        ``scripts/browser.sh``; a fresh profile; no background networking).
    watched: ``watched()`` → a new page whose console messages, page errors and every
        request are recorded (:class:`Watched`).
    artifacts: the dir screenshots go to (``test-artifacts/``, git-ignored; override with
        ``HARNESS_TEST_ARTIFACTS``).
    example_runs: the examples run twice, real and local: the builtin agent with the
        scripted ``faux/demo`` model (every task 1.0) and the ``nop`` agent (every task 0.0).
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import support.cli
from playwright.sync_api import ConsoleMessage, Page
from support.cli import spawn_view

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
]


def harness(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the harness CLI as a subprocess (the way a user does)."""
    return support.cli.harness(*args, env={"TERM": "dumb"}, timeout=timeout)


def run_examples(output_dir: Path, *agent_args: str) -> Path:
    """``harness run examples/tasks ...`` into ``output_dir``; the one run dir it made."""
    before = set(output_dir.iterdir()) if output_dir.exists() else set()
    result = harness(
        "run",
        REPO / "examples" / "tasks",
        *agent_args,
        "--output-dir",
        output_dir,
        "--display",
        "none",
    )
    assert result.returncode in (0, 1), result.stdout + result.stderr
    made = [p for p in output_dir.iterdir() if p not in before and p.is_dir()]
    assert len(made) == 1, made
    return made[0]


@dataclass
class Watched:
    """A page and everything it said or asked for."""

    page: Page
    console: list[ConsoleMessage] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        """Console errors and warnings, and uncaught page errors."""
        said = [f"{m.type}: {m.text}" for m in self.console if m.type in ("error", "warning")]
        return said + [f"pageerror: {e}" for e in self.errors]

    def goto(self, url: str) -> None:
        """Open ``url`` and wait until the app has drawn its first page."""
        self.page.goto(url)
        self.page.wait_for_selector("#app[data-rendered]")

    def text(self, selector: str) -> str:
        """The text of the first element matching ``selector``."""
        return self.page.locator(selector).first.inner_text()


class ViewProcess:
    """A ``harness view`` subprocess on a free port of 127.0.0.1 (see :func:`start_view`)."""

    def __init__(self, proc: subprocess.Popen[str], url: str) -> None:
        self.proc = proc
        self.url = url

    def stop(self) -> None:
        """Kill the server's process group (only the one this helper started)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)


def start_view(*run_dirs: Path) -> ViewProcess:
    """Start ``harness view RUN_DIR... --port 0`` and wait for the URL it prints."""
    view = spawn_view(*run_dirs)
    if view.url is None:
        view.proc.kill()
        raise AssertionError(f"harness view printed {view.first_line!r}; stderr: {view.stderr()}")
    return ViewProcess(view.proc, view.url)
