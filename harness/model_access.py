"""Model access for a run: pick the model (explicitly), then start the gateway for it.

This module moved to :mod:`harness.runner.model_access`; this path re-exports its public names.
"""

from harness.runner.model_access import (
    gateway_limits,
    resolve_model,
    start_gateway,
)

__all__ = [
    "gateway_limits",
    "resolve_model",
    "start_gateway",
]
