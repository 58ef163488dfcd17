"""The Gemini API in the gateway: routes, local answers, faux rendering, the ``google`` upstream.

Gemini clients (the ``@google/genai`` SDK, Gemini CLI) call
``POST /v1beta/models/<model>:generateContent`` and ``:streamGenerateContent`` (server-sent
events with ``?alt=sse``, else one JSON array streamed), with the key in ``x-goog-api-key``
or ``?key=``. The gateway takes the trial's token there, never a real key, and treats the
call like any other model call (checks, budget, record): the model named in the path is
recorded as the requested one, the trial's model answers. Internally a Gemini call's body
carries ``model`` and ``stream`` like the other APIs' bodies do; :class:`GoogleProvider`
takes them out again before the call goes upstream.

``GET /v1beta/models`` (and ``/v1beta/models/<model>``) and ``:countTokens`` are answered
by the gateway itself (the trial's one model; an estimate of ceil(chars / 4)); any other
``/v1beta`` path (embeddings, cached contents, files) is refused 404 as not a model
endpoint.

A JSON-array stream's usage is the gateway's estimate (its framing is not server-sent
events, which is what the record reads usage from); Gemini CLI asks for ``alt=sse``.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Collection, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from typing_extensions import override

from harness.errors import ProviderError
from harness.gateway.policy import CALL_METHODS, READ_METHODS, Refused, method_not_allowed
from harness.gateway.providers import (
    ENDPOINTS,
    Provider,
    ProviderCall,
    ProviderReply,
    endpoint_of,
    json_bytes,
    relay,
    upstream_client,
    whole_reply,
)
from harness.gateway.usage import estimate_tokens, sse_payloads, strict_json, text_chars
from harness.models.catalog import ModelSpec

if TYPE_CHECKING:
    import httpx

#: The API name of the Gemini routes (``ModelSpec.api``, ``ProviderCall.api``).
GEMINI_API = "gemini"
#: Where the Gemini API lives under the gateway (and under Google's endpoint).
PREFIX = "/v1beta/models"
_CALL = re.compile(
    r"^/v1beta/models/(?P<model>[A-Za-z0-9._@-]+):(?P<method>generateContent|streamGenerateContent)"
    r"(?P<sse>\?alt=sse)?$"
)
_COUNT = re.compile(r"^/v1beta/models/(?P<model>[A-Za-z0-9._@-]+):countTokens$")
_MODEL = re.compile(r"^/v1beta/models/(?P<model>[A-Za-z0-9._@-]+)$")


# --------------------------------------------------------------------------------------------
# Routes
# --------------------------------------------------------------------------------------------


def endpoint_api(path: str) -> str | None:
    """The API of a gateway path: ``ENDPOINTS``' or the Gemini call routes' (None: neither)."""
    api = ENDPOINTS.get(path)
    if api is None and _CALL.match(path):
        return GEMINI_API
    return api


def counts_tokens(path: str) -> bool:
    """Whether ``path`` is a Gemini ``…:countTokens`` side endpoint."""
    return _COUNT.match(path) is not None


def allowed(path: str) -> tuple[str, ...] | None:
    """The methods a Gemini route takes (None: not one), for ``OPTIONS`` and a 405's ``Allow``.

    The model listing and a model's description are read (GET, HEAD); a call (also with
    ``?alt=sse``) and ``countTokens`` take POST.
    """
    bare = path.split("?", 1)[0]
    if bare in (PREFIX, PREFIX + "/") or _MODEL.match(bare):
        return READ_METHODS
    if _CALL.match(bare) or _COUNT.match(bare):
        return CALL_METHODS
    return None


def gateway_path(target: str, path: str) -> str:
    """The path a call is handled and recorded under: a Gemini stream keeps ``?alt=sse``.

    Nothing else of the query is kept (``?key=`` holds the token: it is never recorded).
    """
    if path.endswith(":streamGenerateContent") and "sse" in _query(target).get("alt", []):
        return path + "?alt=sse"
    return path


def query_key(target: str) -> str:
    """The token of a ``?key=`` query ("" when there is none)."""
    values = _query(target).get("key", [])
    return values[0] if values else ""


def _query(target: str) -> dict[str, list[str]]:
    _, _, query = target.partition("?")
    return parse_qs(query, keep_blank_values=True)


def streams(path: str) -> bool:
    """Whether a Gemini call path asks for a stream."""
    return ":streamGenerateContent" in path


def stream_type(api: str, path: str) -> str:
    """The content type of a stream: server-sent events, or a Gemini JSON-array stream."""
    if api == GEMINI_API and not path.endswith("?alt=sse"):
        return "application/json"
    return "text/event-stream"


def as_call(path: str, payload: dict[str, Any]) -> dict[str, Any]:
    """A Gemini call's body as the gateway handles it: ``model`` and ``stream`` in it.

    Other APIs' bodies are returned as they are.
    """
    match = _CALL.match(path)
    if match is None:
        return payload
    return {**payload, "model": match["model"], "stream": streams(path)}


def upstream_body(payload: dict[str, Any]) -> dict[str, Any]:
    """What goes to a Gemini endpoint: the body without the gateway's ``model``/``stream``."""
    return {k: v for k, v in payload.items() if k not in ("model", "stream")}


