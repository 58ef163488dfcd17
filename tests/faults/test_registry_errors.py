"""A registry's failure is the image's, never an engine outage: not rerun, not retried.

Real components on 127.0.0.1: a registry port where nothing listens (the engine's pull
answers "connection refused" in its own words), and a registry that answers 500 to
everything. The engine answers its ping throughout, so the run must not take either for an
outage: each trial fails once, its ``ImagePullError`` marked ``retryable: false``, with no
rerun ("no retry spent") and no retry, though ``retry.max_retries`` allows two.
"""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.faults import Cli, assert_no_traceback, records, run_args

pytestmark = [pytest.mark.docker, pytest.mark.serial]


class _Answers500(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(500)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_GET

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def failing_registry() -> Iterator[int]:
    """The port of a registry on 127.0.0.1 that answers 500 to every request."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers500)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _refusing_port() -> int:
    """A port on 127.0.0.1 where nothing listens (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _image_task(root: Path, name: str, image: str) -> None:
    task = root / name
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text(
        f'[task]\nname = "faults/{name}"\n[environment]\ndocker_image = "{image}"\n'
    )
    (task / "instruction.md").write_text("true\n")
    (task / "tests" / "test.sh").write_text('echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n')


def test_a_registry_refusing_or_failing_is_the_images_failure_not_an_outage(
    cli: Cli, failing_registry: int, tmp_path: Path
) -> None:
    refused = f"127.0.0.1:{_refusing_port()}/harness-test/refused:v1"
    failing = f"127.0.0.1:{failing_registry}/harness-test/failing:v1"
    tasks = tmp_path / "tasks"
    _image_task(tasks, "refused", refused)
    _image_task(tasks, "failing", failing)
    run_dir = tmp_path / "runs" / "registry"
    result = cli.run(
        *run_args(tasks, tmp_path / "runs", "registry", "--set", "retry.max_retries=2"),
        timeout=300,
    )

    assert result.code == 1, result  # trials failed; the run itself did not
    assert_no_traceback(result)
    assert "unreachable" not in result.output, result
    found = {r["task"]["name"]: r for r in records(run_dir)}
    assert sorted(found) == ["faults/failing", "faults/refused"], found
    for name, image in (("faults/refused", refused), ("faults/failing", failing)):
        record = found[name]
        assert record["status"] == "environment_error", record
        assert record["previous_attempts"] == [], record
        [error] = record["errors"]
        assert error["type"] == "ImagePullError" and error["retryable"] is False, error
        assert f"image {image} is not present locally and could not be pulled" in error["message"]
    assert "connection refused" in found["faults/refused"]["errors"][0]["message"]
    log = (run_dir / "eval.log").read_text()
    assert "no retry spent" not in log and "engine" not in log.lower().replace(
        "docker engine", ""
    ), log
