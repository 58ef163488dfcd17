"""The provider seam: where the gateway sends a model call.

``HTTPProvider`` forwards to a real endpoint (OpenAI-compatible or Anthropic) with the real
key added on the way out; ``FauxProvider`` (in :mod:`harness.gateway.faux`) answers from a
script. Tests drive ``HTTPProvider`` against real HTTP servers on loopback.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from harness.errors import ProviderError
from harness.models.catalog import ModelSpec, default_base_url

if TYPE_CHECKING:
    import httpx

#: API of each endpoint the gateway serves, by path.
ENDPOINTS: dict[str, str] = {
    "/v1/chat/completions": "openai-chat",
    "/v1/responses": "openai-responses",
    "/v1/messages": "anthropic-messages",
}
#: Client headers passed upstream (everything else, auth above all, is dropped).
PASSTHROUGH_HEADERS = ("anthropic-version", "anthropic-beta", "openai-beta", "accept")
ANTHROPIC_VERSION = "2023-06-01"


@dataclass(frozen=True)
class ProviderCall:
    """One model call, already checked by the gateway."""

    trial_id: str
    task_name: str
    api: str
    path: str
    body: dict[str, Any]
    stream: bool
    headers: Mapping[str, str] = field(default_factory=dict)
    #: A whole answer longer than this is not taken in (the trial's memory headroom).
    max_response_bytes: int | None = None


@dataclass
class ProviderReply:
    """A provider's answer: a whole body, or a stream of chunks.

    Iterating ``chunks`` raises :class:`ProviderError` when the stream breaks off.
    """

    status: int
    content_type: str
    body: bytes | None = None
    chunks: AsyncIterator[bytes] | None = None
    aclose: Callable[[], Awaitable[None]] | None = None
    #: Headers added to the answer (e.g. ``x-should-retry: false``).
    headers: tuple[tuple[str, str], ...] = ()
    #: The record's ``outcome`` and ``reason`` when the provider knows better than the
    #: status (a faux script exhausted: ``error``); None: from the status.
    outcome: str | None = None
    reason: str | None = None
    #: Fields added to the call's record line (the faux provider's ``faux`` note).
    record: Mapping[str, Any] = field(default_factory=dict)


class Provider(ABC):
    """Where model calls go. One instance serves every trial of a run."""

    #: APIs (see ``ENDPOINTS``) this provider answers.
    apis: frozenset[str] = frozenset()

    def open_trial(self, trial_id: str, task_name: str) -> None:  # noqa: B027 - optional
        """Per-trial state begins (e.g. a faux queue)."""

    def close_trial(self, trial_id: str) -> None:  # noqa: B027 - optional
        """Per-trial state ends."""

    @abstractmethod
    async def send(self, call: ProviderCall) -> ProviderReply:
        """Answer one call.

        Raises:
            ProviderError: no answer could be produced.
        """

    async def aclose(self) -> None:  # noqa: B027 - optional
        """Release connections."""


class HTTPProvider(Provider):
    """Forwards calls to an OpenAI-compatible or Anthropic endpoint with the real key."""

    def __init__(
        self,
        spec: ModelSpec,
        api_key: str | None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout_sec: float = 600.0,
    ) -> None:
        self.spec = spec
        self.base_url = endpoint_of(spec)
        self.apis = (
            frozenset(spec.serves or ("openai-chat", "openai-responses"))
            if spec.provider == "openai"
            else frozenset({"anthropic-messages"})
        )
        self._auth: dict[str, str] = {}
        if api_key is not None:
            if spec.provider == "openai" or spec.api_key_env == "ANTHROPIC_AUTH_TOKEN":
                self._auth["authorization"] = f"Bearer {api_key}"
            else:
                self._auth["x-api-key"] = api_key
        self._client = upstream_client(transport, timeout_sec)

    def url(self, path: str) -> str:
        """The upstream URL of a gateway path."""
        if self.spec.provider == "openai":
            # base_url ends in /v1 (as OpenAI clients expect); our paths start with /v1.
            return self.base_url + path.removeprefix("/v1")
        return self.base_url + path

    @override
    async def send(self, call: ProviderCall) -> ProviderReply:
        import httpx  # here, not at the top: a run with no model never loads it

        headers = {k: v for k, v in call.headers.items() if k in PASSTHROUGH_HEADERS}
        if call.api == "anthropic-messages":
            headers.setdefault("anthropic-version", ANTHROPIC_VERSION)
        headers.update(self._auth)
        headers["content-type"] = "application/json"
        request = self._client.build_request(
            "POST", self.url(call.path), content=json_bytes(call.body), headers=headers
        )
        try:
            response = await self._client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise ProviderError(f"{self.spec.provider} endpoint unreachable: {exc}") from None
        content_type = response.headers.get("content-type", "application/json")
        if call.stream and response.status_code < 400 and "event-stream" in content_type:
            return ProviderReply(
                response.status_code,
                content_type,
                chunks=relay(response, self.spec.provider),
                aclose=response.aclose,
            )
        return await whole_reply(
            response, content_type, call.max_response_bytes, self.spec.provider
        )

    @override
    async def aclose(self) -> None:
        await self._client.aclose()


def endpoint_of(spec: ModelSpec) -> str:
    """The base URL of ``spec``'s upstream.

    Raises:
        ValueError: It has none (a faux model).
    """
    base = default_base_url(spec)
    if base is None:
        raise ValueError(f"{spec.id} has no endpoint")
    return base


def upstream_client(
    transport: httpx.AsyncBaseTransport | None, timeout_sec: float
) -> httpx.AsyncClient:
    """The HTTP client of an upstream: no redirects, and no proxy from the environment."""
    import httpx  # here, not at the top: a run with no model never loads it

    return httpx.AsyncClient(
        transport=transport,
        timeout=httpx.Timeout(timeout_sec, connect=30.0),
        follow_redirects=False,
        trust_env=False,  # never send the key through a proxy from the environment
    )


def json_bytes(body: Any) -> bytes:
    """A request body as JSON in UTF-8, whatever strings it holds.

    A lone surrogate (from a ``"\ud800"`` escape the agent sent) cannot be UTF-8: such a
    body goes with every non-ASCII character escaped, so the upstream gets what the agent
    wrote.
    """
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(body, separators=(",", ":"), allow_nan=False).encode("ascii")


async def whole_reply(
    response: httpx.Response, content_type: str, limit: int | None, who: str
) -> ProviderReply:
    """An upstream's whole answer, read within the trial's memory cap, then closed.

    Raises:
        ProviderError: The upstream broke off, or its answer passed ``limit`` bytes.
    """
    import httpx  # here, not at the top: a run with no model never loads it

    try:
        body = await _read_capped(response, limit)
    except httpx.HTTPError as exc:
        raise ProviderError(f"{who} endpoint broke off: {exc}") from None
    finally:
        await response.aclose()
    if body is None:
        raise ProviderError(
            f"{who} answer over the trial's gateway memory cap "
            f"({limit} bytes left, gateway.max_memory_mb): not taken in"
        )
    return ProviderReply(response.status_code, content_type, body=body)


async def relay(response: httpx.Response, who: str) -> AsyncIterator[bytes]:
    """An upstream's stream, chunk by chunk; its breaking off is a :class:`ProviderError`."""
    import httpx  # here, not at the top: a run with no model never loads it

    try:
        async for chunk in response.aiter_bytes():
            yield chunk
    except httpx.HTTPError as exc:
        raise ProviderError(f"{who} stream broke off: {exc}") from None


async def _read_capped(response: httpx.Response, limit: int | None) -> bytes | None:
    """The whole body of ``response``, or None once it passes ``limit`` bytes."""
    parts: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if limit is not None and size > limit:
            return None
        parts.append(chunk)
    return b"".join(parts)
