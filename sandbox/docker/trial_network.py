"""One docker trial's network: which network it joins, and each phase's policy on it.

A trial none of whose phases gets the internet has no network at all (``none``: loopback
and the gateway's in-container forwarder, which reaches the gateway over a unix socket).
One whose phases ever do joins the filtered network (:mod:`sandbox.docker.egress`), or
its compose project's, and is judged per phase by its own chain: the agent phase and the
verifier phase of one trial can differ. :meth:`TrialNetwork.switch` runs when a phase
starts, after the supervisor reported every process of the previous phase dead (that is
when ``run_phase`` returns), so a process left over from a ``no-network`` phase never
sees the next phase's network; while no phase runs, the container keeps the last phase's
state, and a container is closed from its start until its first ``public`` phase.

``allowlist`` is refused on this backend: its egress proxy is not wired in yet.
"""

from __future__ import annotations

from typing import Any

from sandbox.backend import SandboxSpec
from sandbox.docker.egress import NETWORK, EgressRun, TrialFilter
from sandbox.errors import PermanentStartError
from sandbox.network_policy import NO_NETWORK, NetworkPolicy

PUBLIC = NetworkPolicy(mode="public")
ROLES = ("agent", "verifier")


class TrialNetwork:
    """The network side of one :class:`~sandbox.docker.backend.DockerSandbox`."""

    def __init__(self, spec: SandboxSpec, egress: EgressRun) -> None:
        self.spec = spec
        self.egress = egress
        self._filter: TrialFilter | None = None
        self._phase = ""
        self._compose_bridge: str | None = None
        self._compose_network: str | None = None

    def policy(self, role: str) -> NetworkPolicy:
        """The network of a phase of ``role`` (``allow_internet`` without per-phase ones)."""
        if self.spec.networks:
            return self.spec.network_for(role)
        return PUBLIC if self.spec.allow_internet else NO_NETWORK

    @property
    def internet(self) -> bool:
        """Whether any phase of the trial gets the internet."""
        return self.spec.allow_internet or any(self.policy(r).internet for r in ROLES)

    def plain_network(self) -> str:
        """The engine network a container without sidecars joins."""
        return NETWORK if self.internet else "none"

    def prepare(self) -> None:
        """Refuse what this backend cannot enforce; install the filter if a phase needs it.

        Raises:
            PermanentStartError: an ``allowlist`` phase, or a host that cannot filter.
        """
        for role in ROLES:
            policy = self.policy(role)
            if policy.mode == "allowlist":
                raise PermanentStartError(
                    f'[{role}] network_mode = "allowlist" is not supported on the docker '
                    "backend yet (its egress proxy is not wired in): use public or "
                    "no-network"
                )
        if self.internet:
            self.egress.ensure()

    def before_compose(self, bridge: str, network: str) -> None:
        """Filter the compose project's bridge before any of its containers starts."""
        if not self.internet:
            return
        self._compose_bridge, self._compose_network = bridge, network
        self._filter = TrialFilter(kind="C", key=bridge, bridge=bridge)
        self._filter.install()
        self.egress.chains.add(self._filter.chain)

    def after_compose(self) -> None:
        """Put the chain back if a sweep took it while the bridge did not exist yet."""
        if self._filter is not None and not self._filter.present():
            self._filter.install()

    def switch(self, role: str, container: Any) -> None:
        """Set the container's network for the phase of ``role`` about to start.

        Called once the previous phase's processes are all dead.
        """
        if not self.internet or container is None:
            return
        flt = self._filter_of(container)
        flt.collect(self._phase or "start")
        self._phase = role
        if self.policy(role).internet:
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
            address = str((networks.get(NETWORK) or {}).get("IPAddress") or "")
            if not address:
                raise PermanentStartError(f"the trial container has no address on {NETWORK}")
            self._filter = TrialFilter(kind="E", key=str(container.name), source=address)
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
        return self._filter

    def events(self) -> list[dict[str, Any]]:
        """The refusals since the last call (``network_refused`` events).

        One per destination range and phase, with a packet count.
        """
        if self._filter is None:
            return []
        self._filter.collect(self._phase or "start")
        events, self._filter.events = self._filter.events, []
        return events

    def remove(self) -> None:
        """Close the trial and delete its chain (before its container goes)."""
        if self._filter is not None:
            self._filter.collect(self._phase or "start")
            self._filter.remove()
            self.egress.chains.discard(self._filter.chain)

    def describe(self) -> dict[str, Any]:
        """Record facts: each phase's policy as this backend enforced it."""
        facts: dict[str, Any] = {
            "policies": {role: self.policy(role).to_json() for role in ROLES},
        }
        if self._filter is not None:
            facts["egress_chain"] = self._filter.chain
        return facts


__all__ = ["PUBLIC", "TrialNetwork"]
