"""The local sandbox's networks (issue 24 item 8): every phase in its own network namespace.

Attacks through the real CLI (``harness run --sandbox local``), judged from outside: a
listener of the host on 0.0.0.0 (TCP and UDP, so 127.0.0.1 and the host's own address) and
on ``::``; the record's ``posture``. The agent and the verifier try the host's loopback, its
own address and IPv6 loopback, under every policy a local trial can get: Harbor's default
left unstated, a declared ``no-network``, and a declared ``public`` agent with ``--network
none``. A declared ``public`` without it is refused before any trial, with the reason.
"""

from __future__ import annotations

import json
import secrets
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from support.net import Listener
from support.workers import uid_base

from sandbox.backend import SandboxSpec
from sandbox.errors import PermanentStartError
from sandbox.local.sandbox import IdentityPool, LocalSandbox
from sandbox.network_policy import NetworkPolicy

pytestmark = pytest.mark.root

ATTACK = r"""
python3 - <<'PY' > "$OUT" 2>&1
import json, socket
out = {}
for name, family, addr in (
    ("loopback", socket.AF_INET, ("127.0.0.1", @PORT@)),
    ("host", socket.AF_INET, ("@HOST@", @PORT@)),
    ("loopback6", socket.AF_INET6, ("::1", @PORT@)),
):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect(addr)
        s.sendall(b"@TOKEN@-" + name.encode())
        out[name] = "CONNECTED"
    except OSError as exc:
        out[name] = str(exc)
    s.close()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for target in ("127.0.0.1", "@HOST@"):
    try:
        u.sendto(b"@TOKEN@-udp", (target, @PORT@))
    except OSError as exc:
        out["udp-" + target] = str(exc)
with open("/proc/net/dev") as fh:
    out["interfaces"] = sorted(l.split(":")[0].strip() for l in fh.readlines()[2:])
print(json.dumps(out))
PY
"""


def host_address() -> str:
    """An address of this host other than loopback (the source of its default route)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: the kernel picks a source
        address = str(probe.getsockname()[0])
    assert not address.startswith("127."), address
    return address


def write_task(parent: Path, name: str, network: str, attack: str, verify: str) -> Path:
    task = parent / name
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text(
        f'[task]\nname = "{name}"\n[verifier]\ntimeout_sec = 30\n'
        f"[environment]\ncpus = 1\nmemory_mb = 512\n{network}\n"
    )
    (task / "instruction.md").write_text(f"#!/bin/bash\nOUT=agent-net.json\n{attack}")
    (task / "tests" / "test.sh").write_text(
        f'#!/bin/bash\nOUT="$HARNESS_VERIFIER_DIR/verifier-net.json"\n{verify}\n'
        'echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
    )
    return task


def test_no_local_phase_reaches_the_hosts_listeners(sec: Any, tmp_path: Path) -> None:
    """Attack: connect to the host's 0.0.0.0/:: listener from the agent and the verifier."""
    host = host_address()
    tasks, refused_dir = tmp_path / "tasks", tmp_path / "refused"
    policies = {
        "unsaid": "",
        "offline": 'network_mode = "no-network"',  # [environment]: both phases
        "online": '[agent]\nnetwork_mode = "public"\ntimeout_sec = 30',
    }
    tokens: dict[str, str] = {}
    with Listener(ipv6=True) as listener:
        for label, network in policies.items():
            name = sec.unique(f"net-{label}")
            tokens[name] = f"NET-{secrets.token_hex(10)}"

            def script(token: str) -> str:
                return (
                    ATTACK.replace("@PORT@", str(listener.port))
                    .replace("@HOST@", host)
                    .replace("@TOKEN@", token)
                )

            write_task(tasks, name, network, script(tokens[name]), script(tokens[name] + "v"))
        online = next(name for name in tokens if "net-online" in name)
        write_task(refused_dir, online, policies["online"], "true\n", "true")
        cli = sec.Cli(tmp_path, sandbox="local")
        refused = cli.run([refused_dir], timeout=120)
        run = cli.run([tasks], jobs=3, extra=["--network", "none"], timeout=240)
        # Control: the listener does hear a connection to the host's loopback and address.
        for target in ("127.0.0.1", host):
            with socket.create_connection((target, listener.port), timeout=5) as conn:
                conn.sendall(b"CONTROL-" + target.encode())
        with socket.create_connection(("::1", listener.port), timeout=5) as conn:
            conn.sendall(b"CONTROL-v6")
        for _ in range(50):  # the listener's threads record what they accepted
            if sum(data.startswith(b"CONTROL-") for *_, data in listener.received) >= 3:
                break
            time.sleep(0.1)
    assert refused.code == 2, refused
    assert "the agent phase's network_mode = 'public' cannot be enforced by the local" in (
        refused.stderr
    ), refused
    assert refused.run_dir is None or not refused.records
    assert run.code == 0, run
    heard = b"\n".join(data for _kind, _peer, data in listener.received)
    assert heard.count(b"CONTROL-") == 3, f"control failed: the listener heard {heard!r}"
    for token in tokens.values():
        assert token.encode() not in heard, f"a local phase reached the host: {heard!r}"
    assert "network: 2 task(s) leave a phase's network_mode unstated" in run.stderr, run
    for name in tokens:
        record = run.by_task(name)
        assert record["ok"], record
        evidence = run.evidence(record)
        agent = json.loads((evidence / "workspace" / "agent-net.json").read_text())
        verifier = json.loads((evidence / "verifier" / "verifier-net.json").read_text())
        for report in (agent, verifier):
            assert report["interfaces"] == ["lo"], report
            assert "CONNECTED" not in report.values(), report
        # --network none is the user's own declaration, for every agent phase.
        assert record["posture"]["network"] == {"mode": "no-network", "declared": True}
        # Only the offline task states its verifier's network; the others get Harbor's
        # public, which the local sandbox cannot enforce: no-network, undeclared.
        stated = "net-offline" in name
        assert record["verifier_posture"]["network"] == {"mode": "no-network", "declared": stated}


@pytest.mark.parametrize(
    "networks",
    [
        {"verifier": NetworkPolicy("public")},
        {"agent": NetworkPolicy("allowlist", ("pypi.org",))},
        {"agent": NetworkPolicy("public", declared=False)},
    ],
)
def test_a_local_sandbox_with_an_internet_phase_never_starts(networks: Any) -> None:
    """Defence in depth: a spec asking for the internet is refused by the sandbox itself."""
    spec = SandboxSpec(trial_id=f"net-{secrets.token_hex(4)}", networks=networks)
    sandbox = LocalSandbox(
        spec, identities=IdentityPool(uid_base(1_700_000_000), uid_base(1_700_000_000))
    )
    with pytest.raises(PermanentStartError, match="the local sandbox gives a phase loopback"):
        sandbox.start()


def test_a_local_sandbox_with_a_later_steps_internet_phase_never_starts() -> None:
    """Every step's phases are checked up front: the first step's alone would pass."""
    closed = {"agent": NetworkPolicy("no-network"), "verifier": NetworkPolicy("no-network")}
    spec = SandboxSpec(
        trial_id=f"net-{secrets.token_hex(4)}",
        networks=closed,
        step_networks=(closed, {**closed, "agent": NetworkPolicy("public")}),
    )
    sandbox = LocalSandbox(
        spec, identities=IdentityPool(uid_base(1_700_000_000), uid_base(1_700_000_000))
    )
    with pytest.raises(PermanentStartError, match="step 1: the agent phase's network_mode"):
        sandbox.start()
