"""Which status a failure gives, by the phase it happened in: the one table.

The trial (:mod:`~harness.trial.lifecycle`) and the episodes' judge trial
(:mod:`harness.episodes.trials`) both record a phase's failure through
:meth:`~harness.trial.state.TrialState.fail_in`, which looks the status up here. The rows
of a phase are tried in order; the first whose exception types match gives the status. The
rule behind them (docs/security.md, "Failures"): only a fault of the machine or the engine
is an ``environment_error`` (retried); what the agent's own processes did is an
``agent_error``; a verifier that gives no usable reward is a ``verifier_error``.
"""

from __future__ import annotations

from collections.abc import Mapping

from harness.errors import VerifierError
from harness.records import TrialStatus
from sandbox.errors import HostToolInterrupted, SandboxDied, SandboxError, SpaceFilledByAgent

Row = tuple[tuple[type[BaseException], ...], TrialStatus]

_MACHINE = ((Exception,), TrialStatus.ENVIRONMENT_ERROR)
#: A host tool killed by the interrupt that is stopping the run, whatever the phase: the
#: run is being cancelled (it may not have counted the signal yet), never a fault to retry.
_INTERRUPTED = ((HostToolInterrupted,), TrialStatus.CANCELLED)
#: A step of the harness failed on a space the agent filled (a root agent's ``/trial``):
#: the agent's doing in whatever phase it shows, never a fault of the machine to retry.
_AGENTS_SPACE = ((SpaceFilledByAgent,), TrialStatus.AGENT_ERROR)

#: The trial's container died of what an earlier phase left (tmpfs files charged to its
#: memory, say: the kernel OOM-killed in it) while the harness worked between phases: the
#: phases' doing, never a fault of the machine to retry (a retry would pick the agent's
#: lucky attempts). Only the engine's word that the kernel OOM-killed makes it one.
_PHASES_DEATH = ((SandboxDied,), TrialStatus.AGENT_ERROR)

FAILURE_STATUS: Mapping[str, tuple[Row, ...]] = {
    # Getting the sandbox (and a step's files and setup) ready is the machine's part.
    "prepare": (_INTERRUPTED, _MACHINE),
    # A failed build or pull (the errors a retry cannot change say so: retryable false).
    "build": (_INTERRUPTED, _MACHINE),
    "reset": (_INTERRUPTED, _AGENTS_SPACE, _MACHINE),
    "setup": (_INTERRUPTED, _AGENTS_SPACE, _PHASES_DEATH, _MACHINE),
    "execute": (
        _INTERRUPTED,
        _AGENTS_SPACE,
        # The agent's own processes brought the sandbox down (out of memory, say).
        ((SandboxDied,), TrialStatus.AGENT_ERROR),
        ((SandboxError, OSError), TrialStatus.ENVIRONMENT_ERROR),
        ((Exception,), TrialStatus.AGENT_ERROR),
    ),
    "grade": (
        _INTERRUPTED,
        _AGENTS_SPACE,
        ((VerifierError, SandboxDied), TrialStatus.VERIFIER_ERROR),
        # Unless what the agent left caused it (the trial checks: agent_fault).
        ((SandboxError, OSError, RecursionError, UnicodeError), TrialStatus.ENVIRONMENT_ERROR),
        ((Exception,), TrialStatus.VERIFIER_ERROR),
    ),
    # Copying out the agent's tree and the artifacts (``copy_failed`` in the lifecycle):
    # the engine failing is the machine's; the container dying of what was left is not.
    "collect": (_INTERRUPTED, _PHASES_DEATH, _MACHINE),
    "artifacts": (_INTERRUPTED, _PHASES_DEATH, _MACHINE),
}
"""Phase -> ordered (exception types, status) rows."""


def failure_status(phase: str, exc: BaseException) -> TrialStatus:
    """The status a failure ``exc`` in ``phase`` gives (``internal_error`` if no row matches).

    Raises:
        KeyError: ``phase`` has no row in :data:`FAILURE_STATUS`.
    """
    for kinds, status in FAILURE_STATUS[phase]:
        if isinstance(exc, kinds):
            return status
    return TrialStatus.INTERNAL_ERROR


__all__ = ["FAILURE_STATUS", "failure_status"]
