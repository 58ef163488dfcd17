"""The gateway's policy: who may call (tokens), what (model endpoints), how much (budgets).

Every refusal is a :class:`Refused` carrying the HTTP status, the reason recorded in
``model_calls.jsonl`` and its ``outcome`` (``refused`` or ``budget``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import secrets
import threading
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from harness.errors import HarnessError
from harness.gateway.usage import CallUsage, strict_json
from harness.models.catalog import ModelSpec

TOKEN_PREFIX = "hgw-"
_LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}
MODELS_PATHS = ("/v1/models", "/v1/models/")
"""Answered locally with the trial's one model."""


class Refused(HarnessError):  # a refusal, not a failure of the gateway
    """A request the gateway refuses (recorded, answered with ``status``; never raised out).

    Attributes:
        status: The HTTP status of the answer.
        reason: Why, as recorded and answered.
        outcome: ``refused``, or ``budget`` for a spent budget.
    """

    def __init__(self, status: int, reason: str, outcome: str = "refused") -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.outcome = outcome


#: The methods of a route the gateway answers itself (a listing, a model's description).
READ_METHODS = ("GET", "HEAD", "OPTIONS")
#: The methods of a model call's route, and of a token count's.
CALL_METHODS = ("POST", "OPTIONS")


def method_not_allowed(method: str, path: str, methods: tuple[str, ...]) -> Refused:
    """The 405 of ``method`` on a path that takes only ``methods`` (sent as its ``Allow``)."""
    return Refused(405, f"{method} {path} refused: it takes {', '.join(methods)}")


# --------------------------------------------------------------------------------------------
# Tokens
# --------------------------------------------------------------------------------------------


class Tokens:
    """The run's per-trial tokens: live ones by trial, and the revoked (thread-safe)."""

    def __init__(self) -> None:
        self._live: dict[str, str] = {}
        self._revoked: set[str] = set()
        self._lock = threading.Lock()

    def issue(self, trial_id: str) -> str:
        """A new token for ``trial_id``."""
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        with self._lock:
            self._live[token] = trial_id
        return token

    def revoke(self, token: str) -> None:
        """The token dies (and is known as revoked from now on)."""
        with self._lock:
            self._live.pop(token, None)
            self._revoked.add(token)

    def check(self, given: str, own: str, *, revoked: bool) -> None:
        """Accept only the trial's own live token.

        Raises:
            Refused: Missing, revoked, another trial's, or unknown (401).
        """
        if not given:
            raise Refused(401, "missing token")
        if revoked:
            raise Refused(401, "revoked token: the trial's model access has ended")
        if hmac.compare_digest(given.encode(), own.encode()):
            return
        with self._lock:
            foreign = given in self._live
            dead = given in self._revoked
        if foreign:
            raise Refused(401, "foreign token: it belongs to another trial")
        if dead:
            raise Refused(401, "revoked token")
        raise Refused(401, "unknown token")


def token_of(headers: Mapping[str, str]) -> str:
    """The token a request carries (``x-api-key``, ``x-goog-api-key``, or a Bearer)."""
    token = headers.get("x-api-key", "") or headers.get("x-goog-api-key", "")
    auth = headers.get("authorization", "")
    if not token and auth.lower().startswith("bearer "):
        token = auth[7:].strip()
    return token


def check_target(target: str, headers: Mapping[str, str]) -> str:
    """The path of a request to the gateway itself (never a proxy request, never elsewhere).

    Raises:
        Refused: A proxy-style target (400) or another host (403).
    """
    if not target.startswith("/"):
        raise Refused(400, f"proxy-style target {target!r} refused: the gateway is not a proxy")
    host = headers.get("host", "")
    hostname = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
    if hostname.lower() not in _LOOPBACK_HOSTS:
        raise Refused(403, f"host {host!r} refused: only the gateway itself is reachable")
    return target.split("?", 1)[0]


def check_call(
    method: str,
    path: str,
    api: str | None,
    raw_body: bytes,
    *,
    model: ModelSpec,
    apis: Collection[str],
) -> dict[str, Any]:
    """The JSON body of an allowed model call (its size was checked as it was read).

    Args:
        method: The request's method.
        path: Its path.
        api: The API of the path (``ENDPOINTS``; None: not a model endpoint).
        raw_body: The request body.
        model: The trial's model.
        apis: The APIs its provider serves.

    Raises:
        Refused: Not a model endpoint (404), not POST (405), an API the model does not
            speak (404), not a JSON object in UTF-8 (400: not JSON, NaN, a number too
            long, nested too deep).
    """
    if api is None:
        raise Refused(404, f"{method} {path} is not a model endpoint")
    if method != "POST":
        raise Refused(405, f"{method} {path} refused: model endpoints take POST")
    if api not in apis:
        raise Refused(404, f"{path} is not served for {model.id} (it speaks {model.api})")
    try:
        payload = strict_json(raw_body)
    except ValueError as exc:
        raise Refused(400, f"request body is not a JSON object: {exc}") from None
    if not isinstance(payload, dict):
        raise Refused(400, "request body is not a JSON object")
    return payload


# --------------------------------------------------------------------------------------------
# Budgets
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """Per-trial limits; None = unlimited. Once one is spent every call gets a 429."""

    max_calls: int | None = None
    max_tokens: int | None = None
    max_cost_usd: float | None = None


def _plus(total: int | None, value: int | None) -> int | None:
    if value is None:
        return total
    return (total or 0) + value


