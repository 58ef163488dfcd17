"""Fixtures for the security battery (docs/security.md, "How it is tested").

Every attack runs as a real agent through the real CLI (``python -m harness run --sandbox
docker --agent command --agent-cmd "bash {instruction_file}"``: the task's instruction.md
IS the attack script) or through the real ``harness.trial.run_trial`` API. Results are
judged from OUTSIDE the trial: the run dir, ``docker inspect``, the host's cgroups and
/proc, host-side listeners; never the agent's own verdict.

Every docker object a test creates is found by a unique task name / run label and removed
in teardown, so concurrent users of the engine are never touched.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from support.docker import (  # noqa: F401
    docker_client,
    require_image,
    requires_docker,
    unavailable,
)

REPO = Path(__file__).resolve().parents[2]
MANAGED = "org.harness.managed"
RUN_LABEL = "org.harness.run"
TASK_LABEL = "org.harness.task"
TRIAL_LABEL = "org.harness.trial"
KIND_LABEL = "org.harness.kind"
BASE_IMAGE = "harness/base:bookworm"
AGENT_CMD = "bash {instruction_file}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here needs the engine or root: the markers are checked, not assumed."""
    here = Path(__file__).parent
    for item in items:
        if Path(item.path).is_relative_to(here):
            assert (
                item.get_closest_marker("docker") is not None
                or item.get_closest_marker("root") is not None
            ), f"{item.nodeid}: security tests must be marked docker (engine) or root (local)"


@pytest.fixture(scope="session")
def client(requires_docker: Any) -> Any:  # noqa: F811 - the imported fixture
    """The Docker client, with the base image present (skip/fail otherwise)."""
    require_image(requires_docker, BASE_IMAGE)
    return requires_docker


# --------------------------------------------------------------------------- task dirs


def write_task(
    parent: Path,
    name: str,
    *,
    attack: str,
    test_sh: str = 'echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n',
    agent_timeout: float = 15,
    verifier_timeout: float = 20,
    allow_internet: bool = False,
    tests_files: Mapping[str, str] | None = None,
    solution_files: Mapping[str, str] | None = None,
    dockerfile: str | None = None,
    workspace: Mapping[str, str] | None = None,
) -> Path:
    """A task dir ``parent/name`` whose instruction.md is the bash attack script."""
    task = parent / name
    (task / "tests").mkdir(parents=True)
    toml = (
        f'[task]\nname = "{name}"\n\n[agent]\ntimeout_sec = {agent_timeout}\n\n'
        f"[verifier]\ntimeout_sec = {verifier_timeout}\n\n"
        f"[environment]\nallow_internet = {'true' if allow_internet else 'false'}\n"
        "cpus = 1\nmemory_mb = 512\n"
    )
    (task / "task.toml").write_text(toml)
    (task / "instruction.md").write_text("#!/bin/bash\n" + attack)
    (task / "tests" / "test.sh").write_text("#!/bin/bash\n" + test_sh)
    (task / "tests" / "test.sh").chmod(0o755)
    for rel, text in (tests_files or {}).items():
        (task / "tests" / rel).parent.mkdir(parents=True, exist_ok=True)
        (task / "tests" / rel).write_text(text)
    if solution_files:
        for rel, text in solution_files.items():
            path = task / "solution" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            path.chmod(0o755)
    if dockerfile is not None:
        (task / "environment").mkdir()
        (task / "environment" / "Dockerfile").write_text(dockerfile)
    for rel, text in (workspace or {}).items():
        path = task / "workspace" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return task


def unique(prefix: str) -> str:
    """A task name nobody else on this engine uses (it becomes the org.harness.task label)."""
    return f"sec-{prefix}-{secrets.token_hex(4)}"


# --------------------------------------------------------------------------- run dirs


def every_file(top: Path) -> list[Path]:
    """Every regular file under ``top`` (symlinks not followed)."""
    found = []
    for dirpath, _dirs, files in os.walk(top, followlinks=False):
        found.extend(Path(dirpath) / name for name in files)
    return found


