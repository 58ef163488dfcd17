"""What the gateway answers itself: the side endpoints a CLI calls besides model calls.

Real CLIs probe before and around their model calls: Claude Code sends ``HEAD /api/hello``
and ``POST /v1/messages/count_tokens``, clients list ``GET /v1/models`` or fetch
``GET /v1/models/<id>``, browsers' and some SDKs' preflights send ``OPTIONS``. Each is
answered here, per HTTP (``HEAD`` and ``OPTIONS`` carry no body), or refused with a typed
4xx; none reaches the provider, none is a model call, and each is recorded.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from harness.gateway import gemini
from harness.gateway.policy import CALL_METHODS, READ_METHODS, Refused, method_not_allowed
from harness.gateway.providers import ENDPOINTS
from harness.gateway.usage import estimate_tokens, request_chars, strict_json
from harness.models.catalog import ModelSpec

HELLO_PATH = "/api/hello"
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"
MODELS_PREFIX = "/v1/models"
#: Paths answered without a token: they tell nothing about the trial or its model.
PUBLIC_PATHS = frozenset({HELLO_PATH})
_READ = READ_METHODS
_CALL = CALL_METHODS


@dataclass(frozen=True)
class Local:
    """An answer made by the gateway: status, JSON body (None: no body) and headers."""

    status: int
    body: Any = None
    headers: tuple[tuple[str, str], ...] = ()

    def encoded(self) -> bytes:
        """The body as sent (empty when there is none)."""
        return b"" if self.body is None else json.dumps(self.body).encode()


def allowed(path: str) -> tuple[str, ...] | None:
    """The methods ``path`` takes (None: the gateway serves no such path).

    The OpenAI and Anthropic routes, and the Gemini API's (its model listing and model,
    its calls and ``countTokens``: :func:`harness.gateway.gemini.allowed`).
    """
    if path in ENDPOINTS or path == COUNT_TOKENS_PATH:
        return _CALL
    if path in (HELLO_PATH, MODELS_PREFIX) or path.startswith(MODELS_PREFIX + "/"):
        return _READ
    return gemini.allowed(path)


def options(path: str) -> Local | None:
    """The answer to ``OPTIONS path`` (``*``: the gateway as a whole); None if unknown."""
    if path == "*":
        return Local(204, headers=(("allow", "GET, HEAD, POST, OPTIONS"),))
    methods = allowed(path)
    if methods is None:
        return None
    return Local(204, headers=(("allow", ", ".join(methods)),))


def answer(
    method: str, path: str, raw_body: bytes, model: ModelSpec, apis: Collection[str]
) -> Local | None:
    """The gateway's own answer to a side endpoint (None: not one, a model call maybe).

    ``HEAD`` is answered as ``GET`` would be; the caller sends no body.

    Raises:
        Refused: A side endpoint called with a method it does not take (405), a count
            of tokens for a model that does not speak Anthropic messages (404), or a
            body that is not a JSON object (400).
    """
    read = "GET" if method == "HEAD" else method
    if path == HELLO_PATH:
        if read != "GET":
            raise method_not_allowed(method, path, _READ)
        return Local(200, {"message": "hello"})
    if path == MODELS_PREFIX or path.startswith(MODELS_PREFIX + "/"):
        if read != "GET":
            raise method_not_allowed(method, path, _READ)
        return _models(path, model)
    if path == COUNT_TOKENS_PATH:
        if method != "POST":
            raise method_not_allowed(method, path, _CALL)
        if "anthropic-messages" not in apis:
            raise Refused(404, f"{path} is not served for {model.id} (it speaks {model.api})")
        return Local(200, {"input_tokens": estimate_tokens(request_chars(_json_object(raw_body)))})
    return None


def _json_object(raw_body: bytes) -> dict[str, Any]:
    try:
        payload = strict_json(raw_body)
    except ValueError as exc:
        raise Refused(400, f"request body is not a JSON object: {exc}") from None
    if not isinstance(payload, dict):
        raise Refused(400, "request body is not a JSON object")
    return payload


def _model_entry(model: ModelSpec) -> dict[str, Any]:
    # Both shapes at once: OpenAI's (object, owned_by) and Anthropic's (type, display_name).
    return {
        "id": model.upstream,
        "object": "model",
        "owned_by": model.provider,
        "type": "model",
        "display_name": model.upstream,
        "created": 0,
        "created_at": "1970-01-01T00:00:00Z",
    }


def _models(path: str, model: ModelSpec) -> Local:
    """``GET /v1/models`` (the trial's one model) or ``GET /v1/models/<id>``."""
    entry = _model_entry(model)
    name = path.removeprefix(MODELS_PREFIX).strip("/")
    if not name:
        body = {
            "object": "list",
            "data": [entry],
            "has_more": False,
            "first_id": entry["id"],
            "last_id": entry["id"],
        }
        return Local(200, body)
    # Any name is the trial's model: the gateway replaces the model of every call anyway.
    return Local(200, entry)


__all__ = [
    "COUNT_TOKENS_PATH",
    "HELLO_PATH",
    "PUBLIC_PATHS",
    "Local",
    "allowed",
    "answer",
    "method_not_allowed",
    "options",
]
