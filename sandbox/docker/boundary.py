"""The second boundary around a root agent: what, besides the container, keeps it off the host.

``sandbox.agent_root = "isolated"`` runs a task's root agent only where uid 0 in the
container is not the host's root with a few capabilities: under gVisor (``runsc``: the
agent's syscalls reach gVisor's kernel, not the host's) or on an engine that maps the
container's users onto unprivileged host uids (``dockerd --userns-remap``, or a rootless
engine). ``docker info`` says which: its ``SecurityOptions`` name ``userns`` or
``rootless``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

Boundary = Literal["gvisor", "userns-remap", "rootless", "none"]


def second_boundary(runtime: str | None, info: Mapping[str, Any]) -> Boundary:
    """The boundary a root agent would run behind on this engine and runtime.

    Args:
        runtime: The OCI runtime of the trials (``runsc``; None: the engine's default).
        info: The engine's ``docker info``.
    """
    if runtime == "runsc":
        return "gvisor"
    options = [str(item) for item in info.get("SecurityOptions") or []]
    names = {
        part.split("=", 1)[1]
        for option in options
        for part in option.split(",")
        if part.startswith("name=")
    }
    if "rootless" in names:
        return "rootless"
    if "userns" in names:
        return "userns-remap"
    return "none"


def isolated_refusal(runtime: str | None) -> str:
    """Why ``--agent-root isolated`` cannot run here, and what to do instead."""
    return (
        f"--agent-root isolated runs a task's root agent only behind a second boundary, and "
        f"runtime {runtime or 'runc'} on this engine has none (no gVisor, no user-namespace "
        "remapping: the agent would be the host's root with the container's capabilities); "
        "run with --runtime runsc, or on an engine started with --userns-remap or rootless, "
        "or use --agent-root allow to accept a root agent on runc, or never (the default)"
    )


__all__ = ["Boundary", "isolated_refusal", "second_boundary"]
