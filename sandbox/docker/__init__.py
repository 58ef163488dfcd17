"""The docker backend: one hardened container per trial (docs/security.md).

Its flags are in :mod:`sandbox.docker.container`; every Docker SDK call, and the mapping of
its errors to ours, in :mod:`sandbox.docker.sdk`.
"""
