"""The docker backend's egress filter: what a ``public`` phase reaches, enforced on the host.

A trial whose phases ever need the internet joins one harness-owned bridge network,
:data:`NETWORK` (bridge :func:`bridge_of`, inter-container traffic off, labelled
:data:`LABEL`, IPv4 only), instead of the engine's default bridge. Every packet from that
bridge is judged by host netfilter rules in harness chains, for ``iptables`` and
``ip6tables``, all in the ``mangle`` table (:mod:`sandbox.docker.netfilter`: it runs
before the engine's rules in ``filter``, and the engine never re-arranges it):

- ``FORWARD`` and ``INPUT`` (packets to the host's own addresses) jump to
  :data:`DISPATCH` for anything that comes in on the bridge. ``INPUT`` then drops
  whatever came back.
- :data:`DISPATCH` sends each open container (by its address on the bridge) to its own
  chain, ``HXE-<12 hex>``, and drops every other packet: a container is closed from the
  moment it starts until a ``public`` phase opens it, and again as soon as its phase is
  over (:meth:`TrialFilter.open` / :meth:`TrialFilter.close`).
- A trial's chain drops: everything, while it is closed (its first rule); anything
  addressed to the host itself (``addrtype LOCAL``: every address, the bridge gateways
  included, whatever is added later); the private, loopback, link-local, CGNAT, multicast
  and reserved ranges, 169.254.169.254 and the host's own on-link subnets
  (:func:`blocked_ranges`); the Ray cluster's nodes, whatever their addresses
  (:attr:`EgressRun.cluster`, given by a Ray worker); and lets through the host's DNS
  resolvers on port 53 (the engine's embedded DNS forwards the container's queries to
  them). What is left is the internet. Every rule has its own counters:
  :meth:`TrialFilter.collect` reads them (and zeroes them) as the trial's refused
  connections, by rule. An ``NFLOG`` rule before each drop (:mod:`sandbox.docker.nflog`,
  the run's own netlink group, rate-limited) gives the exact destination of the packets it
  logs, listed per trial and bounded.
- IPv6: the network has none, containers get ``net.ipv6.conf.all.disable_ipv6=1``, and
  ``ip6tables`` drops every packet from the bridge in ``FORWARD`` and ``INPUT`` (a container
  left with a link-local ``fe80::`` address would otherwise reach the host's ``::``
  listeners); before that, its own :data:`DISPATCH` sends each plain trial's packets, by
  the container's MAC address, to a chain of the trial's that counts, logs and drops them.

An ``allowlist`` phase (:mod:`sandbox.docker.trial_network`) is the trial's chain with its
egress proxy's two ports on the gateway accepted and everything else dropped before the
rules above (:meth:`TrialFilter.restrict`), and ``nat PREROUTING`` redirects of the
trial's DNS to the gateway (UDP and TCP) onto the proxy's responder.

Compose tasks with the internet get the same filter on their project's bridge (``hxc…``,
see :mod:`sandbox.docker.hostguard`, whose ``INPUT`` rules stay): one chain per project,
dispatched by the bridge, with the main container's address closed during its
``no-network`` phases and restricted to the proxy during its ``allowlist`` ones (the
sidecars keep the rest of the chain). Whatever the project's containers send to the host
goes to the project's chain too, before the host guard's ``INPUT`` drop (an ``INPUT``
rule by the bridge, commented ``harness-egress:input-HXC-…``, inserted above the guard's
once it is in place), so those refusals are the trial's, with their destinations; there
only the main container's proxy ports are accepted (:meth:`TrialFilter.attach_proxy`:
the proxy is bound on the project's own gateway) and everything else to the host is
dropped as before. Falling off the chain returns to ``INPUT`` and the guard's drop.

Only chains and rules carrying the harness's names and comments are ever touched. The
rules are installed idempotently at every run's start, under a lock, and removed by the
last run that used them (each run leaves a holder file with its pid; a run killed with
``-9`` leaves a dead pid, which counts for nothing). A trial chain whose container is
gone is removed at the next run's start and by ``harness sandbox cleanup``
(:func:`sweep`); a container that was never opened, or whose rule is gone, is dropped.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from sandbox.docker import netfilter, nflog
from sandbox.errors import PermanentStartError, SandboxError
from sandbox.host_tools import failure_detail, run_tool

logger = logging.getLogger(__name__)

#: The harness's filtered network, its Linux bridge and the label that finds it.
NETWORK = "hx-egress"
#: The bridge name of earlier releases, one for every engine. Each engine's is now its own
#: (:func:`bridge_of`): two engines on one host (a rootless and a rootful one, a test's
#: private engine) must not share one, since Linux bridges are host-wide and an engine
#: removing its network deletes its bridge under the other's containers.
BRIDGE = "hxegress0"
LABEL = "org.harness.egress"
#: Compose projects' bridges (``sandbox.docker.hostguard.BRIDGE_PREFIX``).
COMPOSE_BRIDGES = "hxc+"
#: The chain every packet from a filtered bridge goes through.
DISPATCH = "HARNESS-EGRESS"
#: A chain made and removed at a run's start, to learn whether ``NFLOG`` rules load here.
PROBE = "HARNESS-EGRESS-PROBE"
TAG = "harness-egress"
#: What the containers on :data:`NETWORK` get (no IPv6 at all).
SYSCTLS = {"net.ipv6.conf.all.disable_ipv6": "1"}
#: Where runs leave their holder files and take the lock.
STATE_DIR = Path(os.environ.get("HARNESS_EGRESS_STATE", "/run/harness-egress"))
_TIMEOUT_SEC = 30
#: How long the last run's teardown waits for containers the engine is still removing (and
#: for endpoints it has yet to release) before it leaves the network to the next one.
SETTLE_SEC = 30.0
#: How long a run's end retries a removal the engine refuses with no container attached:
#: the engine releases a removed container's endpoint a moment after its removal; past
#: this, it counts an endpoint no container has, which only its restart clears, and the
#: run leaves the network to the next one instead of waiting :data:`SETTLE_SEC`.
STALE_GRACE_SEC = 3.0
#: The same for a network found stale before: only an engine restarted since removes it.
KNOWN_STALE_GRACE_SEC = 0.5
_SETTLE_POLL_SEC = 0.25
#: Container states that end in the container's removal without anyone's further request.
_GOING = frozenset({"removing", "dead"})
_CHAIN = re.compile(r"^-N (HX[EC]-[0-9a-f]{12})$", re.M)

#: Destinations a ``public`` phase never reaches (besides the host's own addresses and
#: on-link subnets), most specific first: the first match names the refusal.
BLOCKED_V4: tuple[tuple[str, str], ...] = (
    ("169.254.169.254/32", "metadata"),
    ("0.0.0.0/8", "this-network"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "cgnat"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "ietf-protocol"),
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "benchmarking"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
)


#: How a refusal reads in the record (``reason``), by the rule's short name.
REASONS = {
    "closed": "no-network phase",
    "host": "the host's own address",
    "gateway": "the network's gateway (the engine's host)",
    "metadata": "metadata address",
    "private": "private address",
    "cgnat": "CGNAT address",
    "loopback": "loopback address",
    "link-local": "link-local address",
    "host-subnet": "the host's own subnet",
    "multicast": "multicast address",
    "reserved": "reserved address",
    "this-network": "reserved address",
    "ietf-protocol": "reserved address",
    "benchmarking": "reserved address",
    "allowlist": "allowlist phase: only the egress proxy",
    "ipv6": "IPv6 (the filtered network has none)",
    "cluster": "a node of the Ray cluster",
}


class EgressUnavailable(PermanentStartError):
    """The filter cannot be installed here (the reason says why and how to fix it)."""


def _ipt(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    # On the harness's table (:mod:`sandbox.docker.netfilter`) unless ``-t`` names one. A
    # failed ``-S chain`` means only "not there": iptables-nft 1.8.9 words a missing chain
    # as "chain `X' in table `mangle' is incompatible, use 'nft' tool", never as "No chain".
    return netfilter.run(tool, *args)


def _must(tool: str, *args: str) -> str:
    result = _ipt(tool, *args)
    if result.returncode != 0:
        raise SandboxError(f"{tool} {' '.join(args)}: {failure_detail(result)}")
    return result.stdout


def _ensure_rule(tool: str, chain: str, spec: list[str], *, position: int | None = 1) -> None:
    """Insert ``spec`` into ``chain`` unless an identical rule is there (``-C``)."""
    if _ipt(tool, "-C", chain, *spec).returncode == 0:
        return
    if position is None:
        _must(tool, "-A", chain, *spec)
    else:
        _must(tool, "-I", chain, str(position), *spec)


def _delete_rule(tool: str, chain: str, spec: list[str], table: str = netfilter.TABLE) -> None:
    """Delete every copy of ``spec`` in ``table``'s ``chain`` (gone already is fine)."""
    while _ipt(tool, "-t", table, "-C", chain, *spec).returncode == 0:
        _must(tool, "-t", table, "-D", chain, *spec)


