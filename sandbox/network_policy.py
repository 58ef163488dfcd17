"""A phase's network policy, as the harness hands it to a sandbox backend.

Harbor's ``network_mode`` (``public``, ``no-network``, ``allowlist``) with its
``allowed_hosts``, resolved per phase by the harness (a phase's setting over the
environment's; the oracle's phase is the agent's). What each mode lets through is the
backend's promise, written in docs/security.md: ``public`` is the internet minus the host,
private, loopback, link-local and CGNAT ranges and the metadata address; ``allowlist`` is
only the listed destinations, through the egress proxy; ``no-network`` is loopback and the
model gateway.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

NetworkMode = Literal["public", "no-network", "allowlist"]
NETWORK_MODES: tuple[NetworkMode, ...] = ("public", "no-network", "allowlist")


@dataclass(frozen=True)
class NetworkPolicy:
    """One phase's network.

    Attributes:
        mode: ``public``, ``no-network`` or ``allowlist``.
        allowed_hosts: ``allowlist`` only: host names, ``*.`` wildcards, IPs and CIDRs.
        declared: The task said so (False: Harbor's default, ``public``, was assumed).
    """

    mode: NetworkMode = "no-network"
    allowed_hosts: tuple[str, ...] = ()
    declared: bool = True

    @property
    def internet(self) -> bool:
        """Whether the phase reaches anything beyond loopback and the gateway."""
        return self.mode != "no-network"

    def to_json(self) -> dict[str, object]:
        """The policy as the record's ``posture`` shows it."""
        data: dict[str, object] = {"mode": self.mode, "declared": self.declared}
        if self.mode == "allowlist":
            data["allowed_hosts"] = list(self.allowed_hosts)
        return data


NO_NETWORK = NetworkPolicy()

__all__ = ["NETWORK_MODES", "NO_NETWORK", "NetworkMode", "NetworkPolicy"]