def local_answer(
    method: str, path: str, raw_body: bytes, model: ModelSpec, apis: Collection[str]
) -> dict[str, Any] | None:
    """The gateway's own answer (200) to a Gemini side endpoint, or None (not one of them).

    ``GET /v1beta/models`` lists the trial's model, ``GET /v1beta/models/<m>`` describes it,
    ``POST …:countTokens`` estimates the request's tokens. A trial whose model does not
    speak Gemini gets None here (its ``/v1beta`` calls are refused like any unknown path).

    Raises:
        Refused: A method the route does not take (405; its ``Allow``: :func:`allowed`), a
            countTokens body that is not a JSON object (400).
    """
    if GEMINI_API not in apis or not path.startswith(PREFIX):
        return None
    listing = path in (PREFIX, PREFIX + "/")
    if listing or _MODEL.match(path):
        if method != "GET":  # HEAD is asked as GET
            raise method_not_allowed(method, path, READ_METHODS)
        return {"models": [describe_model(model)]} if listing else describe_model(model)
    if _COUNT.match(path):
        if method != "POST":
            raise method_not_allowed(method, path, CALL_METHODS)
        try:
            body = strict_json(raw_body or b"{}")
        except ValueError as exc:
            raise Refused(400, f"request body is not a JSON object: {exc}") from None
        if not isinstance(body, dict):
            raise Refused(400, "request body is not a JSON object")
        # countTokens takes contents, or a whole generateContentRequest.
        inner = body.get("generateContentRequest")
        source = inner if isinstance(inner, dict) else body
        chars = text_chars(source.get("contents")) + text_chars(source.get("systemInstruction"))
        return {"totalTokens": estimate_tokens(chars)}
    return None


def describe_model(model: ModelSpec) -> dict[str, Any]:
    """The trial's model as a Gemini ``Model`` resource."""
    return {
        "name": f"models/{model.upstream}",
        "baseModelId": model.upstream,
        "version": "harness-gateway",
        "displayName": model.id,
        "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens"],
    }


_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
}


def error(status: int, message: str) -> dict[str, Any]:
    """A Gemini (Google RPC) error body."""
    return {"error": {"code": status, "message": message, "status": _STATUS.get(status, "UNKNOWN")}}


# --------------------------------------------------------------------------------------------
# Faux rendering
# --------------------------------------------------------------------------------------------


def usage_metadata(input_tokens: int, output_tokens: int) -> dict[str, int]:
    """A Gemini ``usageMetadata`` object."""
    return {
        "promptTokenCount": input_tokens,
        "candidatesTokenCount": output_tokens,
        "totalTokenCount": input_tokens + output_tokens,
    }


