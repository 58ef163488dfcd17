"""The fault suite's helpers: the CLI as a process, tasks, what a run dir holds, assertions.

Every fault here is real: a Docker engine stopped and started again (a private one, never
the shared engine), a filesystem that fills up or turns read-only, ``kill -9`` and SIGSTOP of
the harness process. Each test asserts from outside: the records in the run dir, the
objects on the engine, the output (never a traceback).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sandbox.docker.egress import NETWORK as EGRESS_NETWORK

if TYPE_CHECKING:
    from support.private_engine import PrivateEngine

RUNNING = "bash {instruction_file}"
"""The command agent's command: the instruction is a shell script."""


@dataclass
class Result:
    """How a harness process ended: its exit code and its whole output (stdout + stderr)."""

    code: int
    output: str

    def __str__(self) -> str:
        return f"exit {self.code}\n{self.output}"


class HarnessProcess:
    """``python -m harness ARGS`` in a session of its own, output into a file."""

    def __init__(self, args: list[str], env: Mapping[str, str], log: Path) -> None:
        self.args = args
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "harness", *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb", **env},
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        """The harness's pid."""
        return self.proc.pid

    def output(self) -> str:
        """What it printed so far."""
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        """Whether it still runs."""
        return self.proc.poll() is None

    def wait(self, timeout: float = 180) -> Result:
        """Its end (at most ``timeout`` s: then its group is killed and the test fails)."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill_group()
            pytest.fail(f"harness {self.args} did not end within {timeout:g}s\n{self.output()}")
        return Result(code, self.output())

    def kill9(self) -> None:
        """``kill -9`` of the harness process alone (its sandboxes stay, as after a crash)."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def kill_group(self) -> None:
        """Kill the process group this test started (only that one)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


class Cli:
    """Starts harness processes for one test; every one is killed at teardown."""

    def __init__(self, tmp: Path, env: Mapping[str, str]) -> None:
        self.tmp = tmp
        self.env = dict(env)
        self.started: list[HarnessProcess] = []

    def start(self, *args: str | Path, env: Mapping[str, str] | None = None) -> HarnessProcess:
        """Start ``harness ARGS`` (in the background)."""
        log = self.tmp / f"harness-{len(self.started)}.log"
        proc = HarnessProcess([str(a) for a in args], {**self.env, **(env or {})}, log)
        self.started.append(proc)
        return proc

    def run(self, *args: str | Path, timeout: float = 180, **kw: Any) -> Result:
        """Run ``harness ARGS`` to its end."""
        return self.start(*args, **kw).wait(timeout)

    def close(self) -> None:
        """Kill what still runs (a failed test), so nothing outlives it."""
        for proc in self.started:
            if proc.alive():
                proc.kill_group()


def make_tasks(
    root: Path,
    count: int,
    script: str = "true",
    *,
    timeout: float = 60,
    prefix: str = "f",
    dockerfile: str | None = None,
) -> Path:
    """``count`` tasks whose instruction is the shell ``script`` (run by the command agent)."""
    for i in range(count):
        task = root / f"{prefix}{i:02d}"
        (task / "tests").mkdir(parents=True)
        (task / "task.toml").write_text(
            f'[task]\nname = "faults/{prefix}{i:02d}"\n[agent]\ntimeout_sec = {timeout}\n'
            "[verifier]\ntimeout_sec = 60\n"
        )
        (task / "instruction.md").write_text(script + "\n")
        (task / "tests" / "test.sh").write_text('echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n')
        if dockerfile is not None:
            (task / "environment").mkdir()
            (task / "environment" / "Dockerfile").write_text(dockerfile)
    return root


def run_args(tasks: Path, out: Path, name: str, *extra: str, jobs: int = 2) -> list[str | Path]:
    """``harness run`` of the tasks with the command agent on the docker sandbox."""
    return ["run", tasks, "--sandbox", "docker", "--agent", "command", "--agent-cmd", RUNNING,
            "-j", str(jobs), "-o", out, "--run-name", name, "--display", "plain",
            *extra]  # fmt: skip


def agents_running(run_dir: Path, count: int = 2) -> bool:
    """Whether ``count`` trials are in their agent phase (per ``status.json``)."""
    running = status(run_dir).get("running", [])
    return sum(t.get("phase") == "execute" for t in running) == count


NOTHING_LEFT = {"containers": [], "volumes": [], "networks": []}
"""What :meth:`PrivateEngine.leftovers` finds on an engine a run left clean."""


#: What a run says of what it could not remove, and the command it gives for it: a failed
#: cleanup, or (the engine's stale endpoint on the filtered network, which only its restart
#: clears) the warning a run's end gives instead of waiting for it.
_COULD_NOT_REMOVE = (
    r"(?:could not remove 1 sandbox object\(s\)"
    rf"|the {EGRESS_NETWORK} network could not be removed)"
    r".*?`harness ([^`]+)`"
)


def assert_left_clean(engine: PrivateEngine, cli: Cli, after: Result) -> None:
    """Nothing is left on the engine after the harness command that ended as ``after``.

    But for one fault of the engine's own: Docker 20.10 can go on counting an endpoint of a
    removed container on the filtered network while no container is attached, and refuses
    to remove it until it restarts. Then the harness must have said it could not remove it,
    with the command that does; after a restart of the engine that command must.
    """
    left = engine.leftovers()
    stuck = {**NOTHING_LEFT, "networks": [EGRESS_NETWORK]}
    if left == stuck and engine.counts_a_gone_endpoint(EGRESS_NETWORK):
        said = re.search(_COULD_NOT_REMOVE, after.output, re.S)
        assert said, f"{EGRESS_NETWORK} was left without a word: {after}"
        engine.restart()
        cleanup = cli.run(*said.group(1).split())
        assert cleanup.code == 0, cleanup
        left = engine.leftovers()
    assert left == NOTHING_LEFT, after


def records(run_dir: Path) -> list[dict[str, Any]]:
    """Every line of ``trials.jsonl`` (each must be a whole JSON record)."""
    path = run_dir / "trials.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def status(run_dir: Path) -> dict[str, Any]:
    """``status.json`` (empty while missing or being replaced)."""
    try:
        data = json.loads((run_dir / "status.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def assert_each_once(run_dir: Path, planned: int, statuses: set[str] | None = None) -> None:
    """Every planned trial recorded exactly once (after compaction), each as expected."""
    found = records(run_dir)
    ids = [r["id"] for r in found]
    assert len(ids) == len(set(ids)), f"a trial is recorded twice: {sorted(ids)}"
    assert len(ids) == planned, f"{len(ids)} of {planned} trials recorded"
    wanted = statuses or {"completed"}
    bad = [(r["id"], r["status"], r["errors"]) for r in found if r["status"] not in wanted]
    assert not bad, bad


def assert_no_traceback(*results: Result | str) -> None:
    """No Python traceback in any output."""
    for result in results:
        text = result if isinstance(result, str) else result.output
        assert "Traceback (most recent call last)" not in text, text


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 120) -> None:
    """Poll ``condition`` (every 20 ms) until it holds, or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def remount(point: Path, options: str) -> None:
    """``mount -o remount,OPTIONS`` (``ro``, ``rw``, ``size=10m``)."""
    subprocess.run(["mount", "-o", f"remount,{options}", str(point)], check=True)


