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

import json
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.ci_image import ci_cli
from support.net import Listener, primary_addresses
from support.netns import PublicNet
from support.users import (
    ROOTLESS_HOST,
    ROOTLESS_USER,
    docker_group_user,
    rootless_engine,
    run_args,
    user_harness,
)

pytestmark = [pytest.mark.docker, pytest.mark.root]

ROOTFUL_HOST = "unix:///var/run/docker.sock"
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


def _task(root: Path, token: str, targets: list[tuple[str, str, int]], public: str) -> Path:
    task = root / "tasks" / "public"
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text(
        '[task]\nname = "noroot/public"\n'
        '[agent]\ntimeout_sec = 120\nnetwork_mode = "public"\n'
        '[verifier]\ntimeout_sec = 60\nnetwork_mode = "no-network"\n'
    )
    (task / "instruction.md").write_text(
        f"python3 - {token} '{json.dumps(targets)}' <<'AGENT'\n{AGENT}AGENT\n"
    )
    (task / "tests" / "verify.py").write_text(VERIFIER)
    (task / "tests" / "test.sh").write_text(f"python3 /tests/verify.py {token} {public}\n")
    return root / "tasks"


def _record(out: Path) -> dict[str, Any]:
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    (line,) = (run_dir / "trials.jsonl").read_text().splitlines()
    record: dict[str, Any] = json.loads(line)
    return record


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
    private = public_net.route(f"10.231.{secrets.randbelow(250) + 2}.{secrets.randbelow(250) + 2}")
    token = secrets.token_hex(8)
    work = user.workdir() if user is not None else tmp_path / "ci"
    with Listener(ipv6=True) as listener:
        targets: list[tuple[str, str, int]] = [
            ("public", public, 8443),
            ("private", private, 8443),
            ("host-primary", primary_addresses()["ipv4"], listener.port),
            ("docker0", "172.17.0.1", listener.port),
            ("rootless-host", "10.0.2.2", listener.port),
        ]
        if where != "rootless":
            metadata = public_net.route("169.254.169.254", containers_only=True)
            targets.append(("metadata", metadata, 80))
        tasks = _task(work, token, targets, public)
        args = run_args(tasks, work / "out", "--agent", "command", "--agent-cmd",
                        "bash {instruction_file}")  # fmt: skip
        if user is None:
            result = ci_cli(work, *args, timeout=600)
        else:
            user.give(work)
            result = user.cli(*args, docker_host=host)
        host_got = [r for r in listener.received if token.encode() in r[2]]
    assert result.returncode == 0, result.stderr
    record = _record(work / "out")
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