def files_containing(top: Path, needle: str | bytes) -> list[str]:
    """The files under ``top`` whose bytes contain ``needle``."""
    raw = needle.encode() if isinstance(needle, str) else needle
    return [
        str(p)
        for p in every_file(top)
        if not p.is_symlink() and p.is_file() and raw in p.read_bytes()
    ]


def read_records(run_dir: Path) -> list[dict[str, Any]]:
    """The trial records of a run dir."""
    path = run_dir / "trials.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass
class CliRun:
    """One finished ``harness run``."""

    code: int
    stdout: str
    stderr: str
    run_dir: Path | None
    records: list[dict[str, Any]] = field(default_factory=list)

    def by_task(self, name: str) -> dict[str, Any]:
        """The single record of task ``name``."""
        found = [r for r in self.records if r["task"]["name"] == name]
        assert len(found) == 1, f"expected one record of {name}, got {len(found)}\n{self}"
        return found[0]

    def evidence(self, record: Mapping[str, Any]) -> Path:
        """``trials/<id>/`` of a record."""
        assert self.run_dir is not None
        return self.run_dir / "trials" / record["id"]

    def __str__(self) -> str:
        return f"exit {self.code}\n--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}"


class Cli:
    """Runs the real CLI as a subprocess with a private TMPDIR and output dir.

    ``sandbox``/``runtime`` choose the backend (docker by default; ``local``; docker with
    ``runtime="runsc"`` for gVisor).
    """

    def __init__(self, workdir: Path, sandbox: str = "docker", runtime: str | None = None) -> None:
        self.workdir = workdir
        self.sandbox = sandbox
        self.runtime = runtime
        self.tmpdir = workdir / "host-tmp"
        self.tmpdir.mkdir(exist_ok=True)
        self.output = workdir / "runs"
        self._before: set[Path] = set()

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "COLUMNS": "200",
                "NO_COLOR": "1",
                "TERM": "dumb",
                "PYTHONUNBUFFERED": "1",
                "TMPDIR": str(self.tmpdir),
            }
        )
        env.update(extra or {})
        return env

    def argv(
        self, paths: list[Path], *, agent: str = "command", jobs: int = 1, extra: Any = ()
    ) -> list[str]:
        argv = [sys.executable, "-m", "harness", "run", *map(str, paths)]
        argv += ["--sandbox", self.sandbox, *(["--runtime", self.runtime] if self.runtime else [])]
        argv += ["--agent", agent, "-j", str(jobs), "-o", str(self.output), *extra]
        if agent == "command":
            argv += ["--agent-cmd", AGENT_CMD]
        return argv

    def start(
        self,
        paths: list[Path],
        *,
        agent: str = "command",
        jobs: int = 1,
        env: Any = None,
        extra: Any = (),
    ) -> subprocess.Popen[str]:
        """Start ``harness run`` in its own session (the caller may signal it)."""
        self._before = set(self.output.iterdir()) if self.output.exists() else set()
        return subprocess.Popen(
            self.argv(paths, agent=agent, jobs=jobs, extra=extra),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.env(env),
            cwd=str(REPO),
            start_new_session=True,
            text=True,
        )

    def run_dir_of_last(self) -> Path | None:
        """The run dir created by the last ``start`` (None if it created none)."""
        now = set(self.output.iterdir()) if self.output.exists() else set()
        created = sorted(now - self._before)
        assert len(created) <= 1, f"one run created several run dirs: {created}"
        return created[0] if created else None

    def finish(self, proc: subprocess.Popen[str], timeout: float) -> CliRun:
        """Wait for a started run (killing it and failing the test after ``timeout``)."""
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
            pytest.fail(f"harness run did not finish within {timeout:g}s\n{stdout}\n{stderr}")
        run_dir = self.run_dir_of_last()
        records = read_records(run_dir) if run_dir else []
        return CliRun(proc.returncode, stdout, stderr, run_dir, records)

    def run(
        self,
        paths: list[Path],
        *,
        agent: str = "command",
        jobs: int = 1,
        env: Mapping[str, str] | None = None,
        timeout: float = 90,
        extra: Any = (),
    ) -> CliRun:
        """``harness run PATHS --sandbox ... `` to the end."""
        proc = self.start(paths, agent=agent, jobs=jobs, env=env, extra=extra)
        return self.finish(proc, timeout)

    def run_tmp(self, run_dir: Path) -> Path:
        """The run's private temp dir (trial roots and their storage images)."""
        return self.tmpdir / f"harness-run-{run_dir.name}"


