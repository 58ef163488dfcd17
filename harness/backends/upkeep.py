"""``harness sandbox cleanup`` and ``harness doctor`` over every installed backend.

Each backend's own part is its admin verbs (:meth:`sandbox.plugin.SandboxBackend.doctor`,
:meth:`~sandbox.plugin.SandboxBackend.remove_leftovers`), in its own folder; this module
asks every installed backend in turn and adds what the harness itself leaves (run temp dirs,
dead gateways' socket dirs). Functions return what they found; the CLI only displays it.
"""

from __future__ import annotations

import glob
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from harness.backends.registry import SANDBOXES
from harness.errors import HarnessError, UsageError
from harness.gateway.sockets import remove_stale_socket_dirs
from sandbox.plugin import DoctorReport, SandboxBackend
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
        removed: What the backends removed by kind (a singular noun, ``container``,
            ``cgroup``), in the order the summary line names them.
        errors: What could not be removed, each saying what and why.
        notes: The backends' further lines for the user.
        temp_dirs: The temp dirs removed.
    """

    removed: dict[str, list[str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    temp_dirs: list[str] = field(default_factory=list)


def _backends() -> tuple[list[tuple[str, type[SandboxBackend]]], list[str]]:
    """Every installed backend that loads, by name; and why each other one does not."""
    found, broken = [], []
    for name in SANDBOXES.names():
        try:
            found.append((name, SANDBOXES.get(name)))
        except HarnessError as exc:
            broken.append(f"{exc} (`harness sandbox list` lists the installed backends)")
    return found, broken


def cleanup(*, run: str | None = None, temp: bool = True) -> CleanupReport:
    """Remove what the harness's runs left: each backend's leftovers, then temp dirs.

    Every backend is asked, whether or not another one can reach what it would clean (the
    local sandbox's trial cgroups are removed even when the engine does not answer).

    Args:
        run: Only what this run (its name) left; other runs are untouched.
        temp: Also remove harness temp dirs and dead gateways' socket dirs (only without
            ``run``, and only when no harness run is active).

    Raises:
        UsageError: A backend could not reach what it cleans (the others have cleaned).
    """
    report = CleanupReport()
    unreachable: list[str] = []
    backends, broken = _backends()
    report.errors += broken
    for name, backend in backends:
        try:
            found = backend.remove_leftovers(run)
        except UsageError as exc:
            unreachable.append(f"{name}: {exc}")
            continue
        for kind, names in found.removed.items():
            report.removed.setdefault(kind, []).extend(names)
        report.errors += found.errors
        report.notes += found.notes
    if unreachable:
        raise UsageError("\n".join(unreachable))
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


def doctor() -> DoctorReport:
    """Whether the harness runs as root, then each installed backend's rows.

    A backend that does not load is a problem (its rows would be missing).
    """
    report = DoctorReport()
    report.checks.append(("running as root", "yes" if os.geteuid() == 0 else "no"))
    backends, broken = _backends()
    report.problems += broken
    # The local sandbox's rows first: the engine's are many, and end with its guarantees.
    for _name, backend in sorted(backends, key=lambda item: item[0] != "local"):
        backend.doctor(report)
    return report


__all__ = ["TEMP_PATTERNS", "CleanupReport", "cleanup", "doctor"]
