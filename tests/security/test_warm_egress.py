"""A warm container's network, made ahead of its trial, filters that trial as its own would.

The warm pool (:mod:`sandbox.docker.warm`) starts the next trial's container while trials
run, and with it its network: where the harness is not root, the namespace's holder with
every phase's rules (:mod:`sandbox.docker.netns_holder`); as root, the host filter's closed
chain (:mod:`sandbox.docker.egress`). Three trials of one ``public`` task run one at a time
(once the shape repeats, at the second, a container is made ahead for the third), attacked
through the real CLI and judged from outside, as a docker-group user and as root:

- each ``public`` agent connects, by TCP and UDP, to a host listener through the host's
  primary address and docker0, and to a private address routed into a network namespace
  the test makes; it reaches a public-like address there (the control);
- the ``no-network`` verifier after it reaches nothing;
- the servers saw only the controls' packets; every record is attempt 1 with the honest
  reward, says which filter held (``sandbox.egress``) and that a warm container served it
  (``sandbox.warm``), with its refusals; each namespaced trial had a holder of its own.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
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
from support.users import docker_group_user, run_args, user_harness

pytestmark = [pytest.mark.docker, pytest.mark.root]

TRIALS = 3
VERIFIER = r"""
import json, os, socket, sys
token, public = sys.argv[1], sys.argv[2]
reached = []
s = socket.socket(); s.settimeout(3)
try:
    s.connect((public, 8443)); s.sendall(("VERIFIER" + token).encode()); reached.append(8443)
except OSError:
    pass
verdict = json.load(open("net.json"))
ok = verdict.get("public") == "tcp" and not reached and all(
    v != "tcp" for k, v in verdict.items() if k != "public")
open(os.environ["HARNESS_VERIFIER_DIR"] + "/reward.txt", "w").write("1" if ok else "0")
"""


@pytest.fixture
def public_net(tmp_path: Path) -> Iterator[PublicNet]:
    with PublicNet(tmp_path) as net:
        yield net


@pytest.mark.parametrize("where", ["docker-group", "root"])
def test_a_warm_containers_network_filters_the_trial_that_takes_it(
    where: str, public_net: PublicNet, tmp_path: Path
) -> None:
    public = public_net.route()
    private = public_net.route(private_address(232))
    token = secrets.token_hex(8)
    user = user_harness(docker_group_user()) if where == "docker-group" else None
    work = user.workdir() if user is not None else tmp_path
    with Listener(ipv6=True) as listener:
        targets = [("public", public, 8443), ("private", private, 8443), *host_targets(listener)]
        tasks = probe_task(work, "warm/public", token, targets, public, VERIFIER)
        args = run_args(
            tasks, work / "out", "--agent", "command", "--agent-cmd", "bash {instruction_file}",
            "--rollouts", str(TRIALS), "-j", "1",
        )  # fmt: skip
        if user is not None:
            user.give(work)
            result = user.cli(*args, docker_host=ROOTFUL_HOST)
        else:
            result = subprocess.run(
                [sys.executable, "-m", "harness", *args],
                capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        host_got = token_packets(listener, token)
    assert result.returncode == 0, result.stderr
    records = read_records(work / "out")
    seen = public_net.seen()
    assert not host_got, host_got
    assert "VERIFIER" + token not in seen, seen
    assert len(records) == TRIALS, records
    egress = "namespace" if where == "docker-group" else "host"
    for record in records:
        assert record["status"] == "completed" and record["attempt"] == 1, record
        assert record["reward"] == 1, record
        assert record["sandbox"]["egress"] == egress, record["sandbox"]
        refused = {e["refused"] for e in record.get("events", []) if e["type"] == "network_refused"}
        assert "private" in refused, refused
        assert "closed" in refused, refused  # the verifier's attempt, in its own phase
    assert any(r["sandbox"]["warm"] for r in records), records
    if egress == "namespace":
        holders = {r["sandbox"]["egress_namespace"] for r in records}
        assert len(holders) == TRIALS, holders
