"""The container that owns a docker trial's network namespace and writes its rules.

A :class:`NetnsHolder` is a small container of the base image (which ships ``iptables``),
made through the engine's API with every capability dropped but ``NET_ADMIN``, a read-only
root, no mounts and a pids cap. Its namespace is the trial's: the trial's container joins it
(``network_mode="container:<holder id>"``) without any network capability, so the rules the
holder writes (:mod:`sandbox.docker.netns_rules`) hold whatever runs in the trial, root
agents included, and whatever the harness's own privileges on the engine's host are.

The holder's only process reads requests on its stdin, one JSON object a line, from the
harness (attached to it as the supervisor is), and answers each on its stdout:

- ``{"op": "facts"}``: the namespace's gateway and on-link subnets (``/proc/net/route``)
  and resolvers (``/etc/resolv.conf``);
- ``{"op": "load", "v4": ..., "v6": ...}``: ``iptables-restore`` and ``ip6tables-restore``;
- ``{"op": "switch", "args": [...]}``: one ``iptables`` call (the phase's chain);
- ``{"op": "counters"}``: the refusal counters, read and zeroed.

Nothing in the trial can reach that process: it shares only the network namespace, not
the pid or IPC namespace, and listens on nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sandbox.docker.channel import ExecChannel
from sandbox.docker.netns_rules import (
    NetFacts,
    NetPlan,
    parse_counters,
    ruleset,
    switch_args,
)
from sandbox.docker.sdk import call
from sandbox.errors import SandboxError

#: How long one request may take (a load of every chain, or a switch).
_TIMEOUT_SEC = 30.0
_PROGRAM = r"""
import json, subprocess, sys

def run(argv, data=None):
    done = subprocess.run(argv, input=data, capture_output=True, text=True)
    text = done.stdout if done.returncode == 0 else done.stderr
    return {"rc": done.returncode, "out": text[-(1 << 20):]}

def hexip(text):
    raw = bytes.fromhex(text)[::-1]
    return ".".join(str(b) for b in raw)

def facts():
    gateway, subnets = None, []
    with open("/proc/net/route") as routes:
        next(routes)
        for line in routes:
            f = line.split()
            dest, gw, mask = hexip(f[1]), hexip(f[2]), hexip(f[7])
            if dest == "0.0.0.0" and mask == "0.0.0.0":
                gateway = gw
            elif gw == "0.0.0.0":
                bits = sum(bin(int(p)).count("1") for p in mask.split("."))
                subnets.append("%s/%d" % (dest, bits))
    resolvers = []
    try:
        with open("/etc/resolv.conf") as conf:
            for line in conf:
                f = line.split()
                if len(f) >= 2 and f[0] == "nameserver":
                    resolvers.append(f[1])
    except OSError:
        pass
    return {"rc": 0, "gateway": gateway, "subnets": subnets, "resolvers": resolvers}