@dataclass
class TrialUsage:
    """Totals of one trial's model calls; a total is None when no call reported it."""

    calls: int = 0
    refused: int = 0
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None

    def add(self, usage: CallUsage | None, cost: float | None) -> None:
        """Count one forwarded call."""
        self.calls += 1
        if usage is not None:
            self.input_tokens = _plus(self.input_tokens, usage.input_tokens)
            self.output_tokens = _plus(self.output_tokens, usage.output_tokens)
            self.cached_tokens = _plus(self.cached_tokens, usage.cached_tokens)
        if cost is not None:
            self.cost_usd = (self.cost_usd or 0.0) + cost

    @property
    def total_tokens(self) -> int | None:
        """Input plus output, or None unless both are known (as in the transcript)."""
        if self.input_tokens is None or self.output_tokens is None:
            return None
        return self.input_tokens + self.output_tokens

    @property
    def reported_tokens(self) -> int | None:
        """Every token reported so far, on either side (what a token budget counts)."""
        if self.input_tokens is None and self.output_tokens is None:
            return None
        return (self.input_tokens or 0) + (self.output_tokens or 0)


class Allowance:
    """One trial's budget: its usage so far, the calls in flight and the streams running.

    Calls in flight count against ``max_calls`` already, so concurrent calls cannot
    overshoot it; the tokens and cost of streams still running count too (:meth:`live`).
    What a call in flight will cost is known only once it is answered, so under a token or
    cost budget the trial's calls take turns (:meth:`turn`): otherwise 8 concurrent calls
    all pass the check before any is counted and spend 8 calls' worth past the budget.
    """

    def __init__(self, budget: Budget, usage: TrialUsage) -> None:
        self.budget = budget
        self.usage = usage
        self.in_flight = 0
        self.live_tokens = 0
        self.live_cost = 0.0
        self._turns = asyncio.Lock()

    @property
    def metered(self) -> bool:
        """Whether a token or cost budget is set (calls then take turns)."""
        return self.budget.max_tokens is not None or self.budget.max_cost_usd is not None

    async def turn(self) -> contextlib.AbstractContextManager[None]:
        """Wait for the trial's turn to call (under a token or cost budget), then check it.

        Returns a context manager to hold for the whole call (its exit ends the turn);
        enter it with no await in between, as with :meth:`reserved`. Without a token or
        cost budget there is no waiting: calls run side by side as before.

        Raises:
            Refused: 429 once a budget is spent (checked after the wait, when every
                earlier call of the trial has been counted).
        """
        if not self.metered:
            self.check()
            return contextlib.nullcontext()
        await self._turns.acquire()
        try:
            self.check()
        except BaseException:
            self._turns.release()
            raise
        return self._held()

    @contextlib.contextmanager
    def _held(self) -> Iterator[None]:
        try:
            yield
        finally:
            self._turns.release()

    def spent(self, *, calls_too: bool = True) -> str | None:
        """What of the budget is spent, counting running streams (None: nothing is).

        Args:
            calls_too: Count the calls budget (a stream already running is one call).
        """
        budget, usage = self.budget, self.usage
        calls = usage.calls + self.in_flight
        tokens = usage.reported_tokens
        if self.live_tokens:
            tokens = (tokens or 0) + self.live_tokens
        cost = usage.cost_usd
        if self.live_cost:
            cost = (cost or 0.0) + self.live_cost
        if calls_too and budget.max_calls is not None and calls >= budget.max_calls:
            return f"{calls} of {budget.max_calls} calls used"
        if budget.max_tokens is not None and tokens is not None and tokens >= budget.max_tokens:
            return f"{tokens} of {budget.max_tokens} tokens used"
        if budget.max_cost_usd is not None and cost is not None and cost >= budget.max_cost_usd:
            return f"${cost:.4f} of ${budget.max_cost_usd:g} spent"
        return None

    def check(self) -> None:
        """Refuse a call once a budget is spent.

        Raises:
            Refused: 429, outcome ``budget``.
        """
        spent = self.spent()
        if spent is not None:
            raise Refused(429, f"Per-trial model budget spent: {spent}.", outcome="budget")

    @contextlib.contextmanager
    def live(self) -> Iterator[LiveStream]:
        """Count a running stream's tokens and cost against the budget until it ends."""
        stream = LiveStream(self)
        try:
            yield stream
        finally:
            stream.update(0, 0.0)

    @contextlib.contextmanager
    def reserved(self) -> Iterator[None]:
        """Count a call against the budget while it is in flight.

        Entered right after :meth:`check` with no await in between, so concurrent calls on
        the loop cannot all pass the check before any is counted.
        """
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1


class LiveStream:
    """One running stream's share of :class:`Allowance` (its tokens and cost so far)."""

    def __init__(self, allowance: Allowance) -> None:
        self.allowance = allowance
        self.tokens = 0
        self.cost = 0.0

    def update(self, tokens: int, cost: float) -> None:
        """The stream has used ``tokens`` and ``cost`` so far (replaces the last update)."""
        self.allowance.live_tokens += tokens - self.tokens
        self.allowance.live_cost += cost - self.cost
        self.tokens, self.cost = tokens, cost


__all__ = [
    "CALL_METHODS",
    "MODELS_PATHS",
    "READ_METHODS",
    "TOKEN_PREFIX",
    "Allowance",
    "Budget",
    "LiveStream",
    "Refused",
    "Tokens",
    "TrialUsage",
    "check_call",
    "check_target",
    "method_not_allowed",
    "token_of",
]
