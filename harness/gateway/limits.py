"""What one trial may hold in the gateway: connections, request bytes, memory.

The gateway runs in the harness process, so every byte a trial makes it hold is the
harness's memory. :class:`Limits` are the per-trial caps (``[gateway]`` in the run config);
:class:`Meter` is one trial's account of what it holds now. Each cap is checked before
the memory is taken: a request's ``Content-Length`` before its body is read, each chunk of
a chunked body as it arrives, the estimated size of a parsed body before it is parsed.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1 << 20

#: Held for every open connection: h11's buffer (one incomplete event, 64 KiB, and one read)
#: and the stream reader's (paused at twice its 64 KiB limit).
CONNECTION_BYTES = 256 << 10
#: Held for a relayed stream: the partial line waiting for its end and the recorded copy
#: (each capped at the record's 1 MiB).
STREAM_BYTES = 2 * MIB
#: Bytes of Python objects per JSON value on top of the text (a dict, a list, a short
#: string or an int each cost 28-64 bytes plus the slot that points at them).
_BYTES_PER_VALUE = 96


@dataclass(frozen=True)
class Limits:
    """Per-trial caps of the gateway (``[gateway]``).

    Attributes:
        max_connections: Connections open at once; one more is answered 503 and closed.
        max_request_bytes: A request body; a larger one is answered 413 and its
            connection closed (``Content-Length`` checked before any of it is read).
        max_memory_bytes: Everything a trial's connections hold at once (headers, bodies,
            parsed bodies, upstream answers being buffered); over it, 503 (a request) or
            502 (an upstream answer), recorded.
        max_recorded_refusals: Refusals recorded one line each; later ones are counted and
            written as one summary line when the trial's access ends.
    """

    max_connections: int = 32
    max_request_bytes: int = 16 * MIB
    max_memory_bytes: int = 128 * MIB
    max_recorded_refusals: int = 1000


def parse_cost(body: bytes) -> int:
    """An upper estimate of the memory ``json.loads(body)`` takes, text included.

    Every value but the first follows a ``,`` or opens with ``[``/``{``/``:``: counting
    those bytes (in C, without parsing) bounds the number of values from above, so a body
    of a million empty objects is priced at what parsing it would cost.
    """
    values = body.count(b",") + body.count(b"[") + body.count(b"{") + body.count(b":") + 1
    return 2 * len(body) + _BYTES_PER_VALUE * values


class Meter:
    """One trial's account: connections open and bytes held (the gateway's loop only)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.connections = 0
        #: Connections refused over the cap whose request is still read and dropped (at
        #: most ``max_connections`` of them; more are closed at once).
        self.draining = 0
        self.held = 0
        #: The most held at once (for the record's summary and the tests).
        self.peak = 0

    def headroom(self) -> int:
        """Bytes the trial may still take."""
        return max(self.limits.max_memory_bytes - self.held, 0)

    def take(self, size: int) -> bool:
        """Hold ``size`` more bytes if the cap allows (True), else hold nothing (False)."""
        if size > self.headroom():
            return False
        self.held += size
        self.peak = max(self.peak, self.held)
        return True

    def give_back(self, size: int) -> None:
        """Release ``size`` bytes taken before."""
        self.held = max(self.held - size, 0)

    def memory_reason(self, what: str) -> str:
        """Why ``what`` was refused for memory (recorded and answered)."""
        cap = self.limits.max_memory_bytes
        return (
            f"{what} refused: the trial's gateway memory cap ({cap} bytes, "
            f"gateway.max_memory_mb) is reached ({self.held} bytes held)"
        )


class Hold:
    """Bytes held for one request while it lives; given back all at once by :meth:`close`."""

    def __init__(self, meter: Meter) -> None:
        self.meter = meter
        self.size = 0

    def take(self, size: int) -> bool:
        """Hold ``size`` more bytes for this request (False: over the cap, nothing held)."""
        if not self.meter.take(size):
            return False
        self.size += size
        return True

    def charge(self, size: int) -> None:
        """Count ``size`` bytes already in memory (taken in within a headroom given)."""
        self.meter.held += size
        self.meter.peak = max(self.meter.peak, self.meter.held)
        self.size += size

    def give_back(self, size: int) -> None:
        """Give back ``size`` of the bytes this request holds."""
        size = min(size, self.size)
        self.meter.give_back(size)
        self.size -= size

    def close(self) -> None:
        """Give back everything this request held."""
        self.meter.give_back(self.size)
        self.size = 0


__all__ = ["CONNECTION_BYTES", "MIB", "STREAM_BYTES", "Hold", "Limits", "Meter", "parse_cost"]
