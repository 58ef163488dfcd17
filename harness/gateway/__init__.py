"""The model gateway: per-trial tokens, unix sockets, providers, budgets, call records.

:class:`Gateway` (:mod:`.server`) is the facade over :mod:`.http`, :mod:`.policy` and
:mod:`.recorder`; :mod:`.providers` and :mod:`.faux` are where calls go.
"""

from __future__ import annotations

from harness.gateway.faux import NO_MORE_RESPONSES, FauxProvider, load_faux_script
from harness.gateway.gemini import GoogleProvider
from harness.gateway.limits import Limits
from harness.gateway.policy import Budget, TrialUsage
from harness.gateway.providers import HTTPProvider, Provider, ProviderCall, ProviderReply
from harness.gateway.server import Gateway, TrialAccess, TrialGateway
from harness.gateway.translate import ResponsesOverChat
from harness.models.catalog import ModelSpec
from sandbox.credentials import CredentialStore


def make_provider(spec: ModelSpec, credentials: CredentialStore) -> Provider:
    """The provider of ``spec``, holding its real key (from the in-memory store only)."""
    if spec.provider == "faux":
        assert spec.script is not None
        return FauxProvider(load_faux_script(spec.script), spec.upstream)
    key = credentials.get(spec.api_key_env) if spec.api_key_env else None
    if spec.provider == "google":
        return GoogleProvider(spec, key)
    provider = HTTPProvider(spec, key)
    if spec.serves is not None and "openai-responses" not in spec.serves:
        return ResponsesOverChat(provider, frozenset(spec.serves))
    return provider


__all__ = [
    "NO_MORE_RESPONSES",
    "Budget",
    "FauxProvider",
    "Gateway",
    "HTTPProvider",
    "Limits",
    "Provider",
    "ProviderCall",
    "ProviderReply",
    "ResponsesOverChat",
    "TrialAccess",
    "TrialGateway",
    "TrialUsage",
    "load_faux_script",
    "make_provider",
]
