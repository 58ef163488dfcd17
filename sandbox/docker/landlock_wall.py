"""Whether a root agent's kept services can be walled in by Landlock on this engine.

``agent_services = keep`` with a root agent (``agent_root`` ``allow`` or ``isolated``) runs
every process of the agent's phases in a Landlock domain (:mod:`sandbox.inside.landlock`)
that needs the kernel's ABI 6 (Linux 6.12: signal and abstract-socket scopes). The engine
says which runtime and kernel its containers get: :func:`landlock_refusal` reads that once
per run from ``docker info``, before anything runs. A kernel that reports a new enough
version but has Landlock disabled is caught in the first agent phase, whose process never
runs unwalled (the phase fails with a posture error).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: The first kernel whose Landlock has the scopes the wall needs (ABI 6).
MIN_KERNEL = (6, 12)


def landlock_refusal(runtime: str | None, agent_root: str, info: Mapping[str, Any]) -> str | None:
    """Why ``--agent-services keep`` cannot wall in a root agent here, and what to do; None: it can.

    Args:
        runtime: The trials' OCI runtime (None: the engine's default).
        agent_root: ``--agent-root`` (``allow`` or ``isolated``).
        info: The engine's ``docker info``.
    """
    effective = runtime or str(info.get("DefaultRuntime") or "runc")
    if effective == "runsc":
        return (
            f"--agent-services keep with --agent-root {agent_root}: a root agent's kept "
            "services would keep CAP_DAC_OVERRIDE and CAP_KILL beside the verifier, and "
            "gVisor (runsc) has no Landlock to wall them in; use runc with --agent-root "
            "allow, or an unprivileged agent (--agent-root never), or --agent-services kill"
        )
    kernel = str(info.get("KernelVersion") or "")
    match = re.match(r"(\d+)\.(\d+)", kernel)
    if match is None or (int(match.group(1)), int(match.group(2))) < MIN_KERNEL:
        return (
            f"--agent-services keep with --agent-root {agent_root}: a root agent's kept "
            "services are walled in by Landlock's signal and abstract-socket scopes, which "
            f"need Linux {MIN_KERNEL[0]}.{MIN_KERNEL[1]}, and the engine's kernel is "
            f"{kernel or 'unknown'}; use an unprivileged agent (--agent-root never) or "
            "--agent-services kill"
        )
    return None
