"""One docker trial's network: which network it joins, and each phase's policy on it.

A trial none of whose phases gets the internet has no network at all (``none``: loopback
and the gateway's in-container forwarder, which reaches the gateway over a unix socket).
One whose phases ever do joins the filtered network (:mod:`sandbox.docker.egress`), or
its compose project's, and is judged per phase by its own chain: the agent phase and the
verifier phase of one trial can differ, and so can each step's of a multi-step task (a
phase names its step: ``PhaseRequest.step``). :meth:`TrialNetwork.switch` runs when a phase
starts, after the supervisor reported every process of the previous phase dead (that is
when ``run_phase`` returns), so a process left over from a ``no-network`` phase never
sees the next phase's network; while no phase runs, the container keeps the last phase's
state, and a container is closed from its start until its first ``public`` phase.

A trial with an ``allowlist`` phase gets its own egress proxy
(:class:`sandbox.egress_proxy.ProxyServer`, a thread of the harness), bound on the
filtered network's gateway address: HTTP/CONNECT on one port, its DNS responder on
another (UDP and TCP), to which the trial's chain redirects the DNS the engine's embedded
resolver forwards to the gateway (the container's ``dns``). In an ``allowlist`` phase the chain
accepts only those two ports and drops everything else (:meth:`TrialFilter.restrict`); the
phase's environment names the proxy (``HTTP_PROXY``, ``HTTPS_PROXY`` and their lower-case
forms; ``NO_PROXY`` for loopback). The proxy takes each phase's policy at the switch and
stops with the trial.

Where the host filter cannot be installed (the harness is not root on the engine's host: a
docker-group user, the CI image, rootless Docker, a remote engine), a trial whose phases
get the internet is filtered inside its own network namespace instead
(:mod:`sandbox.docker.netns_holder`, :mod:`sandbox.docker.netns_rules`): a holder container
on the engine's default bridge owns the namespace and writes every phase's chain up front,
the trial's container joins it with no network capability, and a switch replaces one rule.
An ``allowlist`` trial's proxy and DNS responder then listen on no network at all: the
harness serves them on unix sockets in a 0700 dir of its own, which only the holder mounts,
and the holder relays ``127.0.0.1:3128`` (the proxy) and ``127.0.0.1:53`` (DNS, UDP and
TCP; the holder's ``resolv.conf``, which the trial's container shares, names it) of the
namespace to them; an ``allowlist`` phase's chain reaches loopback alone. The proxy makes
its connections from the harness's own network, judging each by the phase's list as on the
host filter. Compose sidecars with the internet still need the host filter and are refused
there before anything runs. The record's ``sandbox.egress`` says which filter held.

A compose task's proxy is bound on its project's gateway, once compose made the network
(:meth:`TrialNetwork.after_compose`); the main container's address gets the proxy's ports,
the DNS redirect and the ``INPUT`` jump at its first phase
(:meth:`TrialFilter.attach_proxy`). The engine's embedded DNS (``127.0.0.11``) answers the
service names itself and forwards every other name to the container's ``dns``, from the
container's own address, so the redirect applies as for a plain task (measured under runc
and ``runsc-net``). Traffic to the sidecars is bridged, never judged, and ``NO_PROXY``
names them (service names and addresses), so a tool honouring the proxy variables reaches
them directly. The sidecars' own egress is what it is in any compose trial with the
internet: the project's chain with the ``public`` rules, whatever the main container's
phase. The project's host guard (:mod:`sandbox.docker.hostguard`) drops what its
containers send to the host; its counters are the trial's events too
(:meth:`TrialNetwork.events`), with or without the internet, IPv4 and IPv6.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sandbox.backend import SandboxSpec
from sandbox.docker.egress import NETWORK, REASONS, EgressRun, TrialFilter, container_resolvers
from sandbox.docker.hostguard import HostGuard
from sandbox.docker.netns_holder import DNS_PORT, PROXY_PORT, NetnsHolder
from sandbox.docker.netns_rules import NetFacts, NetPlan
from sandbox.egress_proxy import ProxyServer
from sandbox.errors import PermanentStartError, SandboxError
from sandbox.network_policy import NO_NETWORK, NetworkPolicy

PUBLIC = NetworkPolicy(mode="public")
ROLES = ("agent", "verifier")
#: What an ``allowlist`` phase's tools do not send through the proxy: loopback.
NO_PROXY = "localhost,127.0.0.1,::1"


#: A namespaced allowlist trial's socket dir: ``<prefix><harness pid>-<random>`` in TMPDIR.
EGRESS_DIR_PREFIX = "harness-egress-"


def remove_stale_egress_dirs(parent: Path) -> list[Path]:
    """Remove the socket dirs under ``parent`` of harness processes that are gone.

    A harness killed with SIGKILL leaves its trials' dirs behind (dead sockets); the next
    allowlist trial on the host removes those of this user whose process is not alive.
    """
    removed: list[Path] = []
    for entry in parent.glob(f"{EGRESS_DIR_PREFIX}*-*"):
        pid = entry.name[len(EGRESS_DIR_PREFIX) :].split("-", 1)[0]
        if not pid.isdigit() or entry.is_symlink() or not entry.is_dir():
            continue
        try:
            if entry.stat().st_uid != os.geteuid():
                continue
            os.kill(int(pid), 0)
            continue  # still running
        except ProcessLookupError:
            pass
        except OSError:
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


class TrialNetwork:
    """The network side of one :class:`~sandbox.docker.backend.DockerSandbox`."""

    def __init__(self, spec: SandboxSpec, egress: EgressRun, *, namespace: bool = False) -> None:
        self.spec = spec
        self.egress = egress
        #: The host filter cannot be installed here: internet phases are filtered in the
        #: trial's own network namespace (its holder's).
        self.namespace = namespace
        self._holder: NetnsHolder | None = None
        self._plan: NetPlan | None = None
        self._filter: TrialFilter | None = None
        self._phase = ""
        self._compose_bridge: str | None = None
        self._compose_network: str | None = None
        #: The compose project's host guard, whose own drops are the trial's too.
        self._guard: HostGuard | None = None
        self._guard_events: list[dict[str, Any]] = []
        self._holder_events: list[dict[str, Any]] = []
        self._proxy: ProxyServer | None = None
        #: A namespaced allowlist trial's dir of the proxy's sockets (the holder mounts it).
        self._egress_dir: Path | None = None
        #: What an allowlist phase reaches without the proxy besides loopback: the
        #: compose sidecars' names and addresses.
        self._direct: tuple[str, ...] = ()
        #: The Ray cluster's nodes the namespace's or the chain's rules refuse (None: no
        #: rules written yet).
        self._cluster: tuple[str, ...] | None = None
        #: A compose project the namespace joins: its network and ``(subnet, gateway)``s.
        self._project: tuple[str, tuple[tuple[str, str | None], ...]] | None = None
        #: Its sidecars' addresses by name (the holder's host entries).
        self._sidecars: dict[str, str] = {}

    def policy(self, role: str, step: int | None = None) -> NetworkPolicy:
        """The network of a phase of ``role`` in ``step`` (``allow_internet`` without any).

        Raises:
            SandboxError: ``step`` is not one of the spec's steps.
        """
        if self.spec.networks or self.spec.step_networks:
            return self.spec.network_for(role, step)
        return PUBLIC if self.spec.allow_internet else NO_NETWORK

    def _policies(self) -> tuple[NetworkPolicy, ...]:
        """Every policy a phase of the trial may get, of any step (what is made up front)."""
        return self.spec.all_networks() or (self.policy("agent"),)

    @property
    def internet(self) -> bool:
        """Whether any phase of the trial, of any step, gets the internet."""
        return self.spec.allow_internet or any(p.internet for p in self._policies())

    @property
    def namespaced(self) -> bool:
        """Whether the trial's phases are filtered in its own namespace (its holder's)."""
        return self.namespace and self.internet

    def plain_network(self) -> str:
        """The engine network a container without sidecars joins (its holder's, if any)."""
        if self.namespaced:
            return self._holder.network_mode if self._holder is not None else "bridge"
        return NETWORK if self.internet else "none"

    def plan(self) -> NetPlan:
        """Every phase's policy, resolved once: each role's, and each step's of each role."""
        phases: dict[tuple[str, int | None], NetworkPolicy] = {
            (role, None): self.policy(role) for role in ROLES
        }
        for index in range(len(self.spec.step_networks)):
            phases.update({(role, index): self.policy(role, index) for role in ROLES})
        return NetPlan(phases)

    def start_holder(
        self,
        client: Any,
        image: str,
        *,
        name: str,
        labels: dict[str, str],
        host_addresses: tuple[str, ...],
    ) -> str:
        """Make the trial's namespace and write its rules; the trial's container joins it.

        Returns:
            The network mode the trial's container is created with.

        Raises:
            SandboxError: the holder did not start or could not write the rules.
        """
        self._plan = self.plan()
        self._cluster = self.egress.cluster
        egress_dir = self._start_namespace_proxy()
        project, subnets = self._project or (None, ())
        # On a project's network resolv.conf names the engine's own resolver (127.0.0.11)
        # whatever the holder asks for: its port 53 is redirected to the relay instead
        # (``embedded_dns_to``), and the relay is never named to the engine as a resolver
        # (a loopback one may be asked from the engine host's namespace).
        relay = egress_dir is not None
        holder = NetnsHolder.start(
            client, image, name=name, network="bridge", labels=labels,
            dns=["127.0.0.1"] if relay and project is None else None, egress_dir=egress_dir,
            extra_hosts=self._sidecars or None,
        )  # fmt: skip
        self._holder = holder
        facts = holder.facts()
        if project is not None:
            holder.join(project)
        if egress_dir is not None:
            holder.forward([
                ("tcp", PROXY_PORT, "proxy.sock"),
                ("tcp", DNS_PORT, "dns.sock"),
                ("udp", DNS_PORT, "dns.sock"),
            ])  # fmt: skip
        try:
            holder.load(
                self._plan,
                NetFacts(
                    gateway=facts.gateway,
                    subnets=facts.subnets,
                    host_addresses=host_addresses,
                    resolvers=facts.resolvers,
                    cluster=self._cluster,
                    peers=tuple(subnet for subnet, _gateway in subnets),
                    peer_gateways=tuple(gateway for _subnet, gateway in subnets if gateway),
                    embedded_dns_to="127.0.0.1" if project is not None else None,
                ),
            )
        except SandboxError as exc:
            raise SandboxError(
                f"{exc}; the holder runs the base image {image}, which must ship iptables: "
                "rebuild it with `bash images/bootstrap-base.sh`"
            ) from exc
        return holder.network_mode

    def ready(self, container: Any) -> None:
        """Make ahead what the first phase of ``container`` needs: its closed host chain.

        Called for a warm container (:mod:`sandbox.docker.warm`) once it runs, so that the
        trial that takes it switches an installed chain instead of writing one.
        """
        if self.internet and not self.namespaced and self.spec.compose_file is None:
            self._filter_of(container)

    def adopt(self, warm: TrialNetwork) -> None:
        """Take over the namespace (its holder and rules) or the chain ``warm`` made ahead.

        ``warm`` is a warm container's network of the same shape (the same policies: they
        share the warm pool's key); it owns nothing afterwards.
        """
        self._holder, warm._holder = warm._holder, None
        self._plan, warm._plan = warm._plan, None
        self._filter, warm._filter = warm._filter, None
        self._cluster, warm._cluster = warm._cluster, None

    def current(self) -> bool:
        """Whether the rules written so far refuse the Ray cluster's nodes as known now.

        A Ray worker gives the nodes before each trial (:attr:`EgressRun.cluster`); a warm
        container's rules written before a node joined are not the next trial's.
        """
        return self._cluster is None or self._cluster == self.egress.cluster

    def _start_namespace_proxy(self) -> str | None:
        """An allowlist trial's proxy on unix sockets alone, for the holder to relay.

        A trial on a compose project's network gets one too, whatever its phases: its
        DNS responder answers the namespace's queries in place of the engine's resolver
        (:attr:`~sandbox.docker.netns_rules.NetFacts.embedded_dns_to`).

        Returns:
            The sockets' dir (None: neither).

        Raises:
            PermanentStartError: the proxy cannot listen there.
        """
        if not self.allowlist and self._project is None:
            return None
        parent = Path(tempfile.gettempdir())
        remove_stale_egress_dirs(parent)
        self._egress_dir = Path(tempfile.mkdtemp(prefix=f"{EGRESS_DIR_PREFIX}{os.getpid()}-"))
        self._egress_dir.chmod(0o700)
        try:
            self._proxy = ProxyServer(
                self.policy("agent"), phase="agent", host=None, dns_port=None,
                unix_path=str(self._egress_dir / "proxy.sock"),
                dns_unix_path=str(self._egress_dir / "dns.sock"),
                overrides=self.egress.hosts,
            ).start()  # fmt: skip
        except OSError as exc:
            raise PermanentStartError(
                f"the allowlist egress proxy cannot listen in {self._egress_dir} ({exc}); "
                "is the temporary dir (TMPDIR) writable?"
            ) from exc
        return str(self._egress_dir)

    def _proxy_endpoint(self) -> tuple[str, int] | None:
        """Where the trial reaches its proxy: the holder's relay, or the proxy itself."""
        if self._proxy is None:
            return None
        if self._egress_dir is not None:
            return ("127.0.0.1", PROXY_PORT)
        return self._proxy.address

    def _dns_endpoint(self) -> tuple[str, int] | None:
        """Where the trial reaches its DNS responder (as :meth:`_proxy_endpoint`)."""
        if self._proxy is None:
            return None
        if self._egress_dir is not None:
            return ("127.0.0.1", DNS_PORT)
        if self._proxy.address is None or self._proxy.dns_address is None:
            return None
        return (self._proxy.address[0], self._proxy.dns_address[1])

    @property
    def allowlist(self) -> bool:
        """Whether a phase of the trial, of any step, is an ``allowlist`` (it gets a proxy)."""
        return any(p.mode == "allowlist" for p in self._policies())

    def prepare(self) -> None:
        """Install the filter if a phase needs it, and the proxy if one is an allowlist.

        A task with a compose file gets its proxy later: on its project's gateway
        (:meth:`after_compose`), or on the filtered network's when it has no sidecars
        (:meth:`start_proxy`). In a namespace nothing is made here: the holder makes it
        all (:meth:`start_holder`), a compose project's network joined
        (:meth:`join_project`).

        Raises:
            PermanentStartError: a host that cannot filter, or a proxy that cannot bind.
        """
        if self.namespaced:
            return
        if self.internet:
            self.egress.ensure()
        if self.spec.compose_file is None:
            self.start_proxy()

    def start_proxy(self, gateway: str | None = None, network: str = NETWORK) -> None:
        """Start the trial's egress proxy on ``gateway`` (an allowlist trial; once).

        Not in a namespace: its holder relays the proxy there (:meth:`start_holder`).

        Args:
            gateway: The host's address on ``network`` (None: the filtered network's).
            network: The engine network the container joins, for the error message.

        Raises:
            PermanentStartError: the proxy cannot bind there.
        """
        if self.namespaced or not self.allowlist or self._proxy is not None:
            return
        gateway = gateway or self.egress.gateway()
        first = self.policy("agent")
        try:
            self._proxy = ProxyServer(
                first, phase="agent", host=gateway, port=0, dns_port=0,
                overrides=self.egress.hosts,
            ).start()  # fmt: skip
        except OSError as exc:
            raise PermanentStartError(
                f"the allowlist egress proxy cannot listen on {gateway} ({exc}); is the "
                f"{network} network's bridge up?"
            ) from exc

    def dns(self, network: str) -> tuple[str, ...] | None:
        """The resolvers of a container on ``network`` (the engine's network it joins).

        An allowlist trial's proxy gateway; else, on any engine network but ``none``, the
        host's non-loopback resolvers, always given (:func:`container_resolvers`: never
        the engine's own choice, which asks a loopback resolver from the host's
        namespace). None without a network, and in a namespace: the trial's container
        shares its holder's ``resolv.conf``.
        """
        if network == "none" or network.startswith("container:"):
            return None
        if self._egress_dir is None and self._proxy is not None and self._proxy.address:
            return (self._proxy.address[0],)
        return container_resolvers()

    def phase_env(self, role: str, step: int | None = None) -> dict[str, str]:
        """What a phase of ``role`` in ``step`` adds to its environment (an allowlist's proxy)."""
        endpoint = self._proxy_endpoint()
        if endpoint is None or self.policy(role, step).mode != "allowlist":
            return {}
        host, port = endpoint
        url = f"http://{host}:{port}"
        env = {name: url for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}
        no_proxy = ",".join([NO_PROXY, *self._direct])
        env.update({"NO_PROXY": no_proxy, "no_proxy": no_proxy})
        return env

    def join_project(
        self,
        network: str,
        subnets: tuple[tuple[str, str | None], ...],
        sidecars: Mapping[str, str],
    ) -> None:
        """A compose project the trial's namespace joins, before its holder starts.

        The holder is on the project's network as well as its own, with the sidecars as
        host entries; its rules reach the project's subnets (not their gateways) in every
        phase (:mod:`sandbox.docker.netns_rules`). An ``allowlist`` phase reaches the
        sidecars directly (``NO_PROXY``).

        Args:
            network: The project's engine network.
            subnets: Its IPv4 ``(subnet, gateway)`` pairs, as the engine made them.
            sidecars: Each sidecar's address on it, by service name.

        Raises:
            PermanentStartError: the engine gave the network no IPv4 subnet.
        """
        if not subnets:
            raise PermanentStartError(
                f"the compose network {network} has no IPv4 subnet for the trial's namespace "
                "to reach its sidecars on; leave the default network's ipam to the engine"
            )
        self._project = (network, subnets)
        self._sidecars = dict(sidecars)
        self._direct = tuple(sorted(sidecars)) + tuple(sorted(set(sidecars.values())))

    def before_compose(self, bridge: str, network: str, guard: HostGuard | None = None) -> None:
        """Filter the compose project's bridge before any of its containers starts.

        Args:
            bridge: The project's bridge.
            network: The project's engine network.
            guard: The project's host guard, already installed (the chain's ``INPUT``
                jump goes above it); its drops become the trial's events too.
        """
        self._guard = guard
        if not self.internet:
            return
        self._compose_bridge, self._compose_network = bridge, network
        self._filter = TrialFilter(
            kind="C", key=bridge, bridge=bridge, log=self.egress.log, cluster=self.egress.cluster
        )
        self._filter.install()
        self.egress.chains.add(self._filter.chain)

    def after_compose(self, sidecars: Mapping[str, str]) -> None:
        """Once the project runs: its chain checked, and an allowlist trial's proxy started.

        Args:
            sidecars: Each sidecar's address on the project's network, by service name
                (they go in an allowlist phase's ``NO_PROXY``: the sidecars are reached
                directly, never through the proxy).

        Raises:
            PermanentStartError: the project's network has no IPv4 gateway on this host
                for the proxy, or the proxy cannot bind there.
        """
        if self._filter is not None and not self._filter.present():
            # A sweep took it while the bridge did not exist yet.
            self._filter.install()
        if not self.allowlist or self._compose_network is None:
            return
        self._direct = tuple(sorted(sidecars)) + tuple(sorted(set(sidecars.values())))
        self.start_proxy(self._project_gateway(), self._compose_network)

    def _project_gateway(self) -> str:
        """The compose project's gateway: the host's IPv4 address on its bridge."""
        from sandbox.docker.sdk import call

        assert self._compose_network is not None
        network = call(self.egress.client.networks.get, self._compose_network)
        for config in (network.attrs.get("IPAM") or {}).get("Config") or []:
            gateway = str(config.get("Gateway") or "")
            if gateway and ":" not in gateway:
                return gateway.split("/")[0]
        raise PermanentStartError(
            f"the compose network {self._compose_network} has no IPv4 gateway, where an "
            "allowlist phase's egress proxy listens; leave the default network's ipam to "
            "the engine"
        )

    def switch(self, role: str, container: Any, step: int | None = None) -> None:
        """Set the container's network for the phase of ``role`` (in ``step``) about to start.

        Called once the previous phase's processes are all dead. Each phase gets exactly
        its own step's policy (an allowlist its own hosts, never another step's).
        """
        policy = self.policy(role, step)  # an unknown step is refused, whatever the network
        if container is None:
            return
        if self._holder is not None and self._plan is not None:
            self._collect_holder()
            self._phase = role
            if self._proxy is not None:
                self._proxy.switch(policy, role)
            self._holder.switch(self._plan.chain(role, step))
            return
        self._collect_guard()
        if not self.internet:
            self._phase = role
            return
        flt = self._filter_of(container)
        flt.collect(self._phase or "start")
        self._phase = role
        if self._proxy is not None:
            self._proxy.switch(policy, role)
        if policy.mode == "allowlist":
            flt.restrict()
        elif policy.internet:
            flt.open()
        else:
            flt.close()

    def _filter_of(self, container: Any) -> TrialFilter:
        from sandbox.docker.sdk import call

        if self._filter is not None and self._filter.source is not None:
            return self._filter
        call(container.reload)
        networks = (container.attrs.get("NetworkSettings") or {}).get("Networks") or {}
        if self._filter is None:  # a plain task on the filtered network
            endpoint = networks.get(NETWORK) or {}
            address = str(endpoint.get("IPAddress") or "")
            if not address:
                raise PermanentStartError(f"the trial container has no address on {NETWORK}")
            self._cluster = self.egress.cluster
            self._filter = TrialFilter(
                kind="E", key=str(container.name), bridge=self.egress.bridge, source=address,
                mac=str(endpoint.get("MacAddress") or "") or None, log=self.egress.log,
                cluster=self._cluster,
            )  # fmt: skip
            if self._proxy is not None:
                self._filter.proxy = self._proxy_ports()
            self._filter.install()
            self.egress.chains.add(self._filter.chain)
        else:  # compose: the main container's address on the project's network
            assert self._compose_network is not None
            address = str((networks.get(self._compose_network) or {}).get("IPAddress") or "")
            if not address:
                raise PermanentStartError(
                    f"the trial container has no address on {self._compose_network}"
                )
            self._filter.source = address
            if self._proxy is not None:
                self._filter.attach_proxy(self._proxy_ports())
        return self._filter

    def _proxy_ports(self) -> tuple[str, int, int]:
        assert self._proxy is not None
        if self._proxy.address is None or self._proxy.dns_address is None:
            raise SandboxError("the allowlist egress proxy is not listening")
        host, port = self._proxy.address
        return host, port, self._proxy.dns_address[1]

    def events(self) -> list[dict[str, Any]]:
        """The refusals since the last call (``network_refused`` events).

        The filter's: one per rule and phase, with a packet count, then one per exact
        destination its log kept (``logged``); the proxy's: one per refused request, DNS
        query or tunnel, with its host or address.
        """
        events: list[dict[str, Any]] = []
        self._collect_holder()
        events, self._holder_events = self._holder_events, []
        if self._filter is not None:
            self._filter.collect(self._phase or "start")
            events, self._filter.events = events + self._filter.events, []
        self._collect_guard()
        events, self._guard_events = events + self._guard_events, []
        if self._proxy is not None:
            events += self._proxy.events()
        return events

    def _collect_holder(self) -> None:
        """The namespace's refusals since the last call, as the current phase's events."""
        if self._holder is None:
            return
        for reason, packets in sorted(self._holder.refusals().items()):
            self._holder_events.append({
                "type": "network_refused",
                "phase": self._phase or "start",
                "protocol": "ipv6" if reason == "ipv6" else "ip",
                "reason": REASONS.get(reason, reason),
                "refused": reason,
                "packets": packets,
                "filter": "namespace",
            })  # fmt: skip

    def remove_holder(self) -> None:
        """Remove the namespace's holder (after the trial's container: it keeps the rules)."""
        holder, self._holder = self._holder, None
        if holder is not None:
            holder.remove()

    def _collect_guard(self) -> None:
        """The host guard's drops since the last call, as the current phase's events.

        One per table (``protocol`` ``ip`` or ``ipv6``), the project's whole: the rule
        matches the bridge, not a container. No destinations: the guard does not log.
        """
        if self._guard is None:
            return
        for tool, packets in self._guard.dropped().items():
            self._guard_events.append({
                "type": "network_refused",
                "phase": self._phase or "start",
                "protocol": "ipv6" if tool == "ip6tables" else "ip",
                "reason": REASONS["host"],
                "refused": "host",
                "destination": "host",
                "packets": packets,
            })  # fmt: skip

    def remove(self) -> None:
        """Close the trial, delete its chain (before its container goes), stop its proxy."""
        try:
            self._collect_guard()
            if self._filter is not None:
                self._filter.collect(self._phase or "start")
                self._filter.remove()
                self.egress.chains.discard(self._filter.chain)
        finally:
            try:
                if self._proxy is not None:
                    try:
                        self._proxy.close()
                    except (OSError, RuntimeError, TimeoutError) as exc:
                        raise SandboxError(f"the trial's egress proxy did not stop: {exc}") from exc
            finally:
                if self._egress_dir is not None:
                    shutil.rmtree(self._egress_dir, ignore_errors=True)

    def describe(self) -> dict[str, Any]:
        """Record facts: each phase's policy as this backend enforced it."""
        facts: dict[str, Any] = {
            "policies": {role: self.policy(role).to_json() for role in ROLES},
        }
        if self.spec.step_networks:  # a multi-step task: each step's, by index
            facts["step_policies"] = [
                {role: self.policy(role, index).to_json() for role in ROLES}
                for index in range(len(self.spec.step_networks))
            ]
        if self._filter is not None:
            facts["egress_chain"] = self._filter.chain
        if self._holder is not None:
            facts["egress"] = "namespace"
            facts["egress_namespace"] = str(self._holder.container.id)[:12]
        elif self.internet:
            facts["egress"] = "host"
            facts["egress_log"] = self.egress.log_status()
        proxy, dns = self._proxy_endpoint(), self._dns_endpoint()
        if proxy is not None:
            facts["egress_proxy"] = f"{proxy[0]}:{proxy[1]}"
        if dns is not None:
            facts["egress_dns"] = f"{dns[0]}:{dns[1]}"
        return facts


__all__ = ["EGRESS_DIR_PREFIX", "PUBLIC", "TrialNetwork", "remove_stale_egress_dirs"]
