"""The image's own workload, run by the supervisor as tracked services (stdlib, 3.9).

Under Harbor a task image's ``ENTRYPOINT`` runs as the container's main process, so the
services a task needs (a web server, a database) are up before the agent starts. Here the
supervisor is the container's pid 1, so it starts that workload itself: a confined launch
(the image's user, or root without any capability; the seccomp filter; no new privileges)
whose tree is *protected* — phase kills leave it alone, even when it runs as the agent's
uid — and which keeps running across phases until the container is removed. Its output is
drained by a thread into capped files in the supervisor's root-only logs dir.
"""

from __future__ import annotations

import os
import select
import threading
from typing import Any, Dict, List

try:  # in the harness: the sandbox.inside package; inside a sandbox: siblings on sys.path
    from sandbox.inside import launch, processes
except ImportError:  # pragma: no cover - inside a sandbox
    import launch  # type: ignore[no-redef,import-not-found]
    import processes  # type: ignore[no-redef,import-not-found]


def drain_pipes(captures: List[launch.Capture]) -> None:
    """Feed the captures until every pipe is at EOF (a daemon thread's loop)."""
    open_caps = list(captures)
    while open_caps:
        try:
            ready, _, _ = select.select([c.fd for c in open_caps], [], [], 1.0)
        except (OSError, ValueError):
            break
        for cap in [c for c in open_caps if c.fd in ready]:
            if not cap.feed():
                open_caps.remove(cap)
    for cap in captures:
        cap.close()


def start_service(req: Dict[str, Any], reaper: processes.Reaper) -> Dict[str, Any]:
    """Start one workload; return its pid, posture and start error (if any).

    ``req``: ``argv``, ``env``, ``cwd``, ``user`` {uid, gid} or null (root, whose
    capabilities are then all dropped), ``rlimits``, ``logs`` {stdout, stderr},
    ``max_output_bytes``.
    """
    spec = dict(req)
    spec["kill_uid"] = False
    spec["drop_caps"] = True
    spec.setdefault("unreadable", [])
    service = launch.Launch(spec, reaper, scope_root=None)
    service.start()
    if service.stdin_w >= 0:
        os.close(service.stdin_w)
        service.stdin_w = -1
    logs = req.get("logs") or {}
    limit = int(req.get("max_output_bytes", 1 << 20))
    captures = [
        launch.Capture(service.out_r, logs.get("stdout"), limit),
        launch.Capture(service.err_r, logs.get("stderr"), limit),
    ]
    if service.error is None:
        launch.PROTECTED.add(service.pid)
    thread = threading.Thread(
        target=drain_pipes, args=(captures,), name="service-output", daemon=True
    )
    thread.start()
    return {"pid": service.pid, "posture": service.posture, "service_error": service.error}
