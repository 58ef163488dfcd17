"""One tree of typed errors, and the exit codes they map to (defined once, here).

Every error the harness raises derives from :class:`HarnessError`::

    HarnessError
    ├── UsageError                  exit 2: the request cannot run as given; nothing is written
    │   ├── ConfigError             a config file, --set item or resolved config is invalid
    │   ├── AgentConfigError        an agent cannot run a task as configured
    │   ├── ModelSelectionError     no model, an unknown one, or one without a key
    │   ├── ResumeError             the run dir cannot be resumed as asked
    │   ├── PluginError             an unknown or broken sandbox backend / agent plug-in
    │   ├── TaskError               one problem with one task
    │   ├── TaskSetError            every problem of a task set
    │   ├── EnvTemplateError        a task's ``${VAR}`` cannot be resolved (``harness.tasks``)
    │   ├── CorruptRecordError      a line of trials.jsonl is not a record
    │   └── ExportError             an export cannot be done
    │       └── UnknownFormatError
    ├── TrialFailure                ended a trial; recorded in its record, never raised by a run
    │   ├── AgentRunError           the agent ran and failed
    │   ├── StorageLimitReached     the agent filled the trial's storage (storage_mb)
    │   ├── AgentTimeout            an in-harness agent's time is up
    │   ├── ModelCallError          the gateway answered an agent's model call with an error
    │   ├── VerifierError           the verifier produced no usable reward
    │   │   └── JudgeError          a judge could not score the trial (e.g. malformed output)
    │   ├── EnvError                an episode's env (setup, run, finalize) failed
    │   └── TrialCancelled          the run was interrupted before the trial could go on
    ├── NothingToRetry              exit 3: ``harness trials --retry-failed`` found no failure
    ├── RunStopped                  the run stopped in order on a fault of the machine; resume it
    │   ├── DiskFull                exit 74: a filesystem it writes is full, over quota, read-only
    │   └── EngineOutage            exit 75: the sandbox engine stayed unreachable too long
    ├── ProviderError               the model provider could not answer (gateway side)
    ├── Refused                     a request the gateway refuses (answered, never raised out)
    └── SandboxError                the isolation runtime (``sandbox.errors``)

:func:`exit_code_for` is the one place that maps an error to an exit code.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sandbox.errors import HarnessError, SandboxError, UsageError

EXIT_OK = 0
"""Every trial ran and was graded (low rewards are data, not failures)."""
EXIT_TRIAL_ERRORS = 1
"""A trial ended in an error, ``fail_under`` was not met, or the harness itself failed."""
EXIT_USAGE = 2
"""Bad usage, config, task or input: nothing was run or written."""
EXIT_NOTHING_TO_RETRY = 3
"""``harness trials --retry-failed`` found no failed trial to rerun."""
EXIT_DISK_FULL = 74
"""A filesystem the run writes (its run dir, the engine's data root) is full, over quota or
read-only: the run stopped in order; free space, then ``--resume``."""
EXIT_ENGINE_OUTAGE = 75
"""The sandbox engine stayed unreachable past ``retry.engine_wait_sec``: the run stopped in
order; start the engine, then ``--resume``."""
EXIT_INTERRUPTED = 130
"""Interrupted (Ctrl-C, SIGTERM); every running trial still cleaned up."""


def exit_code_for(error: BaseException) -> int:
    """The exit code of a command that ended with ``error``.

    Args:
        error: What ended the command.

    Returns:
        2 for the :class:`UsageError` branch, 3 for :class:`NothingToRetry`, 74 or 75 for a
        :class:`RunStopped` (a full disk, an engine that stayed away), 130 for an interrupt,
        1 for anything else.
    """
    if isinstance(error, UsageError):
        return EXIT_USAGE
    if isinstance(error, NothingToRetry):
        return EXIT_NOTHING_TO_RETRY
    if isinstance(error, RunStopped):
        return error.exit_code
    if isinstance(error, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    return EXIT_TRIAL_ERRORS


# --------------------------------------------------------------------------------------------
# Exit 2: the request cannot run as given
# --------------------------------------------------------------------------------------------


class ConfigError(UsageError):
    """A config file, ``--set`` item or resolved config is invalid."""


class AgentConfigError(UsageError):
    """An agent cannot run a task as configured (e.g. oracle without solve.sh)."""


class ModelSelectionError(UsageError):
    """No model was selected for an agent that needs one, or the selection is unusable."""


class ResumeError(UsageError):
    """The run dir cannot be resumed as asked; the message says why and how."""


class PluginError(UsageError):
    """A sandbox backend or agent name is not installed, or its plug-in fails to load."""


def _one_line(text: str) -> str:
    """Collapse line breaks so a message always prints on one line."""
    return re.sub(r"\s*[\r\n]+\s*", " ", text.strip())


class TaskError(UsageError):
    """One problem with one task (or with a path given as a task or task set).

    Attributes:
        path: The file the problem is in (``task.toml``, ``instruction.md``), or the task
            dir / given path when something is missing.
        field: Dotted config field (e.g. ``agent.timeout_sec``) for config errors, else None.
        message: What is wrong, on one line.
    """

    def __init__(self, path: Path, message: str, *, field: str | None = None) -> None:
        self.path = Path(path)
        self.field = field
        self.message = _one_line(message)
        super().__init__(str(self))

    def __str__(self) -> str:
        if self.field:
            return f"{self.path}: {self.field}: {self.message}"
        return f"{self.path}: {self.message}"

    def __repr__(self) -> str:
        return f"TaskError(path={self.path!r}, field={self.field!r}, message={self.message!r})"


class TaskSetError(UsageError):
    """Several task problems, raised when anything in a task set failed to load.

    Attributes:
        problems: Every problem found, in discovery order.
    """

    def __init__(self, problems: Sequence[TaskError]) -> None:
        self.problems = list(problems)
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(str(problem) for problem in self.problems)


class CorruptRecordError(UsageError, ValueError):
    """A line of ``trials.jsonl`` other than the last one is not a valid trial record.

    Attributes:
        path: The file.
        line_number: 1-based line number of the bad line.
        reason: Why it did not parse.
    """

    def __init__(self, path: Path, line_number: int, reason: str) -> None:
        self.path = path
        self.line_number = line_number
        self.reason = reason
        super().__init__(f"{path}:{line_number}: not a valid trial record: {reason}")


class ExportError(UsageError):
    """An export could not be done (bad run dir, corrupt records, unknown format)."""


class UnknownFormatError(ExportError, ValueError):
    """The requested export format is not supported.

    Attributes:
        fmt: The format asked for.
        supported: The supported formats.
    """

    def __init__(self, fmt: str, supported: tuple[str, ...]) -> None:
        self.fmt = fmt
        self.supported = supported
        super().__init__(f"unknown export format {fmt!r}; supported: {', '.join(supported)}")


# --------------------------------------------------------------------------------------------
# Inside a trial: recorded as the trial's errors (their class name is the error ``type``)
# --------------------------------------------------------------------------------------------


class TrialFailure(HarnessError):
    """Something that ended a trial; it goes into the trial's record, never out of a run."""


AGENT_ERROR_CAUSES = (
    "authentication",
    "context_window",
    "rate_limit",
    "refusal",
    "budget_spent",
    "unknown",
)
"""Typed causes of an agent's failure (``errors[].cause``; docs/errors.md)."""


class AgentRunError(TrialFailure):
    """The agent ran and failed; the message is the agent's own when it gave one.

    Args:
        message: The agent's own last error, else what the harness saw.
        fields: Facts about the failure for the record's error (``exit_code``,
            ``last_error``, ``cause``, ``cause_source``), never a secret.
    """

    def __init__(self, message: str, fields: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.record_fields: dict[str, Any] = dict(fields or {})


class StorageLimitReached(TrialFailure):
    """The agent used the whole of the trial's storage (``storage_mb``)."""


class AgentTimeout(TrialFailure):
    """An in-harness agent's time is up: no more exec or chat."""


class ModelCallError(TrialFailure):
    """The gateway answered an agent's model call with an error status.

    Attributes:
        status: The HTTP status.
        body: The parsed answer.
    """

    def __init__(self, status: int, body: Any) -> None:
        message = body
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            message = body["error"].get("message", body)
        super().__init__(f"Model call failed: HTTP {status}: {message}.")
        self.status = status
        self.body = body


class VerifierError(TrialFailure):
    """The verifier produced no usable reward; the message says which file and why."""


class EnvError(TrialFailure):
    """An episode's env (its ``setup``, ``run`` or ``finalize``) failed: the episode failed.

    An agent's failure inside an episode is never this: it is recorded on its trace.
    """


class JudgeError(VerifierError):
    """A judge could not score the trial (malformed model answer, missing evidence, failed call).

    Its model's answer is malformed, the evidence it needs is missing (no transcript for a
    tool-call judge), or its model call failed. A low score is never an error: it is data
    (``threshold`` decides whether it gates).
    """


class TrialCancelled(TrialFailure):
    """The run was interrupted (Ctrl-C, SIGTERM) before this trial could go on.

    The trial is recorded ``cancelled``; ``harness run --resume RUN_DIR`` reruns it.
    """


# --------------------------------------------------------------------------------------------
# Faults of the machine: the run stops in order, ``--resume`` continues it
# --------------------------------------------------------------------------------------------


class RunStopped(HarnessError):
    """The run stopped in order on a fault of the machine, not of a trial.

    Nothing recorded is lost; ``harness run --resume RUN_DIR`` continues once the fault is
    gone. The message says what failed, how many trials are recorded and the command.
    """

    exit_code = EXIT_TRIAL_ERRORS


class DiskFull(RunStopped):
    """A filesystem the run writes is full (ENOSPC), over quota (EDQUOT) or read-only (EROFS)."""

    exit_code = EXIT_DISK_FULL


class EngineOutage(RunStopped):
    """The sandbox engine stayed unreachable past ``retry.engine_wait_sec``."""

    exit_code = EXIT_ENGINE_OUTAGE


# --------------------------------------------------------------------------------------------
# Experiments
# --------------------------------------------------------------------------------------------


class NothingToRetry(HarnessError):
    """``--retry-failed`` found no failed trial under the summary or dir it was given (exit 3)."""


# --------------------------------------------------------------------------------------------
# Whose fault: the agent's tree, or the machine's
# --------------------------------------------------------------------------------------------

AGENT_TREE_ERRNOS: dict[int, str] = {
    errno.ELOOP: "a symlink loop",
    errno.ENAMETOOLONG: "a path too long",
    errno.EMFILE: "a tree wider than the harness's open-file limit",
    errno.ENFILE: "a tree wider than the system's open-file limit",
    errno.EMLINK: "too many links",
    errno.EILSEQ: "a name that is not valid",
    errno.EACCES: "a file the harness may not open",
    errno.EPERM: "a file the harness may not open",
    errno.ENOTDIR: "a path whose parent is not a directory",
    errno.EISDIR: "a directory where a file was expected",
    errno.ENOENT: "a path that vanished or dangles",
    errno.ENXIO: "a special file (a FIFO, a socket)",
    errno.EOVERFLOW: "a file too large to read",
    errno.EFBIG: "a file too large to write",
    errno.E2BIG: "an argument list too long",
    errno.ENOSPC: "the trial's own storage is full",
    errno.EDQUOT: "the trial's own storage is over quota",
}
"""Errnos that walking, reading or copying what the agent left produces, with what they mean.

ENOSPC and EDQUOT are the agent's only on the trial's own storage: on the run dir they are the
machine's (:func:`agent_fault`).
"""


def _inside(path: object, top: Path) -> bool:
    if not isinstance(path, str | bytes | os.PathLike):
        return False
    try:
        return Path(os.fsdecode(path)).resolve().is_relative_to(top.resolve())
    except (OSError, ValueError, RuntimeError):
        return False


def agent_fault(exc: BaseException, run_dir: Path | None = None) -> str | None:
    """Why ``exc``, met walking or copying what the agent left, is the agent's doing.

    The agent decides what its tree holds: a 1,200-deep directory (RecursionError), a
    30,000-byte path (ENAMETOOLONG), more subdirectories than the harness may hold open
    (EMFILE), names that are not UTF-8 (UnicodeError), its own storage filled (ENOSPC). Such
    a failure is never the machine's: it is never an ``environment_error`` and never retried.

    Args:
        exc: The exception (its ``__cause__`` chain is searched too).
        run_dir: The run dir: a full disk there is the machine's, not the agent's.

    Returns:
        A short reason, or None when ``exc`` is not known to be the agent's doing.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, RecursionError):
            return "a tree too deep to walk"
        if isinstance(current, UnicodeError):
            return "a name or text that is not valid UTF-8"
        if isinstance(current, OSError) and current.errno in AGENT_TREE_ERRNOS:
            if current.errno in (errno.ENOSPC, errno.EDQUOT):
                names = (current.filename, current.filename2)
                named = [name for name in names if name is not None]
                if not named or run_dir is None or any(_inside(n, run_dir) for n in named):
                    return None  # the run dir (or a place unknown): the machine's
            return AGENT_TREE_ERRNOS[current.errno]
        current = current.__cause__
    return None


# --------------------------------------------------------------------------------------------
# Model access
# --------------------------------------------------------------------------------------------


class ProviderError(HarnessError):
    """The provider could not produce an answer (unreachable, or a faux queue is empty)."""


__all__ = [
    "AGENT_ERROR_CAUSES",
    "AGENT_TREE_ERRNOS",
    "EXIT_DISK_FULL",
    "EXIT_ENGINE_OUTAGE",
    "EXIT_INTERRUPTED",
    "EXIT_NOTHING_TO_RETRY",
    "EXIT_OK",
    "EXIT_TRIAL_ERRORS",
    "EXIT_USAGE",
    "AgentConfigError",
    "AgentRunError",
    "AgentTimeout",
    "ConfigError",
    "CorruptRecordError",
    "DiskFull",
    "EngineOutage",
    "EnvError",
    "ExportError",
    "HarnessError",
    "JudgeError",
    "ModelCallError",
    "ModelSelectionError",
    "NothingToRetry",
    "PluginError",
    "ProviderError",
    "ResumeError",
    "RunStopped",
    "SandboxError",
    "StorageLimitReached",
    "TaskError",
    "TaskSetError",
    "TrialCancelled",
    "TrialFailure",
    "UnknownFormatError",
    "UsageError",
    "VerifierError",
    "agent_fault",
    "exit_code_for",
]
