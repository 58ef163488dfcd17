"""A key canary's pieces: an upstream that records what reached it, and a memory search.

Shared by the tests that judge from outside that a real provider key never reaches a
sandbox (``tests/e2e/test_model_key_secrecy.py``) or a Ray worker node
(``tests/e2e/test_ray_executor.py``).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

#: The fake key's prefix (a search spells it in two pieces, so it never finds itself).
CANARY_PREFIX = "sk-canary-"


class Upstream:
    """An OpenAI-compatible server on loopback that records what reached it."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                headers = {k.lower(): v for k, v in self.headers.items()}
                upstream.requests.append({"path": self.path, "headers": headers, "body": body})
                answer = json.dumps(
                    {
                        "id": "chatcmpl-1",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body.get("model"),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": "hello"},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def process_memory_has(pid: int, needle: bytes) -> bool:
    """Whether any readable mapping of ``pid`` contains ``needle`` (we are root)."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
        mem = open(f"/proc/{pid}/mem", "rb", buffering=0)  # noqa: SIM115
    except OSError:
        return False
    with mem:
        for line in maps:
            addr, perms = line.split()[:2]
            if "r" not in perms:
                continue
            start, end = (int(x, 16) for x in addr.split("-"))
            if end - start > 256 << 20:
                continue
            try:
                mem.seek(start)
                if needle in mem.read(end - start):
                    return True
            except (OSError, ValueError, OverflowError):
                continue
    return False