def _ensure_chain(tool: str, chain: str) -> bool:
    """Create ``chain`` if it is missing; whether it was created."""
    if _ipt(tool, "-S", chain).returncode == 0:
        return False
    result = _ipt(tool, "-N", chain)
    if result.returncode != 0 and "exists" not in result.stderr:
        raise SandboxError(f"{tool} -N {chain}: {failure_detail(result)}")
    return result.returncode == 0


def _drop_chain(tool: str, chain: str, table: str = netfilter.TABLE) -> None:
    if _ipt(tool, "-t", table, "-S", chain).returncode == 0:
        _must(tool, "-t", table, "-F", chain)
        _must(tool, "-t", table, "-X", chain)


def _batch(tool: str, commands: list[list[str]]) -> None:
    """Apply ``commands`` in one atomic ``TOOL-restore`` (:func:`netfilter.restore`)."""
    if not commands:
        return
    result = netfilter.restore(tool, commands)
    if result.returncode != 0:
        raise SandboxError(f"{tool}-restore of {len(commands)} rules: {failure_detail(result)}")


def _comment(text: str) -> list[str]:
    return ["-m", "comment", "--comment", f"{TAG}:{text}"]


def _v6() -> bool:
    return Path("/proc/net/if_inet6").exists() and shutil.which("ip6tables") is not None


#: Each client's bridge (:func:`bridge_of`), asked of its engine once.
_bridges: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
_bridges_lock = threading.Lock()


def bridge_of(client: Any) -> str:
    """The Linux bridge of this engine's filtered network (``hxe`` + a hash of its ID).

    Asked of the engine once per client (a run asks it at its start, its sweeps and its
    end).
    """
    from sandbox.docker.sdk import call

    with _bridges_lock:
        known = _bridges.get(client)
    if known is not None:
        return known
    info = call(client.info)
    # Two daemons started from one host's default config share their ID (key.json); their
    # data roots always differ.
    engine = f"{info.get('ID') or ''}|{info.get('DockerRootDir') or ''}|{info.get('Name') or ''}"
    bridge = "hxe" + hashlib.sha256(engine.encode()).hexdigest()[:11]
    with _bridges_lock:
        _bridges[client] = bridge
    return bridge


def _hooks_v4(bridge: str) -> list[tuple[str, list[str]]]:
    """The jumps into :data:`DISPATCH` (chain, rule); order within a chain matters.

    In ``mangle``, whose ``FORWARD`` runs before the engine's own rules in ``filter``
    and which the engine never re-arranges (:mod:`sandbox.docker.netfilter`).
    """
    return [
        ("FORWARD", ["-i", bridge, *_comment("from-egress"), "-j", DISPATCH]),
        (
            "FORWARD",
            [
                "-i",
                COMPOSE_BRIDGES,
                "!",
                "-o",
                COMPOSE_BRIDGES,
                *_comment("from-compose"),
                "-j",
                DISPATCH,
            ],
        ),  # fmt: skip
        # Judged first (the trial's counters see it), then dropped whatever the verdict.
        ("INPUT", ["-i", bridge, *_comment("to-host-judged"), "-j", DISPATCH]),
        ("INPUT", ["-i", bridge, *_comment("to-host"), "-j", "DROP"]),
    ]


def _hooks_v6(bridge: str) -> list[tuple[str, list[str]]]:
    # Each trial's chain counts (and logs) its own packets first; then every packet from
    # the bridge is dropped whatever the verdict, as before.
    return [
        ("FORWARD", ["-i", bridge, *_comment("v6-forward-judged"), "-j", DISPATCH]),
        ("FORWARD", ["-i", bridge, *_comment("v6-forward"), "-j", "DROP"]),
        (
            "FORWARD",
            [
                "-i",
                COMPOSE_BRIDGES,
                "!",
                "-o",
                COMPOSE_BRIDGES,
                *_comment("v6-compose-forward"),
                "-j",
                "DROP",
            ],
        ),  # fmt: skip
        ("INPUT", ["-i", bridge, *_comment("v6-input-judged"), "-j", DISPATCH]),
        ("INPUT", ["-i", bridge, *_comment("v6-input"), "-j", "DROP"]),
    ]


#: What the engine gives a container when the host has no resolver but loopback ones
#: (Docker's own fallback for its default bridge).
FALLBACK_RESOLVERS = ("8.8.8.8", "8.8.4.4")


def container_resolvers() -> tuple[str, ...]:
    """The resolvers a container on one of the harness's networks is given, explicitly.

    An engine's embedded resolver (``127.0.0.11``, on every user-defined network) forwards
    what it does not know to the resolvers the container was given, from the container's
    own namespace, where the trial's rules judge each query; given none, it takes the
    host's, and asks a loopback one (a local dnsmasq or unbound) from the engine host's own
    namespace, past every rule of the trial's: a DNS channel out of a ``no-network``
    phase. So the host's non-loopback resolvers are always given (Docker's fallback where
    it has none), as the default bridge's containers get them.
    """
    return tuple(_resolv_nameservers()) or FALLBACK_RESOLVERS


