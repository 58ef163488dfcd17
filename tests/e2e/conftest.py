"""Helpers for the end-to-end CLI tests: run ``python -m harness`` as a real subprocess.

Fixtures:
    cli: ``cli(*args, env=..., timeout=..., cwd=...)`` → :class:`CliResult` (code, stdout,
        stderr); the process runs in its own session and is killed (with its group) on
        timeout, which fails the test instead of hanging the suite.
    e2e: the namespace :class:`E2E`: ``run`` (= cli), ``make_task(parent, name, ...)``
        (a minimal task dir), ``read_run(run_dir)`` (→ :class:`RunDir`), ``only_run_dir``,
        ``assert_nothing_created`` and the example task constants.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "tasks"
EXAMPLE_KEYS = (
    "harness-examples/anti-fake",
    "harness-examples/fix-bug",
    "harness-examples/hello-file",
    "harness-examples/sales-report",
)

# A verifier that always writes reward 1 into $HARNESS_VERIFIER_DIR.
TEST_SH_ONE = '#!/bin/bash\necho 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
TEST_SH_ZERO = '#!/bin/bash\necho 0 > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
SOLVE_SH = "#!/bin/bash\ntrue\n"


class CliResult(NamedTuple):
    """What one CLI invocation gave back."""

    code: int
    stdout: str
    stderr: str

    def json(self) -> dict[str, Any]:
        """Parse stdout (``--json``) as one JSON object."""
        try:
            data = json.loads(self.stdout)
        except json.JSONDecodeError as exc:  # pragma: no cover - shown on failure only
            raise AssertionError(
                f"stdout is not JSON ({exc}):\n{self.stdout}\n--- stderr ---\n{self.stderr}"
            ) from exc
        assert isinstance(data, dict), data
        return data

    def error_lines(self) -> list[str]:
        """The non-empty lines of stderr."""
        return [line for line in self.stderr.splitlines() if line.strip()]

    def __str__(self) -> str:
        return f"exit {self.code}\n--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}"


def _base_env() -> dict[str, str]:
    env = dict(os.environ)
    # Wide, plain output so tables are not truncated and nothing is colour-coded.
    env.update({"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb", "PYTHONUNBUFFERED": "1"})
    env.pop("FORCE_COLOR", None)
    return env


class RunningCli:
    """A ``python -m harness`` subprocess started in the background (see :func:`start_cli`)."""

    def __init__(
        self, args: tuple[str, ...], proc: subprocess.Popen[str], output: Path | None = None
    ) -> None:
        self.args = args
        self.proc = proc
        self.output = output

    def wait(self, timeout: float = 60.0) -> CliResult:
        """Wait at most ``timeout`` seconds; on timeout kill its process group and fail."""
        try:
            stdout, stderr = self._read(self.proc.communicate(timeout=timeout))
        except subprocess.TimeoutExpired:
            self.kill()
            stdout, stderr = self._read(self.proc.communicate())
            pytest.fail(
                f"harness {' '.join(self.args)} did not finish within {timeout:g}s\n"
                f"--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}"
            )
        return CliResult(self.proc.returncode, stdout, stderr)

    def _read(self, piped: tuple[str | None, str | None]) -> tuple[str, str]:
        if self.output is None:
            return piped[0] or "", piped[1] or ""
        read = (self.output / "stdout", self.output / "stderr")
        return read[0].read_text(errors="replace"), read[1].read_text(errors="replace")

    def interrupt(self, timeout: float = 300.0) -> CliResult:
        """Ctrl-C (SIGINT to its process group: the run stops and cleans up), then wait."""
        try:
            os.killpg(self.proc.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
        return self.wait(timeout)

    def kill(self) -> None:
        """SIGKILL the process group this helper started (only that one)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def start_cli(
    *args: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    output: Path | None = None,
) -> RunningCli:
    """Start ``python -m harness ARGS...`` in its own session; see :meth:`RunningCli.wait`.

    ``output``: a dir its stdout and stderr go to, as the files ``stdout`` and ``stderr``,
    instead of pipes. A run left going while a test does something else can then write
    all it wants: nobody reads a pipe until it ends, and a full one would stall it.
    """
    full_env = _base_env()
    if env:
        full_env.update(env)
    argv = tuple(map(str, args))
    with contextlib.ExitStack() as files:
        streams: list[Any] = [subprocess.PIPE, subprocess.PIPE]
        if output is not None:
            output.mkdir(parents=True, exist_ok=True)
            streams = [files.enter_context((output / n).open("w")) for n in ("stdout", "stderr")]
        proc = subprocess.Popen(
            [sys.executable, "-m", "harness", *argv],
            stdin=subprocess.DEVNULL,
            stdout=streams[0],
            stderr=streams[1],
            env=full_env,
            cwd=str(cwd or REPO),
            start_new_session=True,
            text=True,
        )
    return RunningCli(argv, proc, output)


