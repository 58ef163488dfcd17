"""Checking the run's env: moved to :mod:`harness.runner.env_check` (this path stays).

The one import that runs up from ``episodes/`` to ``runner/``, allowed by name in
tests/unit/test_architecture.py (``ALLOWED_UPWARD_IMPORTS``); nothing in the harness imports
this module, so it closes no import cycle.
"""

from harness.runner.env_check import (
    SINGLE,
    check_tasks,
    is_single,
    model_agent,
    prepare_env,
    refuse_executor,
    role_configs,
)

__all__ = [
    "SINGLE",
    "check_tasks",
    "is_single",
    "model_agent",
    "prepare_env",
    "refuse_executor",
    "role_configs",
]
