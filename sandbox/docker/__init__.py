"""The docker backend: one hardened container per trial (docs/security.md).

Its whole code is here: :mod:`sandbox.docker.plugin` (``DockerBackend``, what a run opens),
:mod:`sandbox.docker.runtime` (what the run's trials share), :mod:`sandbox.docker.backend`
(``DockerSandbox``, one trial), :mod:`sandbox.docker.admin` (its verbs: images, doctor rows,
leftovers) and the modules they use.

Its flags are in :mod:`sandbox.docker.container`; every Docker SDK call, and the mapping of
its errors to ours, in :mod:`sandbox.docker.sdk`.
"""
