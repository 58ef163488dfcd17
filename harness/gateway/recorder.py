"""The gateway's recorder: one line of ``model_calls.jsonl`` per request, and the totals.

The line format is ``docs/model-access.md`` §2. Bodies are capped at
:data:`MAX_RECORDED_BYTES`; nothing recorded ever holds the real key (the gateway adds it
only on the way out, and redacts what comes back before it reaches the recorder).

Any bytes are recorded without loss and without failing: JSON as parsed (a lone surrogate
escape such as ``"\ud800"`` stays an escape in the file), text that is not JSON as text,
bytes that are not UTF-8 in base64.
"""

from __future__ import annotations

import base64
import json
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from harness.gateway.gemini import endpoint_api
from harness.gateway.policy import TrialUsage
from harness.gateway.usage import CallUsage, StreamUsage, sse_data, strict_json
from harness.models.catalog import ModelSpec

MAX_RECORDED_BYTES = 1 << 20
#: Bytes of a body over the cap that are still recorded (its head).
_HEAD_BYTES = 4096


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def dumps(value: Any) -> str:
    """``value`` as one line of JSON that is valid UTF-8, whatever strings it holds.

    Non-ASCII text is kept readable; a value holding a lone surrogate (parsed from a
    ``"\ud800"`` escape) is written with every non-ASCII character escaped instead, so the
    file stays UTF-8 and reads back to the same value.
    """
    text = json.dumps(value, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value)
    return text


def json_or_none(data: bytes) -> Any:
    """``data`` parsed as strict JSON, or None (never raises, whatever the bytes)."""
    try:
        return strict_json(data)
    except ValueError:
        return None


def raw_body(data: bytes) -> dict[str, Any]:
    """Bytes that are not JSON, for the record: their text, or base64 when not UTF-8."""
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"bytes": len(data), "base64": base64.b64encode(data).decode("ascii")}


def capped_json(data: bytes, *, parse: bool = True) -> Any:
    """A body for the record: parsed JSON when small enough, else a truncated head.

    ``parse`` False records it as text (or base64) without parsing it.
    """
    if len(data) > MAX_RECORDED_BYTES:
        head = data[:_HEAD_BYTES]
        try:
            shown: dict[str, Any] = {"head": head.decode("utf-8")}
        except UnicodeDecodeError:  # not UTF-8, or a character cut at the end: lossless
            shown = {"head_base64": base64.b64encode(head).decode("ascii")}
        return {"truncated": True, "bytes": len(data), **shown}
    if not parse:
        return raw_body(data)
    parsed = json_or_none(data)
    if parsed is None and data.strip() != b"null":
        return raw_body(data)
    return parsed


def capped_value(value: Any) -> Any:
    """A parsed body for the record, capped like :func:`capped_json`."""
    data = dumps(value).encode()
    return capped_json(data) if len(data) > MAX_RECORDED_BYTES else value


def recorded_events(raw: bytes) -> list[Any]:
    """The ``data:`` payloads of a relayed stream, for the record (``[DONE]`` skipped).

    A payload that is not JSON is kept as its text (or base64), never dropped.
    """
    events: list[Any] = []
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = sse_data(block)
        if not data or data.strip() == b"[DONE]":
            continue
        parsed = json_or_none(data)
        events.append(raw_body(data) if parsed is None and data.strip() != b"null" else parsed)
    return events


class StreamCopy:
    """What the record keeps of a relayed stream: a capped copy, its usage, how it ended.

    Args:
        api: The stream's API.
        input_chars: Characters of the request's text (for the usage estimate).
    """

    def __init__(self, api: str, input_chars: int = 0) -> None:
        self.kept = bytearray()
        self.truncated = False
        self.usage = StreamUsage(api, input_chars)
        #: Why the stream ended early (the provider failed, the trial's access was revoked,
        #: the trial's budget was spent).
        self.failure: str | None = None
        #: The record's outcome when the stream was cut for the budget (else from status).
        self.outcome: str | None = None

    def feed(self, data: bytes) -> None:
        """Take the next relayed (already redacted) bytes."""
        self.usage.feed(data)
        if len(self.kept) < MAX_RECORDED_BYTES:
            self.kept.extend(data)
        else:
            self.truncated = True

    def response(self) -> Any:
        """The recorded ``response``: the SSE data payloads (flagged when truncated)."""
        events = recorded_events(bytes(self.kept))
        return {"truncated": True, "events": events} if self.truncated else events


