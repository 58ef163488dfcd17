"""The project's base of the Sandbox contract kit (:mod:`sandbox.testing`) for its backends.

What this repository adds to the kit for every backend it tests: a missing prerequisite
goes through ``prerequisite_missing`` (so CI fails rather than skips), and no process of
the conformance uid range outlives a sandbox's ``stop``.
"""

from __future__ import annotations

from typing import NoReturn

import psutil

from sandbox.backend import Sandbox
from sandbox.testing import SandboxContract
from support.docker import prerequisite_missing
from support.workers import uid_base

#: A uid range of its own (tests/conftest.py uses 61000+), so sweeps never collide.
CONFORMANCE_UID_BASE = uid_base(61100)


class ProjectSandboxContract(SandboxContract):
    """The kit with this repository's prerequisites and its uid-range sweep."""

    def prerequisite_missing(self, reason: str) -> NoReturn:
        prerequisite_missing(reason)

    def after_stop(self, sandboxes: list[Sandbox]) -> None:
        leaked = [
            p.info
            for p in psutil.process_iter(["pid", "uids", "status", "cmdline"])
            if p.info["uids"]
            and CONFORMANCE_UID_BASE <= p.info["uids"].real < CONFORMANCE_UID_BASE + 16
            and p.info["status"] != psutil.STATUS_ZOMBIE
        ]
        assert leaked == [], "sandbox processes outlived stop()"


__all__ = ["CONFORMANCE_UID_BASE", "ProjectSandboxContract"]
