"""A real HTTP server on 127.0.0.1 in a thread, for upstreams the tests script.

The model gateway's tests (``tests/integration/test_gateway.py``, ``test_gateway_limits.py``)
stand up upstreams that record every request and answer as a test says; this is the part
they share: the server on loopback, its thread, its backlog, and writing a chunked body.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: Handler errors a server stays quiet about: every error, or only a cut connection.
QUIET_ALWAYS: Callable[[BaseException | None], bool] = lambda error: True  # noqa: E731
QUIET_ON_CUT: Callable[[BaseException | None], bool] = lambda error: isinstance(  # noqa: E731
    error, ConnectionError
)


class LoopbackServer:
    """A ``ThreadingHTTPServer`` on 127.0.0.1 passing each request of ``methods`` to ``handle``.

    Args:
        handle: Called in the server's handler thread with the request's handler.
        port: 0 picks a free port (``self.port`` says which).
        methods: The HTTP methods served (others get the stdlib's 501).
        quiet: Which handler errors are not printed (the gateway cutting a stream is what
            some tests do on purpose).
    """

    def __init__(
        self,
        handle: Callable[[BaseHTTPRequestHandler], None],
        *,
        port: int = 0,
        methods: Iterable[str] = ("POST",),
        quiet: Callable[[BaseException | None], bool] = QUIET_ALWAYS,
    ) -> None:
        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 128  # 20 concurrent connects must not overflow the backlog (5)

            def handle_error(self, request: Any, client_address: Any) -> None:
                if not quiet(sys.exc_info()[1]):
                    super().handle_error(request, client_address)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

        def serve(h: BaseHTTPRequestHandler) -> None:
            handle(h)

        for method in methods:
            setattr(Handler, f"do_{method}", serve)
        self.server = Server(("127.0.0.1", port), Handler)
        self.port: int = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        """Stop serving and close the listening socket."""
        self.server.shutdown()
        self.server.server_close()


def write_chunk(h: BaseHTTPRequestHandler, data: bytes) -> None:
    """Send one chunk of a ``transfer-encoding: chunked`` body, flushed."""
    h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    h.wfile.flush()


def end_chunks(h: BaseHTTPRequestHandler) -> None:
    """Send the last chunk of a chunked body."""
    h.wfile.write(b"0\r\n\r\n")
    h.wfile.flush()