class CallRecorder:
    """One trial's ``model_calls.jsonl`` and its usage totals.

    Args:
        path: The file (appended to, one line per request).
        trial_id: The trial.
        model: The trial's model (recorded; its prices give the cost).
    """

    def __init__(
        self, path: Path, trial_id: str, model: ModelSpec, *, max_refusals: int = 1000
    ) -> None:
        self.trial_id = trial_id
        self.model = model
        self.usage = TrialUsage()
        self._seq = 0
        self._max_refusals = max_refusals
        self._refusals = 0
        #: Refusals over ``max_refusals``, by status: one summary line when closed.
        self._unrecorded: Counter[int] = Counter()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = path.open("a", encoding="utf-8")

    def line(self, method: str, path: str) -> dict[str, Any]:
        """A new line for a request, numbered; filled in and written when it ends."""
        self._seq += 1
        return {
            "seq": self._seq,
            "trial_id": self.trial_id,
            "started_at": _now(),
            "latency_ms": None,
            "method": method,
            "path": path,
            "api": endpoint_api(path),
            "provider": self.model.provider,
            "model": self.model.name,
            "requested_model": None,
            "status": None,
            "outcome": None,
            "reason": None,
            "stream": False,
            "request": None,
            "response": None,
            "usage": None,
            "cost_usd": None,
        }

    def write(self, line: dict[str, Any]) -> None:
        """Append one line (dropped once the recorder is closed)."""
        if self._file is not None:
            self._file.write(dumps(line) + "\n")
            self._file.flush()

    def refusal(
        self,
        method: str,
        path: str,
        status: int,
        reason: str,
        request: Any,
        outcome: str = "refused",
    ) -> None:
        """Record a refused request (``outcome`` ``refused`` or ``budget``).

        After ``max_refusals`` of them, a refusal is only counted (a flood of requests must
        not fill the disk); :meth:`close` writes one line with the counts.
        """
        if outcome == "refused":
            self.usage.refused += 1
        self._refusals += 1
        if self._refusals > self._max_refusals:
            self._unrecorded[status] += 1
            return
        line = self.line(method, path)
        line.update(
            status=status,
            outcome=outcome,
            reason=reason,
            request=capped_value(request),
            latency_ms=0.0,
        )
        self.write(line)

    def answered(self, method: str, path: str, body: Any, status: int = 200) -> None:
        """Record a request the gateway answered itself (``GET /v1/models``, ``OPTIONS``)."""
        line = self.line(method, path)
        line.update(status=status, outcome="ok", latency_ms=0.0, response=body)
        self.write(line)

    def unanswered(self, line: dict[str, Any], reason: str, started: float) -> None:
        """Record a call the provider gave no answer to (HTTP 502 to the agent)."""
        line.update(status=502, outcome="error", reason=reason, latency_ms=_ms_since(started))
        self.write(line)

    def finished(
        self,
        line: dict[str, Any],
        status: int,
        started: float,
        usage: CallUsage | None,
        failure: str | None = None,
        outcome: str | None = None,
    ) -> None:
        """Record a forwarded call with its status, usage and cost; count it.

        ``outcome`` defaults to ``error`` (a ``failure``), ``ok`` or ``upstream_error``.
        """
        cost = None
        if usage is not None:
            cost = self.model.prices.cost(
                usage.input_tokens, usage.output_tokens, usage.cached_tokens
            )
        if outcome is None:
            outcome = "error" if failure else "ok" if status < 400 else "upstream_error"
        line.update(
            status=status,
            outcome=outcome,
            reason=failure,
            latency_ms=_ms_since(started),
            usage=None if usage is None else usage.as_dict(),
            cost_usd=cost,
        )
        self.usage.add(usage, cost)
        self.write(line)

    def close(self) -> None:
        """Close the file (after the summary of unrecorded refusals); later lines are dropped."""
        if self._unrecorded:
            counts = ", ".join(f"{n} x HTTP {s}" for s, n in sorted(self._unrecorded.items()))
            line = self.line("?", "?")
            line.update(
                outcome="refused",
                latency_ms=0.0,
                reason=(
                    f"{sum(self._unrecorded.values())} more refusals not recorded one by one "
                    f"(gateway.max_recorded_refusals = {self._max_refusals}): {counts}"
                ),
            )
            self._unrecorded.clear()
            self.write(line)
        if self._file is not None:
            self._file.close()
            self._file = None


__all__ = [
    "MAX_RECORDED_BYTES",
    "CallRecorder",
    "StreamCopy",
    "capped_json",
    "capped_value",
    "dumps",
    "json_or_none",
    "raw_body",
    "recorded_events",
]