def _resolv_nameservers() -> list[str]:
    """The IPv4 resolvers dockerd forwards the containers' queries to."""
    found: list[str] = []
    for path in ("/etc/resolv.conf", "/run/systemd/resolve/resolv.conf"):
        try:
            text = Path(path).read_text()
        except OSError:
            continue
        for line in text.splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] == "nameserver":
                try:
                    address = ipaddress.ip_address(parts[1])
                except ValueError:
                    continue
                if address.version == 4 and not address.is_loopback and parts[1] not in found:
                    found.append(parts[1])
    return found


def _onlink_subnets() -> list[str]:
    """The host's directly connected IPv4 subnets (its LAN), docker's bridges excluded."""
    try:
        out = run_tool(
            ["ip", "-j", "-4", "route", "show", "table", "main", "scope", "link"],
            timeout=_TIMEOUT_SEC, check=True,
        ).stdout  # fmt: skip
        routes = json.loads(out or "[]")
    except (OSError, subprocess.SubprocessError, ValueError):
        return []
    subnets = []
    for route in routes:
        dst = str(route.get("dst") or "")
        if dst and dst != "default" and "/" in dst:
            subnets.append(dst)
    return subnets


def blocked_ranges() -> list[tuple[str, str]]:
    """Every IPv4 destination refused to a ``public`` phase, with the name it is counted by."""
    ranges = list(BLOCKED_V4)
    covered = [ipaddress.IPv4Network(cidr) for cidr, _ in BLOCKED_V4]
    for subnet in _onlink_subnets():
        net = ipaddress.IPv4Network(subnet, strict=False)
        if not any(net.subnet_of(big) for big in covered):
            ranges.append((str(net), "host-subnet"))
    return ranges


def chain_name(kind: str, key: str) -> str:
    """A trial's chain: ``HXE-`` (plain) or ``HXC-`` (compose) and 12 hex of ``key``."""
    return f"HX{kind}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    STATE_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(STATE_DIR / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _holders(bridge: str | None = None) -> list[Path]:
    """Holder files of live runs, of one engine's bridge or all (dead ones are removed)."""
    live = []
    for path in STATE_DIR.glob(f"holder-{bridge}-*" if bridge else "holder-*"):
        try:
            pid = int(path.name.rsplit("-", 1)[-1])
        except ValueError:
            continue
        if _alive(pid):
            live.append(path)
        else:
            path.unlink(missing_ok=True)
    return live


def _claim(chain: str) -> Path:
    """Mark ``chain`` as this process's (a file named for it and our pid) until released.

    A compose project's chain is made before its bridge exists, which is what a sweep
    judges such a chain alive by: another run sweeping then (at its start, or under
    ``harness sandbox cleanup``) would delete it under a trial being set up. A claim by a
    live pid keeps it; one left by a dead run counts for nothing.

    The claim is made under the sweeps' lock: a sweep reads the claims first and the
    chains last, so a claim made between the two would name a chain the sweep lists but
    judges dead, and it would flush the chain of a trial being set up (its dispatch rule
    then leads to an empty chain, which lets every packet through) or fail to delete it.
    """
    with _locked():
        path = STATE_DIR / f"chain-{chain}-{os.getpid()}"
        path.touch()
    return path


def _claimed() -> set[str]:
    """The chains live processes claim (dead claims are removed)."""
    live = set()
    for path in STATE_DIR.glob("chain-*"):
        name, _, pid = path.name.removeprefix("chain-").rpartition("-")
        try:
            alive = _alive(int(pid))
        except ValueError:
            continue
        if alive:
            live.add(name)
        else:
            path.unlink(missing_ok=True)
    return live


def _network(client: Any) -> Any | None:
    from sandbox.docker.sdk import call

    found = call(client.networks.list, names=[NETWORK], filters={"label": f"{LABEL}=1"})
    return next((n for n in found if n.name == NETWORK), None)


def _ensure_network(client: Any, bridge: str) -> None:
    from sandbox.docker.sdk import EngineRequestError, call

    network = _network(client)
    if network is not None:
        options = network.attrs.get("Options") or {}
        if options.get("com.docker.network.bridge.name") == bridge:
            return
        # Made by an earlier release on the shared bridge name: replaced while unused.
        call(network.reload)
        if network.attrs.get("Containers"):
            raise EgressUnavailable(
                f"the {NETWORK} network of this engine is on the bridge of an earlier release "
                "and still has containers; run `harness sandbox cleanup`"
            )
        call(network.remove)
    try:
        call(
            client.networks.create,
            NETWORK,
            driver="bridge",
            labels={LABEL: "1"},
            options={
                "com.docker.network.bridge.name": bridge,
                "com.docker.network.bridge.enable_icc": "false",
            },
        )
    except EngineRequestError as exc:
        if "already exists" not in str(exc):
            raise


def _install_hooks(bridge: str) -> None:
    """The dispatch chains and the jumps into them (idempotent)."""
    if _ensure_chain("iptables", DISPATCH):
        _must("iptables", "-A", DISPATCH, *_comment("closed"), "-j", "DROP")
    if _ipt("iptables", "-t", "filter", "-S", "DOCKER-USER").returncode != 0:
        # The engine makes DOCKER-USER when it manages iptables; without that, it neither
        # forwards nor masquerades its bridges' traffic, and its rules are not the ones
        # this filter was measured against.
        raise EgressUnavailable(
            "the Docker engine made no DOCKER-USER chain (is it running with --iptables?); "
            "internet tasks cannot be filtered"
        )
    if len(_holders()) <= 1:  # this run's own: no live run uses what an old release left
        _remove_legacy()
    # Reverse order, each inserted at the top: they end up in the listed order.
    for chain, spec in reversed(_hooks_v4(bridge)):
        _ensure_rule("iptables", chain, spec)
    if _v6():
        _ensure_chain("ip6tables", DISPATCH)
        for chain, spec in reversed(_hooks_v6(bridge)):
            _ensure_rule("ip6tables", chain, spec)


def _remove_hooks(bridge: str) -> None:
    for chain, spec in _hooks_v4(bridge):
        _delete_rule("iptables", chain, spec)
    if _v6():
        for chain, spec in _hooks_v6(bridge):
            _delete_rule("ip6tables", chain, spec)
    if _holders():
        return  # another engine's live run: the dispatch chain and its trials are in use
    for _chain, spec in _nat_rules():
        _delete_nat(spec)
    for _chain, spec in _input_jumps():
        _delete_rule("iptables", "INPUT", spec)
    for tool in _tools():
        # No live run of any engine: every jump into the dispatch chain is stale (the hooks
        # of an engine that is gone, whose last run never tore them down), and would keep
        # the chain from being deleted.
        for chain, spec in _jumps_into_dispatch(tool):
            _delete_rule(tool, chain, spec)
        _drop_chains(tool)
    _remove_legacy()