for line in sys.stdin:
    try:
        req = json.loads(line)
        op = req.get("op")
        if op == "facts":
            answer = facts()
        elif op == "load":
            answer = run(["iptables-restore", "-w"], req["v4"])
            if answer["rc"] == 0:
                answer = run(["ip6tables-restore", "-w"], req["v6"])
        elif op == "switch":
            answer = run(["iptables"] + [str(a) for a in req["args"]])
        elif op == "counters":
            answer = run(["iptables", "-w", "-L", "-v", "-x", "-n", "-Z"])
        else:
            answer = {"rc": 2, "out": "unknown op %r" % (op,)}
    except Exception as exc:
        answer = {"rc": 2, "out": "%s: %s" % (type(exc).__name__, exc)}
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
"""


def create_args(
    image: str, *, name: str, network: str, labels: dict[str, str], dns: list[str] | None = None
) -> dict[str, Any]:
    """The keyword arguments of ``containers.create`` for a holder (pure)."""
    args: dict[str, Any] = {
        "image": image,
        "name": name,
        "command": ["python3", "-I", "-S", "-c", _PROGRAM],
        "entrypoint": [],
        "user": "0:0",
        "stdin_open": True,
        "network": network,
        "hostname": "sandbox",
        "labels": labels,
        "cap_drop": ["ALL"],
        "cap_add": ["NET_ADMIN"],
        "security_opt": ["no-new-privileges"],
        "read_only": True,
        "pids_limit": 32,
        "mem_limit": "64m",
        "working_dir": "/",
        "environment": {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"},
        # No IPv6 address in the namespace at all; the rules drop IPv6 whatever is left.
        "sysctls": {"net.ipv6.conf.all.disable_ipv6": "1"},
    }
    if dns:
        args["dns"] = dns
    return args


@dataclass
class HolderFacts:
    """What the holder saw of its namespace."""

    gateway: str | None
    subnets: tuple[str, ...]
    resolvers: tuple[str, ...]


class NetnsHolder:
    """One trial's network namespace: its holder container and its control channel."""

    def __init__(self, client: Any, container: Any, channel: ExecChannel) -> None:
        self.client = client
        self.container = container
        self._channel = channel
        self.chain: str | None = None

    @classmethod
    def start(
        cls,
        client: Any,
        image: str,
        *,
        name: str,
        network: str,
        labels: dict[str, str],
        dns: list[str] | None = None,
    ) -> NetnsHolder:
        """Create and start a holder on ``network`` (the trial joins it later)."""
        container = call(
            client.containers.create,
            **create_args(image, name=name, network=network, labels=labels, dns=dns),
        )
        try:
            raw = call(
                client.api.attach_socket,
                container.id,
                params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1},
            )
            channel = ExecChannel(raw)
            call(container.start)
        except BaseException:
            call(container.remove, force=True)
            raise
        return cls(client, container, channel)

    @property
    def network_mode(self) -> str:
        """What the trial's container is created with to join this namespace."""
        return f"container:{self.container.id}"

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        self._channel.write((json.dumps(request) + "\n").encode())
        if not self._channel.wait_line(_TIMEOUT_SEC):
            raise SandboxError(f"the network namespace holder did not answer {request['op']!r}")
        line = self._channel.readline()
        if not line:
            raise SandboxError(
                "the network namespace holder is gone: "
                f"{self._channel.stderr.strip()[-500:] or 'no output'}"
            )
        answer: dict[str, Any] = json.loads(line)
        if answer.get("rc") != 0:
            raise SandboxError(
                f"the network namespace holder's {request['op']} failed: "
                f"{str(answer.get('out', '')).strip()[-500:]}"
            )
        return answer

    def facts(self) -> HolderFacts:
        """The namespace's gateway, on-link subnets and resolvers, as the holder sees them."""
        answer = self._ask({"op": "facts"})
        return HolderFacts(
            gateway=answer.get("gateway"),
            subnets=tuple(answer.get("subnets") or ()),
            resolvers=tuple(answer.get("resolvers") or ()),
        )

    def load(self, plan: NetPlan, facts: NetFacts) -> None:
        """Write every chain of the trial's plan; the namespace starts closed."""
        v4, v6 = ruleset(plan, facts)
        self._ask({"op": "load", "v4": v4, "v6": v6})
        self.chain = None

    def switch(self, chain: str) -> None:
        """Send the namespace's traffic to ``chain`` (a phase's)."""
        if chain != self.chain:
            self._ask({"op": "switch", "args": switch_args(chain)})
            self.chain = chain

    def refusals(self) -> dict[str, int]:
        """Packets refused since the last call, by reason."""
        return parse_counters(str(self._ask({"op": "counters"}).get("out", "")))

    def remove(self) -> None:
        """Stop the holder and remove its container."""
        self._channel.drop()
        call(self.container.remove, force=True)


__all__ = ["HolderFacts", "NetnsHolder", "create_args"]
