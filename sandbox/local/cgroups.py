"""Per-trial cgroups of the local sandbox: its ``memory_mb``, ``cpus`` and ``pids`` limits.

Every trial of the local sandbox gets a cgroup of its own, named for its run
(``harness-trial@<run>@<token>``), which the harness creates with the trial's limits before
its first phase and kills (``cgroup.kill``, or freeze + SIGKILL on cgroup v1) and removes at
its end. Each launch of a phase — the agent, the verifier, every command the verifier runs as
the agent — joins it in the launcher's forked child before anything of the phase runs
(:func:`sandbox.inside.launch.join_cgroups`), so every process of the trial, detached or
not, is counted and limited, and dies with it.

Two shapes of the cgroup tree, probed at the start of a run (:func:`probe`):

- **cgroup v2** (the unified hierarchy with the memory, cpu and pids controllers): one dir
  under ``<v2 mount>/harness.trials`` with ``memory.max``, ``memory.swap.max = 0``,
  ``cpu.max`` and ``pids.max``.
- **cgroup v1** (or a hybrid host whose controllers are bound to v1 hierarchies): one dir
  per hierarchy (memory, cpu, cpuacct, pids, freezer), each under the harness's own cgroup
  of that hierarchy, with ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes``
  at the same value: no swap), ``cpu.cfs_quota_us`` and ``pids.max``.

Nothing here touches a cgroup it did not create: the sweep (:func:`sweep`) only ever
removes dirs carrying the harness's name prefix, so the container engine's cgroups (and
every other) are left alone.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sandbox.errors import SandboxError
from sandbox.resource_policy import caps, enforced_value, reserves

#: Every trial cgroup's name starts with this (then the run's label, ``@``, a token).
NAME_PREFIX = "harness-trial@"
#: The v2 dir that holds the trial cgroups (a child of the v2 root, like the engine's own).
V2_PARENT = "harness.trials"
#: Controllers a trial's limits need, on cgroup v2.
V2_CONTROLLERS = ("memory", "cpu", "pids")
#: Hierarchies a trial's limits need on cgroup v1 (``freezer`` is used to kill when present).
V1_REQUIRED = ("memory", "cpu", "cpuacct", "pids")
V1_OPTIONAL = ("freezer",)
#: CFS period of ``cpu.max`` / ``cpu.cfs_period_us``.
CPU_PERIOD_US = 100_000
#: The smallest quota the kernel accepts.
MIN_QUOTA_US = 1_000
MIB = 1024 * 1024
#: How long a kill waits for the cgroup to empty.
KILL_WAIT_SEC = 10.0


class CgroupError(SandboxError, OSError):
    """A trial cgroup could not be made, joined, killed or removed (the machine's fault).

    Also an :class:`OSError`, which is what the cgroup files raised underneath.
    """


@dataclass(frozen=True)
class Limits:
    """What one trial is given: memory (MiB, no swap), CPUs (a fraction), processes.

    ``cpu_policy`` and ``memory_policy`` say how (:mod:`sandbox.resource_policy`): a cap
    (``cpu.max``, ``memory.max``), a reservation (``cpu.weight``, ``memory.low``; on v1
    ``cpu.shares``, ``memory.soft_limit_in_bytes``), both, or neither.
    """

    memory_mb: int
    cpus: float
    pids: int
    cpu_policy: str = "limit"
    memory_policy: str = "limit"


@dataclass(frozen=True)
class Support:
    """How this host can limit a trial, or why it cannot.

    Attributes:
        version: ``"v2"`` or ``"v1"``; None when no cgroup can be made (see ``problem``).
        problem: Why not, with how to fix it (None when it works).
        parents: Controller (``"unified"`` on v2) -> the dir trial cgroups are made in.
        mounts: Every cgroup mount point the sweep walks.
    """

    version: str | None
    problem: str | None = None
    parents: dict[str, str] = field(default_factory=dict)
    mounts: tuple[str, ...] = ()

    @property
    def mechanism(self) -> str | None:
        """``cgroup v2`` / ``cgroup v1`` (None: none)."""
        return f"cgroup {self.version}" if self.version else None


def cpu_weight(cpus: float) -> int:
    """The v2 ``cpu.weight`` of a request of ``cpus`` (100 per CPU, the kernel's range)."""
    return min(10_000, max(1, int(cpus * 100)))


# --------------------------------------------------------------------------- probing


def _read(path: str) -> str:
    with open(path) as fh:
        return fh.read()


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _mounts(mountinfo: str) -> list[tuple[str, str, str, set[str]]]:
    """(fstype, mount root, mount point, super options) of every cgroup mount."""
    found = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        root, point = (f.replace("\\040", " ") for f in fields[3:5])
        found.append((tail[0], root, point, set(tail[2].split(","))))
    return found


def _memberships(self_cgroup: str) -> dict[str, str]:
    """Controller (``""`` for the unified hierarchy) -> this process's cgroup path."""
    found: dict[str, str] = {}
    for line in self_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _id, controllers, path = parts
        for name in controllers.split(",") if controllers else [""]:
            found[name] = path
    return found


def _below(point: str, root: str, path: str) -> str:
    """The host dir of cgroup ``path`` in a hierarchy mounted from ``root`` at ``point``."""
    if root != "/" and (path == root or path.startswith(root.rstrip("/") + "/")):
        path = path[len(root) :]
    return os.path.join(point, path.lstrip("/"))


def probe(*, create: bool = True) -> Support:
    """How this host can give a trial its limits (made and removed once when ``create``).

    Returns:
        The mechanism, or the problem (what is missing and how to fix it).
    """
    if os.geteuid() != 0:
        return Support(None, "the harness is not running as root, so it cannot create cgroups")
    try:
        mounts = _mounts(_read("/proc/self/mountinfo"))
        member = _memberships(_read("/proc/self/cgroup"))
    except OSError as exc:
        return Support(None, f"cannot read this process's cgroups: {exc}")
    points = tuple(sorted({point for _t, _r, point, _o in mounts}))
    support = _probe_v2(mounts, points) or _probe_v1(mounts, member, points)
    if support.version and create:
        try:
            cgroup = TrialCgroup.create(support, "probe", Limits(64, 0.5, 16))
        except OSError as exc:
            return Support(None, f"cannot create a {support.mechanism} trial cgroup: {exc}")
        cgroup.remove()
    return support


_Mount = tuple[str, str, str, set[str]]


def _probe_v2(mounts: list[_Mount], points: tuple[str, ...]) -> Support | None:
    """Support through the unified hierarchy, if it has the controllers (else None)."""
    for fstype, _root, point, _opts in mounts:
        if fstype != "cgroup2":
            continue
        try:
            available = set(_read(os.path.join(point, "cgroup.controllers")).split())
        except OSError:
            continue
        if not set(V2_CONTROLLERS) <= available:
            continue  # a hybrid host: the controllers are bound to v1 hierarchies
        parent = os.path.join(point, V2_PARENT)
        try:
            _enable_v2(point, parent)
        except OSError as exc:
            return Support(
                None,
                f"cgroup v2 at {point} cannot delegate {', '.join(V2_CONTROLLERS)} to "
                f"{parent} ({exc}): run the harness where it can (as root on the host, or "
                "in a container with its own writable cgroup namespace)",
            )
        return Support("v2", parents={"unified": parent}, mounts=points)
    return None


def _enable_v2(point: str, parent: str) -> None:
    """Make ``parent`` and let it (and its children) use the v2 controllers."""
    wanted = " ".join(f"+{name}" for name in V2_CONTROLLERS)
    enabled = set(_read(os.path.join(point, "cgroup.subtree_control")).split())
    if not set(V2_CONTROLLERS) <= enabled:
        _write(os.path.join(point, "cgroup.subtree_control"), wanted)
    os.makedirs(parent, mode=0o755, exist_ok=True)
    enabled = set(_read(os.path.join(parent, "cgroup.subtree_control")).split())
    if not set(V2_CONTROLLERS) <= enabled:
        _write(os.path.join(parent, "cgroup.subtree_control"), wanted)


def _probe_v1(
    mounts: list[tuple[str, str, str, set[str]]], member: dict[str, str], points: tuple[str, ...]
) -> Support:
    """Support through v1 hierarchies, each trial under the harness's own cgroup."""
    parents: dict[str, str] = {}
    for fstype, root, point, opts in mounts:
        if fstype != "cgroup":
            continue
        for name in (*V1_REQUIRED, *V1_OPTIONAL):
            if name in opts and name not in parents and name in member:
                parents[name] = _below(point, root, member[name])
    missing = [name for name in V1_REQUIRED if name not in parents]
    if missing:
        return Support(
            None,
            f"no cgroup v2 with the {', '.join(V2_CONTROLLERS)} controllers and no cgroup v1 "
            f"hierarchy for {', '.join(missing)}: mount them (or boot with cgroup v2)",
        )
    for name, path in parents.items():
        if not os.path.isdir(path):
            return Support(None, f"the harness's own {name} cgroup {path} is not visible")
    return Support("v1", parents=parents, mounts=points)


# --------------------------------------------------------------------------- naming


def _label(run: str) -> str:
    """The run's name as it appears in a cgroup's name (no ``/``, no whitespace)."""
    cleaned = "".join("_" if ch == "/" or ch.isspace() else ch for ch in run)
    return cleaned[:150] or "_"


def cgroup_name(run: str) -> str:
    """A fresh trial cgroup name of run ``run``: ``harness-trial@<run>@<token>``."""
    return f"{NAME_PREFIX}{_label(run)}@{secrets.token_hex(6)}"


def run_of(name: str) -> str | None:
    """The run label in a trial cgroup's name (None: not a trial cgroup)."""
    if not name.startswith(NAME_PREFIX) or "@" not in name[len(NAME_PREFIX) :]:
        return None
    return name[len(NAME_PREFIX) :].rsplit("@", 1)[0]


# --------------------------------------------------------------------------- a trial


class TrialCgroup:
    """One trial's cgroup (one dir per hierarchy on v1), made with its limits.

    Args:
        version: ``v2`` or ``v1``.
        dirs: Controller -> the trial's dir (``unified`` on v2; on v1 co-mounted
            controllers share a dir).
        limits: What was written, or None for one found by the sweep.
    """

    def __init__(self, version: str, dirs: dict[str, str], limits: Limits | None) -> None:
        self.version = version
        self.dirs = dirs
        self.limits = limits
        self.name = os.path.basename(next(iter(dirs.values())))
        self.swap_limited = False
        self._removed = False

    @classmethod
    def create(cls, support: Support, run: str, limits: Limits) -> TrialCgroup:
        """Make the trial's cgroup with ``limits`` (removed again if any write fails).

        Raises:
            CgroupError: It could not be made (the message names the file).
        """
        if support.version is None:
            raise CgroupError(support.problem or "no cgroup support")
        name = cgroup_name(run)
        dirs = {key: os.path.join(parent, name) for key, parent in support.parents.items()}
        made = cls(support.version, dirs, limits)
        try:
            for path in made.unique_dirs():
                os.mkdir(path, 0o755)
            if support.version == "v2":
                made._limit_v2(limits)
            else:
                made._limit_v1(limits)
        except OSError as exc:
            made.remove()
            raise CgroupError(f"cannot make trial cgroup {name}: {exc}") from exc
        return made

    def unique_dirs(self) -> list[str]:
        """Each dir of the cgroup once (v1 co-mounts share one)."""
        return sorted(set(self.dirs.values()))

    def _file(self, controller: str, name: str) -> str:
        return os.path.join(self.dirs["unified" if self.version == "v2" else controller], name)

    def _limit_v2(self, limits: Limits) -> None:
        size = str(limits.memory_mb * MIB)
        if caps(limits.memory_policy):
            _write(self._file("memory", "memory.max"), size)
            swap = self._file("memory", "memory.swap.max")
            if os.path.exists(swap):
                _write(swap, "0")
                self.swap_limited = True
        if reserves(limits.memory_policy):
            _write(self._file("memory", "memory.low"), size)
        if caps(limits.cpu_policy):
            quota = max(MIN_QUOTA_US, int(limits.cpus * CPU_PERIOD_US))
            _write(self._file("cpu", "cpu.max"), f"{quota} {CPU_PERIOD_US}")
        if reserves(limits.cpu_policy):
            _write(self._file("cpu", "cpu.weight"), str(cpu_weight(limits.cpus)))
        _write(self._file("pids", "pids.max"), str(limits.pids))

    def _limit_v1(self, limits: Limits) -> None:
        size = str(limits.memory_mb * MIB)
        if caps(limits.memory_policy):
            _write(self._file("memory", "memory.limit_in_bytes"), size)
            memsw = self._file("memory", "memory.memsw.limit_in_bytes")
            if os.path.exists(memsw):  # memory + swap = memory: no swap at all
                _write(memsw, size)
                self.swap_limited = True
        if reserves(limits.memory_policy):
            _write(self._file("memory", "memory.soft_limit_in_bytes"), size)
        if caps(limits.cpu_policy):
            _write(self._file("cpu", "cpu.cfs_period_us"), str(CPU_PERIOD_US))
            quota = max(MIN_QUOTA_US, int(limits.cpus * CPU_PERIOD_US))
            _write(self._file("cpu", "cpu.cfs_quota_us"), str(quota))
        if reserves(limits.cpu_policy):
            _write(self._file("cpu", "cpu.shares"), str(max(2, int(limits.cpus * 1024))))
        _write(self._file("pids", "pids.max"), str(limits.pids))

    @property
    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files a launch writes itself into (one per hierarchy)."""
        return [os.path.join(path, "cgroup.procs") for path in self.unique_dirs()]

    # -- facts ----------------------------------------------------------------------------

    def pids(self) -> set[int]:
        """The processes in the cgroup now."""
        found: set[int] = set()
        for path in self.procs_files:
            try:
                found.update(int(line) for line in _read(path).split())
            except FileNotFoundError:
                continue
        return found

    def _keyed(self, controller: str, name: str, key: str) -> int:
        try:
            for line in _read(self._file(controller, name)).splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[0] == key:
                    return int(parts[1])
        except (OSError, ValueError):
            pass
        return 0

    def oom_kills(self) -> int:
        """How many of its processes the kernel OOM-killed (``memory.events`` oom_kill)."""
        if self.version == "v2":
            return self._keyed("memory", "memory.events", "oom_kill")
        return self._keyed("memory", "memory.oom_control", "oom_kill")

    def cpu_usage_usec(self) -> int:
        """CPU time its processes used, in microseconds (``cpu.stat`` usage_usec)."""
        if self.version == "v2":
            return self._keyed("cpu", "cpu.stat", "usage_usec")
        try:
            return int(_read(self._file("cpuacct", "cpuacct.usage"))) // 1000
        except (OSError, ValueError):
            return 0

    def memory_peak_bytes(self) -> int | None:
        """The most memory it used (None where the kernel does not say)."""
        name = "memory.peak" if self.version == "v2" else "memory.max_usage_in_bytes"
        try:
            return int(_read(self._file("memory", name)))
        except (OSError, ValueError):
            return None

    def describe(self) -> dict[str, object]:
        """The limits applied and how (for the trial record)."""
        limits = self.limits
        found: dict[str, object] = {
            "memory_mb": limits.memory_mb if limits else None,
            "swap_mb": 0 if self.swap_limited else None,
            "cpus": limits.cpus if limits else None,
            "pids": limits.pids if limits else None,
            "mechanism": f"cgroup {self.version}",
            "cgroup": self.name,
        }
        if limits is not None:
            found["policy"] = {"cpus": limits.cpu_policy, "memory_mb": limits.memory_policy}
            found["enforced"] = {
                "cpus": enforced_value(limits.cpu_policy, cap_held=True, reservation_held=True),
                "memory_mb": enforced_value(
                    limits.memory_policy, cap_held=True, reservation_held=True
                ),
                "pids": True,
            }
        return found

    # -- the end ---------------------------------------------------------------------------

    def kill(self, wait_sec: float = KILL_WAIT_SEC) -> None:
        """SIGKILL every process in the cgroup and wait until it is empty.

        Raises:
            CgroupError: Processes were still in it after ``wait_sec``.
        """
        kill_file = self._file("unified", "cgroup.kill") if self.version == "v2" else None
        stop_at = time.monotonic() + wait_sec
        while True:
            left = self.pids()
            if not left:
                return
            if kill_file is not None and os.path.exists(kill_file):
                try:
                    _write(kill_file, "1")
                except FileNotFoundError:
                    return
            else:
                self._kill_listed()
            if time.monotonic() >= stop_at:
                raise CgroupError(f"processes {sorted(left)} survived the kill of {self.name}")
            time.sleep(0.02)

    def _kill_listed(self) -> None:
        """SIGKILL the listed processes, frozen first (v1) so none can fork meanwhile."""
        freezer = self.dirs.get("freezer")
        state = os.path.join(freezer, "freezer.state") if freezer else None
        if state is not None:
            try:
                _write(state, "FROZEN")
            except OSError:
                state = None
        try:
            for pid in self.pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        finally:
            if state is not None:
                # A frozen task dies of its SIGKILL once thawed.
                try:
                    _write(state, "THAWED")
                except OSError:
                    pass

    def remove(self) -> None:
        """Kill what is left and remove the cgroup's dirs (idempotent).

        Raises:
            CgroupError: A dir could not be removed (the message says which).
        """
        if self._removed:
            return
        problems = []
        try:
            self.kill()
        except CgroupError as exc:
            problems.append(str(exc))
        for path in self.unique_dirs():
            try:
                _rmdir(path)
            except OSError as exc:
                problems.append(f"cannot remove {path}: {exc}")
        if problems:
            raise CgroupError("; ".join(problems))
        self._removed = True


def _rmdir(path: str, wait_sec: float = 5.0) -> None:
    """``rmdir`` a cgroup dir, retrying while the kernel still lists dying tasks."""
    stop_at = time.monotonic() + wait_sec
    while True:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() >= stop_at:
                raise
            time.sleep(0.05)


# --------------------------------------------------------------------------- the sweep


def _trial_dirs(mounts: tuple[str, ...], run: str | None) -> Iterator[str]:
    """Every trial cgroup dir (of ``run``, or of every run) under the cgroup mounts."""
    label = None if run is None else _label(run)
    for mount in mounts:
        for dirpath, dirnames, _files in os.walk(mount):
            keep = []
            for name in dirnames:
                owner = run_of(name)
                if owner is None:
                    keep.append(name)
                elif label is None or owner == label:
                    yield os.path.join(dirpath, name)
            dirnames[:] = keep  # never into a trial's dir (nothing of ours is below it)


def sweep(run: str | None = None, support: Support | None = None) -> tuple[list[str], list[str]]:
    """Kill and remove the trial cgroups a dead invocation left (of ``run``, or all).

    Only dirs named ``harness-trial@...`` are touched.

    Returns:
        The cgroup names removed, and what could not be removed.
    """
    support = support or probe(create=False)
    mounts = support.mounts
    if not mounts:
        try:
            mounts = tuple(sorted({p for _t, _r, p, _o in _mounts(_read("/proc/self/mountinfo"))}))
        except OSError:
            return [], []
    found: dict[str, dict[str, str]] = {}
    for path in _trial_dirs(mounts, run):
        key = os.path.basename(path)
        found.setdefault(key, {})[path] = path
    removed, errors = [], []
    for name, paths in sorted(found.items()):
        dirs = {f"d{i}": path for i, path in enumerate(sorted(paths))}
        version = "v2" if any(Path(p, "cgroup.kill").exists() for p in paths) else "v1"
        freezer = [p for p in paths if Path(p, "freezer.state").exists()]
        if freezer:
            dirs["freezer"] = freezer[0]
        if version == "v2":
            dirs["unified"] = next(p for p in paths if Path(p, "cgroup.kill").exists())
        leftover = TrialCgroup(version, dirs, None)
        try:
            leftover.remove()
            removed.append(name)
        except CgroupError as exc:
            errors.append(str(exc))
    return removed, errors


__all__ = [
    "NAME_PREFIX",
    "CgroupError",
    "Limits",
    "Support",
    "TrialCgroup",
    "cgroup_name",
    "probe",
    "run_of",
    "sweep",
]
