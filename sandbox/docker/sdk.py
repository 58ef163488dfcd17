"""The one place the Docker SDK is called, and where its errors become ours.

Every request the harness makes of the engine through the SDK goes through :func:`call`
(or :func:`stream`, for a streamed answer), the way python-on-whales sends every command
through one ``run()``; the compose CLI, through python-on-whales, goes through
:func:`command`. An SDK error is mapped here, once, to the matching error of this
module (the way httpx maps transport errors): the same family tree as the SDK's, so each
caller catches exactly what it caught before, and the message is the SDK's own, so what a
record or the engine-outage check (:func:`~sandbox.docker.engine.engine_failure`) reads is
unchanged. A transport error of the SDK's HTTP layer (the engine's socket refusing, missing
or dropping the connection) is not the SDK's own exception: it becomes
:class:`EngineUnreachable`, the one error that says the engine itself did not answer. That
is where an engine outage is told from a registry's or a task's own ``connection refused``,
which the engine reports in an answer (:class:`EngineRequestError`).

These errors hang under :class:`~sandbox.errors.HarnessError`, deliberately not under
:class:`~sandbox.errors.SandboxError`: an engine error nobody expected stays, for the trial,
what it was before this seam existed (the backends wrap the ones they expect).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import ParamSpec, TypeVar

import docker.errors
import requests.exceptions

from sandbox.errors import HarnessError, HostToolInterrupted
from sandbox.host_tools import interrupted

P = ParamSpec("P")
T = TypeVar("T")


class EngineError(HarnessError):
    """The Docker SDK failed a request (``docker.errors.DockerException``).

    Attributes:
        status_code: The engine's HTTP status (None: the SDK failed before an answer).
        explanation: The engine's own words, when it answered.
    """

    def __init__(
        self, message: str, *, status_code: int | None = None, explanation: str | None = None
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.explanation = explanation

    def is_client_error(self) -> bool:
        """The engine refused the request itself (4xx): it fails the same way again."""
        return self.status_code is not None and 400 <= self.status_code < 500


class EngineUnreachable(EngineError):
    """The engine did not answer: its socket refused, was missing, or dropped the request.

    Raised for the transport errors of the SDK's HTTP layer on the way to the engine, never
    for an error the engine answered with (a registry's refusal, a bad request): only this
    one is an engine outage's signature (:func:`~sandbox.docker.engine.engine_failure`).
    """


class EngineRequestError(EngineError):
    """The engine answered a request with an error (``docker.errors.APIError``)."""


class EngineObjectMissing(EngineRequestError):
    """No such container, volume, network or image (``docker.errors.NotFound``)."""


class ImageMissing(EngineObjectMissing):
    """No such image on the engine (``docker.errors.ImageNotFound``)."""


def mapped(exc: docker.errors.DockerException) -> EngineError:
    """Our error for an SDK error: the same branch of the tree, the same message."""
    if isinstance(exc, docker.errors.APIError):
        kind: type[EngineError] = EngineRequestError
        if isinstance(exc, docker.errors.ImageNotFound):
            kind = ImageMissing
        elif isinstance(exc, docker.errors.NotFound):
            kind = EngineObjectMissing
        return kind(str(exc), status_code=exc.status_code, explanation=exc.explanation)
    # The SDK's own wrapping of a transport failure (no API version: the engine is away).
    if isinstance(exc.__cause__ or exc.__context__, _TRANSPORT_ERRORS):
        return unreachable(exc)
    return EngineError(str(exc))


#: The SDK's transport failures on the way to the engine: a refused, missing or dropped
#: connection (``requests`` wraps urllib3's and the socket's own errors in these).
_TRANSPORT_ERRORS = (
    requests.exceptions.ConnectionError,
    requests.exceptions.ChunkedEncodingError,
)

#: The words :class:`EngineUnreachable` starts with (the outage check looks for them).
UNREACHABLE_WORDS = "the Docker engine did not answer"


def unreachable(exc: BaseException) -> EngineUnreachable:
    """Our error for a transport failure on the way to the engine, the SDK's words kept."""
    return EngineUnreachable(f"{UNREACHABLE_WORDS}: {exc}")


def call(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Call the SDK: ``fn(*args, **kwargs)``, its errors mapped (:func:`mapped`).

    Raises:
        EngineUnreachable: The engine did not answer (its socket refused or dropped us).
        EngineError: The SDK's error, as ours (a subclass for each of its kinds).
    """
    try:
        return fn(*args, **kwargs)
    except docker.errors.DockerException as exc:
        raise mapped(exc) from exc
    except _TRANSPORT_ERRORS as exc:
        raise unreachable(exc) from exc


def stream(items: Iterable[T]) -> Iterator[T]:
    """A streamed SDK answer (a pull's progress), its errors mapped while it is read.

    Raises:
        EngineError: The SDK's error, as ours.
    """
    iterator = call(iter, items)
    while True:
        try:
            item = next(iterator)
        except StopIteration:
            return
        except docker.errors.DockerException as exc:
            raise mapped(exc) from exc
        except _TRANSPORT_ERRORS as exc:
            raise unreachable(exc) from exc
        yield item


class CommandError(HarnessError):
    """A docker CLI command failed (python-on-whales' ``DockerException``: compose).

    Not an :class:`EngineError`: the SDK's and the CLI's failures were always told apart.

    Attributes:
        stdout: What the command wrote to its stdout (None: nothing captured).
        stderr: What it wrote to its stderr.
    """

    def __init__(self, message: str, *, stdout: str | None, stderr: str | None) -> None:
        super().__init__(message)
        self.stdout = stdout
        self.stderr = stderr


def command(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Run a docker CLI command through python-on-whales, its error mapped.

    python-on-whales starts the CLI in the harness's own process group, so a terminal's
    Ctrl-C reaches it too: a command the interrupt stopped is the run being stopped, never
    the command's failure (:mod:`sandbox.host_tools`).

    Raises:
        CommandError: The command failed (its output kept).
        HostToolInterrupted: An interrupt signal stopped the command.
    """
    from python_on_whales.exceptions import DockerException

    try:
        return fn(*args, **kwargs)
    except DockerException as exc:
        if interrupted(exc.return_code):
            raise HostToolInterrupted(
                f"{' '.join(exc.docker_command[:3])} was interrupted (exit {exc.return_code}): "
                "the run is being stopped"
            ) from exc
        raise CommandError(str(exc), stdout=exc.stdout, stderr=exc.stderr) from exc


def not_found(message: str) -> EngineObjectMissing:
    """An "object missing" error of our own making (an object unusable as if absent)."""
    return EngineObjectMissing(message, status_code=404)


__all__ = [
    "CommandError",
    "EngineError",
    "EngineObjectMissing",
    "EngineRequestError",
    "EngineUnreachable",
    "ImageMissing",
    "UNREACHABLE_WORDS",
    "call",
    "command",
    "mapped",
    "not_found",
    "stream",
    "unreachable",
]
