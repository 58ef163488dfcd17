"""Moved to :mod:`sandbox.inside.confine` (the in-sandbox folder); re-exported here."""

from sandbox.inside.confine import PostureError, erase_environ

__all__ = ["PostureError", "erase_environ"]
