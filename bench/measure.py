"""What both benchmark scripts measure with: phase names, duration statistics, host facts."""

from __future__ import annotations

import os
import platform
import statistics
import sys
from typing import Any

#: The trial record's ``timings`` keys, in lifecycle order.
PHASES = (
    "prepare",
    "reset",
    "execute",
    "agent",
    "collect",
    "grade",
    "verifier",
    "cleanup",
    "total",
)


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]), like numpy's default."""
    data = sorted(values)
    if not data:
        return float("nan")
    pos = (len(data) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def stats_ms(seconds: list[float]) -> dict[str, float]:
    """median, p90, mean, min, max of durations given in seconds, in milliseconds."""
    ms = [s * 1000.0 for s in seconds]
    if not ms:
        return {k: float("nan") for k in ("median", "p90", "mean", "min", "max")}
    return {
        "median": statistics.median(ms),
        "p90": percentile(ms, 90),
        "mean": statistics.fmean(ms),
        "min": min(ms),
        "max": max(ms),
    }


def host_info() -> dict[str, Any]:
    """CPU, Python, platform, privileges and load of the measuring host."""
    try:
        affinity: int | None = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = None
    return {
        "nproc": affinity or os.cpu_count(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "root": os.geteuid() == 0,
        "loadavg": list(os.getloadavg()),
    }
