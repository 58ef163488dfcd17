"""harness 0.1's module ``harness.run``, still importable under that name.

``harness.run`` is the API function now (:func:`harness.api.run`); ``harness/__init__.py``
registers this module as ``sys.modules["harness.run"]`` so that 0.1 code doing
``from harness.run import prepare_run`` keeps working without a ``harness/run.py`` whose
import would replace the function. New code calls :func:`harness.run` (credentials hidden,
config checked) or uses :mod:`harness.runner`.
"""

from __future__ import annotations

from harness.backends.base import SandboxBackend
from harness.backends.registry import open_backend
from harness.config import RunConfig
from harness.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_TRIAL_ERRORS, EXIT_USAGE
from harness.runner import (
    ABORT_GRACE_SEC,
    PreparedRun,
    RunEvents,
    RunOutcome,
    RunStart,
    execute_run,
    prepare_run,
)
from harness.trial import SandboxFactory


def _sandbox_factory(
    config: RunConfig, run_label: str = "adhoc"
) -> tuple[SandboxFactory, SandboxBackend]:
    """0.1's way to get sandboxes without a run: the configured backend, opened, started.

    Returns:
        Its sandbox factory, and the backend (``close()`` it after use).
    """
    backend = open_backend(config, run_label)
    backend.start()
    return backend.make_sandbox, backend


__all__ = [
    "ABORT_GRACE_SEC",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TRIAL_ERRORS",
    "EXIT_USAGE",
    "PreparedRun",
    "RunEvents",
    "RunOutcome",
    "RunStart",
    "execute_run",
    "prepare_run",
]
