"""Which of a trial's limits the engine really applies, read from the engine itself.

A container is created with ``memory_mb``, ``cpus`` and ``pids`` (:mod:`.container`), but
an engine may accept the flags and apply none of them: rootless Docker on a cgroup v1 host
has no cgroup driver (``docker info``: ``CgroupDriver: none``), and an engine whose kernel
lacks a controller drops that limit with a warning. A record must say what held, not what
was asked for, so each limit is judged from two answers of the engine: what it says it can
enforce (``docker info``) and what the created container's configuration holds
(``HostConfig``). Both functions here are pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sandbox.resource_policy import enforced_value

#: The limits a container's cgroup enforces, in the order records list them.
CGROUP_LIMITS = ("memory_mb", "cpus", "pids")

_NO_DRIVER = "it has no cgroup driver (CgroupDriver: none, as rootless Docker on a cgroup v1 host)"
# docker info's flag for each limit, and the words for an engine without it.
_INFO_FLAGS = {
    "memory_mb": ("MemoryLimit", "its kernel has no memory cgroup controller"),
    "cpus": ("CpuCfsQuota", "its kernel has no CFS quota (cpu cgroup controller)"),
    "pids": ("PidsLimit", "its kernel has no pids cgroup controller"),
}


def engine_gaps(info: Mapping[str, Any]) -> dict[str, str]:
    """The limits the engine says it cannot enforce, each with why (empty: all of them).

    Args:
        info: The engine's ``docker info`` answer.
    """
    if str(info.get("CgroupDriver") or "").lower() == "none":
        return dict.fromkeys(CGROUP_LIMITS, _NO_DRIVER)
    gaps = {}
    for limit, (flag, why) in _INFO_FLAGS.items():
        if info.get(flag) is False:
            gaps[limit] = why
    return gaps


def applied(
    host_config: Mapping[str, Any], *, memory_mb: int, cpus: float, pids: int
) -> dict[str, bool]:
    """Whether the created container's configuration holds each requested limit (a cap).

    An engine that cannot apply a limit it was given drops it from the configuration
    (``Memory: 0``); a value other than the requested one is not the limit asked for.
    """
    return {
        "memory_mb": int(host_config.get("Memory") or 0) == memory_mb << 20,
        "cpus": int(host_config.get("NanoCpus") or 0) == int(cpus * 1e9),
        "pids": int(host_config.get("PidsLimit") or 0) == pids,
    }


def reserved(host_config: Mapping[str, Any], *, memory_mb: int, shares: int) -> dict[str, bool]:
    """Whether the configuration holds each reservation (``request``): memory, CPU shares."""
    return {
        "memory_mb": int(host_config.get("MemoryReservation") or 0) == memory_mb << 20,
        "cpus": int(host_config.get("CpuShares") or 0) == shares,
    }


def enforced(
    info: Mapping[str, Any],
    host_config: Mapping[str, Any],
    *,
    memory_mb: int,
    cpus: float,
    pids: int,
    policies: Mapping[str, str] | None = None,
    shares: int = 0,
) -> dict[str, bool | str]:
    """Each cgroup limit as it held: True (its cap), ``"request"`` (a reservation), False.

    Held by the container's configuration and enforceable by the engine; ``policies``
    (``cpus`` and ``memory_mb`` -> :mod:`sandbox.resource_policy`'s names, default
    ``limit``) says what was asked, ``shares`` the CPU shares a CPU request was given.
    """
    gaps = engine_gaps(info)
    held = applied(host_config, memory_mb=memory_mb, cpus=cpus, pids=pids)
    kept = reserved(host_config, memory_mb=memory_mb, shares=shares)
    found: dict[str, bool | str] = {}
    for limit in CGROUP_LIMITS:
        if limit in gaps:
            found[limit] = False
            continue
        policy = (policies or {}).get(limit, "limit")
        found[limit] = enforced_value(
            policy, cap_held=held[limit], reservation_held=kept.get(limit, False)
        )
    return found


def gap_line(gaps: Mapping[str, str], *, required: bool) -> str:
    """The run's one line about the limits the engine cannot enforce."""
    names = ", ".join(gaps)
    reasons = "; ".join(dict.fromkeys(gaps.values()))
    if required:
        return (
            f"the engine cannot enforce {names}: {reasons}. sandbox.require_limits = true "
            "refuses the run: use an engine with a cgroup driver (rootful Docker, or "
            "rootless Docker on a cgroup v2 host), or set sandbox.require_limits = false"
        )
    return (
        f"the engine does not enforce {names}: {reasons}. Trials run without these limits "
        "and each record says so (sandbox.limits.enforced); sandbox.require_limits = true "
        "refuses such a run"
    )


__all__ = ["CGROUP_LIMITS", "applied", "enforced", "engine_gaps", "gap_line"]