def _drop_chains(tool: str, table: str = netfilter.TABLE) -> None:
    """Delete the dispatch chain and every trial chain (their jumps are gone already)."""
    if _ipt(tool, "-t", table, "-S", DISPATCH).returncode == 0:
        _must(tool, "-t", table, "-F", DISPATCH)  # its gotos keep the trial chains busy
    for name in _trial_chains(tool, table):
        _drop_chain(tool, name, table)
    _drop_chain(tool, DISPATCH, table)


def _jumps_into_dispatch(tool: str, table: str = netfilter.TABLE) -> list[tuple[str, list[str]]]:
    """(chain, rule spec) of every rule of the built-in chains that jumps to :data:`DISPATCH`."""
    jumps = []
    for chain in ("DOCKER-USER", "INPUT", "FORWARD"):
        listing = _ipt(tool, "-t", table, "-S", chain)
        for line in listing.stdout.splitlines() if listing.returncode == 0 else []:
            words = _split(line)
            if words[:2] == ["-A", chain] and words[-2:] == ["-j", DISPATCH]:
                jumps.append((chain, words[2:]))
    return jumps


def _remove_legacy() -> None:
    """Remove what a release before the move to ``mangle`` left in ``filter`` (a killed run's).

    Its hooks in ``DOCKER-USER`` and ``INPUT`` would send the bridge's packets to its old
    dispatch chain, whose last rule drops them: every trial closed, whatever its phase.
    Only names and comments of the harness are touched.
    """
    legacy = netfilter.LEGACY_TABLE
    for tool in _tools():
        # One listing says whether anything is there: nearly every run finds nothing.
        listing = _ipt(tool, "-t", legacy, "-S").stdout
        if DISPATCH not in listing and not _CHAIN.search(listing):
            continue
        if tool == "iptables":  # a compose chain's INPUT jump is in IPv4's table only
            for _target, spec in _tagged_rules("INPUT", "input", table=legacy):
                _delete_rule(tool, "INPUT", spec, legacy)
        for chain, spec in _jumps_into_dispatch(tool, legacy):
            _delete_rule(tool, chain, spec, legacy)
        _drop_chains(tool, legacy)


def _tools() -> tuple[str, ...]:
    """The tables the filter has chains in: IPv4's, and IPv6's where the host has it."""
    return ("iptables", "ip6tables") if _v6() else ("iptables",)


def _trial_chains(tool: str = "iptables", table: str = netfilter.TABLE) -> list[str]:
    listing = _ipt(tool, "-t", table, "-S")
    return _CHAIN.findall(listing.stdout) if listing.returncode == 0 else []


def _tagged_rules(
    chain: str, kind: str, table: str = netfilter.TABLE
) -> list[tuple[str, list[str]]]:
    """(trial chain, rule spec) of every rule in ``table``'s ``chain`` tagged ``kind-<chain>``."""
    listing = _ipt("iptables", "-t", table, "-S", chain)
    rules = []
    for line in listing.stdout.splitlines() if listing.returncode == 0 else []:
        match = re.search(rf"{TAG}:{kind}-(HX[EC]-[0-9a-f]{{12}})", line)
        if line.startswith(f"-A {chain} ") and match:
            rules.append((match.group(1), _split(line)[2:]))
    return rules


def _nat_rules() -> list[tuple[str, list[str]]]:
    """(trial chain, rule spec) of every DNS redirect in ``nat PREROUTING`` of the harness."""
    return _tagged_rules("PREROUTING", "dns", table="nat")


def _delete_nat(spec: list[str]) -> None:
    _delete_rule("iptables", "PREROUTING", spec, table="nat")


def _input_jumps() -> list[tuple[str, list[str]]]:
    """(trial chain, rule spec) of every ``INPUT`` jump of a compose main container."""
    return [(chain, spec) for chain, spec in _tagged_rules("INPUT", "input") if chain[:3] == "HXC"]


def _dispatch_rules(tool: str = "iptables") -> list[tuple[str, list[str]]]:
    """(chain it goes to, rule spec) of every rule in :data:`DISPATCH` naming a trial chain."""
    # Read from the whole table, where a missing chain has no lines: the chain is gone
    # when a run's filter failed before its hooks, or when another run's teardown removed
    # it after a caller saw it (an IPv6 chain also before a release had one).
    rules = []
    for line in _must(tool, "-S").splitlines():
        match = re.search(r"-g (HX[EC]-[0-9a-f]{12})", line)
        if line.startswith(f"-A {DISPATCH} ") and match:
            rules.append((match.group(1), _split(line)[2:]))
    return rules


def _split(line: str) -> list[str]:
    return shlex.split(line)


def _sweep_stale(client: Any, keep: set[str]) -> list[str]:  # noqa: C901
    """Remove trial chains whose container (or compose bridge) is gone; what was removed.

    Only this engine's: a dispatch rule from another engine's bridge (one that still
    exists) and the chain it leads to are that engine's to judge.
    """
    from sandbox.docker.sdk import call

    mine = bridge_of(client)
    network = _network(client)
    live: set[str] = set(keep) | _claimed()
    if network is not None:
        call(network.reload)
        for endpoint in (network.attrs.get("Containers") or {}).values():
            live.add(chain_name("E", str(endpoint.get("Name") or "")))
    for bridge in Path("/sys/class/net").glob("hxc*"):
        live.add(chain_name("C", bridge.name))
    dispatch = {tool: _dispatch_rules(tool) for tool in _tools()}
    for target, spec in [rule for rules in dispatch.values() for rule in rules]:
        name = spec[spec.index("-i") + 1] if "-i" in spec else mine
        if name != mine and not name.startswith("hxc") and Path(f"/sys/class/net/{name}").exists():
            live.add(target)  # another engine's live bridge
    removed = []
    for tool, rules in dispatch.items():
        for target, spec in rules:
            if target not in live:
                _delete_rule(tool, DISPATCH, spec)
    for target, spec in _nat_rules():
        if target not in live:
            _delete_nat(spec)
    for target, spec in _input_jumps():
        if target not in live:
            _delete_rule("iptables", "INPUT", spec)
    for tool in dispatch:
        for name in _trial_chains(tool):
            if name not in live:
                _drop_chain(tool, name)
                removed.append(f"{tool} {name}")
    return removed


def problem(client: Any) -> str | None:
    """None when the filter can be installed for this engine, else why not (one line)."""
    from sandbox.docker import hostguard

    return hostguard.problem(client)


