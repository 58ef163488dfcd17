"""An in-memory sandbox for tests, in the spirit of httpx's ``MockTransport``.

No process runs: each phase is answered by a handler you pass in, which may read and write
the fake filesystem (e.g. a verifier handler writes ``reward.txt``). Every call is logged in
``calls`` so tests can assert the lifecycle order, and every phase with the network policy
it got (its step's: ``SandboxSpec.network_for``) in ``phases``.

Apart from running no process, it keeps the Sandbox contract that :mod:`sandbox.testing`
checks (tests/conformance/test_fake.py): fixtures are checked before anything is seeded,
``put_dir`` replaces the dir, and a path that climbs out with ``..`` is refused.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from pathlib import Path

from typing_extensions import override

from sandbox.backend import (
    PhaseRequest,
    PhaseResult,
    Role,
    Sandbox,
    SandboxPaths,
    SandboxSpec,
)
from sandbox.errors import SandboxError
from sandbox.inside.evidence import EvidenceEvent
from sandbox.network_policy import NetworkPolicy
from sandbox.seeding import check_fixture_path

PhaseHandler = Callable[[PhaseRequest, "FakeSandbox"], PhaseResult]


def ok_result(exit_code: int = 0, **fields: object) -> PhaseResult:
    """A phase result for a process that exited by itself."""
    base: dict[str, object] = {
        "exit_code": exit_code,
        "signal": None,
        "timed_out": False,
        "duration_sec": 0.0,
        "posture": {"dropped": True},
        "error": None,
        "survivors": [],
    }
    base.update(fields)
    return PhaseResult(**base)  # type: ignore[arg-type]


def _key(path: str) -> str:
    """An in-sandbox path as the fake's files are keyed: normalized, never climbing out.

    Raises:
        SandboxError: the path has a ``..`` component (a real backend refuses it too).
    """
    if ".." in path.split("/"):
        raise SandboxError(f"path {path} climbs out with '..'")
    return posixpath.normpath(path)


def _default_handler(request: PhaseRequest, sandbox: FakeSandbox) -> PhaseResult:
    return ok_result()


class FakeSandbox(Sandbox):
    """A sandbox whose filesystem is a dict and whose phases are a function."""

    backend = "fake"
    ROOT = "/fake"

    def __init__(
        self,
        spec: SandboxSpec,
        handler: PhaseHandler = _default_handler,
        *,
        fail_on: set[str] | None = None,
    ) -> None:
        super().__init__(spec)
        self.handler = handler
        self.files: dict[str, bytes] = {}
        self.calls: list[str] = []
        #: Each phase run, with the network policy a real backend would have given it.
        self.phases: list[tuple[PhaseRequest, NetworkPolicy]] = []
        self.fail_on = fail_on or set()
        self.started = False
        self.stopped = False

    @property
    @override
    def paths(self) -> SandboxPaths:
        return SandboxPaths.under(self.ROOT)

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name in self.fail_on:
            raise RuntimeError(f"fake failure in {name}")

    @override
    def start(self) -> None:
        self._call("start")
        for name in self.spec.fixtures:
            check_fixture_path(name)  # every path, before anything is seeded
        self.started = True
        for name, fixture in self.spec.fixtures.items():
            data = fixture[0] if isinstance(fixture, tuple) else fixture
            self.files[_key(posixpath.join(self.paths.workspace, name))] = data

    @override
    def put_file(self, dest: str, data: bytes, *, agent_readable: bool, mode: int = 0o644) -> None:
        self._call(f"put_file:{dest}")
        self.files[_key(dest)] = data

    @override
    def put_dir(self, src: Path, dest: str, *, agent_readable: bool) -> None:
        self._call(f"put_dir:{dest}")
        self._clear(dest)
        self._store_tree(src, dest)

    @override
    def upload(self, src: Path, dest: str, *, owner: Role) -> None:
        self._call(f"upload:{dest}")
        self._store_tree(src, dest)

    def _store_tree(self, src: Path, dest: str) -> None:
        """Keep every regular file under ``src`` at its place under ``dest`` (no links)."""
        for path in sorted(src.rglob("*")):
            if path.is_file() and not path.is_symlink():
                self.files[_key(posixpath.join(dest, path.relative_to(src).as_posix()))] = (
                    path.read_bytes()
                )

    def _clear(self, path: str) -> None:
        """Remove the dir ``path`` and everything below it."""
        prefix = _key(path).rstrip("/") + "/"
        for name in [n for n in self.files if n.startswith(prefix)]:
            del self.files[name]

    @override
    def reset_dir(self, path: str) -> None:
        self._call(f"reset_dir:{path}")
        self._clear(path)

    @override
    def new_agent_user(self) -> tuple[int, int] | None:
        self._call("new_agent_user")
        return None  # a dict has no users

    @override
    def run_phase(self, request: PhaseRequest) -> PhaseResult:
        self._call(f"run_phase:{request.role}")
        for src, dest in request.scratch_uploads:
            self.upload(src, dest, owner="verifier")
        # As a real backend: the phase's step's policy, an unknown step refused.
        self.phases.append((request, self.spec.network_for(request.role, request.step)))
        return self.handler(request, self)

    @override
    def reset_verifier_dir(self) -> None:
        self._call("reset_verifier_dir")
        self._clear(self.paths.verifier)

    @override
    def read_file(self, path: str, *, max_bytes: int) -> tuple[bytes | None, EvidenceEvent | None]:
        key = _key(path)
        if key not in self.files:
            return None, EvidenceEvent("missing", path)
        data = self.files[key]
        if len(data) > max_bytes:
            return None, EvidenceEvent("too_large", path)
        return data, None

    @override
    def copy_out(
        self, path: str, dest: Path, *, max_file_bytes: int, max_total_bytes: int
    ) -> list[EvidenceEvent]:
        self._call(f"copy_out:{path}")
        key = _key(path)
        prefix = key.rstrip("/") + "/"
        for name, data in self.files.items():
            if name == key:
                target = dest
            elif name.startswith(prefix):
                target = dest / name[len(prefix) :]
            else:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data[:max_file_bytes])
        return []

    @override
    def stop(self) -> None:
        self._call("stop")
        self.stopped = True
