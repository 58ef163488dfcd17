"""Images of Harbor tasks: ``docker_image`` pulled per ``--pull`` from a real registry on
127.0.0.1 (Debian's docker-registry, started here), ``--base-alias`` on ``docker_image``,
``build_timeout_sec``, GPUs on an engine without any, and ``os = "windows"``. Failures a
retry cannot change are recorded ``retryable: false`` and never retried, and never keep
the other tasks of the set from running."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest
from support.docker import docker_client, require_image

from sandbox.docker.images import ImageBuildError, ImageRequest, ImageResolver
from sandbox.docker.pulls import ImagePuller, ImagePullError

BASE = "harness/base:bookworm"
pytestmark = pytest.mark.docker


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A docker-registry on 127.0.0.1 holding ``conformance/base:v1`` (the base image)."""
    client = docker_client()
    require_image(client)
    binary = shutil.which("docker-registry")
    assert binary, "docker-registry is missing: bash scripts/registry.sh installs it"
    root = tmp_path_factory.mktemp("registry")
    port = free_port()
    config = root / "config.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
        f"    rootdirectory: {root / 'data'}\nhttp:\n  addr: 127.0.0.1:{port}\n"
    )
    proc = subprocess.Popen(
        [binary, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://{address}/v2/", timeout=1).read()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "the registry did not answer within 30s"
                time.sleep(0.1)
        image = client.images.get(BASE)
        image.tag(f"{address}/conformance/base", "v1")
        client.images.push(f"{address}/conformance/base", tag="v1")
        client.images.remove(f"{address}/conformance/base:v1")
        yield address
    finally:
        proc.terminate()
        proc.wait(10)
        for tag in (f"{address}/conformance/base:v1",):
            try:
                client.images.remove(tag)
            except docker.errors.ImageNotFound:
                pass


def untag(image: str) -> None:
    try:
        docker_client().images.remove(image)
    except docker.errors.ImageNotFound:
        pass


def test_a_missing_image_is_pulled_with_progress(registry: str) -> None:
    image = f"{registry}/conformance/base:v1"
    untag(image)
    said: list[str] = []
    puller = ImagePuller(docker_client(), "missing", progress=said.append)
    assert (
        ImageResolver(docker_client(), puller=puller).resolve(ImageRequest("t", image=image))
        == image
    )
    docker_client().images.get(image)
    assert said[0] == f"pulling image {image}" and said[-1].startswith(f"pulled image {image}")
    said.clear()
    ImageResolver(
        docker_client(), puller=ImagePuller(docker_client(), "missing", said.append)
    ).resolve(ImageRequest("t", image=image))
    assert said == []  # present: not pulled again
    untag(image)


def test_pull_always_pulls_a_present_image(registry: str) -> None:
    image = f"{registry}/conformance/base:v1"
    ImagePuller(docker_client(), "missing").ensure(image)
    said: list[str] = []
    ImagePuller(docker_client(), "always", progress=said.append).ensure(image)
    assert said and said[0] == f"pulling image {image}"
    untag(image)


def test_pull_never_refuses_a_missing_image(registry: str) -> None:
    image = f"{registry}/conformance/base:v1"
    untag(image)
    with pytest.raises(ImagePullError, match="not present locally and pulls are off") as info:
        ImagePuller(docker_client(), "never").ensure(image)
    assert info.value.retryable is False


def test_an_image_the_registry_lacks_is_one_permanent_error(registry: str) -> None:
    image = f"{registry}/conformance/nothing:v9"
    puller = ImagePuller(docker_client(), "missing")
    with pytest.raises(
        ImagePullError, match=f"image {image} is not present locally and could not be pulled"
    ) as info:
        puller.ensure(image)
    assert info.value.retryable is False
    with pytest.raises(ImagePullError) as again:
        puller.ensure(image)  # remembered: no second pull
    assert again.value is info.value


def test_no_registry_answering_names_the_image() -> None:
    image = f"127.0.0.1:{free_port()}/gone/app:1"
    with pytest.raises(ImagePullError, match=f"image {image} is not present locally") as info:
        ImagePuller(docker_client(), "missing").ensure(image)
    assert info.value.retryable is False


def test_base_alias_applies_to_docker_image(registry: str) -> None:
    target = f"{registry}/conformance/base:v1"
    untag(target)
    resolver = ImageResolver(docker_client(), aliases={"example.invalid/app:1": target})
    assert resolver.resolve(ImageRequest("t", image="example.invalid/app:1")) == target
    untag(target)


def test_a_build_ends_at_build_timeout_sec(tmp_path: Path) -> None:
    require_image(docker_client())
    (tmp_path / "Dockerfile").write_text(f"FROM {BASE}\nRUN sleep 120\n")
    (tmp_path / "nonce").write_text(str(time.time()))  # a new context: never a cached tag
    request = ImageRequest("slow", dockerfile=tmp_path / "Dockerfile", build_timeout_sec=2)
    started = time.monotonic()
    with pytest.raises(
        ImageBuildError, match="did not finish within build_timeout_sec = 2s"
    ) as info:
        ImageResolver(docker_client()).resolve(request)
    assert info.value.retryable is False
    assert time.monotonic() - started < 60


def task(root: Path, name: str, environment: str) -> Path:
    path = root / name
    (path / "tests").mkdir(parents=True)
    (path / "solution").mkdir()
    (path / "task.toml").write_text(f"[agent]\ntimeout_sec = 30\n[environment]\n{environment}")
    (path / "instruction.md").write_text("Write ok into /app/ok.txt\n")
    (path / "solution" / "solve.sh").write_text("#!/bin/bash\necho ok > /app/ok.txt\n")
    (path / "tests" / "test.sh").write_text(
        '#!/bin/bash\n[ "$(cat /app/ok.txt)" = ok ] && echo 1 > /logs/verifier/reward.txt '
        "|| echo 0 > /logs/verifier/reward.txt\n"
    )
    return path


def test_failures_a_retry_cannot_change_do_not_block_the_set(
    e2e: Any, tmp_path: Path, registry: str
) -> None:
    """An image no registry has is an environment_error, not retryable and not retried;
    GPUs on an engine without any and windows are refused before the run (skipped with
    --skip-invalid), while the fine task completes."""
    require_image(docker_client())
    root = tmp_path / "set"
    task(root, "fine", f'docker_image = "{BASE}"\n')
    task(root, "gpu", f'docker_image = "{BASE}"\ngpus = 1\ngpu_types = ["H100"]\n')
    task(root, "windows", 'os = "windows"\n')
    task(root, "no-image", f'docker_image = "{registry}/conformance/absent:v1"\n')
    out = tmp_path / "runs"
    result = e2e.run(
        "run",
        root,
        "--sandbox",
        "docker",
        "--agent",
        "oracle",
        "--max-retries",
        "3",
        "--skip-invalid",
        "-o",
        out,
        "--display",
        "plain",
        timeout=300,
    )
    assert result.code == 1, result
    records = {r["task"]["name"]: r for r in e2e.read_run(e2e.only_run_dir(out)).records}
    assert sorted(records) == ["fine", "no-image"], records
    assert records["fine"]["status"] == "completed" and records["fine"]["reward"] == 1.0
    skipped = [line for line in result.stderr.splitlines() if "skipped invalid task" in line]
    assert any("[environment].gpus = 1, but the Docker engine has no GPU" in s for s in skipped)
    assert any('environment.os: "windows" is not supported' in s for s in skipped), skipped
    record = records["no-image"]
    assert record["status"] == "environment_error", record
    assert record["attempt"] == 1 and record["previous_attempts"] == [], record
    (error,) = record["errors"]
    assert f"image {registry}/conformance/absent:v1 is not present locally and could not be " \
        "pulled" in error["message"] and error["retryable"] is False, error  # fmt: skip


def test_a_run_pulls_per_pull_with_progress_on_the_message_line_and_in_eval_log(
    e2e: Any, tmp_path: Path, registry: str
) -> None:
    """``--pull`` reaches the docker backend: ``never`` refuses the absent image, the
    default pulls it, saying so on the message line and in the invocation's log."""
    image = f"{registry}/conformance/base:v1"
    untag(image)
    root = tmp_path / "set"
    task(root, "pulled", f'docker_image = "{image}"\n')

    def run(out: Path, *extra: str) -> Any:
        args = ("run", root, "--sandbox", "docker", "--agent", "oracle", *extra)
        return e2e.run(*args, "-o", out, "--display", "plain", timeout=300)

    try:
        refused = run(tmp_path / "never", "--pull", "never")
        assert refused.code == 1, refused
        (record,) = e2e.read_run(e2e.only_run_dir(tmp_path / "never")).records
        assert "pulls are off" in record["errors"][0]["message"], record
        pulled = run(tmp_path / "default")
        assert pulled.code == 0, pulled
        assert f"pulling image {image}" in pulled.stderr, pulled
        run_dir = e2e.only_run_dir(tmp_path / "default")
        assert f"pulled image {image}" in (run_dir / "eval.log").read_text()
        saved = tomllib.loads((run_dir / "config.toml").read_text())
        assert saved["run"]["sandbox"]["pull"] == "missing"
    finally:
        untag(image)
