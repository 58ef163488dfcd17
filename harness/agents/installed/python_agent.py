"""What the Python agent CLIs share: the harness's own interpreter, and a log file to convert.

A :class:`PythonInstalledAgent` installs its PyPI packages on the host's relocated CPython
(:mod:`~harness.agents.installed.python_runtime`) and starts them with
:meth:`PythonInstalledAgent.python`, never with the image's ``python3``. Its log to
convert is a file the CLI writes into the trial's HOME (:attr:`log_file`), not its
stdout: :meth:`collect` keeps it under ``agent-logs/`` and converts it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import ClassVar

from harness.agents.installed.base import (
    AGENT_LOGS,
    INSTALL_MOUNT,
    SESSION,
    InstalledAgent,
    json_line,
)
from harness.agents.installed.cache import AgentCache, CacheEntry, InstallError, Platform
from harness.agents.installed.python_runtime import (
    PythonAgentSpec,
    ensure_python_agent,
    python_agent_spec,
    python_argv,
)
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

    def install_spec(self) -> PythonAgentSpec:  # noqa: D102
        return python_agent_spec(self.name, self.version, (f"{self.pypi_package}=={self.version}",))

    def install(self) -> CacheEntry:  # noqa: D102
        if self.entry is None:
            if self.platform.libc != Platform.host().libc:
                # The runtime is this host's CPython and C library, relocated: no other libc.
                raise InstallError(
                    f"{self.name}: agent.kwargs.libc = {self.platform.libc!r} is not supported: "
                    f"its Python runtime is relocated from this {Platform.host().libc} host. "
                    "Run it from a host of that C library, or drop agent.kwargs.libc."
                )
            self.entry = ensure_python_agent(self.cache or AgentCache(), self.install_spec())
        return self.entry

    def python(self) -> list[str]:
        """The in-sandbox command that starts the entry's interpreter, isolated.

        ``-I``: neither the image's ``PYTHON*`` variables nor the workspace (the start dir)
        nor a user site reach the agent's interpreter; ``-X utf8`` for any locale.
        """
        return [*python_argv(self.install(), INSTALL_MOUNT), "-I", "-X", "utf8"]

    def log_path(self, sandbox: Sandbox) -> str:
        """The in-sandbox path of the CLI's log file."""
        return f"{sandbox.paths.home}/{LOG_DIR}/{self.log_file}"

    def log_dirs(self, sandbox: Sandbox) -> dict[str, str]:  # noqa: D102
        return {self.name: f"{sandbox.paths.home}/{LOG_DIR}"}

    def collect(self, sandbox: Sandbox | None, evidence: Path) -> None:
        """Keep the log dir and stdout; convert the CLI's log file into ``session.jsonl``."""
        super().collect(sandbox, evidence)
        kept = evidence / AGENT_LOGS / self.name / self.log_file
        if not kept.is_file():
            return
        lines = list(self.convert(kept.read_text("utf-8", "replace").splitlines()))
        if sandbox is not None:
            data, event = sandbox.read_file(sandbox.paths.instruction, max_bytes=1 << 20)
            if data is not None and event is None:
                at = 1 if lines and lines[0].get("type") == "session" else 0
                text = data.decode("utf-8", "replace")
                lines.insert(at, {"type": "message", "role": "user", "content": text})
        (evidence / SESSION).write_text("".join(json_line(x) for x in lines), encoding="utf-8")

    def explain_failure(self, sandbox: Sandbox, result: PhaseResult) -> str | None:
        """The ``end`` line's error of the converted log file, if it has one."""
        data, event = sandbox.read_file(self.log_path(sandbox), max_bytes=32 << 20)
        if data is None or event is not None:
            return None
        for line in self.convert(data.decode("utf-8", "replace").splitlines()):
            if line.get("type") == "end" and line.get("error"):
                return str(line["error"])
        return None


__all__ = ["LOG_DIR", "PythonInstalledAgent"]
