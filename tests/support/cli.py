"""The harness CLI as a user runs it: ``python -m harness ...`` in a subprocess.

Shared by the tests that judge the CLI from outside (tests/security, tests/browser): one
command to its end (:func:`harness`), and ``harness view`` started on a free port of
127.0.0.1 (:func:`spawn_view`), killed by its process group (:meth:`View.kill`).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: Wide, colourless output, so that messages are matched on one line.
CLI_ENV = {"COLUMNS": "200", "NO_COLOR": "1"}
SERVING = re.compile(r"serving (http://127\.0\.0\.1:\d+/)")


def harness(
    *args: str | Path, env: Mapping[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """One real ``python -m harness ARGS...`` to its end, from the repo, stdin closed."""
    return subprocess.run(
        [sys.executable, "-m", "harness", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **CLI_ENV, **(env or {})},
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@dataclass
class View:
    """A ``harness view`` process (see :func:`spawn_view`)."""

    proc: subprocess.Popen[str]
    #: The first line it printed.
    first_line: str
    #: The URL that line names, or None (the view refused the run dirs, or died).
    url: str | None

    def kill(self, timeout: float = 30) -> None:
        """Kill the view's process group (only the one this helper started) and reap it."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=timeout)

    def stderr(self) -> str:
        """What it wrote on stderr (read to the end: kill it first if it still runs)."""
        return self.proc.stderr.read() if self.proc.stderr else ""


def spawn_view(*run_dirs: Path) -> View:
    """Start ``harness view RUN_DIR... --port 0`` in a session of its own; read its first line."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "view", *map(str, run_dirs), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **CLI_ENV},
        start_new_session=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = SERVING.search(line)
    return View(proc, line, match.group(1) if match else None)
