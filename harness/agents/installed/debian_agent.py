"""What the agents on the Debian 13 Python runtime share: install, driver, argv, litellm.

A :class:`DebianPythonAgent` is a Python agent (:class:`PythonInstalledAgent`) whose
packages need a newer Python than the host's: they are installed on Debian's
``python3.13`` with its own loader and libc (:mod:`.debian_runtime`), which runs on any
image, musl ones included. Its CLI is a small driver the harness writes into the trial's
HOME (:attr:`DebianPythonAgent.driver`), started as
``python DRIVER openai/<model> <runtime bin dir> <log path> <instruction>``; the model is
reached through the gateway's chat completions with litellm kept offline.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from typing_extensions import override

from harness.agents.installed.base import INSTALL_MOUNT
from harness.agents.installed.cache import AgentCache, CacheEntry, InstallError, Platform
from harness.agents.installed.debian_runtime import (
    WRAPPER_BIN,
    DebianPythonSpec,
    debian_python_spec,
    ensure_debian_python_agent,
)
from harness.agents.installed.python_agent import PythonInstalledAgent
from harness.tasks import Task
from sandbox.backend import Sandbox

#: litellm without its network lookups and telemetry, and a plain terminal.
LITELLM_ENV: Mapping[str, str] = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_TELEMETRY": "False",
    "LITELLM_OFFLINE_MODE": "true",
    "TERM": "xterm-256color",
    "NO_COLOR": "1",
}


class DebianPythonAgent(PythonInstalledAgent):
    """A Python agent on the Debian runtime, started through a driver in the trial's HOME."""

    #: The driver's file name in the trial's HOME, and its source.
    driver_file: ClassVar[str] = ""
    driver: ClassVar[str] = ""
    #: Variables of the agent's own beside :data:`LITELLM_ENV`.
    extra_env: ClassVar[Mapping[str, str]] = {}

    @override
    def install_spec(self) -> DebianPythonSpec:
        return debian_python_spec(
            self.name, self.version, (f"{self.pypi_package}=={self.version}",)
        )

    @override
    def install(self) -> CacheEntry:
        if self.entry is None:
            if self.platform.libc != Platform.host().libc:
                raise InstallError(
                    f"{self.name}: agent.kwargs.libc = {self.platform.libc!r} is not supported: "
                    "its runtime is Debian's glibc Python with its own loader, which runs on "
                    "a musl image as it is: drop agent.kwargs.libc."
                )
            spec = self.install_spec()
            entry = ensure_debian_python_agent(self.cache or AgentCache(), spec, INSTALL_MOUNT)
            self.check_planned(entry)
            self.entry = entry
        return self.entry

    @override
    def home_files(self, task: Task, sandbox: Sandbox) -> Mapping[str, str]:
        return {self.driver_file: self.driver}

    def log_arg(self, task: Task, sandbox: Sandbox) -> str:
        """Where the driver writes the agent's log: its file (the default) or its dir."""
        return self.log_path(sandbox, self.step_name(task))

    @override
    def cli_argv(self, task: Task, sandbox: Sandbox) -> list[str]:
        assert self.model is not None
        return [
            *self.python(),
            f"{sandbox.paths.home}/{self.driver_file}",
            f"openai/{self.model.upstream}",
            f"{INSTALL_MOUNT}/{WRAPPER_BIN}",
            self.log_arg(task, sandbox),
            task.instruction,
        ]

    @override
    def cli_env(self, sandbox: Sandbox) -> Mapping[str, str]:
        return {**LITELLM_ENV, **self.extra_env}
