"""Relaying the phase's model calls to the trial's gateway socket (stdlib, Python >= 3.9).

The phase opens a loopback listener in its own network namespace and hands it to the
supervisor (see :mod:`launch`); the supervisor, root and not dumpable, relays each
connection to the gateway's unix socket, which the phase's user cannot open. The phase
holds only a per-trial token; the gateway holds the real key.
"""

from __future__ import annotations

import os
import threading
from typing import Any, List, Optional

_READ_CHUNK = 65536


class Forwarder:
    """Relays loopback TCP connections in the agent's netns to the trial's gateway socket.

    The agent reaches the model only through this: the gateway (host side) holds the real
    key; the agent holds a per-trial token. Runs in the supervisor parent (root, not
    dumpable), which can open the gateway socket; the agent user cannot.
    """

    def __init__(self, listener: Any, socket_path: str) -> None:
        self.listener = listener
        self.port = int(listener.getsockname()[1])
        self.socket_path = socket_path
        self.connections = 0
        self._stop_r, self._stop_w = os.pipe()
        self._threads: List[Any] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        while True:
            ready = select_fds([self.listener.fileno(), self._stop_r])
            if self._stop_r in ready:
                return
            try:
                conn, _ = self.listener.accept()
            except OSError:
                continue
            with self._lock:
                self.connections += 1
                thread = threading.Thread(target=self._relay, args=(conn,), daemon=True)
                self._threads.append(thread)
            thread.start()

    def _relay(self, conn: Any) -> None:
        import socket

        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(self.socket_path)
        except OSError:
            conn.close()
            upstream.close()
            return
        peers = {conn.fileno(): upstream, upstream.fileno(): conn}
        open_fds = set(peers)
        try:
            while open_fds:
                ready = select_fds(sorted(open_fds) + [self._stop_r])
                if self._stop_r in ready:
                    return
                for fd in ready:
                    src = conn if fd == conn.fileno() else upstream
                    try:
                        data = src.recv(_READ_CHUNK)
                    except OSError:
                        data = b""
                    if not data:
                        open_fds.discard(fd)
                        try:
                            peers[fd].shutdown(socket.SHUT_WR)
                        except OSError:
                            pass
                        continue
                    try:
                        peers[fd].sendall(data)
                    except OSError:
                        return
        finally:
            conn.close()
            upstream.close()

    def stop(self) -> int:
        """Stop accepting and cut every relay; return how many connections were made."""
        os.write(self._stop_w, b"x")
        self._thread.join(5)
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(5)
        self.listener.close()
        os.close(self._stop_r)
        os.close(self._stop_w)
        return self.connections


def select_fds(fds: List[int]) -> List[int]:
    """Block until one of ``fds`` is readable; return the readable ones."""
    import select

    while True:
        try:
            ready, _, _ = select.select(fds, [], [])
            return list(ready)
        except InterruptedError:
            continue


def start_forwarder(channel: Any, socket_path: str) -> Optional[Forwarder]:
    """Receive the child's loopback listener and start relaying; None if it sent none."""
    import socket

    try:
        channel.setblocking(False)
        _, fds, _, _ = socket.recv_fds(channel, 16, 1)
    except (BlockingIOError, OSError):
        fds = []
    finally:
        channel.close()
    if not fds:
        return None
    listener = socket.socket(fileno=fds[0])
    return Forwarder(listener, socket_path)
