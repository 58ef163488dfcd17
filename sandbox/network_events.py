"""Security events for connections a phase's network filter refused.

A backend's filter (the docker egress filter, the allowlist proxy of
:mod:`sandbox.egress_proxy`) reports each refusal it can see as a :class:`NetworkRefused`;
the sandbox hands them to the harness through ``Sandbox.network_events()``, and the trial
record lists them among its ``events`` (``"type": "network_refused"``, docs/run-dir.md).
The list is bounded (:data:`MAX_NETWORK_EVENTS`): a flood of refused connections keeps its
first entries and a count of the rest.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

#: Most refusals one sandbox keeps; the rest are counted (``NetworkEventLog.dropped``).
MAX_NETWORK_EVENTS = 200
_TEXT = 255
"""Longest host text kept in an event (a DNS name is at most 253 characters)."""


@dataclass(frozen=True)
class NetworkRefused:
    """One connection (or DNS query) the filter refused.

    Attributes:
        phase: ``agent`` or ``verifier`` (the role whose policy refused it).
        protocol: ``tcp``, ``udp``, ``http``, ``connect`` (an HTTP CONNECT), ``tls`` (a
            ClientHello) or ``dns``.
        host: The name asked for (Host header, CONNECT target, SNI, DNS query), if any.
        ip: The address it would have reached, if known.
        port: The destination port, if any.
        reason: Why, in a few words (``not listed``, ``private address``, ...).
    """

    phase: str
    protocol: str
    host: str | None = None
    ip: str | None = None
    port: int | None = None
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The event as the record's ``events`` hold it."""
        data: dict[str, Any] = {"type": "network_refused", "phase": self.phase}
        data["protocol"] = self.protocol
        for key in ("host", "ip", "port"):
            value = getattr(self, key)
            if value is not None:
                data[key] = value[:_TEXT] if isinstance(value, str) else value
        data["reason"] = self.reason[:_TEXT]
        return data


class NetworkEventLog:
    """A thread-safe, bounded list of refusals (the filter appends, the sandbox drains)."""

    def __init__(self, limit: int = MAX_NETWORK_EVENTS) -> None:
        self._limit = limit
        self._events: list[NetworkRefused] = []
        self.dropped = 0
        self._lock = threading.Lock()

    def add(self, event: NetworkRefused) -> None:
        """Keep ``event`` (or count it, past the limit)."""
        with self._lock:
            if len(self._events) < self._limit:
                self._events.append(event)
            else:
                self.dropped += 1

    def drain(self) -> list[dict[str, Any]]:
        """The events so far as record entries (a summary entry for those dropped); cleared."""
        with self._lock:
            events, dropped = self._events, self.dropped
            self._events, self.dropped = [], 0
        out = [event.as_dict() for event in events]
        if dropped:
            out.append({"type": "network_refused", "dropped": dropped, "reason": "over the cap"})
        return out

    def __len__(self) -> int:
        with self._lock:
            return len(self._events)


__all__ = ["MAX_NETWORK_EVENTS", "NetworkEventLog", "NetworkRefused"]
