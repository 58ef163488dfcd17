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
- ``{"op": "counters"}``: the refusal counters, read and zeroed;
- ``{"op": "forward", "listen": [[proto, port, socket], ...]}``: an ``allowlist`` trial's
  egress proxy and DNS responder brought into the namespace. The harness serves them on
  unix sockets in a dir of its own, bind-mounted read-only at :data:`EGRESS_MOUNT` (the
  holder's only mount); the holder listens on the namespace's loopback (``127.0.0.1``) and
  relays each TCP connection to its socket as it is, each UDP query (DNS) as a
  length-prefixed query on a stream. Loopback is all an ``allowlist`` phase reaches
  (:mod:`sandbox.docker.netns_rules`), so the proxy and the responder are reachable from
  the trial's namespace and from nowhere else: no TCP or UDP port of the host serves them.
  This needs ``NET_BIND_SERVICE`` (port 53, where ``resolv.conf`` sends the trial's
  queries) and ``DAC_OVERRIDE`` (the harness's 0600 sockets, when the engine's root is
  not the harness's user), in the holder only.

Nothing in the trial can reach that process: it shares only the network namespace, not
the pid or IPC namespace, and listens on nothing but those relays.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from docker.types import Mount

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
#: Where the holder sees the harness's dir of an allowlist trial's proxy sockets.
EGRESS_MOUNT = "/run/harness-egress"
#: The in-namespace ports of an allowlist trial's proxy and DNS responder (loopback).
PROXY_PORT = 3128
DNS_PORT = 53
#: A holder that forwards: its relays' threads (two per TCP connection) under the pids cap.
_FORWARD_PIDS = 256
_PROGRAM = r"""
import json, os, socket, struct, subprocess, sys, threading
threading.stack_size(262144)
SLOTS = threading.BoundedSemaphore(96)

def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass

def relay(conn, path):
    up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        up.connect(path)
        back = threading.Thread(target=pump, args=(up, conn), daemon=True)
        back.start()
        pump(conn, up)
        back.join()
    except (OSError, RuntimeError):
        pass
    finally:
        up.close()
        conn.close()
        SLOTS.release()

def exactly(sock, size):
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise OSError("closed")
        data += chunk
    return data

def query(udp, data, peer, path):
    up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        up.settimeout(15)
        up.connect(path)
        up.sendall(struct.pack("!H", len(data)) + data)
        (size,) = struct.unpack("!H", exactly(up, 2))
        udp.sendto(exactly(up, size), peer)
    except OSError:
        pass
    finally:
        up.close()
        SLOTS.release()

def start(target, args):
    try:
        threading.Thread(target=target, args=args, daemon=True).start()
        return True
    except RuntimeError:
        return False

def serve_tcp(listener, path):
    while True:
        conn, _ = listener.accept()
        if not (SLOTS.acquire(blocking=False) and start(relay, (conn, path))):
            conn.close()

def serve_udp(udp, path):
    while True:
        data, peer = udp.recvfrom(4096)
        if SLOTS.acquire(blocking=False) and not start(query, (udp, data, peer, path)):
            SLOTS.release()

def forward(listen):
    served = []
    for proto, port, path in listen:
        if proto == "tcp":
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
            sock.listen(128)
            served.append((serve_tcp, sock, path))
        else:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind(("127.0.0.1", port))
            served.append((serve_udp, sock, path))
    for serve, sock, path in served:
        threading.Thread(target=serve, args=(sock, path), daemon=True).start()
    return {"rc": 0}

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
        elif op == "forward":
            answer = forward(req["listen"])
        else:
            answer = {"rc": 2, "out": "unknown op %r" % (op,)}
    except Exception as exc:
        answer = {"rc": 2, "out": "%s: %s" % (type(exc).__name__, exc)}
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
"""


def create_args(
    image: str,
    *,
    name: str,
    network: str,
    labels: dict[str, str],
    dns: list[str] | None = None,
    egress_dir: str | None = None,
    extra_hosts: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The keyword arguments of ``containers.create`` for a holder (pure).

    ``egress_dir``: the harness's dir of an allowlist trial's proxy sockets, mounted
    read-only at :data:`EGRESS_MOUNT` for the holder's relays (see the module's doc).
    ``extra_hosts``: a compose task's sidecars by name: the trial's container shares the
    holder's ``/etc/hosts`` (an engine refuses host entries on a joined namespace).
    """
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
    if extra_hosts:
        args["extra_hosts"] = dict(sorted(extra_hosts.items()))
    if egress_dir is not None:
        args["cap_add"] = ["NET_ADMIN", "NET_BIND_SERVICE", "DAC_OVERRIDE"]
        args["pids_limit"] = _FORWARD_PIDS
        args["mounts"] = [Mount(EGRESS_MOUNT, egress_dir, type="bind", read_only=True)]
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
        egress_dir: str | None = None,
        extra_hosts: dict[str, str] | None = None,
    ) -> NetnsHolder:
        """Create and start a holder on ``network`` (the trial joins it later)."""
        args = create_args(
            image, name=name, network=network, labels=labels, dns=dns, egress_dir=egress_dir,
            extra_hosts=extra_hosts,
        )  # fmt: skip
        container = call(client.containers.create, **args)
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

    def join(self, network: str) -> None:
        """Put the namespace on a second engine network (a compose task's project's).

        Once :meth:`facts` has been read: the engine then answers the namespace's names
        itself (``127.0.0.11``) and its ``resolv.conf`` no longer names the resolvers the
        engine forwards to, which a ``public`` phase must reach.
        """
        call(call(self.client.networks.get, network).connect, self.container)

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

    def forward(self, listen: Sequence[tuple[str, int, str]]) -> None:
        """Relay the namespace's ``127.0.0.1:port`` to a socket of the egress dir.

        Each of ``listen`` is ``(proto, port, socket name)``; bound before this returns.
        """
        self._ask({
            "op": "forward",
            "listen": [[proto, port, f"{EGRESS_MOUNT}/{sock}"] for proto, port, sock in listen],
        })  # fmt: skip

    def refusals(self) -> dict[str, int]:
        """Packets refused since the last call, by reason."""
        return parse_counters(str(self._ask({"op": "counters"}).get("out", "")))

    def remove(self) -> None:
        """Stop the holder and remove its container."""
        self._channel.drop()
        call(self.container.remove, force=True)


__all__ = ["DNS_PORT", "EGRESS_MOUNT", "PROXY_PORT", "HolderFacts", "NetnsHolder", "create_args"]
