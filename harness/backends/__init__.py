"""How the harness finds and opens a run's sandbox backend (the ``harness.sandboxes`` plug-ins).

The interface a backend implements is :class:`sandbox.plugin.SandboxBackend`; each backend's
whole code is in its own folder (``sandbox/local/``, ``sandbox/docker/``). This package holds
only the registry (:mod:`harness.backends.registry`), which the built-ins join through the
same entry points a third-party backend uses (``docs/plugins.md``).
"""
