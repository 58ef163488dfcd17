"""Typed errors of the eval framework; each says what went wrong and how to fix it."""

from __future__ import annotations


class HarnessError(Exception):
    """Base class for harness errors."""


class UsageError(HarnessError):
    """Bad command-line usage or configuration (exit code 2)."""


class AgentConfigError(UsageError):
    """An agent cannot run a task as configured (e.g. oracle without solve.sh)."""


class VerifierError(HarnessError):
    """The verifier produced no usable reward; the message says which file and why."""


class TrialCancelled(HarnessError):
    """The run was interrupted (Ctrl-C, SIGTERM) before this trial could go on.

    The trial is recorded ``cancelled``; ``harness run --resume RUN_DIR`` reruns it.
    """
