"""The IPv4 addresses of the engine's host, asked of the engine itself.

A trial's ``public`` namespace must never reach the engine's host by any of its addresses
(:mod:`sandbox.docker.netns_rules`). The harness knows its own addresses, which are the
engine host's only where it shares that host's network namespace: not in the CI image (the
harness in a container of its own, the engine's socket mounted), not against a remote
engine. So the engine is asked: :func:`engine_host_ipv4` runs one short-lived container of
the base image in the engine host's network namespace (``network_mode = "host"``; every
capability dropped, a read-only root, as ``nobody``), which prints the kernel's local
routing table there (``/proc/net/fib_trie``); each ``/32 host LOCAL`` leaf is one address
(:func:`sandbox.egress_proxy.rules.local_ipv4`). Asked once per engine and process.

On rootless Docker the engine's host network is rootlesskit's namespace, not the real
host's; the harness runs on the real host there and adds its own addresses.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from sandbox.docker.labels import KIND, MANAGED
from sandbox.docker.sdk import EngineError, call
from sandbox.egress_proxy.rules import local_ipv4

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_answers: dict[str, tuple[str, ...]] = {}


def create_args(image: str) -> dict[str, Any]:
    """The keyword arguments of ``containers.run`` for the probe (pure)."""
    return {
        "image": image,
        "command": ["cat", "/proc/net/fib_trie"],
        "entrypoint": [],
        "network_mode": "host",
        "user": "65534:65534",
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "read_only": True,
        "pids_limit": 8,
        "mem_limit": "32m",
        "labels": {MANAGED: "1", KIND: "host-addresses"},
        "remove": True,
        "stdout": True,
        "stderr": False,
    }


def engine_host_ipv4(client: Any, image: str) -> tuple[str, ...]:
    """Every IPv4 address the engine's host network holds (empty if the engine refuses).

    Args:
        client: The engine.
        image: An image the engine has (the harness's base image).
    """
    key = str(getattr(client.api, "base_url", ""))
    with _lock:
        if key in _answers:
            return _answers[key]
    try:
        output = call(client.containers.run, **create_args(image))
    except EngineError as exc:
        logger.warning(
            "cannot ask the engine for its host's addresses (a container on its host "
            "network): %s; a public phase keeps out the host's addresses the harness "
            "sees, the gateway and the private ranges",
            exc,
        )
        return ()
    text = output.decode("ascii", errors="replace") if isinstance(output, bytes) else str(output)
    answer = tuple(sorted(str(address) for address in local_ipv4(text)))
    with _lock:
        _answers[key] = answer
    return answer


__all__ = ["create_args", "engine_host_ipv4"]
