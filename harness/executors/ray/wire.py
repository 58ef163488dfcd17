"""The bridge's wire format: one JSON header line per connection, then JSON lines or bytes.

A worker opens a TCP connection to the driver's bridge per use and sends one header line,
``{"op": ..., "trial": <id>, "ticket": <secret>, ...}``. The ops:

- ``watch``: the attempt's control channel, open while it runs. The worker sends
  ``{"node": ip}`` first, then ``{"phase": name}`` lines; the driver sends ``{"signal":
  "cancel"}`` (first interrupt) or ``{"signal": "abort"}`` (second). Either end closing it
  ends the attempt's link: a worker whose driver is gone kills its trial.
- ``pipe``: from here on raw bytes, spliced to the trial's gateway socket on the driver
  (one HTTP connection of the sandbox's agent).
- ``revoke``: end the trial's gateway access; the reply is its usage totals.
- ``call``: a model call of a trusted in-process agent; the reply is status and body.
"""

from __future__ import annotations

import json
import socket
import threading
from typing import Any

from harness.errors import HarnessError

MAX_LINE = 64 << 20
"""Longest header or reply line (a ``call`` carries a model request or response)."""
CHUNK = 1 << 16


class WireError(HarnessError):
    """The other end closed early or sent something that is not a JSON line."""


def send_json(sock: socket.socket, message: dict[str, Any]) -> None:
    """Send one JSON line."""
    sock.sendall(json.dumps(message, separators=(",", ":")).encode() + b"\n")


class LineReader:
    """Reads JSON lines from a socket; bytes after a line stay buffered for :meth:`rest`."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buffer = b""

    def read(self) -> dict[str, Any] | None:
        """The next JSON line, or None at end of stream.

        Raises:
            WireError: A line longer than :data:`MAX_LINE`, or not a JSON object.
        """
        while b"\n" not in self._buffer:
            if len(self._buffer) > MAX_LINE:
                raise WireError("line too long")
            data = self.sock.recv(CHUNK)
            if not data:
                if self._buffer:
                    raise WireError("connection closed mid-line")
                return None
            self._buffer += data
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            message = json.loads(line)
        except ValueError:
            raise WireError("not a JSON line") from None
        if not isinstance(message, dict):
            raise WireError("not a JSON object")
        return message

    def rest(self) -> bytes:
        """What arrived after the last line read (the start of a spliced stream)."""
        data, self._buffer = self._buffer, b""
        return data


def _copy(source: socket.socket, target: socket.socket) -> None:
    try:
        while True:
            data = source.recv(CHUNK)
            if not data:
                break
            target.sendall(data)
    except OSError:
        pass
    finally:
        try:
            target.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def splice(left: socket.socket, right: socket.socket, *, head: bytes = b"") -> None:
    """Copy bytes both ways until both sides are done, then close both.

    Args:
        left: One end (e.g. the connection from a worker).
        right: The other end (e.g. the trial's gateway socket).
        head: Bytes already read from ``left`` (sent to ``right`` first).
    """
    try:
        if head:
            right.sendall(head)
        back = threading.Thread(target=_copy, args=(right, left), daemon=True)
        back.start()
        _copy(left, right)
        back.join()
    except OSError:
        pass
    finally:
        left.close()
        right.close()


__all__ = ["CHUNK", "MAX_LINE", "LineReader", "WireError", "send_json", "splice"]
