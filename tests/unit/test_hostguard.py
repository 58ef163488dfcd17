"""When the host can be shielded from a compose network, and the refusal when it cannot."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from sandbox.docker import hostguard
from sandbox.docker.compose import ComposeProject
from sandbox.docker.hostguard import HostGuardUnavailable, bridge_name, refusal


def _client(base_url: str, socket_path: str | None = None) -> SimpleNamespace:
    """What :func:`hostguard.problem` reads of a docker-py client."""
    adapter = SimpleNamespace(socket_path=socket_path)
    return SimpleNamespace(api=SimpleNamespace(base_url=base_url, _custom_adapter=adapter))


def test_bridge_names_fit_linux_and_are_deterministic() -> None:
    name = bridge_name("harness-some-trial-abcdef")
    assert len(name) <= 15 and name.startswith(hostguard.BRIDGE_PREFIX)
    assert name == bridge_name("harness-some-trial-abcdef") != bridge_name("harness-other")


def test_a_remote_engine_cannot_be_shielded() -> None:
    reason = hostguard.problem(_client("http://10.1.2.3:2375"))
    assert reason is not None and "not on this host's unix socket" in reason
    message = refusal(reason)
    assert 'sandbox.compose_host_access = "allow"' in message and "insecure" in message


@pytest.mark.root
def test_an_engine_in_another_network_namespace_cannot_be_shielded(tmp_path: Path) -> None:
    """A unix socket served from another network namespace (as a rootless or VM engine)."""
    path = tmp_path / "engine.sock"
    server = subprocess.Popen(
        ["unshare", "--net", sys.executable, "-c",
         "import socket, sys, time\n"
         "s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(4)\n"
         "time.sleep(60)\n", str(path)],
    )  # fmt: skip
    try:
        for _ in range(100):
            if path.exists():
                break
            time.sleep(0.05)
        reason = hostguard.problem(_client("http+docker://localhost", str(path)))
        assert reason is not None and "another network namespace" in reason, reason
        # The same check, served from this namespace, passes.
        with socket.socket(socket.AF_UNIX) as own:
            own.bind(str(tmp_path / "own.sock"))
            own.listen(4)
            assert hostguard.problem(_client("http+docker://localhost", own.getsockname())) is None
    finally:
        server.kill()
        server.wait()


def test_compose_sidecars_are_refused_before_anything_starts(tmp_path: Path) -> None:
    (tmp_path / "docker-compose.yaml").write_text(
        "services:\n  side:\n    image: harness/base:bookworm\n"
    )
    project = ComposeProject(
        tmp_path / "docker-compose.yaml",
        trial_id="t.r0",
        labels={},
        allow_internet=False,
        main_image="harness/base:bookworm",
        build_timeout_sec=None,
        host_problem="the engine is remote",
        allow_host_access=False,
    )
    try:
        with pytest.raises(HostGuardUnavailable, match="the engine is remote"):
            project.up()
        assert not project.started
        assert project.describe()["host_exposed"] == "the engine is remote"
    finally:
        project.down()
