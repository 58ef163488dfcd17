"""A stand-in for Harbor Hub's read API: a real HTTP server on 127.0.0.1, in a thread.

It answers what Harbor's client asks (PostgREST-style table reads, the
``resolve_task_version`` RPC, the storage bucket ``packages``) from plain dicts a test
fills and may make hostile at will. Packages are real ``tar.gz`` archives of real task
dirs, with Harbor's digest computed here independently of the harness (SHA-256 over
``PATH NUL SHA256(FILE) LF`` records of the covered files, in order of path). Every request
is logged, so a test can tell that an archive was never asked for.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import tarfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

_COVERED_FILES = ("task.toml", "instruction.md", "README.md", "trajectory.json")
_COVERED_DIRS = ("environment", "tests", "solution", "steps")


def harbor_digest(task_dir: Path) -> str:
    """The 64 hex digits of Harbor's package digest of ``task_dir``."""
    records = []
    for path in sorted(task_dir.rglob("*")):
        rel = path.relative_to(task_dir).as_posix()
        top = rel.split("/")[0]
        inside = top in _COVERED_DIRS if "/" in rel else rel in _COVERED_FILES
        if path.is_file() and not path.is_symlink() and inside:
            records.append((rel, hashlib.sha256(path.read_bytes()).hexdigest()))
    outer = hashlib.sha256()
    for rel, inner in sorted(records):
        outer.update(f"{rel}\0{inner}\n".encode())
    return outer.hexdigest()