#: The backends the grading battery runs on: id -> (sandbox, runtime, marks).
BACKENDS = {
    "local": ("local", None, [pytest.mark.root]),
    "docker": ("docker", None, [pytest.mark.docker]),
    "runsc": ("docker", "runsc", [pytest.mark.docker]),
}


def backend_params() -> list[Any]:
    """``pytest.param`` per backend, with its marks, for ``@pytest.mark.parametrize``."""
    return [pytest.param(name, marks=marks, id=name) for name, (_s, _r, marks) in BACKENDS.items()]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test that takes ``backend`` runs once per backend (``local``, ``docker``, ``runsc``)."""
    if "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend", backend_params())


def backend_engine(request: pytest.FixtureRequest, backend: str) -> tuple[str, str | None, Any]:
    """``backend``'s sandbox, runtime and engine client (None: local), its runtime checked.

    A docker runtime the engine does not register fails (CI) or skips, saying how to add it.
    """
    sandbox, runtime, _marks = BACKENDS[backend]
    client = None
    if sandbox == "docker":
        client = request.getfixturevalue("client")
        if runtime and runtime not in (client.info().get("Runtimes") or {}):
            unavailable(f"runtime {runtime} is not registered (docker/start-engine.sh does it)")
    return sandbox, runtime, client


@pytest.fixture
def any_cli(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> Iterator[Cli]:
    """A CLI runner for the test's ``backend`` parameter (local, docker or runsc)."""
    sandbox, runtime, client = backend_engine(request, backend)
    runner = Cli(tmp_path, sandbox=sandbox, runtime=runtime)
    yield runner
    if client is not None and runner.output.exists():
        for run_dir in runner.output.iterdir():
            remove_labelled(client, f"{RUN_LABEL}={run_dir.name}")


@pytest.fixture(params=["runc", "runsc"])
def docker_runtime(request: pytest.FixtureRequest, client: Any) -> str | None:
    """Each docker attack runs under runc and under gVisor (``--runtime runsc``)."""
    if request.param == "runc":
        return None
    if request.param not in (client.info().get("Runtimes") or {}):
        unavailable(f"runtime {request.param} is not registered (docker/start-engine.sh does it)")
    return str(request.param)


@pytest.fixture
def cli(client: Any, docker_runtime: str | None, tmp_path: Path) -> Iterator[Cli]:
    """A CLI runner; teardown removes whatever its runs left on the engine (by run label)."""
    runner = Cli(tmp_path, runtime=docker_runtime)
    yield runner
    if runner.output.exists():
        for run_dir in runner.output.iterdir():
            remove_labelled(client, f"{RUN_LABEL}={run_dir.name}")


# --------------------------------------------------------------------------- engine


def labelled(client: Any, label: str) -> dict[str, list[str]]:
    """Containers, volumes (not the shared runtime) and networks carrying ``label``."""
    filters = {"label": [f"{MANAGED}=1", label]}
    containers = [c.name for c in client.containers.list(all=True, filters=filters)]
    volumes = [
        v.name
        for v in client.volumes.list(filters=filters)
        if (v.attrs.get("Labels") or {}).get(KIND_LABEL) != "runtime"
    ]
    networks = [n.name for n in client.networks.list(filters=filters)]
    return {"containers": containers, "volumes": volumes, "networks": networks}


def remove_labelled(client: Any, label: str) -> None:
    """Best-effort removal of what a test's run left behind (never other users' objects)."""
    filters = {"label": [f"{MANAGED}=1", label]}
    for container in client.containers.list(all=True, filters=filters):
        try:
            container.remove(force=True, v=True)
        except Exception:
            pass
    for volume in client.volumes.list(filters=filters):
        if (volume.attrs.get("Labels") or {}).get(KIND_LABEL) == "runtime":
            continue
        try:
            volume.remove(force=True)
        except Exception:
            pass