def run_cli(
    *args: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    cwd: Path | None = None,
) -> CliResult:
    """Run ``python -m harness ARGS...`` and wait for it (at most ``timeout`` seconds)."""
    return start_cli(*args, env=env, cwd=cwd).wait(timeout)


def make_task_dir(
    parent: Path,
    name: str,
    *,
    instruction: str | None = "Do the task.\n",
    test_sh: str | None = TEST_SH_ONE,
    solve_sh: str | None = SOLVE_SH,
    toml: str | None = None,
    agent_timeout: float | None = 30,
    workspace: Mapping[str, str] | None = None,
) -> Path:
    """Build a task dir ``parent/name``; pass None to leave a file out.

    ``toml`` replaces the whole ``task.toml`` (default: ``[task] name`` plus
    ``[agent] timeout_sec``); ``workspace`` maps relative paths to file contents. Delete
    ``task.toml`` afterwards to get a dir without one.
    """
    task = parent / name
    task.mkdir(parents=True)
    if toml is None:
        toml = f'[task]\nname = "e2e/{name}"\n'
        if agent_timeout is not None:
            toml += f"\n[agent]\ntimeout_sec = {agent_timeout}\n"
    (task / "task.toml").write_text(toml)
    if instruction is not None:
        (task / "instruction.md").write_text(instruction)
    (task / "tests").mkdir()
    if test_sh is not None:
        (task / "tests" / "test.sh").write_text(test_sh)
        (task / "tests" / "test.sh").chmod(0o755)
    if solve_sh is not None:
        (task / "solution").mkdir()
        (task / "solution" / "solve.sh").write_text(solve_sh)
        (task / "solution" / "solve.sh").chmod(0o755)
    for rel, content in (workspace or {}).items():
        path = task / "workspace" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return task


@dataclass
class RunDir:
    """A finished run dir, parsed."""

    path: Path
    records: list[dict[str, Any]]
    summary: dict[str, Any]
    config: dict[str, Any]

    def by_task(self) -> dict[str, list[dict[str, Any]]]:
        """Records grouped by task key."""
        out: dict[str, list[dict[str, Any]]] = {}
        for record in self.records:
            out.setdefault(record["task"]["key"], []).append(record)
        return out

    def evidence(self, record: Mapping[str, Any]) -> Path:
        """The trial's evidence dir, ``trials/<id>/``."""
        return self.path / "trials" / record["id"]


def read_run_dir(run_dir: Path) -> RunDir:
    """Parse ``trials.jsonl`` (every line must be one JSON object), summary and config."""
    run_dir = Path(run_dir)
    records = []
    for number, line in enumerate((run_dir / "trials.jsonl").read_text().splitlines(), 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise AssertionError(f"trials.jsonl line {number} is not JSON: {line!r}") from exc
        assert isinstance(record, dict), f"trials.jsonl line {number} is not an object"
        records.append(record)
    summary = json.loads((run_dir / "summary.json").read_text())
    config = tomllib.loads((run_dir / "config.toml").read_text())
    return RunDir(run_dir, records, summary, config)


def only_run_dir(output_dir: Path) -> Path:
    """The single run dir created under ``output_dir``."""
    runs = [p for p in Path(output_dir).iterdir() if p.is_dir()]
    assert len(runs) == 1, f"expected one run dir in {output_dir}, found {runs}"
    return runs[0]


def assert_nothing_created(output_dir: Path) -> None:
    """The output dir does not exist, or is empty."""
    if Path(output_dir).exists():
        left = sorted(p.name for p in Path(output_dir).iterdir())
        assert not left, f"{output_dir} should be empty, holds {left}"


class E2E:
    """Everything the e2e tests share, handed out by the ``e2e`` fixture."""

    REPO = REPO
    EXAMPLES = EXAMPLES
    EXAMPLE_KEYS = EXAMPLE_KEYS
    TEST_SH_ONE = TEST_SH_ONE
    TEST_SH_ZERO = TEST_SH_ZERO
    run = staticmethod(run_cli)
    start = staticmethod(start_cli)
    make_task = staticmethod(make_task_dir)
    read_run = staticmethod(read_run_dir)
    only_run_dir = staticmethod(only_run_dir)
    assert_nothing_created = staticmethod(assert_nothing_created)


@pytest.fixture(scope="session")
def e2e() -> type[E2E]:
    """The helpers: ``e2e.run(...)``, ``e2e.make_task(...)``, ``e2e.read_run(...)``, ..."""
    return E2E


@pytest.fixture(scope="session")
def cli() -> Callable[..., CliResult]:
    """``cli(*args, env=None, timeout=60, cwd=None)`` → CliResult (code, stdout, stderr)."""
    return run_cli