def pack(task_dir: Path) -> bytes:
    """``task_dir`` as Harbor's archive: a ``tar.gz`` with ``task.toml`` at its root."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(task_dir.rglob("*")):
            tar.add(path, arcname=path.relative_to(task_dir).as_posix(), recursive=False)
    return buffer.getvalue()


def make_task(root: Path, name: str, answer: str = "42") -> Path:
    """A task dir: the oracle writes ``answer.txt``; the verifier rewards ``answer``."""
    task = root / name
    for part in ("tests", "solution"):
        (task / part).mkdir(parents=True, exist_ok=True)
    (task / "task.toml").write_text(
        f'[task]\nname = "acme/{name}"\n\n[agent]\ntimeout_sec = 60\n\n'
        "[verifier]\ntimeout_sec = 60\n"
    )
    (task / "instruction.md").write_text(f"Write {answer} into answer.txt.\n")
    solve = task / "solution" / "solve.sh"
    solve.write_text(
        f'#!/bin/bash\ncd "${{HARNESS_WORKSPACE:-$PWD}}"\necho {answer} > answer.txt\n'
    )
    test = task / "tests" / "test.sh"
    test.write_text(
        "#!/bin/bash\nWS=${HARNESS_WORKSPACE:-$PWD}\nVD=${HARNESS_VERIFIER_DIR:-/logs/verifier}\n"
        f'if [ "$(cat "$WS/answer.txt" 2>/dev/null)" = "{answer}" ]; then r=1; else r=0; fi\n'
        'echo $r > "$VD/reward.txt"\n'
    )
    for script in (solve, test):
        script.chmod(0o755)
    return task


@dataclass
class HubState:
    """What the stand-in serves; a test edits it freely (also to make it hostile).

    Attributes:
        dataset_versions: ``(org, name)`` → list of version rows
            (``{id, revision, content_hash, description, yanked_at, yanked_reason, tags}``).
        dataset_tasks: version id → list of ``dataset_version_task`` rows.
        task_versions: ``(org, name)`` → list of task version rows
            (``{id, archive_path, content_hash, revision, yanked_at, yanked_reason, tags}``).
        storage: archive path → bytes.
        requests: ``METHOD PATH`` of every request served.
    """

    dataset_versions: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    dataset_tasks: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    task_versions: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    storage: dict[str, bytes] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)

    def publish_task(
        self, org: str, task_dir: Path, tags: tuple[str, ...] = ("latest",), revision: int = 1
    ) -> str:
        """Package ``task_dir`` as ``org/<dir name>``; its digest (64 hex digits)."""
        name = task_dir.name
        digest = harbor_digest(task_dir)
        path = f"{org}/{name}/{digest}/dist.tar.gz"
        self.storage[path] = pack(task_dir)
        versions = self.task_versions.setdefault((org, name), [])
        for version in versions:
            version["tags"] = [t for t in version["tags"] if t not in tags]
        versions.append(
            {
                "id": f"tv-{org}-{name}-{revision}",
                "archive_path": path,
                "content_hash": digest,
                "revision": revision,
                "yanked_at": None,
                "yanked_reason": None,
                "tags": list(tags),
            }
        )
        return digest

    def task_row(self, org: str, name: str, digest: str) -> dict[str, Any]:
        """A ``dataset_version_task`` row naming a package task version."""
        return {
            "task_version": {
                "content_hash": digest,
                "package": {"name": name, "org": {"name": org}},
            }
        }

    def publish_dataset(
        self,
        org: str,
        name: str,
        rows: list[dict[str, Any]],
        tags: tuple[str, ...] = ("latest",),
        revision: int = 1,
    ) -> str:
        """A dataset version of ``rows``; its digest (64 hex digits)."""
        digest = hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()
        version_id = f"dv-{org}-{name}-{revision}"
        self.dataset_tasks[version_id] = rows
        versions = self.dataset_versions.setdefault((org, name), [])
        for version in versions:
            version["tags"] = [t for t in version["tags"] if t not in tags]
        versions.append(
            {
                "id": version_id,
                "revision": revision,
                "content_hash": digest,
                "description": f"{org}/{name}",
                "yanked_at": None,
                "yanked_reason": None,
                "tags": list(tags),
            }
        )
        return digest


def _eq(query: dict[str, list[str]], key: str) -> str | None:
    values = query.get(key)
    return values[0].removeprefix("eq.") if values else None


def _version_fields(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "tags"}


def _find(versions: list[dict[str, Any]], ref: str) -> dict[str, Any] | None:
    for version in versions:
        if ref.startswith("sha256:") and version["content_hash"] == ref.removeprefix("sha256:"):
            return version
        if ref.isdigit() and str(version["revision"]) == ref:
            return version
        if ref in version["tags"]:
            return version
    return None


def _handler(state: HubState) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _json(self, data: object) -> None:
            self._send(200, json.dumps(data).encode())

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            state.requests.append(f"GET {url.path}")
            query = parse_qs(url.query)
            storage = "/storage/v1/object/authenticated/packages/"
            if url.path.startswith(storage):
                blob = state.storage.get(unquote(url.path.removeprefix(storage)))
                if blob is None:
                    self._send(404, b'{"error":"not found"}')
                else:
                    self._send(200, blob, "application/gzip")
                return
            org, name = _eq(query, "package.org.name"), _eq(query, "package.name")
            versions = state.dataset_versions.get((org or "", name or ""), [])
            package = {"name": name, "type": "dataset", "org": {"name": org}}
            if url.path == "/rest/v1/dataset_version_tag":
                found = _find(versions, _eq(query, "tag") or "")
                self._json(
                    [{"dataset_version": _version_fields(found), "package": package}]
                    if found
                    else []
                )
            elif url.path == "/rest/v1/dataset_version":
                revision, digest = _eq(query, "revision"), _eq(query, "content_hash")
                found = _find(versions, revision or f"sha256:{digest}")
                self._json([{**_version_fields(found), "package": package}] if found else [])
            elif url.path == "/rest/v1/dataset_version_task":
                rows = state.dataset_tasks.get(_eq(query, "dataset_version_id") or "", [])
                offset = int(query.get("offset", ["0"])[0])
                limit = int(query.get("limit", ["1000"])[0])
                self._json(rows[offset : offset + limit])
            else:
                self._send(404, b'{"error":"no such table"}')

        def do_POST(self) -> None:
            url = urlsplit(self.path)
            state.requests.append(f"POST {url.path}")
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            if url.path != "/rest/v1/rpc/resolve_task_version":
                self._send(404, b'{"error":"no such function"}')
                return
            versions = state.task_versions.get((body["p_org"], body["p_name"]), [])
            found = _find(versions, body["p_ref"])
            self._json(_version_fields(found) if found else None)

    return Handler


@contextmanager
def serve_hub(state: HubState) -> Iterator[str]:
    """Serve ``state`` on a free port of 127.0.0.1; yields the Hub's base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def hub_env(cache: Path) -> dict[str, str]:
    """An environment for a CLI run with its own cache and no Hub key."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_HUB")}
    return {**env, "HARNESS_CACHE_DIR": str(cache)}


__all__ = [
    "HubState",
    "harbor_digest",
    "hub_env",
    "make_task",
    "pack",
    "serve_hub",
]