class Ext4:
    """A loop-mounted ext4 filesystem of the test's (``errors=remount-ro``).

    :meth:`fail` makes the kernel turn it read-only at once, as a failing disk does
    (open files and all: ``mount -o remount,ro`` would refuse while the harness writes);
    :meth:`repair` checks and mounts it writable again.
    """

    def __init__(self, root: Path, size_mb: int) -> None:
        self.image = root / "fs.img"
        self.point = root / "mnt"
        self.point.mkdir()
        with self.image.open("wb") as image:
            image.truncate(size_mb << 20)
        subprocess.run(["mkfs.ext4", "-q", "-F", str(self.image)], check=True)
        self._mount()

    def _mount(self) -> None:
        subprocess.run(["mount", "-o", "loop,errors=remount-ro", str(self.image),
                        str(self.point)], check=True)  # fmt: skip
        device = subprocess.run(["findmnt", "-n", "-o", "SOURCE", str(self.point)],
                                capture_output=True, text=True, check=True).stdout  # fmt: skip
        self.device = Path(device.strip()).name

    def fail(self) -> None:
        """An ext4 error: the kernel remounts it read-only (EROFS for every write)."""
        Path(f"/sys/fs/ext4/{self.device}/trigger_fs_error").write_text("1\n")

    def repair(self) -> None:
        """Unmount, fsck and mount it writable again."""
        subprocess.run(["umount", str(self.point)], check=True)
        subprocess.run(["e2fsck", "-fy", str(self.image)], capture_output=True)
        self._mount()

    def close(self) -> None:
        """Unmount it and remove its image."""
        subprocess.run(["umount", "-l", str(self.point)], capture_output=True)
        shutil.rmtree(self.image.parent, ignore_errors=True)


__all__ = [
    "RUNNING",
    "Cli",
    "Ext4",
    "HarnessProcess",
    "Result",
    "NOTHING_LEFT",
    "agents_running",
    "assert_each_once",
    "assert_left_clean",
    "assert_no_traceback",
    "make_tasks",
    "records",
    "remount",
    "run_args",
    "status",
    "wait_until",
]
