"""Docker pieces of Harbor support that need no engine: device requests, the engine's
no-GPU answer, what a compose file's ``main`` asks for, image references."""

from __future__ import annotations

from sandbox.docker.compose import plan
from sandbox.docker.gpus import NoGpuError, device_requests, no_gpu_error
from sandbox.docker.pulls import _reference


def test_gpus_become_a_device_request() -> None:
    assert device_requests(0) == []
    (request,) = device_requests(2)
    assert request["Count"] == 2 and request["Capabilities"] == [["gpu"]]


def test_the_engines_no_gpu_answer_is_a_permanent_error() -> None:
    answer = 'could not select device driver "" with capabilities: [[gpu]]'
    error = no_gpu_error(answer, 2)
    assert isinstance(error, NoGpuError) and error.retryable is False
    assert "the task needs 2 GPU(s) and the Docker engine has none" in str(error)
    assert no_gpu_error(answer, 0) is None
    assert no_gpu_error("some other failure", 1) is None


def test_compose_main_keys_applied_and_overridden() -> None:
    data = {
        "services": {
            "main": {
                "image": "x",
                "command": "serve --port 8080",
                "environment": {"A": "1", "B": None},
                "depends_on": {"db": {"condition": "service_healthy"}},
                "privileged": True,
                "cap_add": ["SYS_ADMIN"],
                "volumes": ["/:/host"],
                "entrypoint": None,
                "networks": {"default": None},
            },
            "db": {"image": "postgres"},
            "mcp": {"build": {"context": "./mcp"}},
        }
    }
    result = plan(data)
    assert result.sidecars == ["db", "mcp"]
    assert result.main_command == ["serve", "--port", "8080"]
    assert result.main_environment == {"A": "1", "B": ""}
    assert result.overridden == ["cap_add", "privileged", "volumes"]


def test_image_references() -> None:
    assert _reference("ubuntu") == ("ubuntu", "latest")
    assert _reference("127.0.0.1:5000/a/b:v1") == ("127.0.0.1:5000/a/b", "v1")
    assert _reference("a/b@sha256:" + "0" * 64) == ("a/b", "sha256:" + "0" * 64)
