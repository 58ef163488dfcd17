"""``harness view``: the report's pages served on 127.0.0.1, following runs live.

The server is read-only and small (stdlib ``http.server``, one thread per request):

- ``GET /``: the page, with the current index embedded;
- ``GET /api/version``: each run's fingerprint (sizes and mtimes of its records, summary,
  status and config) and whether one is running: the page polls it every second and
  reloads the index when it changes;
- ``GET /api/index``: the index (re-read from the run dirs only when a fingerprint moved);
- ``GET /api/trial?run=N&id=ID``: one trial's page data;
- ``GET /api/raw?run=N&path=REL``: a whole evidence file (under ``trials/`` or
  ``attempts/``) as ``text/plain``, for text the page clipped.

It binds to 127.0.0.1 only and answers only requests whose ``Host`` names it (a page from
another site cannot reach it through DNS rebinding). Every response carries the page's
Content-Security-Policy and ``nosniff``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from harness.records.layout import ATTEMPTS_DIRNAME, TRIALS_DIRNAME
from harness.report.bundle import build_index
from harness.report.clip import Limits
from harness.report.evidence import trial_detail
from harness.report.page import content_security_policy, render_page
from harness.report.rundata import RunData, load_run, read_status_safely, run_fingerprint
from sandbox.beneath import read_beneath

__all__ = ["ViewServer", "make_server"]

RAW_ROOTS = (TRIALS_DIRNAME, ATTEMPTS_DIRNAME)
"""The run-dir folders whose files ``/api/raw`` serves (the evidence, nothing else)."""

RAW_LIMIT = 64 * 1024 * 1024
"""Largest evidence file ``/api/raw`` serves whole."""


class _RunSet:
    """The run dirs being viewed, re-read when their files change."""

    def __init__(self, run_dirs: Sequence[Path], limits: Limits) -> None:
        self.run_dirs = [Path(d) for d in run_dirs]
        self.limits = limits
        self._lock = threading.Lock()
        self._fingerprints: list[Any] = []
        self._runs: list[RunData] = []
        self._index: dict[str, Any] = {}

    def fingerprints(self) -> list[Any]:
        return [run_fingerprint(d) for d in self.run_dirs]

    def running(self) -> bool:
        return any((read_status_safely(d) or {}).get("state") == "running" for d in self.run_dirs)

    def current(self) -> tuple[list[RunData], dict[str, Any]]:
        """The runs and index, re-read if any run dir changed since the last read."""
        with self._lock:
            now = self.fingerprints()
            if now != self._fingerprints or not self._runs:
                self._runs = [load_run(d) for d in self.run_dirs]
                self._index = build_index(self._runs, live=True)
                self._fingerprints = now
            return self._runs, self._index


class ViewServer(ThreadingHTTPServer):
    """The HTTP server of ``harness view`` (see the module docstring)."""

    daemon_threads = True

    def __init__(self, port: int, runs: _RunSet) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.runs = runs
        self.title = "harness view: " + ", ".join(d.name for d in runs.run_dirs)

    @property
    def url(self) -> str:
        """Where the page is served."""
        return f"http://127.0.0.1:{self.server_address[1]}/"


def make_server(
    run_dirs: Sequence[Path], *, port: int = 0, limits: Limits | None = None
) -> ViewServer:
    """A server for ``run_dirs`` on 127.0.0.1 (``port`` 0 picks a free one).

    Raises:
        ReportError: A run dir cannot be read (checked before the server starts).
        OSError: The port cannot be bound.
    """
    runs = _RunSet(run_dirs, limits or Limits())
    runs.current()  # fail now, not on the first request
    return ViewServer(port, runs)


class _Handler(BaseHTTPRequestHandler):
    server: ViewServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the terminal shows the URL, not every poll."""

    def _host_ok(self) -> bool:
        host = (self.headers.get("Host") or "").lower()
        port = self.server.server_address[1]
        return host in (f"127.0.0.1:{port}", f"localhost:{port}")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Content-Security-Policy", content_security_policy())
        self.end_headers()
        self.wfile.write(body)

    def _json(self, value: Any, status: int = HTTPStatus.OK) -> None:
        data = json.dumps(value, ensure_ascii=True, allow_nan=False).encode("ascii")
        self._send(status, data, "application/json")

    def _error(self, status: int, message: str) -> None:
        self._json({"error": message}, status)

    def do_GET(self) -> None:
        """Route a request (see the module docstring)."""
        if not self._host_ok():
            self._error(HTTPStatus.FORBIDDEN, "unexpected Host header")
            return
        parts = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        try:
            self._route(parts.path, query)
        except Exception as exc:  # one bad run dir must not kill the viewer
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}")

    def _route(self, path: str, query: dict[str, str]) -> None:
        runs = self.server.runs
        if path == "/":
            _, index = runs.current()
            page = render_page(self.server.title, index).encode("utf-8")
            self._send(HTTPStatus.OK, page, "text/html; charset=utf-8")
        elif path == "/api/version":
            self._json({"fingerprints": runs.fingerprints(), "running": runs.running()})
        elif path == "/api/index":
            self._json(runs.current()[1])
        elif path == "/api/trial":
            self._trial(query)
        elif path == "/api/raw":
            self._raw(query)
        else:
            self._error(HTTPStatus.NOT_FOUND, "no such page")

    def _run(self, query: dict[str, str]) -> RunData | None:
        runs, _ = self.server.runs.current()
        try:
            number = int(query.get("run", ""))
        except ValueError:
            return None
        return runs[number] if 0 <= number < len(runs) else None

    def _trial(self, query: dict[str, str]) -> None:
        run = self._run(query)
        wanted = query.get("id")
        record = next((r for r in run.records if r.id == wanted), None) if run else None
        if run is None or record is None:
            self._error(HTTPStatus.NOT_FOUND, "no such trial")
            return
        self._json(trial_detail(run.run_dir, record, self.server.runs.limits))

    def _raw(self, query: dict[str, str]) -> None:
        run = self._run(query)
        relative = query.get("path", "")
        target = _evidence_file(relative)
        read = read_beneath(run.run_dir, target, RAW_LIMIT) if run and target else None
        if read is None:  # missing, not a regular file, or reached through a link
            self._error(HTTPStatus.NOT_FOUND, "no such evidence file")
            return
        self._send(HTTPStatus.OK, read.data, "text/plain; charset=utf-8")


def _evidence_file(relative: str) -> str | None:
    """``relative`` as a path inside the run's evidence folders, or None (no ``..``).

    It is opened beneath the run dir by dir fd, never through a link at any component.
    """
    pieces = [p for p in relative.split("/") if p]
    if not pieces or pieces[0] not in RAW_ROOTS:
        return None
    if any(p in (".", "..") or "\0" in p for p in pieces):
        return None
    return "/".join(pieces)
