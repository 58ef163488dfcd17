"""Host firewall rules that keep a compose network's containers off the host's own services.

Docker's ``internal`` network only stops *forwarding* (the FORWARD chain): a packet a
container addresses to the host itself — the network's gateway, ``docker0``, the host's
primary address — goes through the host's INPUT chain and reaches any service bound to
``0.0.0.0`` (Ray's ports, a registry, a database). So for each compose network the harness
creates, it inserts one rule per address family at the top of INPUT (in the ``mangle``
table, :mod:`sandbox.docker.netfilter`, which runs before ``filter``'s)::

    -i <bridge> -m comment --comment harness-hostguard:<run>:<bridge> -j DROP

before any container starts: the bridge is named by the harness
(``com.docker.network.bridge.name``, :func:`bridge_name`), so the rule can exist before the
interface does. Nothing from the bridge is accepted by the host, not even replies: the
harness never connects to a container over its network (it uses the engine's API). Traffic
between the network's containers is bridged, never INPUT, and is unaffected.

Only rules carrying the tag are ever inserted or deleted (by their full spec, never by
position); existing rules are never listed for rewriting or flushed. The tag names the run
(10 hex of its name), so :func:`sweep` removes a dead run's leftovers, and only those whose
bridge no longer exists (a live network keeps its rule).

The rules need root, ``iptables``, and an engine in this host's network namespace
(:func:`problem` says what is missing).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import socket
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox.docker import netfilter
from sandbox.errors import PermanentStartError, SandboxError
from sandbox.host_tools import failure_detail

TAG = "harness-hostguard"
#: A harness compose bridge: ``hxc`` + 12 hex (Linux names have at most 15 characters).
BRIDGE_PREFIX = "hxc"
DEFAULT_SOCKET = "/var/run/docker.sock"
_RULE = re.compile(rf'--comment "?({TAG}:([0-9a-f]{{10}}):({BRIDGE_PREFIX}[0-9a-f]{{12}}))"?')


class HostGuardUnavailable(PermanentStartError):
    """The host's services cannot be shielded from a compose network (the reason says why)."""


def bridge_name(project: str) -> str:
    """The Linux bridge of the compose project ``project``'s network (15 characters)."""
    return f"{BRIDGE_PREFIX}{hashlib.sha256(project.encode()).hexdigest()[:12]}"


def run_tag(run: str) -> str:
    """What every rule of the run ``run`` carries in its comment."""
    return f"{TAG}:{hashlib.sha256(run.encode()).hexdigest()[:10]}"


def _tools() -> list[str]:
    """The tables to guard: IPv4 always, IPv6 where the host has it."""
    return ["iptables", "ip6tables"] if Path("/proc/net/if_inet6").exists() else ["iptables"]


