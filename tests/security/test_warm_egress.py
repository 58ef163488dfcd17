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

import json
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.net import Listener, primary_addresses
from support.netns import PublicNet
from support.users import docker_group_user, run_args, user_harness

pytestmark = [pytest.mark.docker, pytest.mark.root]

ROOTFUL_HOST = "unix:///var/run/docker.sock"
TRIALS = 3
AGENT = r"""
import json, socket, sys
token, targets = sys.argv[1], json.loads(sys.argv[2])
out = {}
for name, host, port in targets:
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect((host, port)); s.sendall(token.encode()); out[name] = "tcp"
    except OSError as exc:
        out[name] = type(exc).__name__
    finally:
        s.close()
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        u.sendto(token.encode(), (host, port))
    except OSError:
        pass
open("net.json", "w").write(json.dumps(out))
"""
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


def _task(root: Path, token: str, targets: list[tuple[str, str, int]], public: str) -> Path:
    task = root / "tasks" / "public"
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text(
        '[task]\nname = "warm/public"\n'
        '[agent]\ntimeout_sec = 120\nnetwork_mode = "public"\n'
        '[verifier]\ntimeout_sec = 60\nnetwork_mode = "no-network"\n'
    )
    (task / "instruction.md").write_text(
        f"python3 - {token} '{json.dumps(targets)}' <<'AGENT'\n{AGENT}AGENT\n"
    )
    (task / "tests" / "verify.py").write_text(VERIFIER)
    (task / "tests" / "test.sh").write_text(f"python3 /tests/verify.py {token} {public}\n")
    return root / "tasks"


def _records(out: Path) -> list[dict[str, Any]]:
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    lines = (run_dir / "trials.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.mark.parametrize("where", ["docker-group", "root"])
def test_a_warm_containers_network_filters_the_trial_that_takes_it(
    where: str, public_net: PublicNet, tmp_path: Path
) -> None:
    public = public_net.route()
    private = public_net.route(f"10.232.{secrets.randbelow(250) + 2}.{secrets.randbelow(250) + 2}")
    token = secrets.token_hex(8)
    user = user_harness(docker_group_user()) if where == "docker-group" else None
    work = user.workdir() if user is not None else tmp_path
    with Listener(ipv6=True) as listener:
        targets = [
            ("public", public, 8443),
            ("private", private, 8443),
            ("host-primary", primary_addresses()["ipv4"], listener.port),
            ("docker0", "172.17.0.1", listener.port),
        ]
        tasks = _task(work, token, targets, public)
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
        host_got = [r for r in listener.received if token.encode() in r[2]]
    assert result.returncode == 0, result.stderr
    records = _records(work / "out")
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
