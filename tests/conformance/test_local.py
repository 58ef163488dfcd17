"""The Sandbox contract over ``LocalSandbox``, and what only its host root shows."""

from __future__ import annotations

import os
import shutil
import sys

import pytest
from support.sandbox_contract import CONFORMANCE_UID_BASE, ProjectSandboxContract

from sandbox.backend import Sandbox, SandboxSpec
from sandbox.environment import FIXED_PATH
from sandbox.errors import SandboxError
from sandbox.local.sandbox import IdentityPool, LocalSandbox
from sandbox.testing import SandboxFactory, run

SYSTEM_PYTHON = shutil.which("python3", path=FIXED_PATH) or sys.executable
_POOL = IdentityPool(CONFORMANCE_UID_BASE, CONFORMANCE_UID_BASE)
IS_ROOT = os.geteuid() == 0


class TestLocalSandbox(ProjectSandboxContract):
    def make_sandbox(self, spec: SandboxSpec) -> Sandbox:
        return LocalSandbox(spec, identities=_POOL, python=SYSTEM_PYTHON)

    def agent_separation_missing(self) -> str | None:
        if IS_ROOT:
            return None
        return "root: the local sandbox drops privileges only when started as root"

    def test_stop_removes_the_host_root(self, sandbox_factory: SandboxFactory) -> None:
        sandbox = sandbox_factory()
        assert isinstance(sandbox, LocalSandbox)
        root = sandbox.root
        assert root.is_dir()
        assert run(sandbox, "echo alive").exit_code == 0
        sandbox.stop()
        sandbox.stop()
        assert not root.exists()

    def test_a_failed_start_leaves_no_host_root(self, sandbox_factory: SandboxFactory) -> None:
        sandbox = sandbox_factory(start=False, fixtures={"../escape.txt": b"x"})
        assert isinstance(sandbox, LocalSandbox)
        with pytest.raises(SandboxError):
            sandbox.start()
        root = sandbox.root  # made before the fixtures were refused
        assert root.is_dir()
        sandbox.stop()
        sandbox.stop()
        assert not root.exists()