def _iptables(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return netfilter.run(tool, *args)


def _engine_netns_problem(socket_path: str) -> str | None:
    """None when the engine behind ``socket_path`` shares this process's network namespace."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        try:
            conn.connect(socket_path)
            pid, _uid, _gid = struct.unpack("3i", conn.getsockopt(
                socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")
            ))  # fmt: skip
        except OSError as exc:
            return f"cannot ask the engine's socket {socket_path} who serves it: {exc}"
    try:
        same = os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat("/proc/self/ns/net").st_ino
    except OSError:
        same = False
    if pid <= 0 or not same:
        return (
            f"the Docker engine behind {socket_path} runs in another network namespace "
            "(rootless, in a VM or in another container), so this host's firewall does not "
            "see its bridges"
        )
    return None


@functools.lru_cache(maxsize=8)
def _problem(local_socket: str | None) -> str | None:
    if local_socket is None:
        where = os.environ.get("DOCKER_HOST", "")
        return f"the Docker engine ({where}) is not on this host's unix socket"
    if os.geteuid() != 0:
        return "the harness does not run as root (host firewall rules need root)"
    for tool in _tools():
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian: apt-get install iptables)"
        listing = _iptables(tool, "-S", "INPUT")
        if listing.returncode != 0:
            return f"{tool} does not work here: {failure_detail(listing)}"
    return _engine_netns_problem(local_socket)


def problem(client: Any) -> str | None:
    """None when host rules can guard this engine's networks, else why not (one line).

    The engine must be a local unix socket served from this network namespace, and the
    harness root with working ``iptables`` (and ``ip6tables`` on a host with IPv6).
    """
    adapter = getattr(client.api, "_custom_adapter", None)
    path = getattr(adapter, "socket_path", None)
    local = str(getattr(client.api, "base_url", "")) == "http+docker://localhost"
    return _problem(str(path or DEFAULT_SOCKET) if local else None)


def _spec(bridge: str, comment: str) -> list[str]:
    return ["-i", bridge, "-m", "comment", "--comment", comment, "-j", "DROP"]


def _delete(tool: str, bridge: str, comment: str, table: str = netfilter.TABLE) -> None:
    """Delete every copy of the rule (there is one; a retry may have left two)."""
    while True:
        result = _iptables(tool, "-t", table, "-D", "INPUT", *_spec(bridge, comment))
        if result.returncode != 0:
            # "Bad rule" / "does a matching rule exist": gone. Anything else is kept.
            gone = "matching rule" in result.stderr or "Bad rule" in result.stderr
            if not gone:
                raise SandboxError(f"{tool}: cannot delete {comment}: {failure_detail(result)}")
            return


@dataclass
class HostGuard:
    """The INPUT rules of one compose network's bridge."""

    run: str
    bridge: str
    families: list[str] = field(default_factory=list)
    #: Each table's rule's packet counter as last read (:meth:`dropped`).
    _read: dict[str, int] = field(default_factory=dict, repr=False)

    @property
    def comment(self) -> str:
        """The rule's comment: the run's tag and the bridge."""
        return f"{run_tag(self.run)}:{self.bridge}"

    def install(self) -> None:
        """Insert the rule in every family, at the top of INPUT.

        Raises:
            HostGuardUnavailable: a table refused the rule (those inserted are removed).
        """
        for tool in _tools():
            result = _iptables(tool, "-I", "INPUT", "1", *_spec(self.bridge, self.comment))
            if result.returncode != 0:
                self.remove()
                raise HostGuardUnavailable(
                    f"{tool} refused the rule that keeps the compose network {self.bridge} "
                    f"off the host's services: {failure_detail(result)}"
                )
            self.families.append(tool)

    def remove(self) -> None:
        """Delete the rules this guard inserted (only those)."""
        for tool in self.families:
            _delete(tool, self.bridge, self.comment)
        self.families = []

    def dropped(self) -> dict[str, int]:
        """The packets each table's rule dropped since the last call, by tool (nonzero only).

        The rule is the project's own (``-i <bridge>``), so these are its containers'
        packets to the host that no rule above it judged: every one for a project without
        the internet, every IPv6 one, and, for a project with the internet, what fell off
        its egress chain (:mod:`sandbox.docker.egress`). The counters are read, never
        zeroed: zeroing one rule needs its position, which other rules' inserts move.
        """
        found: dict[str, int] = {}
        for tool in self.families:
            listing = _iptables(tool, "-S", "INPUT", "-v")
            for line in listing.stdout.splitlines() if listing.returncode == 0 else []:
                counts = re.search(r"-c (\d+) \d+", line)
                if self.comment not in line or "-j DROP" not in line or counts is None:
                    continue
                total = int(counts.group(1))
                if total > self._read.get(tool, 0):
                    found[tool] = total - self._read.get(tool, 0)
                self._read[tool] = total
                break
        return found

    def describe(self) -> dict[str, Any]:
        """Record facts: the bridge and the tables holding its rule."""
        return {"bridge": self.bridge, "families": list(self.families), "comment": self.comment}


def sweep(run: str | None = None) -> tuple[list[str], list[str]]:
    """Delete the tagged rules (of ``run``, else of any run) whose bridge no longer exists.

    A no-op where the rules cannot exist (not root, no ``iptables``).

    Returns:
        The comments of the rules removed, and errors.
    """
    if os.geteuid() != 0:
        return [], []
    wanted = run_tag(run) if run is not None else f"{TAG}:"
    removed: list[str] = []
    errors: list[str] = []
    for tool in _tools():
        if shutil.which(tool) is None:
            continue
        # The legacy table too: a dead run of a release before the move left its rules there.
        for table in (netfilter.TABLE, netfilter.LEGACY_TABLE):
            listing = _iptables(tool, "-t", table, "-S", "INPUT")
            for match in _RULE.finditer(listing.stdout):
                comment, bridge = match.group(1), match.group(3)
                if not comment.startswith(wanted) or Path("/sys/class/net", bridge).exists():
                    continue
                try:
                    _delete(tool, bridge, comment, table)
                    removed.append(f"{tool} {comment}")
                except SandboxError as exc:
                    errors.append(str(exc))
    return removed, errors


def remedy() -> str:
    """The two ways to run compose tasks where the rules cannot be installed."""
    return (
        "run the harness as root on the engine's host with iptables, or set "
        'sandbox.compose_host_access = "allow" to run compose tasks unprotected (insecure: '
        "only for trusted agents on a host with nothing to reach)"
    )


def refusal(reason: str) -> str:
    """Why a compose task is refused, and the two ways on."""
    return (
        "the task's compose sidecars put the agent on a Docker network, from which it could "
        f"connect to every service this host listens on, and {reason}; {remedy()}"
    )
