"""The Sandbox contract over ``FakeSandbox``: everything but running a command."""

from __future__ import annotations

from support.sandbox_contract import ProjectSandboxContract

from sandbox.backend import Sandbox, SandboxSpec
from sandbox.fake import FakeSandbox


class TestFakeSandbox(ProjectSandboxContract):
    limitations = {
        "commands": "a phase is answered by the handler the test passes in; no process runs",
    }

    def make_sandbox(self, spec: SandboxSpec) -> Sandbox:
        return FakeSandbox(spec)
