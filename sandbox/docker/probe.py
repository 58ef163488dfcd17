"""Asking the engine whether it takes a container option: a probe container, once per engine.

Some things only the engine can answer (does its storage driver cap a layer, does it take
``nr_inodes`` on a tmpfs): :func:`refusal` creates a container of an image the engine has
with the option, optionally starts it, removes it at once, and returns the engine's own
refusal, cached per engine (its API address) and question for the life of the process.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from sandbox.docker.labels import KIND, MANAGED
from sandbox.docker.sdk import EngineError, EngineObjectMissing, EngineRequestError, call

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_answers: dict[tuple[str, str], str | None] = {}


def refusal(client: Any, image: str, *, kind: str, start: bool, **options: Any) -> str | None:
    """The engine's refusal of a container of ``image`` with ``options`` (None: taken).

    Args:
        client: The engine.
        image: An image the engine has (the harness's base image).
        kind: The probe's name: its label, and its key in the cache.
        start: Start it too (an option the engine checks only when it mounts).
        options: Keyword arguments of ``containers.create``.

    Raises:
        EngineError: the engine failed otherwise (unreachable, image missing).
    """
    key = (str(getattr(client.api, "base_url", "")), kind)
    with _lock:
        if key in _answers:
            return _answers[key]
    answer: str | None = None
    try:
        probe = call(
            client.containers.create,
            image,
            ["true"],
            entrypoint=[],
            network_mode="none",
            labels={MANAGED: "1", KIND: kind},
            **options,
        )
    except EngineObjectMissing:
        raise
    except EngineRequestError as exc:
        answer = str(exc.explanation or exc)
    else:
        try:
            if start:
                call(probe.start)
        except EngineRequestError as exc:
            answer = str(exc.explanation or exc)
        finally:
            try:
                call(probe.remove, force=True)
            except EngineError as exc:
                logger.warning("cannot remove the %s container: %s", kind, exc)
    with _lock:
        _answers[key] = answer
    return answer


__all__ = ["refusal"]
