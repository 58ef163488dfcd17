"""A ``public`` task whose agent probes where its packets go, and its verifier after it.

The egress tests run without root (``tests/security/test_egress_without_root.py``) and with a
warm container (``test_warm_egress.py``) attack the filter the same way: the agent phase
(``public``) connects, by TCP and UDP, to each target the test names (the host listener's
addresses, a private address and a public-like one routed into a network namespace the test
makes), sending a token; the ``no-network`` verifier then tries the public-like server
itself and grades what the agent reached. Each test brings its own verifier script; the
verdict is read from the run's ``trials.jsonl``.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

from support.net import Listener, primary_addresses

#: The rootful engine's socket, as the harness's ``--docker-host``.
ROOTFUL_HOST = "unix:///var/run/docker.sock"

#: The agent (``python3 - TOKEN TARGETS``): each ``[name, host, port]`` of TARGETS gets the
#: token by TCP and by UDP; ``net.json`` says, by name, ``tcp`` or the connect's error.
PROBE_AGENT = r"""
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


def private_address(second_octet: int) -> str:
    """A random address of ``10.<second_octet>.0.0/16`` (a test's own, to route and to try)."""
    return f"10.{second_octet}.{secrets.randbelow(250) + 2}.{secrets.randbelow(250) + 2}"


def host_targets(listener: Listener) -> list[tuple[str, str, int]]:
    """The host listener through the host's primary IPv4 address and through docker0."""
    return [
        ("host-primary", primary_addresses()["ipv4"], listener.port),
        ("docker0", "172.17.0.1", listener.port),
    ]


def token_packets(listener: Listener, token: str) -> list[tuple[str, str, bytes]]:
    """What the host listener received that carries ``token`` (the agent's, the verifier's)."""
    return [got for got in listener.received if token.encode() in got[2]]


def probe_task(
    root: Path,
    name: str,
    token: str,
    targets: list[tuple[str, str, int]],
    public: str,
    verifier: str,
) -> Path:
    """Write the task ``root/tasks/public`` (named ``name``); return its task set, ``root/tasks``.

    Args:
        root: Where the task set goes.
        name: The task's name in its task.toml.
        token: What the agent sends each target (and the verifier sends after ``VERIFIER``).
        targets: ``(name, host, port)`` for :data:`PROBE_AGENT`.
        public: The public-like address, the verifier script's second argument.
        verifier: The verifier's Python script (``verify.py TOKEN PUBLIC``): it writes the
            reward to ``$HARNESS_VERIFIER_DIR/reward.txt``.
    """
    task = root / "tasks" / "public"
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text(
        f'[task]\nname = "{name}"\n'
        '[agent]\ntimeout_sec = 120\nnetwork_mode = "public"\n'
        '[verifier]\ntimeout_sec = 60\nnetwork_mode = "no-network"\n'
    )
    (task / "instruction.md").write_text(
        f"python3 - {token} '{json.dumps(targets)}' <<'AGENT'\n{PROBE_AGENT}AGENT\n"
    )
    (task / "tests" / "verify.py").write_text(verifier)
    (task / "tests" / "test.sh").write_text(f"python3 /tests/verify.py {token} {public}\n")
    return root / "tasks"


def read_records(out: Path) -> list[dict[str, Any]]:
    """The trial records of the one run dir under the CLI's ``out``."""
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    lines = (run_dir / "trials.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]
