"""The fault suite's fixtures: a private engine, size-limited filesystems, the CLI as a process.

Every fault here is real: a Docker engine stopped and started again (a private one, never
the shared engine), a filesystem that fills up or turns read-only, ``kill -9`` and SIGSTOP of
the harness process. Each test asserts from outside: the records in the run dir, the
objects on the engine, the output (never a traceback). Helpers: ``tests/support/faults.py``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.docker import unavailable
from support.faults import Cli, Ext4
from support.private_engine import PrivateEngine, started_engine


@pytest.fixture(scope="session")
def private_engine() -> Iterator[PrivateEngine]:
    """A private Docker engine for the session (stop it, restart it: it is the test's)."""
    if os.geteuid() != 0:
        unavailable("a private Docker engine needs root")
    if shutil.which("dockerd") is None:
        unavailable("dockerd is not installed")
    root = Path(tempfile.mkdtemp(prefix="hf-", dir="/tmp"))
    try:
        engine = started_engine(root)
    except RuntimeError as exc:
        shutil.rmtree(root, ignore_errors=True)
        unavailable(f"the private engine did not start: {exc}")
    yield engine
    engine.close()


@pytest.fixture
def engine(private_engine: PrivateEngine) -> Iterator[PrivateEngine]:
    """The private engine, running and empty (the test asserts it leaves it empty)."""
    if not private_engine.answers():
        private_engine.start()
    private_engine.remove_everything()
    yield private_engine
    if not private_engine.answers():
        private_engine.start()
    private_engine.remove_everything()


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    """Harness processes of this test (on the shared engine unless told otherwise)."""
    runner = Cli(tmp_path, {})
    yield runner
    runner.close()


@pytest.fixture
def engine_cli(tmp_path: Path, engine: PrivateEngine) -> Iterator[Cli]:
    """Harness processes of this test, on the private engine."""
    runner = Cli(tmp_path, {"DOCKER_HOST": engine.host})
    yield runner
    runner.close()


@pytest.fixture
def ext4() -> Iterator[Callable[[int], Ext4]]:
    """``ext4(32)``: a 32 MB ext4 filesystem, turned read-only by ``.fail()``."""
    made: list[Ext4] = []

    def make(size_mb: int) -> Ext4:
        fs = Ext4(Path(tempfile.mkdtemp(prefix="hf-ext4-", dir="/tmp")), size_mb)
        made.append(fs)
        return fs

    yield make
    for fs in made:
        fs.close()