class EgressRun:
    """One run's use of the filter: installs it once, gives it back at the run's end."""

    def __init__(self, client: Any, run_label: str) -> None:
        self.client = client
        self.run_label = run_label
        self._lock = threading.Lock()
        self._ready = False
        #: Whether this run has written its holder (and may have made the network or the
        #: hooks): what :meth:`close` gives back even when :meth:`ensure` failed halfway.
        self._held = False
        tag = hashlib.sha256(run_label.encode()).hexdigest()[:10]
        self._first_group = nflog.GROUP_BASE + int(tag, 16) % nflog.GROUP_SPAN
        #: This engine's bridge (:func:`bridge_of`).
        self.bridge = bridge_of(client)
        self._holder = STATE_DIR / f"holder-{self.bridge}-{tag}-{os.getpid()}"
        #: The trial chains of this run (never swept while it runs).
        self.chains: set[str] = set()
        #: Names the allowlist proxies resolve from this table before the host's resolver
        #: (as ``/etc/hosts`` would: an operator pinning a mirror, a test its servers).
        self.hosts: dict[str, list[str]] = {}
        #: The IPv4 addresses of the Ray cluster's nodes when a Ray worker runs the trials
        #: (set before each trial): every phase's chain refuses them, wherever they are
        #: (a node on a public address is not covered by the host's or the private ranges).
        self.cluster: tuple[str, ...] = ()
        #: The refused packets' log (None: counters only, :attr:`log_problem` says why).
        self.log: nflog.PacketLog | None = None
        self.log_problem: str | None = None

    def log_status(self) -> str:
        """What the record says of the log, once per trial: its group, or why there is none."""
        if self.log is not None:
            return f"nflog group {self.log.group}: refused destinations logged"
        why = self.log_problem or "the filter is not installed"
        return f"counters only, no destinations: {why}"

    def gateway(self) -> str:
        """The filtered network's gateway address on the host (its bridge's), once ensured.

        Raises:
            SandboxError: the network has no IPv4 gateway.
        """
        from sandbox.docker.sdk import call

        network = _network(self.client)
        if network is not None:
            call(network.reload)
            for config in (network.attrs.get("IPAM") or {}).get("Config") or []:
                gateway = str(config.get("Gateway") or "")
                if gateway and ":" not in gateway:
                    return gateway.split("/")[0]
        raise SandboxError(f"the {NETWORK} network has no IPv4 gateway")

    def ensure(self) -> None:
        """Install the network and the rules (once per run).

        Raises:
            EgressUnavailable: the host cannot filter this engine's networks.
        """
        with self._lock:
            if self._ready:
                return
            why = problem(self.client)
            if why is not None:
                raise EgressUnavailable(
                    "a phase of this task gets the internet, which the docker backend only "
                    f"gives behind its host filter, and {why}; run the harness as root on "
                    "the engine's host with iptables"
                )
            with _locked():
                self._held = True
                self._holder.write_text(self.run_label)
                _ensure_network(self.client, self.bridge)
                _install_hooks(self.bridge)
                with contextlib.suppress(SandboxError):
                    _sweep_stale(self.client, keep=set())
                self.log_problem = _nflog_problem(self._first_group)
            if self.log_problem is None:
                opened = nflog.open_log(self._first_group)
                if isinstance(opened, str):
                    self.log_problem = opened
                else:
                    self.log = opened
            self._ready = True

    def close(self) -> list[str]:
        """Give the filter back; the last live run removes the network and the rules.

        Where the engine counts an endpoint on the network that no container has (see
        :class:`StaleEndpoint`), the network and the rules stay for the next run, which
        uses them as they are, and a warning says what clears it: no run's end waits for
        what only a restart of the engine mends, nor calls the run's cleanup failed.
        """
        with self._lock:
            if not self._held:
                return []
            self._ready = self._held = False
        try:
            with _locked():
                self._holder.unlink(missing_ok=True)
                try:
                    return _teardown_if_unused(self.client, stale_grace=STALE_GRACE_SEC)
                except StaleEndpoint as exc:
                    logger.warning("%s", exc)
                    return []
        finally:
            if self.log is not None:
                self.log.close()
                self.log = None


def _nflog_problem(group: int) -> str | None:
    """None when ``NFLOG`` rules load in every table the filter uses, else why not.

    Tried in a chain of its own, removed at once (under the run lock).
    """
    for tool in _tools():
        try:
            _drop_chain(tool, PROBE)
            _must(tool, "-N", PROBE)
            try:
                result = _ipt(tool, "-A", PROBE, "-m", "limit", "--limit", nflog.RATE,
                              "-j", "NFLOG", "--nflog-group", str(group))  # fmt: skip
            finally:
                _drop_chain(tool, PROBE)
        except SandboxError as exc:
            return f"the NFLOG probe failed: {exc}"
        if result.returncode != 0:
            return f"{tool} cannot load an NFLOG rule ({failure_detail(result)})"
    return None


def _only_stale_endpoints(client: Any, network: Any, deadline: float) -> bool:
    """Disconnect the network's endpoints whose container is gone; False if one is alive.

    The engine can keep the endpoint of a container removed while it was being connected
    (a removal under load, an engine restart); such an endpoint keeps the network from
    being removed ("has active endpoints") though no container uses it. Disconnecting it
    by force, by its container's name, is the engine's own remedy. A container the engine
    is still removing (a removal that outlived its request, which ``remove_leaks`` leaves
    to the engine) is waited for until ``deadline``: it holds the network only meanwhile.
    """
    from sandbox.docker.sdk import EngineObjectMissing, EngineRequestError, call

    for container_id, endpoint in (network.attrs.get("Containers") or {}).items():
        while True:
            try:
                state = call(client.api.inspect_container, container_id).get("State") or {}
            except EngineObjectMissing:
                break
            if state.get("Status") not in _GOING or time.monotonic() >= deadline:
                return False  # a live container of a run
            time.sleep(_SETTLE_POLL_SEC)
        name = str((endpoint or {}).get("Name") or container_id)
        try:
            call(client.api.disconnect_container_from_network, name, network.id, force=True)
        except (EngineObjectMissing, EngineRequestError):
            pass  # gone meanwhile; the removal says if anything still holds it
    return True


class StaleEndpoint(SandboxError):
    """The engine counts an endpoint on the network that no container has.

    Its own ``network rm`` fails the same way; only a restart of the engine clears it.
    """


