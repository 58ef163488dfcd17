"""What the Python agent CLIs share: the harness's own interpreter, and a log file to convert.

A :class:`PythonInstalledAgent` installs its PyPI packages on the host's relocated CPython
(:mod:`~harness.agents.installed.python_runtime`) and starts them with
:meth:`PythonInstalledAgent.python`, never with the image's ``python3``. Its log to
convert is a file the CLI writes into the trial's HOME (:attr:`log_file`), not its
stdout: :meth:`collect` keeps it under ``agent-logs/`` and converts it. A multi-step
task's steps each write their own (``<LOG_DIR>/<step>/``): a later step would otherwise
overwrite (or append to) the earlier one's.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import ClassVar

from typing_extensions import override

from harness.agents.installed.base import AGENT_LOGS, INSTALL_MOUNT, InstalledAgent
from harness.agents.installed.cache import AgentCache, CacheEntry, InstallError, Platform
from harness.agents.installed.python_runtime import (
    PythonAgentSpec,
    ensure_python_agent,
    python_agent_spec,
    python_argv,
)
from harness.tasks import Task
from sandbox.backend import PhaseResult, Sandbox

logger = logging.getLogger(__name__)

#: The dir in the trial's HOME a Python CLI writes its log to (kept as ``agent-logs/<name>``).
LOG_DIR = ".harness-agent-log"


class PythonInstalledAgent(InstalledAgent):
    """An installed agent whose CLI is a Python package (PyPI), run on the harness's Python."""

    #: The PyPI distribution of the CLI (pinned to the agent's version).
    pypi_package: ClassVar[str] = ""
    #: The log file's name in :data:`LOG_DIR`.
    log_file: ClassVar[str] = ""

    @override
    def install_spec(self) -> PythonAgentSpec:
        return python_agent_spec(self.name, self.version, (f"{self.pypi_package}=={self.version}",))

    @override
    def install(self) -> CacheEntry:
        if self.entry is None:
            host = Platform.host().libc
            if self.platform.libc != host:
                # The runtime is this host's CPython and C library, relocated: no other libc
                # (no registry here hosts a musl CPython). It needs none of the image's, so
                # it runs on a musl image as it is: the option only has to go.
                raise InstallError(
                    f"{self.name}: agent.kwargs.libc = {self.platform.libc!r} is not supported: "
                    f"its Python runtime is relocated from this {host} host, with that C "
                    "library and its loader. It runs on a musl (Alpine) image as it is, "
                    "needing no C library of the image's: drop agent.kwargs.libc."
                )
            entry = ensure_python_agent(self.cache or AgentCache(), self.install_spec())
            self.check_planned(entry)
            self.entry = entry
        return self.entry

    def python(self) -> list[str]:
        """The in-sandbox command that starts the entry's interpreter, isolated.

        ``-I``: neither the image's ``PYTHON*`` variables nor the workspace (the start dir)
        nor a user site reach the agent's interpreter; ``-X utf8`` for any locale.
        """
        return [*python_argv(self.install(), INSTALL_MOUNT), "-I", "-X", "utf8"]

    def log_path(self, sandbox: Sandbox, step: str | None = None) -> str:
        """The in-sandbox path of the CLI's log file (a multi-step task's: ``step``'s)."""
        return f"{self.log_dir(sandbox, step)}/{self.log_file}"

    def log_dir(self, sandbox: Sandbox, step: str | None = None) -> str:
        """The in-sandbox dir the CLI writes its logs to (a multi-step task's: ``step``'s)."""
        base = f"{sandbox.paths.home}/{LOG_DIR}"
        return base if step is None else f"{base}/{step}"

    def step_name(self, task: Task) -> str | None:
        """The step of ``task`` the CLI runs for (None: a task without steps)."""
        return task.step.name if task.step is not None else None

    @override
    def log_dirs(self, sandbox: Sandbox) -> dict[str, str]:
        return {self.name: f"{sandbox.paths.home}/{LOG_DIR}"}

    def converted_log(self, evidence: Path, step: str | None) -> Path:
        """The CLI's log file as kept under ``agent-logs/`` (a step's: in its own dir)."""
        kept = evidence / AGENT_LOGS / self.name
        return kept / self.log_file if step is None else kept / step / self.log_file

    def explain_failure(self, sandbox: Sandbox, result: PhaseResult) -> str | None:
        """The ``end`` line's error of the converted log file, if it has one."""
        path = self.log_path(sandbox, self.current_step(sandbox))
        data, event = sandbox.read_file(path, max_bytes=32 << 20)
        if data is None or event is not None:
            return None
        for line in self.convert(data.decode("utf-8", "replace").splitlines()):
            if line.get("type") == "end" and line.get("error"):
                return str(line["error"])
        return None


__all__ = ["LOG_DIR", "PythonInstalledAgent"]
