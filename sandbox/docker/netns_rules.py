"""A trial's network rules inside its own network namespace: one pure function of its plan.

The host-firewall filter (:mod:`sandbox.docker.egress`) needs root on the engine's host.
This is the other way, built only from what the engine's API can create: the trial's
network namespace is owned by a small harness-made container holding ``CAP_NET_ADMIN`` in
that namespace alone (:mod:`sandbox.docker.netns_holder`); the trial's container joins it
(``network_mode = container:<holder>``) with no network capability, so nothing in the trial
can change what is written here. One mechanism for runc and gVisor (``runsc-net`` uses the
namespace it is put in), rootful or rootless engines, local or remote.

:func:`ruleset` turns a trial's :class:`NetPlan` (every phase's policy, resolved once) and
the :class:`NetFacts` of its namespace into the input of ``iptables-restore`` and
``ip6tables-restore``: every phase's chain made up front, so a phase switch is one rule
replaced (:func:`switch_args`), never a round of tools. In each namespace:

- ``OUTPUT`` accepts loopback, then jumps to the current phase's chain, which judges every
  other packet by its destination alone: a flow a ``public`` phase opened (a UDP
  "connection" in conntrack included) carries nothing once the namespace is closed. The
  policy is ``DROP``: a namespace whose rules are not loaded yet sends nothing.
- ``HXN-closed`` (``no-network``): loopback only, every other packet counted and rejected.
- ``HXN-allowlist`` (``allowlist``): loopback only too, every other packet counted and
  rejected as ``allowlist``: the phase's egress proxy and DNS responder are reached on the
  namespace's loopback, where the holder forwards them to the harness's unix sockets
  (:mod:`sandbox.docker.netns_holder`); the proxy judges each request by the phase's list.
- ``HXN-public``: rejects, each by its own counted rule, the namespace's gateway and every
  address of the engine's host (the harness's own and the engine's answer), the
  namespace's own subnets (other trials, the bridge), the Ray cluster's nodes, then the
  private, loopback, link-local, CGNAT, multicast and reserved ranges and the metadata
  address (:data:`~sandbox.docker.egress.BLOCKED_V4`); it lets through DNS to the
  namespace's own resolvers (port 53, UDP and TCP) before those rejections and the rest of
  the internet after them.
- A compose task's namespace is on its project's network too: every chain first rejects
  that network's gateway (no one holds it: the engine-made network has no host address,
  :mod:`sandbox.docker.compose`) and accepts the rest of its subnet (the sidecars), in
  every phase, as the host filter does; ``INPUT`` accepts what the sidecars open.
- On a project's network the engine's resolver (``127.0.0.11``, on loopback) is never
  asked: the ``nat`` table sends its port 53 to the trial's DNS relay, which answers by the
  phase's policy, and every chain refuses anything else sent to it
  (:attr:`NetFacts.embedded_dns_to`). The engine's resolver would forward what it does not
  know from a namespace of the engine's choosing, which for a resolver on the host's
  loopback is the engine host's own on some engines, past the trial's rules.
- IPv6: only loopback, whatever the phase (``public`` is IPv4 only, as on the host filter).
- ``INPUT`` and ``FORWARD`` drop what was not asked for: nothing outside the namespace
  opens a connection to the trial, and it routes nothing.

Every rule that refuses carries a comment naming why (``hx:<reason>``), by which
:func:`parse_counters` reads the refusals back as the trial's events.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sandbox.docker.egress import BLOCKED_V4
from sandbox.network_policy import NetworkMode, NetworkPolicy

#: The chain of each mode a phase can be in.
CHAINS: dict[str, str] = {
    "no-network": "HXN-closed",
    "public": "HXN-public",
    "allowlist": "HXN-allowlist",
}
#: Where ``OUTPUT`` sends a phase: its rule number in ``OUTPUT`` (after loopback),
#: replaced at each switch.
PHASE_RULE = 2
_COMMENT = "hx:"
_COUNTER = re.compile(
    r"^\s*(?P<packets>\d+)\s+(?P<bytes>\d+)\s+\S+.*?/\* hx:(?P<reason>[a-z0-9-]+) \*/"
)


@dataclass(frozen=True)
class NetPlan:
    """Every phase's policy of one trial, resolved once: ``(role, step) -> policy``.

    ``step`` is None for a single-step task. The first phase's chain is where the
    namespace starts; ``closed`` until then.
    """

    phases: Mapping[tuple[str, int | None], NetworkPolicy]

    def modes(self) -> set[NetworkMode]:
        """The modes any phase of the trial is in."""
        return {policy.mode for policy in self.phases.values()}

    def chain(self, role: str, step: int | None = None) -> str:
        """The chain of a phase (``closed`` for a phase the plan does not name)."""
        policy = self.phases.get((role, step)) or self.phases.get((role, None))
        if policy is None:
            return CHAINS["no-network"]
        if policy.mode not in CHAINS:
            raise ValueError(f"network mode {policy.mode!r} has no in-namespace rules")
        return CHAINS[policy.mode]


@dataclass(frozen=True)
class NetFacts:
    """What the namespace's rules must know of where it is.

    Attributes:
        gateway: The namespace's default gateway (the engine's bridge, or slirp's host).
        subnets: The namespace's on-link IPv4 subnets: the bridge other trials are on.
        host_addresses: IPv4 addresses of the engine's host: the harness's own when the
            engine is local, and those the engine's host network holds, asked of the
            engine (:mod:`sandbox.docker.engine_host`).
        resolvers: IPv4 resolvers of the namespace (its ``resolv.conf``): port 53 to
            these is DNS, not a private address, in a ``public`` phase.
        cluster: Ray cluster nodes, refused in every phase.
        peers: A compose task's project subnets (its sidecars), reached in every phase.
        peer_gateways: Those subnets' gateways, refused in every phase.
        embedded_dns_to: Where the namespace's queries to the engine's embedded DNS
            (``127.0.0.11`` port 53, a project network's resolver) go instead: the
            trial's relay on the namespace's loopback, whose responder answers by the
            phase's policy. Everything else sent to ``127.0.0.11`` is refused in every
            phase: the engine's resolver forwards what it does not know from a namespace
            of the engine's choosing (the engine host's own, for a loopback resolver, on
            some engines), past any rule of the trial's. None: no project network.
    """

    gateway: str | None = None
    subnets: tuple[str, ...] = ()
    host_addresses: tuple[str, ...] = ()
    resolvers: tuple[str, ...] = ()
    cluster: tuple[str, ...] = field(default_factory=tuple)
    peers: tuple[str, ...] = ()
    peer_gateways: tuple[str, ...] = ()
    embedded_dns_to: str | None = None


#: The engine's embedded DNS, in every container on a user-defined network.
EMBEDDED_DNS = "127.0.0.11"


def _v4(values: Iterable[str]) -> list[str]:
    """The IPv4 addresses or networks among ``values``, normalized, in order, once each."""
    found: list[str] = []
    for value in values:
        try:
            net = ipaddress.ip_network(value, strict=False)
        except ValueError:
            continue
        if net.version == 4 and str(net) not in found:
            found.append(str(net))
    return found


def _reject(chain: str, dest: str, reason: str, proto: str | None = None) -> list[str]:
    spec = f"-A {chain} -d {dest}"
    if proto is not None:
        spec += f" -p {proto}"
    comment = f'-m comment --comment "{_COMMENT}{reason}"'
    reject = "--reject-with tcp-reset" if proto == "tcp" else "--reject-with icmp-port-unreachable"
    return [f"{spec} {comment} -j REJECT {reject}"]


def _peers(chain: str, facts: NetFacts) -> list[str]:
    """A chain's first rules: the sidecars' gateways refused, then their subnets reached.

    With the engine's embedded DNS redirected, what else is sent to it (its own ports,
    which forward from wherever the engine decides) is refused first.
    """
    lines: list[str] = []
    if facts.embedded_dns_to is not None:
        lines += _reject(chain, f"{EMBEDDED_DNS}/32", "engine-dns", "tcp")
        lines += _reject(chain, f"{EMBEDDED_DNS}/32", "engine-dns")
    for gateway in _v4(facts.peer_gateways):
        lines += _reject(chain, gateway, "gateway", "tcp")
        lines += _reject(chain, gateway, "gateway")
    lines += [f"-A {chain} -d {subnet} -j ACCEPT" for subnet in _v4(facts.peers)]
    return lines


def _public(facts: NetFacts) -> list[str]:
    chain = CHAINS["public"]
    lines: list[str] = []
    for cidr in _v4(facts.cluster):
        lines += _reject(chain, cidr, "cluster", "tcp")
        lines += _reject(chain, cidr, "cluster")
    lines += _peers(chain, facts)
    for resolver in _v4(facts.resolvers):
        for proto in ("udp", "tcp"):
            lines.append(f"-A {chain} -d {resolver} -p {proto} --dport 53 -j ACCEPT")
    named = [(a, "gateway") for a in _v4([facts.gateway] if facts.gateway else [])]
    named += [(a, "host") for a in _v4(facts.host_addresses)]
    named += [(s, "host-subnet") for s in _v4(facts.subnets)]
    named += list(BLOCKED_V4)
    for cidr, reason in named:
        lines += _reject(chain, cidr, reason, "tcp")
        lines += _reject(chain, cidr, reason)
    lines.append(f"-A {chain} -j ACCEPT")
    return lines


def ruleset(plan: NetPlan, facts: NetFacts) -> tuple[str, str]:
    """The ``iptables-restore`` and ``ip6tables-restore`` inputs of one trial's namespace.

    Every chain the plan's phases use is made; ``OUTPUT`` starts at ``closed``.
    """
    modes = plan.modes() | {"no-network"}
    unknown = modes - set(CHAINS)
    if unknown:
        raise ValueError(f"network modes {sorted(unknown)} have no in-namespace rules")
    closed = CHAINS["no-network"]
    v4 = ["*filter", ":INPUT DROP [0:0]", ":FORWARD DROP [0:0]", ":OUTPUT DROP [0:0]"]
    v4 += [f":{CHAINS[mode]} - [0:0]" for mode in sorted(modes)]
    v4 += [
        "-A INPUT -i lo -j ACCEPT",
        "-A INPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT",
        *[f"-A INPUT -s {gateway} -j DROP" for gateway in _v4(facts.peer_gateways)],
        *[f"-A INPUT -s {subnet} -j ACCEPT" for subnet in _v4(facts.peers)],
        # The engine's own resolver is on loopback too: judged by the phase when redirected.
        "-A OUTPUT -o lo -j ACCEPT"
        if facts.embedded_dns_to is None
        else f"-A OUTPUT -o lo ! -d {EMBEDDED_DNS}/32 -j ACCEPT",
        f"-A OUTPUT -j {closed}",
        *_peers(closed, facts),
        f'-A {closed} -p tcp -m comment --comment "{_COMMENT}closed" -j REJECT '
        "--reject-with tcp-reset",
        f'-A {closed} -m comment --comment "{_COMMENT}closed" -j REJECT '
        "--reject-with icmp-port-unreachable",
    ]
    if "public" in modes:
        v4 += _public(facts)
    if "allowlist" in modes:
        allowlist = CHAINS["allowlist"]
        v4 += _peers(allowlist, facts)
        v4 += [
            f'-A {allowlist} -p tcp -m comment --comment "{_COMMENT}allowlist" -j REJECT '
            "--reject-with tcp-reset",
            f'-A {allowlist} -m comment --comment "{_COMMENT}allowlist" -j REJECT '
            "--reject-with icmp-port-unreachable",
        ]
    v4.append("COMMIT")
    if facts.embedded_dns_to is not None:
        # The engine's own redirects go (the table is replaced): its resolver is not asked.
        target = _v4([facts.embedded_dns_to])[0].removesuffix("/32")
        v4 += ["*nat", ":PREROUTING ACCEPT [0:0]", ":INPUT ACCEPT [0:0]",
               ":OUTPUT ACCEPT [0:0]", ":POSTROUTING ACCEPT [0:0]"]  # fmt: skip
        v4 += [
            f"-A OUTPUT -d {EMBEDDED_DNS}/32 -p {proto} --dport 53 -j DNAT "
            f"--to-destination {target}:53"
            for proto in ("udp", "tcp")
        ]
        v4.append("COMMIT")
    v6 = [
        "*filter",
        ":INPUT DROP [0:0]",
        ":FORWARD DROP [0:0]",
        ":OUTPUT DROP [0:0]",
        "-A INPUT -i lo -j ACCEPT",
        "-A OUTPUT -o lo -j ACCEPT",
        f'-A OUTPUT -m comment --comment "{_COMMENT}ipv6" -j REJECT',
        "COMMIT",
    ]
    return "\n".join(v4) + "\n", "\n".join(v6) + "\n"


@dataclass(frozen=True)
class SidecarRules:
    """The rules of one compose sidecar's own namespace, as ``iptables -S`` lists them.

    Written canonically, so the very lines restored are the lines read back: the sidecar
    starts only once its namespace lists exactly these (:mod:`sandbox.docker.sidecar_netns`).
    """

    v4: tuple[str, ...]
    v6: tuple[str, ...]

    @staticmethod
    def restore(listing: tuple[str, ...]) -> str:
        """The ``iptables-restore`` input (``filter`` table) of a listing."""
        lines = ["*filter"]
        lines += [
            f":{line.split()[1]} {line.split()[2]} [0:0]"
            for line in listing
            if line.startswith("-P ")
        ]
        lines += [line for line in listing if line.startswith("-A ")]
        return "\n".join([*lines, "COMMIT"]) + "\n"


def sidecar_rules(peers: Iterable[tuple[str, str | None]]) -> SidecarRules:
    """A sidecar's namespace: it sends to its project's unicast peers and loopback only.

    ``peers`` are the project network's ``(subnet, gateway)`` pairs, as the engine made
    them. ``OUTPUT`` drops by policy; it accepts loopback (the engine's resolver
    included, which answers no public name on an internal network), then each subnet,
    but never its gateway, its network address or its broadcast: no broadcast, no
    multicast, nothing to the gateway or any other address of the engine's host leaves
    the namespace, so none reaches the host's sockets through the bridge. ``INPUT``
    accepts (the main container and the other sidecars open connections to it); nothing
    is forwarded. IPv6: loopback only, both ways.
    """
    drops: list[str] = []
    accepts: list[str] = []
    for subnet, gateway in peers:
        try:
            net = ipaddress.ip_network(subnet, strict=False)
        except ValueError:
            continue
        if not isinstance(net, ipaddress.IPv4Network):
            continue
        special = [net.network_address, net.broadcast_address]
        if gateway:
            special.insert(1, ipaddress.IPv4Address(gateway))
        for address in dict.fromkeys(special):
            line = f"-A OUTPUT -d {address}/32 -j DROP"
            if line not in drops:
                drops.append(line)
        accepts.append(f"-A OUTPUT -d {net} -j ACCEPT")
    v4 = (
        "-P INPUT ACCEPT",
        "-P FORWARD DROP",
        "-P OUTPUT DROP",
        "-A OUTPUT -m addrtype --dst-type BROADCAST -j DROP",
        "-A OUTPUT -d 224.0.0.0/4 -j DROP",
        "-A OUTPUT -o lo -j ACCEPT",
        *drops,
        *dict.fromkeys(accepts),
    )
    v6 = (
        "-P INPUT DROP",
        "-P FORWARD DROP",
        "-P OUTPUT DROP",
        "-A INPUT -i lo -j ACCEPT",
        "-A OUTPUT -o lo -j ACCEPT",
    )
    return SidecarRules(v4=v4, v6=v6)


def switch_args(chain: str) -> list[str]:
    """``iptables`` arguments that send ``OUTPUT`` to ``chain`` (one rule replaced)."""
    if chain not in CHAINS.values():
        raise ValueError(f"{chain!r} is not a phase chain")
    return ["-w", "-R", "OUTPUT", str(PHASE_RULE), "-j", chain]


def parse_counters(listing: str) -> dict[str, int]:
    """Packets refused by reason, from ``iptables -L -v -x -n`` (and ``-Z``) output."""
    counts: dict[str, int] = {}
    for line in listing.splitlines():
        match = _COUNTER.match(line)
        if match is None or "REJECT" not in line:
            continue
        packets = int(match.group("packets"))
        if packets:
            reason = match.group("reason")
            counts[reason] = counts.get(reason, 0) + packets
    return counts


__all__ = [
    "CHAINS",
    "EMBEDDED_DNS",
    "PHASE_RULE",
    "NetFacts",
    "NetPlan",
    "SidecarRules",
    "parse_counters",
    "ruleset",
    "sidecar_rules",
    "switch_args",
]