def _remove_network(client: Any, network: Any, *, stale_grace: float | None = None) -> bool:
    """Remove the filtered network unless a live container holds it; whether it is gone.

    Args:
        client: The engine's client.
        network: The filtered network.
        stale_grace: How long a removal refused with no container attached is retried
            before :class:`StaleEndpoint` (None: :data:`SETTLE_SEC`, as any refusal).
            A network found stale before (its ID is remembered in :data:`STATE_DIR`
            until it is removed) gets at most :data:`KNOWN_STALE_GRACE_SEC` (but for
            None: `harness sandbox cleanup`, the command that removes it after a
            restart of the engine, still gets the settling time).

    Raises:
        StaleEndpoint: refused with no container attached past ``stale_grace``.
        SandboxError: the engine still refuses to remove it after :data:`SETTLE_SEC`.
    """
    from sandbox.docker.sdk import EngineObjectMissing, EngineRequestError, call

    deadline = time.monotonic() + SETTLE_SEC
    unattached_since: float | None = None
    if stale_grace is not None and str(network.id) in _stale_networks():
        # A run's end, for a network refused before with no container attached: asked
        # again briefly (an engine restarted since removes it), never waited for as long.
        stale_grace = min(stale_grace, KNOWN_STALE_GRACE_SEC)
    while True:
        try:
            call(network.reload)
        except EngineObjectMissing:
            _forget_stale(str(network.id))
            return True
        if not _only_stale_endpoints(client, network, deadline):
            return False  # a container of a dead run: `harness sandbox cleanup` removes it
        try:
            call(network.remove)
        except EngineObjectMissing:
            pass
        except EngineRequestError as exc:
            # The engine releases a removed container's endpoint a moment after the removal.
            now = time.monotonic()
            if now >= deadline:
                raise _unremovable(network, exc) from exc
            if stale_grace is not None and not (network.attrs.get("Containers") or {}):
                unattached_since = now if unattached_since is None else unattached_since
                if now - unattached_since >= stale_grace:
                    raise _unremovable(network, exc) from exc
            else:
                unattached_since = None
            time.sleep(_SETTLE_POLL_SEC)
            continue
        _forget_stale(str(network.id))
        return True


#: The filtered networks (by ID) the engine refused to remove with no container attached.
_STALE_FILE = "stale-networks"


def _stale_networks() -> set[str]:
    """IDs of networks found stale before (under the run lock)."""
    try:
        return set((STATE_DIR / _STALE_FILE).read_text().split())
    except OSError:
        return set()


def _write_stale(ids: set[str]) -> None:
    STATE_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    (STATE_DIR / _STALE_FILE).write_text("".join(f"{n}\n" for n in sorted(ids)))


def _remember_stale(network_id: str) -> None:
    """Note a network the engine counts an endpoint on that no container has."""
    _write_stale(_stale_networks() | {network_id})


def _forget_stale(network_id: str) -> None:
    known = _stale_networks()
    if network_id in known:
        _write_stale(known - {network_id})


def _unremovable(network: Any, exc: Exception) -> SandboxError:
    """Why the network stays, and what removes it (:class:`StaleEndpoint`: a restart)."""
    from sandbox.docker.sdk import EngineError, call

    try:
        call(network.reload)
        attached = bool(network.attrs.get("Containers"))
    except EngineError:
        attached = True  # unknown: the plain advice holds either way
    if not attached:
        # The engine counts an endpoint no container has: its store lost the endpoint's
        # removal. Nothing but its restart resets the count (its own `network rm` fails).
        # Remembered, so that no later run waits for it again.
        _remember_stale(str(network.id))
        return StaleEndpoint(
            f"the {NETWORK} network could not be removed ({exc}) though no container is "
            "attached to it: the engine still counts an endpoint of a removed container, "
            "which only a restart of the engine clears; restart the docker engine, then run "
            "`harness sandbox cleanup`"
        )
    return SandboxError(
        f"the {NETWORK} network could not be removed ({exc}); run "
        "`harness sandbox cleanup` once no run uses this engine"
    )


def _teardown_if_unused(client: Any, *, stale_grace: float | None = None) -> list[str]:
    """Remove the network and every rule when no live run holds them (under the lock).

    Raises:
        StaleEndpoint: see :func:`_remove_network` (``stale_grace``); the rules stay too.
    """
    bridge = bridge_of(client)
    if _holders(bridge):
        return []
    network = _network(client)
    removed: list[str] = []
    if network is not None:
        if not _remove_network(client, network, stale_grace=stale_grace):
            return []
        removed.append(f"network {NETWORK}")
    if any(Path("/sys/class/net").glob("hxc*")):
        _sweep_stale(client, keep=set())
        return removed  # a compose project still up keeps the hooks
    _remove_hooks(bridge)
    removed.append(f"iptables {DISPATCH}")
    return removed


class Swept(NamedTuple):
    """What :func:`sweep` removed, and what it could not."""

    #: Trial chains whose container is gone.
    chains: list[str]
    #: What the runs of the engine share (the network, the hooks), when none held them.
    shared: list[str]
    errors: list[str]


def sweep(client: Any, run: str | None = None, *, shared: bool = False) -> Swept:
    """Remove trial chains whose container is gone, and everything when no run holds it.

    Called by ``remove_leaks`` after the containers are gone; a no-op where this process
    cannot manage them (not root, no ``iptables``, no ``CAP_NET_ADMIN``, a remote engine).

    Args:
        client: The engine's client.
        run: Sweeping for this run only: the network and the hooks stay (a run starting
            would only make them again), unless ``shared``.
        shared: Also remove the network and the hooks when no live run holds them, as
            always without ``run`` (``harness sandbox cleanup --run``: a run that could
            not remove them at its end says to run it).
    """
    # Not root, no iptables, root in a container without CAP_NET_ADMIN (the CI image), or
    # an engine elsewhere: whatever rules exist are not this process's to read or remove.
    if problem(client) is not None:
        return Swept([], [], [])
    if _ipt("iptables", "-S", DISPATCH).returncode != 0 and _network(client) is None:
        return Swept([], [], [])
    chains: list[str] = []
    try:
        with _locked():
            chains = _sweep_stale(client, keep=set())
            released = _teardown_if_unused(client) if run is None or shared else []
        return Swept(chains, released, [])
    except SandboxError as exc:
        return Swept(chains, [], [str(exc)])


