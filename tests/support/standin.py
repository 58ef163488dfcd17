"""A model provider's stand-in on loopback that keeps its own log of every request.

Tests judge from it what reached the provider: the gateway under test cannot write here.
Each request is answered 200 with a minimal body of the protocol its path names.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any

from support.loopback import LoopbackServer

#: What each protocol's upstream answers (any 200 the gateway relays will do).
ANSWERS: dict[str, dict[str, Any]] = {
    "chat": {"id": "c", "object": "chat.completion", "choices": [], "usage": None},
    "responses": {"id": "r", "object": "response", "status": "completed", "output": []},
    "messages": {"id": "m", "type": "message", "role": "assistant", "content": []},
    "gemini": {"candidates": []},
}


def _kind(path: str) -> str:
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/responses"):
        return "responses"
    if path.endswith("/messages"):
        return "messages"
    return "gemini"


class RecordingUpstream:
    """The provider's stand-in on 127.0.0.1: every request it receives, in its own log."""

    def __init__(self) -> None:
        self._seen: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.server = LoopbackServer(self._handle)
        self.port = self.server.port

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("content-length") or 0)
        raw = h.rfile.read(length)
        try:
            body: Any = json.loads(raw or b"{}")
        except ValueError:
            body = raw.decode("latin-1")
        with self._lock:
            self._seen.append({"path": h.path, "body": body})
        data = json.dumps(ANSWERS[_kind(h.path)]).encode()
        h.send_response(200)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def log(self) -> list[dict[str, Any]]:
        """Every request received so far: ``{"path", "body"}``."""
        with self._lock:
            return list(self._seen)

    def close(self) -> None:
        """Stop serving."""
        self.server.close()


__all__ = ["ANSWERS", "RecordingUpstream"]
