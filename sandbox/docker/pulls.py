"""Pulling a task's ``docker_image`` when the engine lacks it (``--pull``).

``missing`` (the default) pulls an image the engine does not have, ``always`` pulls every
image once per run (a newer one replaces the local copy), ``never`` only uses local images.
Progress goes to a callback (the run's message line). An image no registry answers for is
one clear, permanent error naming it: retrying the trial cannot change it. An engine that
stops answering mid-pull is not the image's failure: that error (``EngineUnreachable``) goes
up as it is, for the run's engine watch.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Literal

from docker.utils import parse_repository_tag

import docker
from sandbox.docker.sdk import (
    EngineError,
    EngineRequestError,
    EngineUnreachable,
    ImageMissing,
    call,
    stream,
)
from sandbox.errors import PermanentStartError

PullPolicy = Literal["missing", "always", "never"]
PULL_POLICIES: tuple[str, ...] = ("missing", "always", "never")
#: Least time between two progress messages of one pull.
PROGRESS_EVERY_SEC = 2.0


class ImagePullError(PermanentStartError):
    """The image is not local and could not be pulled (or pulls are off)."""


def _reference(image: str) -> tuple[str, str]:
    repository, tag = parse_repository_tag(image)
    if tag is None and "@" not in image:
        tag = "latest"
    return repository, tag or ""


class ImagePuller:
    """Makes images local per the pull policy; each image at most once per run."""

    def __init__(
        self,
        client: docker.DockerClient,
        policy: PullPolicy = "missing",
        progress: Callable[[str], None] | None = None,
    ) -> None:
        if policy not in PULL_POLICIES:
            raise ValueError(f"pull policy must be one of {', '.join(PULL_POLICIES)}")
        self.client = client
        self.policy = policy
        self.progress = progress
        self._lock = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._done: dict[str, ImagePullError | None] = {}

    def ensure(self, image: str) -> bool:
        """Make ``image`` local as the policy says; whether this call pulled it.

        Raises:
            ImagePullError: naming the image and why it cannot be had (also on every later
                call for the same image).
        """
        with self._lock:
            lock = self._locks.setdefault(image, threading.Lock())
        with lock:
            if image in self._done:
                failure = self._done[image]
                if failure is not None:
                    raise failure
                return False
            try:
                pulled = self._ensure(image)
            except ImagePullError as exc:
                self._done[image] = exc
                raise
            self._done[image] = None
            return pulled

    def _local(self, image: str) -> bool:
        try:
            call(self.client.images.get, image)
        except ImageMissing:
            return False
        return True

    def _ensure(self, image: str) -> bool:
        if self.policy != "always" and self._local(image):
            return False
        if self.policy == "never":
            raise ImagePullError(
                f"image {image} is not present locally and pulls are off (--pull never); "
                "build or load it first (`docker load`), or use --pull missing"
            )
        self.pull(image)
        return True

    def _say(self, text: str) -> None:
        if self.progress is not None:
            self.progress(text)

    def pull(self, image: str) -> None:
        """Pull ``image``, reporting progress.

        Raises:
            ImagePullError: the registry refused or could not be reached.
        """
        repository, tag = _reference(image)
        self._say(f"pulling image {image}")
        layers: dict[str, str] = {}
        last = time.monotonic()
        try:
            events = call(
                self.client.api.pull, repository, tag=tag or None, stream=True, decode=True
            )
            for event in stream(events):
                if not isinstance(event, dict):
                    continue
                if event.get("error"):
                    raise ImagePullError(_message(image, str(event["error"])))
                self._track(event, layers)
                if time.monotonic() - last >= PROGRESS_EVERY_SEC and layers:
                    last = time.monotonic()
                    done = sum(1 for state in layers.values() if state == "done")
                    self._say(f"pulling image {image}: {done}/{len(layers)} layers")
        except EngineRequestError as exc:
            # The engine answered: the registry's refusal (even its "connection refused")
            # is the image's, and permanent.
            raise ImagePullError(_message(image, str(exc.explanation or exc))) from None
        except EngineUnreachable:
            raise  # the engine itself is away: an outage, not the image's doing
        except EngineError as exc:
            raise ImagePullError(_message(image, str(exc))) from None
        if not self._local(image):
            raise ImagePullError(_message(image, "the engine reported no error but has no image"))
        self._say(f"pulled image {image} ({len(layers)} layers)")

    @staticmethod
    def _track(event: dict[str, Any], layers: dict[str, str]) -> None:
        layer = event.get("id")
        status = str(event.get("status") or "")
        if not layer or ":" in str(layer):
            return
        if status in ("Pull complete", "Already exists"):
            layers[str(layer)] = "done"
        else:
            layers.setdefault(str(layer), "pending")


def _message(image: str, reason: str) -> str:
    return (
        f"image {image} is not present locally and could not be pulled ({reason.strip()}); "
        "check the name and that its registry is reachable from the Docker engine, or load "
        "it with `docker load`"
    )