class Watcher:
    """Polls the engine from a thread for containers with a label, calling ``on_seen``.

    ``on_seen(container_id)`` runs on every poll while the container exists (so it can
    sample cgroups or re-inspect); its exceptions are kept in ``errors``.
    """

    def __init__(
        self,
        client: Any,
        label: str,
        on_seen: Callable[[str], None] | None = None,
        *,
        interval: float = 0.1,
    ) -> None:
        self.client = client
        self.label = label
        self.on_seen = on_seen
        self.interval = interval
        self.seen: dict[str, dict[str, Any]] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def wait_for_container(self, timeout: float = 60) -> str:
        """The id of the first container seen (fails the test after ``timeout``)."""
        stop_at = time.monotonic() + timeout
        while time.monotonic() < stop_at:
            if self.seen:
                return next(iter(self.seen))
            time.sleep(0.05)
        pytest.fail(f"no container labelled {self.label} appeared within {timeout:g}s")

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                found = self.client.api.containers(all=False, filters={"label": [self.label]})
            except Exception as exc:
                self.errors.append(repr(exc))
                found = []
            for summary in found:
                cid = summary["Id"]
                if cid not in self.seen:
                    try:
                        self.seen[cid] = self.client.api.inspect_container(cid)
                    except Exception as exc:
                        self.errors.append(repr(exc))
                        continue
                if self.on_seen is not None:
                    try:
                        self.on_seen(cid)
                    except Exception as exc:
                        self.errors.append(repr(exc))
            self._stop.wait(self.interval)


# --------------------------------------------------------------------------- python API


@dataclass
class ApiRun:
    """The shared docker runtime of API-driven trials, with a unique run label."""

    client: Any
    run_dir: Path
    make_sandbox: Any
    runtime: Any
    label: str

    def trial(
        self,
        task_dir: Path,
        agent: Any,
        *,
        secret_env: Mapping[str, str] | None = None,
        trial_id: str | None = None,
    ) -> Any:
        """Run one trial through ``harness.trial.run_trial`` and return its record."""
        from harness.tasks import load_task
        from harness.trial import TrialPlan, TrialSettings, run_trial

        task = load_task(task_dir)
        plan = TrialPlan(id=trial_id or f"{task.name}.r0", task=task, rollout=0)
        settings = TrialSettings(
            run_dir=self.run_dir,
            agent=agent,
            make_sandbox=self.make_sandbox,
            secret_env=dict(secret_env or {}),
            protected_paths=(self.run_dir,),
        )
        return run_trial(plan, settings)


@pytest.fixture
def api(client: Any, docker_runtime: str | None, tmp_path: Path) -> Iterator[ApiRun]:
    """Trials through the Python API on the real docker backend (opened as a run opens it)."""
    from harness.backends.registry import open_backend
    from harness.config import RunConfig

    run_dir = tmp_path / "api-run"
    run_dir.mkdir(mode=0o700)
    label = f"sec-api-{secrets.token_hex(6)}"
    config = RunConfig(
        paths=[str(tmp_path)],
        agent="command",
        agent_cmd=AGENT_CMD,
        sandbox="docker",
        runtime=docker_runtime,
    )
    runtime = open_backend(config, label)
    runtime.start()
    yield ApiRun(client, run_dir, runtime.make_sandbox, runtime, label)
    runtime.close()
    remove_labelled(client, f"{RUN_LABEL}={label}")


class Sec:
    """The helpers, handed to tests by the ``sec`` fixture (conftest is not importable)."""

    write_task = staticmethod(write_task)
    unique = staticmethod(unique)
    every_file = staticmethod(every_file)
    files_containing = staticmethod(files_containing)
    read_records = staticmethod(read_records)
    labelled = staticmethod(labelled)
    Watcher = Watcher
    Cli = Cli
    AGENT_CMD = AGENT_CMD
    MANAGED = MANAGED
    RUN_LABEL = RUN_LABEL
    TASK_LABEL = TASK_LABEL
    TRIAL_LABEL = TRIAL_LABEL
    BASE_IMAGE = BASE_IMAGE


@pytest.fixture(scope="session")
def sec() -> type[Sec]:
    """``sec.write_task(...)``, ``sec.unique(...)``, ``sec.Watcher(...)``, ..."""
    return Sec
