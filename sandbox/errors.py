"""Typed errors of the isolation runtime and the cleanup error aggregation (docs/sandbox.md)."""

from __future__ import annotations

from collections.abc import Sequence

CLEANUP_FAILED = "Agent cleanup failed."
RUN_AND_CLEANUP_FAILED = "Agent run failed and cleanup also failed."


class HarnessError(Exception):
    """The root of every error the harness raises; ``harness.errors`` re-exports it.

    It is defined here because ``sandbox`` never imports ``harness``: both packages share
    one tree, with :class:`SandboxError` as the isolation runtime's branch.
    """


class UsageError(HarnessError):
    """Bad command-line usage, config, task or input (exit code 2; nothing is written).

    Defined here, beside :class:`HarnessError`, because a sandbox backend refuses its
    options with it (:mod:`sandbox.plugin`); ``harness.errors`` re-exports it with the
    rest of its branch.
    """


class SandboxError(HarnessError):
    """Base class for errors raised by the isolation runtime.

    ``retryable`` is False for a failure that cannot change on a retry (a build error, an
    image no registry has, a limit the engine refuses): retrying it only burns time.
    """

    retryable: bool = True


class EnvironmentStartError(SandboxError):
    """The sandbox could not be created (root, container, image)."""


class PermanentStartError(EnvironmentStartError):
    """The sandbox cannot be created for this task, whatever the number of tries."""

    retryable = False


class SeedingError(SandboxError):
    """A workspace fixture path was rejected; the message names the path."""


class PostureCheckFailed(SandboxError):
    """The privilege drop or the secrecy self-check failed; no agent ran."""


class SupervisorError(SandboxError):
    """The in-sandbox supervisor failed or broke its protocol."""


class SandboxDied(SupervisorError):
    """The trial's sandbox stopped by itself while a phase ran (not the harness's doing).

    The phase's own processes are the cause: memory or pids exhausted (gVisor stops the
    whole sandbox then; the local sandbox raises it when the kernel OOM-killed a process of
    the trial's cgroup). Docker also raises it when the container ran out of memory
    (``OOMKilled``) under a harness step after a phase, of what the phase left in its
    memory-backed space. ``role`` names the (last) phase, so the trial is an agent or
    verifier error, not an environment error to retry.
    """

    def __init__(self, message: str, role: str) -> None:
        super().__init__(message)
        self.role = role


class ChannelForged(SupervisorError):
    """An answer on the supervisor's channel lacked its request's nonce: not the supervisor's.

    Something inside the sandbox wrote to the channel (a root agent under gVisor can open
    the supervisor's fds through ``/proc/1/fd``); the channel is no longer trusted.
    """


class SpaceFilledByAgent(SupervisorError):
    """A step of the harness met a full space (``ENOSPC``) that the agent could fill.

    A root agent writes every root-only space of its container; what it left there made a
    later step of the harness fail. The agent's doing: an ``agent_error`` that a retry
    cannot change (``harness/trial/failures.py``), never an environment error to retry.
    """

    retryable = False
    record_fields = {"cause": "agent", "reason": "a space the agent filled"}


class EvidenceError(SandboxError):
    """Evidence could not be copied out safely."""


class SessionFileMissing(SandboxError):
    """The agent declared a session file but none was produced."""


class EngineUnavailable(SandboxError):
    """The container engine cannot be reached; the message says how to start it."""


class HostToolInterrupted(SandboxError):
    """A host tool (``iptables``, ``mount``, ``cp``) died of an interrupt sent to its group.

    A terminal's Ctrl-C reaches every process of its foreground group; a tool caught in the
    instant before it leaves the harness's group dies of it
    (:mod:`sandbox.host_tools`), and so does a local supervisor starting in that instant.
    The run is being interrupted: the trial is ``cancelled``, never an
    ``environment_error`` to retry.
    """


def aggregate_errors(
    run_error: BaseException | None, cleanup_errors: Sequence[Exception]
) -> BaseException | None:
    """Combine a run error with cleanup errors the way the cleanup contract requires.

    Args:
        run_error: The error that ended the run, or None if the run succeeded.
        cleanup_errors: Errors of the cleanup steps, in step order.

    Returns:
        None when nothing failed; the run error alone; the single cleanup error; an
        ``ExceptionGroup("Agent cleanup failed.", ...)`` for several cleanup errors; or
        ``ExceptionGroup("Agent run failed and cleanup also failed.", [run, *cleanup])``.
    """
    if not cleanup_errors:
        return run_error
    if run_error is None:
        if len(cleanup_errors) == 1:
            return cleanup_errors[0]
        return ExceptionGroup(CLEANUP_FAILED, list(cleanup_errors))
    first: Exception = (
        run_error if isinstance(run_error, Exception) else RuntimeError(repr(run_error))
    )
    return ExceptionGroup(RUN_AND_CLEANUP_FAILED, [first, *cleanup_errors])