def frame(chunks: Sequence[Any], *, sse: bool) -> list[bytes]:
    """Stream chunks framed as server-sent events, or as the pieces of one JSON array."""
    if sse:
        return [f"data: {json.dumps(c)}\r\n\r\n".encode() for c in chunks]
    pieces = [("[" if n == 0 else ",\r\n") + json.dumps(c) for n, c in enumerate(chunks)]
    return [p.encode() for p in pieces] + [b"]"] if pieces else [b"[]"]


# --------------------------------------------------------------------------------------------
# The google upstream
# --------------------------------------------------------------------------------------------


class GoogleProvider(Provider):
    """Forwards Gemini calls to Google's endpoint (or any server speaking it) with the real key.

    Streams are always asked for as server-sent events; a client that asked for the JSON
    array gets the events re-framed as one.

    Args:
        spec: The model (``provider = "google"``; ``base_url`` without ``/v1beta``).
        api_key: The real key, sent as ``x-goog-api-key`` (None: the server needs none).
        transport: An httpx transport (tests).
        timeout_sec: Per-call read timeout.
    """

    apis = frozenset({GEMINI_API})

    def __init__(
        self,
        spec: ModelSpec,
        api_key: str | None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout_sec: float = 600.0,
    ) -> None:
        self.spec = spec
        self.base_url = endpoint_of(spec).removesuffix("/v1beta")
        self._auth = {"x-goog-api-key": api_key} if api_key else {}
        self._client = upstream_client(transport, timeout_sec)

    def url(self, stream: bool) -> str:
        """The upstream URL of a (streamed) call to the model."""
        method = "streamGenerateContent?alt=sse" if stream else "generateContent"
        return f"{self.base_url}{PREFIX}/{self.spec.upstream}:{method}"

    @override
    async def send(self, call: ProviderCall) -> ProviderReply:
        import httpx  # here, not at the top: a run with no model never loads it

        if call.api != GEMINI_API:
            raise ProviderError(f"{self.spec.id} speaks only the Gemini API, not {call.api}")
        headers = {"content-type": "application/json", **self._auth}
        request = self._client.build_request(
            "POST",
            self.url(call.stream),
            content=json_bytes(upstream_body(call.body)),
            headers=headers,
        )
        try:
            response = await self._client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise ProviderError(f"google endpoint unreachable: {exc}") from None
        content_type = response.headers.get("content-type", "application/json")
        if call.stream and response.status_code < 400 and "event-stream" in content_type:
            if call.path.endswith("?alt=sse"):
                chunks = relay(response, "google")
            else:
                chunks, content_type = self._as_array(response), "application/json"
            return ProviderReply(
                response.status_code, content_type, chunks=chunks, aclose=response.aclose
            )
        return await whole_reply(response, content_type, call.max_response_bytes, "google")

    async def _as_array(self, response: httpx.Response) -> AsyncIterator[bytes]:
        """The upstream's events re-framed as one JSON array, event by event."""
        pending = b""
        first = True
        async for chunk in relay(response, "google"):
            pending = (pending + chunk).replace(b"\r\n", b"\n")
            blocks = pending.split(b"\n\n")
            pending = blocks.pop()
            for payload in sse_payloads(b"\n\n".join(blocks) + b"\n\n"):
                yield (b"[" if first else b",\r\n") + json.dumps(payload).encode()
                first = False
        for payload in sse_payloads(pending):
            yield (b"[" if first else b",\r\n") + json.dumps(payload).encode()
            first = False
        yield b"[]" if first else b"]"

    @override
    async def aclose(self) -> None:
        await self._client.aclose()


__all__ = [
    "GEMINI_API",
    "GoogleProvider",
    "allowed",
    "as_call",
    "describe_model",
    "endpoint_api",
    "error",
    "gateway_path",
    "local_answer",
    "query_key",
    "stream_type",
    "streams",
]