@dataclass
class TrialFilter:
    """One trial's chain: its open/closed state, its counters, its logged destinations.

    ``key`` is the container's name (plain tasks) or the compose bridge; ``source`` is the
    container's address on the filtered bridge and ``mac`` its MAC address there (what
    IPv6 packets are told apart by: the container has no IPv6 address), known once it
    runs. ``log`` is the run's packet log (None: counters only). ``cluster`` holds the
    IPv4 addresses of the Ray cluster's nodes (:attr:`EgressRun.cluster`), refused in
    every phase before the host's own addresses are.
    """

    kind: str  # "E" (the harness network) or "C" (a compose project's bridge)
    key: str
    bridge: str = BRIDGE
    source: str | None = None
    closed: bool = True
    events: list[dict[str, Any]] = field(default_factory=list)
    #: ``(gateway, proxy port, DNS port)`` of the trial's egress proxy (allowlist trials);
    #: the DNS port is the responder's on UDP and on TCP.
    proxy: tuple[str, int, int] | None = None
    #: An ``allowlist`` phase: everything but the proxy is dropped.
    only_proxy: bool = False
    mac: str | None = None
    log: nflog.PacketLog | None = None
    cluster: tuple[str, ...] = ()
    _logged: nflog.Destinations | None = field(default=None, repr=False)
    #: This process's claim on the chain (:func:`_claim`), from install to removal.
    _claim_file: Path | None = field(default=None, repr=False)

    @property
    def chain(self) -> str:
        """The chain's name (in ``iptables``, and in ``ip6tables`` for a plain task)."""
        return chain_name(self.kind, self.key)

    @property
    def v6(self) -> bool:
        """Whether the trial has a chain of its own in ``ip6tables`` (by its MAC address)."""
        return self.kind == "E" and self.mac is not None and _v6()

    def _dispatch(self) -> list[str]:
        if self.kind == "E":
            assert self.source is not None
            return [
                "-s",
                f"{self.source}/32",
                "-i",
                self.bridge,
                *_comment(self.key),
                "-g",
                self.chain,
            ]
        return ["-i", self.bridge, *_comment(self.key), "-g", self.chain]

    def _dispatch_v6(self) -> list[str]:
        assert self.mac is not None
        return ["-i", self.bridge, "-m", "mac", "--mac-source", self.mac, *_comment(self.key),
                "-g", self.chain]  # fmt: skip

    def _refuse(self, match: list[str], what: str) -> list[list[str]]:
        """The rules refusing ``match`` (counted as ``what``): logged, then dropped.

        The log rule is rate-limited (:data:`nflog.RATE`) and before its drop, so the
        drop's counters stay the count of record whatever the log kept.
        """
        drop = [*match, *_comment(what), "-j", "DROP"]
        if self.log is None:
            return [drop]
        logged = [*match, "-m", "limit", "--limit", nflog.RATE, "--limit-burst", nflog.BURST,
                  "-j", "NFLOG", "--nflog-group", str(self.log.group),
                  "--nflog-prefix", f"{self.chain} {what}"]  # fmt: skip
        return [logged, drop]

    def _closed_rules(self) -> list[list[str]]:
        source = ["-s", f"{self.source}/32"] if self.kind == "C" and self.source else []
        return self._refuse(source, "closed")

    def _proxy_rules(self) -> list[list[str]]:
        """The trial's own proxy ports on the gateway (its DNS port after the redirect).

        A compose project's chain sees every packet its containers send to the host: only
        the main container's are accepted (the sidecars never had the proxy).
        """
        if self.proxy is None:
            return []
        gateway, port, dns = self.proxy
        source = ["-s", f"{self.source}/32"] if self.kind == "C" and self.source else []
        return [
            [*source, "-d", f"{gateway}/32", "-p", "tcp", "--dport", str(port),
             *_comment("proxy"), "-j", "ACCEPT"],
            [*source, "-d", f"{gateway}/32", "-p", "udp", "--dport", str(dns),
             *_comment("proxy-dns"), "-j", "ACCEPT"],
            [*source, "-d", f"{gateway}/32", "-p", "tcp", "--dport", str(dns),
             *_comment("proxy-dns"), "-j", "ACCEPT"],
        ]  # fmt: skip

    def _allowlist_rules(self) -> list[list[str]]:
        # A compose project's chain judges its sidecars too: only the main container's
        # address is restricted (the sidecars keep the project's policy).
        source = ["-s", f"{self.source}/32"] if self.kind == "C" and self.source else []
        return self._refuse(source, "allowlist")

    def _dns_redirects(self) -> list[list[str]]:
        """``nat PREROUTING``: the trial's DNS to the gateway goes to its proxy's responder.

        The engine's embedded DNS forwards a container's queries to its ``dns`` servers
        from the container's own network namespace, by UDP, or by TCP when the client
        asked by TCP (a large answer, or a client that prefers it): they come in on the
        bridge from its address, to port 53, and reach the responder on its own port.
        """
        assert self.proxy is not None and self.source is not None
        gateway, _port, dns = self.proxy
        return [
            ["-i", self.bridge, "-s", f"{self.source}/32", "-d", f"{gateway}/32", "-p", proto,
             "--dport", "53", *_comment(f"dns-{self.chain}"), "-j", "DNAT",
             "--to-destination", f"{gateway}:{dns}"]
            for proto in ("udp", "tcp")
        ]  # fmt: skip

    def _input_jump(self) -> list[str]:
        """``INPUT``: a compose project's packets to the host go to its chain first.

        Inserted above the host guard's drop of the whole bridge
        (:mod:`sandbox.docker.hostguard`, installed first), so what the chain drops is
        counted and logged as the trial's, and the main container's proxy ports on the
        project's gateway can be accepted; the chain drops everything else addressed to
        the host (``addrtype LOCAL``), and what falls off it meets the guard's drop.
        """
        return ["-i", self.bridge, *_comment(f"input-{self.chain}"), "-j", self.chain]

    def _redirect(self) -> None:
        """The trial's DNS redirects to its proxy's responder."""
        for redirect in self._dns_redirects():
            _delete_nat(redirect)
            _must("iptables", "-t", "nat", "-I", "PREROUTING", "1", *redirect)

    def install(self) -> None:
        """Create the chain (closed) and its dispatch rule (and IPv6's, by MAC address).

        Each table's chain and dispatch rule are written by one ``iptables-restore``
        (:func:`netfilter.restore`): one process and one atomic commit per table, so the
        dispatch rule never points at a chain that is only partly written.
        """
        chain = self.chain
        self._claim_file = _claim(chain)  # before the chain exists: no sweep may take it
        rules: list[list[str]] = []
        if self.kind == "E":
            rules += self._closed_rules()
        self.closed = self.kind == "E"
        self.only_proxy = False
        rules += self._proxy_rules()
        if self.proxy is not None and self.source is not None:
            self._redirect()
        for address in self.cluster:
            rules += self._refuse(["-d", f"{address}/32"], f"cluster:{address}/32")
        rules += self._refuse(["-m", "addrtype", "--dst-type", "LOCAL"], "host")
        for server in container_resolvers():
            for proto in ("udp", "tcp"):
                rules.append(["-d", f"{server}/32", "-p", proto, "--dport", "53",
                              *_comment("dns"), "-j", "RETURN"])  # fmt: skip
        for cidr, name in blocked_ranges():
            rules += self._refuse(["-d", cidr], f"{name}:{cidr}")
        if self.log is not None:
            self._logged = self.log.register(chain)
        if self.v6:
            # No phase gets IPv6 on docker: the chain drops every packet, counted as
            # this trial's (a container reaches IPv6 only by a raw frame of its own).
            _batch("ip6tables", [
                [f":{chain}"],
                *(["-A", chain, *rule] for rule in self._refuse([], "ipv6:::/0")),
                ["-I", DISPATCH, "1", *self._dispatch_v6()],
            ])  # fmt: skip
        _batch("iptables", [
            [f":{chain}"],
            *(["-A", chain, *rule] for rule in rules),
            ["-I", DISPATCH, "1", *self._dispatch()],
        ])  # fmt: skip
        if self.kind == "C":
            _delete_rule("iptables", "INPUT", self._input_jump())
            _must("iptables", "-I", "INPUT", "1", *self._input_jump())

    def attach_proxy(self, proxy: tuple[str, int, int]) -> None:
        """Give a compose project's chain its trial's egress proxy (:attr:`proxy`).

        Called once the main container's address (:attr:`source`) is known, before its
        first phase: the proxy's ports are accepted from it at the top of the chain (after
        the closed rules, if any; the chain sees its packets to the host through
        :meth:`_input_jump`), and its DNS to the gateway is redirected to the responder.
        """
        if self.kind != "C" or self.source is None:
            raise SandboxError("only a compose chain with its main container's address")
        self.proxy = proxy
        position = 1 + (len(self._closed_rules()) if self.closed else 0)
        for offset, rule in enumerate(self._proxy_rules()):
            _must("iptables", "-I", self.chain, str(position + offset), *rule)
        self._redirect()

    def open(self) -> None:
        """Let the trial through its chain (a ``public`` phase is about to start).

        Every change of a switch is one ``iptables-restore`` (one process, one commit).
        """
        commands: list[list[str]] = []
        if self.only_proxy:
            commands += (["-D", self.chain, *rule] for rule in self._allowlist_rules())
        if self.closed:
            commands += (["-D", self.chain, *rule] for rule in self._closed_rules())
        _batch("iptables", commands)
        self.only_proxy = self.closed = False

    def restrict(self) -> None:
        """Let the trial reach its egress proxy only (an ``allowlist`` phase is next)."""
        if self.proxy is None:
            raise SandboxError("an allowlist phase needs the trial's egress proxy")
        commands: list[list[str]] = []
        if not self.only_proxy:
            closed = len(self._closed_rules()) if self.closed else 0
            position = str(1 + closed + len(self._proxy_rules()))
            commands += (
                ["-I", self.chain, position, *rule] for rule in reversed(self._allowlist_rules())
            )
        if self.closed:
            commands += (["-D", self.chain, *rule] for rule in self._closed_rules())
        _batch("iptables", commands)
        self.only_proxy, self.closed = True, False

    def close(self) -> None:
        """Drop everything from the trial (a ``no-network`` phase is about to start)."""
        if not self.closed:
            _batch("iptables", [
                ["-I", self.chain, "1", *rule] for rule in reversed(self._closed_rules())
            ])  # fmt: skip
            self.closed = True

    def collect(self, phase: str) -> None:
        """Add the refusals since the last call to :attr:`events`.

        The drop rules' counters first (one event per rule, the count of record), then
        the packets the log kept, one event per destination (``logged``).
        """
        tools = ("iptables", "ip6tables") if self.v6 else ("iptables",)
        for tool in tools:
            self._collect_counters(tool, phase)
        if self.log is None or self._logged is None:
            return
        self.log.flush()
        listed, other = self._logged.drain()
        for (what, ip, protocol, port), packets in listed.items():
            event = {**self._event(phase, what, packets), "protocol": protocol, "ip": ip}
            if port is not None:
                event["port"] = port
            self.events.append({**event, "logged": True})
        for what, packets in other.items():
            # Past the trial's first destinations: summed, so the record stays bounded.
            event = {**self._event(phase, what, packets), "ip": "other", "logged": True}
            self.events.append(event)

    def _collect_counters(self, tool: str, phase: str) -> None:
        # Listed, then zeroed, by one call.
        listing = _ipt(tool, "-S", self.chain, "-v", "-Z")
        if listing.returncode != 0:
            return
        for line in listing.stdout.splitlines():
            comment = re.search(rf"--comment \"?{TAG}:([^\" ]+)\"?", line)
            counts = re.search(r"-c (\d+) (\d+)", line)
            if comment is None or counts is None or "-j DROP" not in line:
                continue
            packets = int(counts.group(1))
            if packets:
                self.events.append(self._event(phase, comment.group(1), packets))

    @staticmethod
    def _event(phase: str, what: str, packets: int) -> dict[str, Any]:
        """A refusal counted by the rule commented ``what`` (``name`` or ``name:range``)."""
        name, _, cidr = what.partition(":")
        return {
            "type": "network_refused",
            "phase": phase,
            "protocol": "ipv6" if name == "ipv6" else "ip",
            "reason": REASONS.get(name, name),
            "refused": name,
            "destination": cidr or name,
            "packets": packets,
        }

    def present(self) -> bool:
        """Whether the chain and its dispatch rule are in place."""
        return _ipt("iptables", "-C", DISPATCH, *self._dispatch()).returncode == 0

    def remove(self) -> None:
        """Delete the dispatch rules, then the chains, and stop keeping the trial's log."""
        try:
            self._remove()
        finally:
            if self._claim_file is not None:  # a chain left behind is a sweep's to remove
                self._claim_file.unlink(missing_ok=True)

    def _remove_batched(self) -> bool:
        """A plain trial's chains and dispatch rules deleted by one restore per table.

        Whether that held; when not (a rule of it is missing or doubled, or the chain has
        other references), nothing changed in that table and :meth:`_remove` finds and
        deletes every rule that names the chain, one by one.
        """
        if self.kind != "E" or self.proxy is not None or self.source is None:
            return False
        chain = self.chain
        batches = []
        if self.v6:
            batches.append(("ip6tables", self._dispatch_v6()))
        batches.append(("iptables", self._dispatch()))  # last: _remove looks for it first
        for tool, dispatch in batches:
            commands = [["-D", DISPATCH, *dispatch], ["-F", chain], ["-X", chain]]
            if netfilter.restore(tool, commands).returncode != 0:
                return False
        return True

    def _remove(self) -> None:
        if self.log is not None:
            self.log.unregister(self.chain)
        if self._remove_batched():
            return
        if _ipt("iptables", "-S", self.chain).returncode != 0:
            return
        if self.kind == "C" or self.source is not None:
            _delete_rule("iptables", DISPATCH, self._dispatch())
        for tool in _tools():
            for _target, spec in _dispatch_rules(tool):
                if _target == self.chain:
                    _delete_rule(tool, DISPATCH, spec)
        for _target, spec in _nat_rules():
            if _target == self.chain:
                _delete_nat(spec)
        for _target, spec in _input_jumps():
            if _target == self.chain:
                _delete_rule("iptables", "INPUT", spec)
        for tool in _tools():
            _drop_chain(tool, self.chain)


__all__ = [
    "BLOCKED_V4",
    "BRIDGE",
    "bridge_of",
    "DISPATCH",
    "LABEL",
    "NETWORK",
    "Swept",
    "SYSCTLS",
    "EgressRun",
    "EgressUnavailable",
    "TrialFilter",
    "blocked_ranges",
    "chain_name",
    "problem",
    "sweep",
]
