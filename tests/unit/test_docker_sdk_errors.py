"""Docker SDK errors become ours at one seam (sandbox/docker/sdk.py), message unchanged.

The mapping is checked on the SDK's own exception objects, then on a real engine: a missing
image and a missing container answer with our errors, worded as the SDK words them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import docker.errors
import pytest
import requests
from support.docker import docker_client

from sandbox.docker.engine import engine_failure
from sandbox.docker.rootlayer import storage_driver
from sandbox.docker.sdk import (
    EngineError,
    EngineObjectMissing,
    EngineRequestError,
    EngineUnreachable,
    ImageMissing,
    call,
    mapped,
    stream,
)
from sandbox.errors import HarnessError, SandboxError


def _response(status: int) -> requests.Response:
    response = requests.Response()
    response.status_code = status
    return response


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (docker.errors.ImageNotFound("no such image", _response(404)), ImageMissing),
        (docker.errors.NotFound("no such volume", _response(404)), EngineObjectMissing),
        (docker.errors.APIError("bad limit", _response(400), "invalid"), EngineRequestError),
        (docker.errors.APIError("boom", _response(500), "database not open"), EngineRequestError),
        (docker.errors.DockerException("Error while fetching server API version"), EngineError),
    ],
)
def test_each_sdk_error_maps_to_the_same_branch_with_the_same_words(
    error: docker.errors.DockerException, kind: type[EngineError]
) -> None:
    ours = mapped(error)
    assert type(ours) is kind
    assert str(ours) == str(error)
    assert isinstance(ours, HarnessError) and not isinstance(ours, SandboxError)
    if isinstance(error, docker.errors.APIError):
        assert ours.explanation == error.explanation
        assert ours.status_code == error.status_code
        assert ours.is_client_error() == error.is_client_error()
    assert engine_failure(str(ours)) == engine_failure(str(error))


def test_call_raises_ours_chained_to_the_sdks_and_passes_results_through() -> None:
    original = docker.errors.NotFound("no such container", _response(404))

    def fails() -> None:
        raise original

    with pytest.raises(EngineObjectMissing) as caught:
        call(fails)
    assert caught.value.__cause__ is original
    assert call(lambda a, b=0: a + b, 2, b=3) == 5


def test_a_transport_error_on_the_way_to_the_engine_is_the_engine_not_answering() -> None:
    original = requests.exceptions.ConnectionError("Connection refused")

    def refused() -> None:
        raise original

    with pytest.raises(EngineUnreachable) as caught:
        call(refused)
    assert caught.value.__cause__ is original
    assert engine_failure(str(caught.value))
    # The same words in an answer (a registry the engine could not reach) are no outage.
    answered = mapped(
        docker.errors.APIError("pull", _response(500), "dial tcp: connection refused")
    )
    assert type(answered) is EngineRequestError and not engine_failure(str(answered))


def test_a_streamed_answer_maps_an_error_raised_while_it_is_read() -> None:
    def events() -> Iterator[dict[str, Any]]:
        yield {"status": "Pulling"}
        raise docker.errors.APIError("pull access denied", _response(403), "denied")

    seen = []
    with pytest.raises(EngineRequestError, match="denied"):
        for event in stream(events()):
            seen.append(event)
    assert seen == [{"status": "Pulling"}]


def test_the_storage_driver_question_goes_through_the_seam() -> None:
    # rootlayer asks `docker info` at a container's boot: an engine gone away there is the
    # engine not answering, not a raw transport error escaping the trial.
    class Away:
        class api:  # the SDK's attribute name
            base_url = "http+docker://sdk-seam-storage-driver-test"

        def info(self) -> dict[str, Any]:
            raise requests.exceptions.ConnectionError("Connection refused")

    with pytest.raises(EngineUnreachable):
        storage_driver(Away())


@pytest.mark.docker
def test_a_real_engine_answers_missing_objects_with_our_errors() -> None:
    client = docker_client()
    with pytest.raises(ImageMissing) as image:
        call(client.images.get, "harness/no-such-image:sdk-seam")
    assert isinstance(image.value.__cause__, docker.errors.ImageNotFound)
    assert str(image.value) == str(image.value.__cause__)
    with pytest.raises(EngineObjectMissing) as container:
        call(client.containers.get, "harness-no-such-container-sdk-seam")
    assert type(container.value) is EngineObjectMissing
    assert container.value.is_client_error()
