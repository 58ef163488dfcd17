"""The image's own config (``ENV``, ``WORKDIR``, ``USER``) as every phase of a trial gets it.

A container backend reads it from the engine's image attributes (``Config``); the local
backend has no image (:meth:`sandbox.backend.Sandbox.image_config` is None there). How it
merges with the task's and the harness's variables is ``harness.trial.env``'s rule
(docs/tasks.md, "The image's config").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ImageConfig:
    """What a task image declares for the processes started in it.

    Attributes:
        env: Its ``Config.Env`` (``ENV`` lines, ``PATH`` included), in the image's order.
        workdir: Its ``WORKDIR`` (None when unset or ``/``).
        user: Its ``USER`` (None when unset).
    """

    env: Mapping[str, str] = field(default_factory=dict)
    workdir: str | None = None
    user: str | None = None

    @classmethod
    def from_engine(cls, config: Mapping[str, Any] | None) -> ImageConfig:
        """From an image's ``Config`` as the Docker engine reports it.

        ``Env`` items are ``NAME=value``; one without ``=`` (the engine never writes one)
        or with an empty name is ignored, and a later item of the same name wins, as it
        does for a process started by the engine.
        """
        config = config or {}
        env: dict[str, str] = {}
        for item in config.get("Env") or []:
            name, sep, value = str(item).partition("=")
            if sep and name:
                env[name] = value
        workdir = str(config.get("WorkingDir") or "")
        user = str(config.get("User") or "")
        return cls(
            env=env,
            workdir=workdir if workdir not in ("", "/") else None,
            user=user or None,
        )


__all__ = ["ImageConfig"]
