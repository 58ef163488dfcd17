"""Sandbox backends as the harness opens them for a run (the ``harness.sandboxes`` plug-ins).

:class:`~harness.backends.base.SandboxBackend` is the interface; ``local`` and ``docker``
(this package's modules of the same names) are the built-ins, registered through the same
entry points a third-party backend uses (see ``docs/plugins.md``).
"""

from harness.backends.base import BackendOptions, SandboxBackend
from sandbox.backend import CloseReport

__all__ = ["BackendOptions", "CloseReport", "SandboxBackend"]
