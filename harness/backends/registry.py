"""The sandbox backends registry: the ``harness.sandboxes`` entry points, and opening one.

A distribution adds a backend by declaring it::

    [project.entry-points."harness.sandboxes"]
    mybox = "my_package.backend:MyBackend"      # a sandbox.plugin.SandboxBackend

``harness sandbox list`` shows what is installed; ``--sandbox NAME`` selects one.
"""

from __future__ import annotations

from harness.config import RunConfig
from harness.registry import Registry, subclass_of
from sandbox.plugin import BackendOptions, SandboxBackend

SANDBOXES_GROUP = "harness.sandboxes"
"""The entry-point group of sandbox backends."""

SANDBOXES: Registry[type[SandboxBackend]] = Registry(
    SANDBOXES_GROUP, "sandbox backend", subclass_of(SandboxBackend)
)
"""Sandbox backends: ``SandboxBackend`` subclasses (built-ins: ``local``, ``docker``)."""


def open_backend(config: RunConfig, run_name: str) -> SandboxBackend:
    """The run's sandbox backend, opened (nothing started yet).

    Raises:
        PluginError: The backend is not installed (or does not load).
        UsageError: The backend refused its options (e.g. the engine is unreachable).
    """
    backend_class = SANDBOXES.get(config.sandbox.backend)
    backend = backend_class(
        BackendOptions(run_name=run_name, config=config.sandbox, concurrency=config.concurrency)
    )
    backend.name = config.sandbox.backend
    return backend


__all__ = ["SANDBOXES", "SANDBOXES_GROUP", "open_backend"]
