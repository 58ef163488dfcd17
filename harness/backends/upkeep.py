"""``harness sandbox cleanup`` and ``harness doctor`` over every built-in backend.

Each backend's own part lives in its folder (the docker backend's in
:mod:`sandbox.docker.admin`, the local sandbox's cgroups in :mod:`sandbox.local.cgroups`);
this module runs them in order and adds what the harness itself leaves (run temp dirs, dead
gateways' socket dirs). Functions return what they found; the CLI only displays it.
"""

from __future__ import annotations

import glob
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from harness.gateway.sockets import remove_stale_socket_dirs
from sandbox.docker import admin
from sandbox.docker.engine import LeakReport
from sandbox.local import cgroups
from sandbox.removal import remove_tree
from sandbox.run_tmp import NODE_DIR_PREFIX, RUN_TMP_PREFIX, remove_private_dir
from sandbox.storage import release_leftovers

#: Temp dirs the harness and its sandboxes create (``harness-run-<name>`` holds a local
#: run's trial roots, ``harness-ray-<name>`` a Ray node's copy of a run's tasks and scratch).
TEMP_PATTERNS = (
    "harness-trial-*",
    "harness-build-*",
    "harness-supervisor-*",
    "harness-tools-*",
    "harness-compose-*",  # a trial's compose overrides
    "harness-docker-cli-*",  # the compose plug-in's private docker CLI config
    f"{RUN_TMP_PREFIX}*",
    "harness-gw-*",
    f"{NODE_DIR_PREFIX}*",
)


@dataclass
class CleanupReport:
    """What ``harness sandbox cleanup`` removed, and what it could not.

    Attributes:
        leaks: The containers, volumes and networks removed, and the errors.
        temp_dirs: The temp dirs removed.
        cgroups: The local sandbox's trial cgroups removed (their processes killed).
        cgroup_errors: The trial cgroups that could not be removed, and why.
        images: The untagged image layers failed builds left (without ``run`` only).
    """

    leaks: LeakReport
    temp_dirs: list[str] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)
    cgroup_errors: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)


def cleanup(*, run: str | None = None, temp: bool = True) -> CleanupReport:
    """Remove what the harness's runs left: trial cgroups, engine objects, temp dirs.

    The local sandbox's trial cgroups (of the run, or all of them) are killed and removed
    first, whether or not the engine answers.

    Args:
        run: Only the objects of this run (its name); other runs are untouched.
        temp: Also remove harness temp dirs and dead gateways' socket dirs (only without
            ``run``, and only when no harness run is active).

    Raises:
        UsageError: The engine cannot be reached (the cgroups are already swept).
    """
    removed, failed = cgroups.sweep(run)
    engine = admin.remove_engine_leftovers(run)
    report = CleanupReport(engine.leaks, images=engine.images)
    report.cgroups, report.cgroup_errors = removed, failed
    base = os.environ.get("TMPDIR", "/tmp")
    if run is not None:
        # The run's own temp dir: its trial roots and their (maybe still mounted) filesystems.
        own = Path(base) / f"{RUN_TMP_PREFIX}{run}"
        if own.exists():
            remove_private_dir(own)
            report.temp_dirs.append(str(own))
        # On a Ray node: the run's task copies and trial scratch.
        node = Path(base) / f"{NODE_DIR_PREFIX}{run}"
        if node.exists():
            remove_tree(node)
            report.temp_dirs.append(str(node))
    if run is None and temp:
        report.temp_dirs.extend(str(path) for path in remove_stale_socket_dirs())
        for pattern in TEMP_PATTERNS:
            for path in glob.glob(os.path.join(base, pattern)):
                release_leftovers(Path(path))  # a dead run's trial filesystems, still mounted
                shutil.rmtree(path, ignore_errors=True)
                report.temp_dirs.append(path)
    return report


def _local_limits(report: admin.DoctorReport) -> None:
    """Whether the local sandbox can enforce memory_mb / cpus / pids (a cgroup made and removed)."""
    support = cgroups.probe()
    if support.version is not None:
        where = ", ".join(sorted(support.parents))
        report.checks.append(("local sandbox limits", f"{support.mechanism} ({where})"))
        return
    report.checks.append(("local sandbox limits", "unavailable"))
    report.problems.append(
        f"the local sandbox cannot enforce memory_mb, cpus and pids: {support.problem} "
        '(local runs are refused unless [sandbox] local_limits = "warn")'
    )


def doctor() -> admin.DoctorReport:
    """Check root and the local sandbox's limits, then the engine (:func:`admin.doctor`)."""
    report = admin.DoctorReport()
    root = os.geteuid() == 0
    report.checks.append(("running as root", "yes" if root else "no"))
    if root:
        _local_limits(report)
    else:
        # The local sandbox needs root (docs/deployments.md); the docker sandbox does not.
        report.checks.append(("local sandbox", "needs root (use --sandbox docker)"))
    admin.doctor(report)
    return report


__all__ = ["TEMP_PATTERNS", "CleanupReport", "cleanup", "doctor"]
