"""Shared fixtures: the ``root`` marker, canaries, task dirs, local sandboxes, small filesystems.

Tests marked ``@pytest.mark.root`` need root (CI runs as root): without it they skip, or fail
under ``HARNESS_REQUIRE_DOCKER=1`` (``support.docker.prerequisite_missing``).
Local sandboxes get their own uid range (so a uid sweep can never touch anything else) and
the system ``python3``, exactly as the supervisor runs inside a task image.

A test module's ``from conftest import ...`` means its own directory's ``conftest.py`` (the
nearest one up the tree), whichever files one pytest command names
(:func:`pytest_collectstart`).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from support.docker import prerequisite_missing
from support.workers import uid_base

from harness.tasks import Task, load_task
from sandbox.backend import SandboxSpec
from sandbox.environment import FIXED_PATH
from sandbox.local.sandbox import IdentityPool, LocalSandbox

#: Task fixtures hold their own tests (a vendored TB2 task's ``tests/test_outputs.py``):
#: they are data the harness runs inside a sandbox, never tests of this repository.
collect_ignore_glob = ["fixtures/*"]

IS_ROOT = os.geteuid() == 0
#: A run dir written by harness 0.1.0 (flat config keys, logs/attempt_N); see its README.
LEGACY_RUN = Path(__file__).resolve().parent / "fixtures" / "legacy-run-0.1.0"
LEGACY_WRITTEN_AT = "/tmp/harness-fixture"
#: uids/gids no real account uses; a pool of 8 slots starts here.
TEST_UID_BASE = uid_base(61000)
SYSTEM_PYTHON = shutil.which("python3", path=FIXED_PATH) or sys.executable


def _attack_tmp() -> str:
    """Where trial roots and bait go: a temp dir whose mount honours setuid bits and exec.

    A ``nosuid``/``noexec`` /tmp would make the setuid and file-capability attacks fail for
    the mount's sake, not the sandbox's, so their controls could never succeed there.
    """
    blocked = os.ST_NOSUID | os.ST_NOEXEC
    for base in ("/tmp", "/var/tmp"):
        if os.path.isdir(base) and not os.statvfs(base).f_flag & blocked:
            return base
    return "/tmp"  # the attack tests' controls then fail (or skip) and say why


ATTACK_TMP = _attack_tmp()


#: The modules that take minutes, first: a worker that starts one of them last would leave
#: the others idle while it finishes (measured with --durations; the rest keep their order).
SLOWEST_FIRST = (
    "tests/e2e/test_tb2_sample.py",
    "tests/security/test_compose_allowlist.py",
    "tests/e2e/test_ray_executor.py",
    "tests/security/test_docker_attacks.py",
    "tests/security/test_grading_attacks.py",
    "tests/e2e/test_agent_musl.py",
    "tests/security/test_egress_filter.py",
    "tests/e2e/test_step_networks.py",
    "tests/security/test_record_integrity.py",
    "tests/e2e/test_cli_resume.py",
    "tests/security/test_agent_exec_confinement.py",
    "tests/e2e/test_agent_mini_swe_agent.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slowest modules first (:data:`SLOWEST_FIRST`); every other test in its order."""
    rank = {path: i for i, path in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadscope`` (scripts/test), a module's tests go to one worker together.

    Scopes are taken in collection order (``--no-loadscope-reorder``): the slowest first.

    So a module's fixtures (a built image, a Ray cluster) are made once; the modules whose
    name starts ``test_ray_`` share one worker (one Ray cluster at a time on the machine's
    loopback addresses). support/workers.py says how the suite runs in parallel.
    """
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return shared_scope(nodeid.split("::", 1)[0])

    return ModuleScheduling(config, log)


def shared_scope(path: str) -> str:
    """The unit a worker takes whole: the module, or the group it shares a resource with."""
    return "ray" if Path(path).name.startswith("test_ray_") else path


def pytest_collectstart(collector: pytest.Collector) -> None:
    """Before a test module is imported, ``conftest`` names its own directory's conftest.

    Every ``conftest.py`` outside a package is imported as the one module name ``conftest``:
    ``sys.modules["conftest"]`` holds whichever pytest loaded last, and pytest loads the
    conftests of every path on its command line before collecting any. So with
    ``tests/security/x.py tests/e2e/y.py`` named together, ``x``'s ``from conftest import``
    would find e2e's conftest and fail to collect. Pointing the name at the nearest conftest of
    the module's own directory, just before the module is imported, makes the import mean
    the same whatever else the command names (tests/unit/test_test_hygiene.py checks it).
    """
    if not isinstance(collector, pytest.Module):
        return
    manager = collector.config.pluginmanager
    for directory in collector.path.parents:
        own = manager.get_plugin(str(directory / "conftest.py"))
        if own is not None:
            sys.modules["conftest"] = own
            return
        if directory == collector.config.rootpath:
            return


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("root") is not None and not IS_ROOT:
        prerequisite_missing("root: the local sandbox drops privileges only when started as root")


def live_procs_of(uids: range) -> list[psutil.Process]:
    """Every non-zombie process whose real uid is in ``uids``."""
    found = []
    for proc in psutil.process_iter(["uids", "status"]):
        try:
            if proc.info["uids"].real in uids and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.Error, TypeError, AttributeError):
            continue
    return found


@pytest.fixture
def canary() -> str:
    return f"CANARY-{secrets.token_hex(16)}"


@pytest.fixture
def make_task(tmp_path: Path) -> Callable[..., Task]:
    """Build a real task dir under tmp_path and load it."""

    def make(
        name: str = "demo",
        *,
        test_sh: str = 'echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n',
        workspace: dict[str, bytes] | None = None,
        agent_timeout: float = 30,
    ) -> Task:
        task_dir = tmp_path / "tasks" / name
        (task_dir / "tests").mkdir(parents=True)
        (task_dir / "task.toml").write_text(
            f'[task]\nname = "{name}"\n\n[agent]\ntimeout_sec = {agent_timeout}\n\n'
            "[verifier]\ntimeout_sec = 30\n"
        )
        (task_dir / "instruction.md").write_text("Do the thing.\n")
        (task_dir / "tests" / "test.sh").write_text("#!/bin/bash\n" + test_sh)
        for rel, data in (workspace or {}).items():
            target = task_dir / "workspace" / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        return load_task(task_dir)

    return make


def copy_legacy_run(root: Path) -> Path:
    """The 0.1.0 run dir and its tasks under ``root``, its paths pointing there."""
    shutil.copytree(LEGACY_RUN / "tasks", root / "tasks", symlinks=True)
    run_dir = root / "runs" / "legacy"
    shutil.copytree(LEGACY_RUN / "run", run_dir, symlinks=True)
    for name in ("config.toml", "trials.jsonl"):
        path = run_dir / name
        path.write_text(path.read_text().replace(LEGACY_WRITTEN_AT, str(root)))
    return run_dir


@pytest.fixture
def legacy_run() -> Callable[[Path], Path]:
    """``legacy_run(root)``: copy the run dir harness 0.1.0 wrote under ``root``."""
    return copy_legacy_run


@pytest.fixture
def outside_dir() -> Iterator[Path]:
    """A world-readable dir outside any trial root (tmp_path is 0700, useless as bait)."""
    path = Path(tempfile.mkdtemp(prefix="harness-test-outside-", dir=ATTACK_TMP))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def small_fs() -> Iterator[Callable[[str], Path]]:
    """``small_fs("300k")``: a tmpfs of that size (remount it read-only, or bigger, at will)."""
    mounted: list[Path] = []

    def make(size: str) -> Path:
        point = Path(tempfile.mkdtemp(prefix="hf-fs-", dir="/tmp"))
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs",
                        str(point)], check=True)  # fmt: skip
        mounted.append(point)
        return point

    yield make
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)
        shutil.rmtree(point, ignore_errors=True)


@pytest.fixture
def identity_pool() -> Iterator[IdentityPool]:
    """A private uid pool; teardown fails if any process of its uids is still alive."""
    yield IdentityPool(TEST_UID_BASE, TEST_UID_BASE)
    leaked = live_procs_of(range(TEST_UID_BASE, TEST_UID_BASE + 8))
    assert not leaked, f"sandbox processes leaked: {[p.info for p in leaked]}"


@pytest.fixture
def roots_dir() -> Iterator[Path]:
    """Where local trial roots are created: traversable (not listable) by sandbox uids."""
    path = Path(tempfile.mkdtemp(prefix="harness-test-roots-", dir=ATTACK_TMP))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def make_local_sandbox(
    identity_pool: IdentityPool, roots_dir: Path
) -> Iterator[Callable[..., LocalSandbox]]:
    """Create (and always stop) LocalSandboxes running the real supervisor."""
    made: list[LocalSandbox] = []

    def make(spec: SandboxSpec | None = None, *, start: bool = True) -> LocalSandbox:
        sandbox = LocalSandbox(
            spec or SandboxSpec(trial_id=f"t-{secrets.token_hex(4)}"),
            identities=identity_pool,
            python=SYSTEM_PYTHON,
            tmp_dir=roots_dir,
        )
        made.append(sandbox)
        if start:
            sandbox.start()
        return sandbox

    yield make
    for sandbox in made:
        sandbox.stop()
