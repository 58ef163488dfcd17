"""Pieces of the compose tests: a sidecar's compose file, a resolver that listens, a project.

The compose attacks (``tests/security/test_compose_*.py``, ``test_loopback_resolver.py``)
build tasks whose sidecar ``kv`` serves HTTP on 8080 from ``environment/kv``; the DNS
attacks judge by what a resolver on one of the host's loopback addresses was asked.
"""

from __future__ import annotations

import json
import socket
import threading
import uuid
from pathlib import Path
from typing import Any

import filelock

from sandbox.docker.compose import ComposeProject

#: The image of the sidecars that :func:`guarded_project`'s tests write.
BASE_IMAGE = "harness/base:bookworm"


def guarded_project(compose_file: Path, client: Any, name: str) -> ComposeProject:
    """An engine-guarded project of ``compose_file`` on ``client``'s engine (not up yet)."""
    return ComposeProject(
        compose_file,
        trial_id=f"{name}-{uuid.uuid4().hex[:8]}.r0",
        labels={"org.harness.managed": "1"},
        allow_internet=False,
        main_image=BASE_IMAGE,
        build_timeout_sec=None,
        host_problem="the harness does not run as root",
        engine_guard=True,
        engine=client,
    )


def kv_compose(command: list[str] | None = None) -> str:
    """A compose file: ``main`` waits for ``kv`` (built from ``./kv``) to answer on 8080."""
    run = f"    command: {json.dumps(command)}\n" if command is not None else ""
    return (
        "services:\n"
        "  main:\n"
        "    depends_on:\n"
        "      kv:\n"
        "        condition: service_healthy\n"
        "  kv:\n"
        "    build:\n"
        "      context: ./kv\n"
        f"{run}"
        "    healthcheck:\n"
        "      test:\n"
        "        - CMD\n"
        "        - python3\n"
        "        - -c\n"
        "        - import socket; socket.create_connection(('localhost', 8080), 2)\n"
        "      interval: 1s\n"
        "      timeout: 5s\n"
        "      retries: 30\n"
    )


class LoopbackResolver:
    """UDP and TCP listeners on ``address:53`` of the host, keeping every query they get.

    Where an engine's resolver asks a resolver on the host's loopback, it asks this one.
    """

    def __init__(self, address: str = "127.0.0.1") -> None:
        self.address = address
        # One test at a time on an address (tests of other modules run at once).
        self._lock = filelock.FileLock(f"/tmp/harness-test-resolver-{address}.lock")
        self._lock.acquire(timeout=900)
        self.got: list[bytes] = []
        self._stop = threading.Event()
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self.udp.bind((address, 53))
            self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.tcp.bind((address, 53))
            self.tcp.listen(8)
        except OSError:
            self.udp.close()
            self.tcp.close()
            self._lock.release()
            raise
        self._threads = [
            threading.Thread(target=self._serve, args=(sock,), daemon=True)
            for sock in (self.udp, self.tcp)
        ]
        for sock, thread in zip((self.udp, self.tcp), self._threads, strict=True):
            sock.settimeout(0.2)
            thread.start()

    def _serve(self, sock: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                if sock.type == socket.SOCK_DGRAM:
                    self.got.append(sock.recv(4096))
                else:
                    conn, _ = sock.accept()
                    with conn:
                        conn.settimeout(2)
                        self.got.append(conn.recv(4096))
            except OSError:
                continue

    def close(self) -> None:
        """Stop listening: the address is free again when this returns."""
        self._stop.set()
        # A socket a thread still waits on stays bound until that wait ends.
        for thread in self._threads:
            thread.join(timeout=10)
        self.udp.close()
        self.tcp.close()
        self._lock.release()


__all__ = ["LoopbackResolver", "kv_compose"]
