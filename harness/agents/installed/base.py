"""The installed-agent seam: an agent CLI people evaluate, installed by the harness.

An :class:`InstalledAgent` is a :class:`~harness.agents.kinds.SandboxAgent` (untrusted, run
as the agent user under the supervisor) made of five parts:

- **install** (:meth:`InstalledAgent.install_spec`): the packages to fetch, pinned by version
  (``agent.version`` overrides the default), for the host's platform. The harness fetches
  them on the host into the :mod:`~harness.agents.installed.cache` before any trial, and the
  sandbox sees the entry read-only at :data:`INSTALL_MOUNT`.
- **prepare** (:meth:`InstalledAgent.home_files`, :meth:`InstalledAgent.cli_env`): config
  files written into the trial's HOME, and the environment: the gateway as the provider
  (with the trial's token, never a key), telemetry and auto-update off.
- **command** (:meth:`InstalledAgent.cli_argv`): how the instruction is passed: once, the
  way the CLI expects it; nothing on stdin.
- **collect** (:meth:`InstalledAgent.collect`): the CLI's own log into the evidence.
- **convert** (:meth:`InstalledAgent.convert`): that log into ``session.jsonl`` lines
  (docs/model-access.md §3), from which the transcript and ATIF are derived as for
  ``builtin``.

A multi-step task runs the CLI once per step, each writing its own log (kept in the step's
evidence, ``steps/<name>/agent.log``): collect converts each step's, in order, into the
one ``session.jsonl``, each opened by that step's instruction as the user message.

A plug-in adds one by subclassing and registering it under ``harness.agents``
(docs/agents.md).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from abc import abstractmethod
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from typing_extensions import override

from harness.agents.installed.cache import (
    AgentCache,
    CacheEntry,
    EntryMismatch,
    InstallError,
    InstallSpec,
    Platform,
)
from harness.agents.kinds import AgentCommand, SandboxAgent, reject_command
from harness.config import AgentConfig
from harness.errors import AgentConfigError, UsageError
from harness.records.layout import (
    AGENT_LOG_FILENAME,
    AGENT_LOGS_DIRNAME,
    SESSION_FILENAME,
    STEPS_DIRNAME,
)
from harness.tasks import Task
from sandbox.backend import PhaseResult, Sandbox

logger = logging.getLogger(__name__)

#: Where a sandbox sees the agent's cache entry (read-only), in every backend.
INSTALL_MOUNT = "/opt/harness-agent"
#: The evidence file the CLI's own log is kept in, as it wrote it.
AGENT_LOG = AGENT_LOG_FILENAME
#: The evidence dir the CLI's own session files are copied into.
AGENT_LOGS = AGENT_LOGS_DIRNAME
LOG_FILE_BYTES = 32 << 20
LOG_TOTAL_BYTES = 128 << 20
#: The C libraries an image may have (``agent.kwargs.libc``; default: the host's).
LIBCS = ("glibc", "musl")


class InstalledAgent(SandboxAgent):
    """An agent CLI fetched by the harness on the host and run in the sandbox.

    Args:
        version: The CLI's version (default: :attr:`default_version`).
        cache: The cache to install into (default: the user's, ``$HARNESS_AGENT_CACHE``).
    """

    model_use = "required"
    exit_0_after_a_failed_call_fails: ClassVar[bool] = True
    #: The pinned version installed when ``agent.version`` is not given.
    default_version: ClassVar[str] = ""
    #: The API the CLI speaks to the gateway.
    api: ClassVar[str] = "anthropic-messages"
    #: Providers whose models the gateway serves in that API (``faux`` answers in any).
    providers: ClassVar[tuple[str, ...]] = ("anthropic", "faux")

    def __init__(
        self,
        *,
        version: str | None = None,
        cache: AgentCache | None = None,
        libc: str | None = None,
    ) -> None:
        self.version = version or self.default_version
        if not self.version:
            raise AgentConfigError(f"agent {self.name} has no version to install")
        if libc is not None and libc not in LIBCS:
            raise AgentConfigError(
                f"--agent {self.name}: agent.kwargs.libc is {libc!r}; it takes "
                f"{' or '.join(LIBCS)} (the C library of the sandbox's image)"
            )
        host = Platform.host()
        #: The platform the CLI is fetched for: the host's CPU, the image's C library.
        self.platform = Platform(arch=host.arch, libc=libc or host.libc)
        self.cache = cache
        self.entry: CacheEntry | None = None
        #: The entry the run planned with (the driver's, as check() left it: its
        #: ``describe()``), carried by a copy sent to another node, whose own entry must
        #: hold the same files (:meth:`check_planned`). None where nothing was planned.
        self.planned: dict[str, Any] | None = None
        # The steps each trial's CLI ran so far (by its sandbox's id; the agent serves every
        # trial of a run): their names and instructions, until collect() converts their logs.
        self._steps: dict[int, list[StepRun]] = {}

    @classmethod
    def from_config(cls, config: AgentConfig) -> InstalledAgent:
        """The agent of ``[agent]``: ``agent.version`` picks the CLI's version.

        Raises:
            AgentConfigError: A command line, or an option it does not take.
        """
        reject_command(config)
        options = dict(config.kwargs)
        libc = options.pop("libc", None)
        if options:
            raise AgentConfigError(
                f"--agent {config.name} has no option {', '.join(options)} "
                "(it takes agent.version and agent.kwargs.libc)"
            )
        if libc is not None and not isinstance(libc, str):
            raise AgentConfigError(f"--agent {config.name}: agent.kwargs.libc must be a string")
        return cls(version=config.version, libc=libc)

    # -- install --------------------------------------------------------------------------

    #: The npm package of a Node CLI (its native build for the host's platform follows).
    npm_package: ClassVar[str] = ""

    def install_spec(self) -> InstallSpec:
        """What to fetch for :attr:`version` (pinned packages for the host's platform).

        A Node CLI names its :attr:`npm_package`; any other agent overrides this.

        Raises:
            AgentConfigError: Neither is given (a plug-in's mistake).
        """
        if not self.npm_package:
            raise AgentConfigError(
                f"agent {self.name} names no npm_package: a plug-in that installs another "
                "way overrides install_spec"
            )
        return InstallSpec(
            agent=self.name,
            version=self.version,
            npm=(f"{self.npm_package}@{self.version}",),
            platform=self.platform,
        )

    def check(self, task: Task) -> None:
        """Have the CLI in the cache before any trial (fetched now if needed).

        Raises:
            InstallError: It cannot be had (offline, an unknown version): one message.
            AgentConfigError: The gateway does not serve the model in the CLI's API.
        """
        model = self.model
        if model is not None and model.provider not in self.providers:
            raise AgentConfigError(
                f"--agent {self.name} speaks {self.api}, which the gateway serves for "
                f"{' and '.join(self.providers)} models, not {model.id} (pick one of those)"
            )
        self.install()

    def install(self) -> CacheEntry:
        """The CLI's checked cache entry, fetched on the host if needed (once per agent).

        Raises:
            InstallError: It cannot be had (offline, an unknown version): one message.
        """
        if self.entry is None:
            # Every agent's spec is fetched for :attr:`platform`, whatever it left default.
            spec = dataclasses.replace(self.install_spec(), platform=self.platform)
            entry = (self.cache or AgentCache()).ensure(spec)
            self.check_programs(entry)
            self.check_planned(entry)
            self.entry = entry
        return self.entry

    def expect_install(self, planned: Mapping[str, Any]) -> None:
        """This node's entry must hold the files of ``planned`` (:meth:`check_planned`)."""
        self.planned = dict(planned)

    def check_planned(self, entry: CacheEntry) -> None:
        """``entry`` holds the files of the entry the run planned with (:attr:`planned`).

        The key pins what was asked (the CLI's version, the platform), not what a fetch
        resolved: another node's fetch, at another time or from another mirror, can bring
        other dependencies, and a Python agent's entry holds the fetching host's shared
        libraries. The entry's ``tree`` (the hash of its manifest's file list) tells.

        Raises:
            EntryMismatch: It holds other files (one message: both trees, what to do).
        """
        planned = self.planned
        if planned is None or planned.get("tree") == entry.tree:
            return
        raise EntryMismatch(
            f"agent {self.name} {self.version}: this node's cache entry {entry.path} is not "
            f"the one the run planned with: its files hash to tree {entry.tree}, the "
            f"driver's ({planned.get('path')}) to {planned.get('tree')}. Only the CLI's own "
            "package is pinned; its dependencies were resolved when each entry was fetched "
            "(a Python agent's entry also holds its host's shared libraries). Give every "
            f"node the driver's entry: replace {entry.path} with a copy of the driver's "
            "dir, then --resume the run."
        )

    def programs(self) -> tuple[str, ...]:
        """In-sandbox paths of the files the CLI starts from (checked once fetched).

        A CLI whose executable is an optional dependency per platform names it here: npm
        skips an optional dependency that was never published, so a version without a
        build for :attr:`platform` installs without error and holds no executable.
        """
        return ()

    def check_programs(self, entry: CacheEntry) -> None:
        """Every file of :meth:`programs` is in ``entry``.

        Raises:
            InstallError: One is missing (before any trial, naming it and what to do).
        """
        for program in self.programs():
            rel = program.removeprefix(f"{INSTALL_MOUNT}/")
            if not (entry.path / rel).is_file():
                raise InstallError(
                    f"cannot install agent {self.name} {self.version} for {self.platform}: "
                    f"the fetched packages hold no {rel} (npm skips an optional dependency "
                    f"that was never published, so {self.name} {self.version} may have no "
                    f"build for {self.platform}). Pick a version that has one "
                    "(agent.version), or another C library (agent.kwargs.libc)."
                )

    def sandbox_mounts(self) -> Mapping[str, Path]:
        """The cache entry, shown read-only at :data:`INSTALL_MOUNT` (installed if needed)."""
        return {INSTALL_MOUNT: self.install().path}

    def mount_points(self) -> tuple[str, ...]:
        """:data:`INSTALL_MOUNT`, without installing anything."""
        return (INSTALL_MOUNT,)

    def __getstate__(self) -> dict[str, Any]:
        # A copy sent to another node (a Ray worker) uses that node's own cache, which must
        # hold what this one checked (check_planned).
        state = dict(self.__dict__)
        if self.entry is not None:
            state["planned"] = self.entry.describe()
        state["entry"] = None
        state["_steps"] = {}
        return state

    # -- prepare and command --------------------------------------------------------------

    def home_files(self, task: Task, sandbox: Sandbox) -> Mapping[str, str]:
        """Config files to write into the trial's HOME (relative path -> text)."""
        return {}

    def cli_env(self, sandbox: Sandbox) -> Mapping[str, str]:
        """Environment of the CLI besides the gateway's variables (never a secret)."""
        return {}

    @abstractmethod
    def cli_argv(self, task: Task, sandbox: Sandbox) -> list[str]:
        """The CLI's command line, with the instruction passed once."""

    def prepare(self, task: Task, sandbox: Sandbox) -> None:
        """Write :meth:`home_files` into the trial's HOME (agent-readable).

        Called before each agent phase: a multi-step task's step is noted, so that
        :meth:`collect` converts every step's log, not only the last one's.
        """
        if task.step is not None:
            step = StepRun(task.step.name, task.instruction)
            self._steps.setdefault(id(sandbox), []).append(step)
        for rel, text in self.home_files(task, sandbox).items():
            sandbox.put_file(f"{sandbox.paths.home}/{rel}", text.encode(), agent_readable=True)

    @override
    def command(self, task: Task, sandbox: Sandbox) -> AgentCommand:
        if self.model is None:
            raise UsageError(f"--agent {self.name} has no model; select one with --model")
        # stdin stays empty (never the instruction): CLIs that read it would append it.
        return AgentCommand(self.cli_argv(task, sandbox), env=dict(self.cli_env(sandbox)))

    # -- collect and convert --------------------------------------------------------------

    def log_dirs(self, sandbox: Sandbox) -> Mapping[str, str]:
        """Dirs the CLI keeps its own session files in: evidence name -> in-sandbox dir."""
        return {}

    def collect(self, sandbox: Sandbox | None, evidence: Path) -> None:
        """Keep the CLI's session files; turn its log into ``session.jsonl``.

        The session files (:meth:`log_dirs`) are copied as they are under ``agent-logs/``
        (regular files only, never following a link, capped). The log converted is
        :meth:`converted_log` (its stdout, ``agent.log``, unless a subclass says otherwise):
        for a multi-step task each step's, in the order they ran, each opened by the
        instruction that step gave the CLI as the user message (its logs do not repeat the
        prompt); the first ``session`` line found opens the file.
        """
        steps = self._steps.pop(id(sandbox), []) if sandbox is not None else []
        if sandbox is not None:
            for name, path in self.log_dirs(sandbox).items():
                events = sandbox.copy_out(
                    path,
                    evidence / AGENT_LOGS / name,
                    max_file_bytes=LOG_FILE_BYTES,
                    max_total_bytes=LOG_TOTAL_BYTES,
                )
                for found in events:
                    if found.kind != "missing":
                        logger.warning("agent %s: %s not kept: %s", self.name, path, found)
        runs: list[tuple[Path, str | None]]
        if steps:
            runs = [(self.converted_log(evidence, step.name), step.instruction) for step in steps]
        else:
            instruction = None
            if sandbox is not None:
                data, event = sandbox.read_file(sandbox.paths.instruction, max_bytes=1 << 20)
                if data is not None and event is None:
                    instruction = data.decode("utf-8", "replace")
            runs = [(self.converted_log(evidence, None), instruction)]
        head: list[dict[str, Any]] = []
        body: list[dict[str, Any]] = []
        converted = False
        for log, instruction in runs:
            if not log.is_file():
                continue  # that step's CLI left no log (it never started, say)
            converted = True
            lines = list(self.convert(log.read_text("utf-8", "replace").splitlines()))
            if lines and lines[0].get("type") == "session":
                session = lines.pop(0)
                if not head:
                    head.append(session)
            if instruction is not None:
                body.append({"type": "message", "role": "user", "content": instruction})
            body.extend(lines)
        if converted:
            text = "".join(json_line(line) for line in [*head, *body])
            (evidence / SESSION_FILENAME).write_text(text, encoding="utf-8")

    def converted_log(self, evidence: Path, step: str | None) -> Path:
        """The evidence file of the log :meth:`convert` reads: the CLI's stdout as kept.

        Args:
            evidence: The trial's evidence dir.
            step: The step whose log it is (None: a task without steps).
        """
        if step is None:
            return evidence / AGENT_LOG
        return evidence / STEPS_DIRNAME / step / AGENT_LOG

    def current_step(self, sandbox: Sandbox) -> str | None:
        """The step whose agent phase runs (or ran last) in ``sandbox`` (None: no steps)."""
        steps = self._steps.get(id(sandbox))
        return steps[-1].name if steps else None

    @abstractmethod
    def convert(self, log: list[str]) -> Iterable[dict[str, Any]]:
        """The CLI's log lines as ``session.jsonl`` lines (docs/model-access.md §3)."""

    def explain_failure(self, sandbox: Sandbox, result: PhaseResult) -> str | None:
        """The ``end`` line's error of the converted log, if it has one."""
        data, event = sandbox.read_file(f"{sandbox.paths.logs}/agent.stdout", max_bytes=16 << 20)
        if data is None or event is not None:
            return None
        refused, error = None, None
        for line in self.convert(data.decode("utf-8", "replace").splitlines()):
            if line.get("type") == "end" and line.get("error"):
                error = str(line["error"])
            stop = line.get("stop_reason")
            if line.get("type") == "message" and stop in ("refusal", "content_filter"):
                refused = str(stop)
        if refused is not None:
            # The model declined earlier; what failed last may only follow from that.
            note = f"the model refused to answer (stop_reason {refused})"
            return f"{error} (after {note})" if error else note
        return error

    @override
    def describe(self) -> dict[str, Any]:
        facts: dict[str, Any] = {"name": self.name, "version": self.version}
        if self.entry is not None:
            facts["install"] = self.entry.describe()
        return facts

    @property
    def model_id(self) -> str | None:
        """The trial's model id, as the converted log names it (None: no model bound)."""
        return self.model.id if self.model else None

    def bin_path(self, rel: str) -> str:
        """The in-sandbox path of a file of the cache entry."""
        return f"{INSTALL_MOUNT}/{rel}"


@dataclasses.dataclass(frozen=True)
class StepRun:
    """One step's run of the CLI in a multi-step trial: what :meth:`collect` converts.

    Attributes:
        name: The step's name (its evidence is ``steps/<name>/``).
        instruction: What the step told the CLI.
    """

    name: str
    instruction: str


def json_line(line: Mapping[str, Any]) -> str:
    """One JSONL line."""
    return json.dumps(line, ensure_ascii=False) + "\n"


__all__ = ["AGENT_LOG", "INSTALL_MOUNT", "InstalledAgent", "StepRun"]
