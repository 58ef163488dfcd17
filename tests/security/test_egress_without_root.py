"""Where the harness is not root, a ``public`` phase is filtered in the trial's own namespace.

The harness runs as a member of the ``docker`` group against the rootful engine, as the
rootless engine's own user against it (``docker/start-rootless-engine.sh``), and in the CI
image with the rootful engine's socket mounted (``support.ci_image``: root, but in a
container of its own with no network). None can install the host egress filter, so each
trial's network namespace is owned by a holder container that writes its rules
(:mod:`sandbox.docker.netns_holder`). Attacked through the real CLI, judged from outside:

- a ``public`` agent connects, by TCP and UDP, to a host listener on ``0.0.0.0`` and ``::``
  through its namespace's gateway and the host's primary IPv4 address, to a private
  address and (rootful) the metadata address routed into a network namespace the test
  makes, and reaches a public-like address there (the control);
- the ``no-network`` verifier after it reaches nothing;
- the servers saw only the control's packets; the record says the namespace filter held
  (``sandbox.egress``) and lists each refusal; the host's firewall holds none of its rules.
"""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.ci_image import ci_cli
from support.net import Listener
from support.netns import PublicNet
from support.public_probe import (
    ROOTFUL_HOST,
    host_targets,
    private_address,
    probe_task,
    read_records,
    token_packets,
)
from support.users import (
    ROOTLESS_HOST,
    ROOTLESS_USER,
    docker_group_user,
    rootless_engine,
    run_args,
    user_harness,
)

pytestmark = [pytest.mark.docker, pytest.mark.root]

VERIFIER = r"""
import json, os, socket, sys
token, public = sys.argv[1], sys.argv[2]
reached = []
for port in (80, 8443):
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect((public, port)); s.sendall(("VERIFIER" + token).encode()); reached.append(port)
    except OSError:
        pass
print(json.dumps({"verifier_reached": reached}))
verdict = json.load(open("net.json"))
ok = verdict.get("public") == "tcp" and not reached
open(os.environ["HARNESS_VERIFIER_DIR"] + "/reward.txt", "w").write("1" if ok else "0")
"""


@pytest.fixture
def public_net(tmp_path: Path) -> Iterator[PublicNet]:
    with PublicNet(tmp_path) as net:
        yield net


@pytest.mark.parametrize("where", ["docker-group", "rootless", "ci-image"])
def test_a_public_phase_without_root_reaches_the_internet_and_nothing_of_the_host(
    where: str, public_net: PublicNet, tmp_path: Path
) -> None:
    user = None
    if where == "rootless":
        host, user = rootless_engine(), user_harness(ROOTLESS_USER)
        assert host == ROOTLESS_HOST
    elif where == "docker-group":
        host, user = ROOTFUL_HOST, user_harness(docker_group_user())
    public = public_net.route()
    private = public_net.route(private_address(231))
    token = secrets.token_hex(8)
    work = user.workdir() if user is not None else tmp_path / "ci"
    with Listener(ipv6=True) as listener:
        targets: list[tuple[str, str, int]] = [
            ("public", public, 8443),
            ("private", private, 8443),
            *host_targets(listener),
            ("rootless-host", "10.0.2.2", listener.port),
        ]
        if where != "rootless":
            metadata = public_net.route("169.254.169.254", containers_only=True)
            targets.append(("metadata", metadata, 80))
        tasks = probe_task(work, "noroot/public", token, targets, public, VERIFIER)
        args = run_args(tasks, work / "out", "--agent", "command", "--agent-cmd",
                        "bash {instruction_file}")  # fmt: skip
        if user is None:
            result = ci_cli(work, *args, timeout=600)
        else:
            user.give(work)
            result = user.cli(*args, docker_host=host)
        host_got = token_packets(listener, token)
    assert result.returncode == 0, result.stderr
    (record,) = read_records(work / "out")
    seen = public_net.seen()
    # From outside: the control reached the public-like server; nothing else got anything.
    assert f"tcp8443 {token}" in seen or token in seen, seen
    assert not host_got, host_got
    assert "VERIFIER" + token not in seen, seen
    assert record["status"] == "completed" and record["attempt"] == 1, record
    assert record["reward"] == 1, record
    assert record["sandbox"]["egress"] == "namespace", record["sandbox"]
    refused = {e["refused"] for e in record.get("events", []) if e["type"] == "network_refused"}
    assert "private" in refused, refused
    assert refused & {"host", "gateway", "host-subnet"}, refused
    assert "closed" in refused, refused  # the verifier's attempts, counted in its phase
    firewall = "".join(
        subprocess.run([tool], capture_output=True, text=True).stdout
        for tool in ("iptables-save", "ip6tables-save")
    )
    assert "HXN-" not in firewall
