"""Which models exist, where they live, what they cost: the model catalog.

A model is named ``provider/name``. The built-in catalog lists well-known OpenAI and
Anthropic models with their list prices; catalog files (TOML) add or override models:

```toml
[models."openai/qwen-local"]        # any OpenAI-compatible server: vLLM, ollama, a proxy
model = "Qwen/Qwen2.5-7B-Instruct"  # the name sent upstream (default: the part after "/")
base_url = "http://127.0.0.1:8000/v1"
serves = ["openai-chat"]            # its endpoint has no /v1/responses: the gateway translates
api_key_env = ""                    # the credential to send; "" = the server needs none
input_price = 0.0                   # USD per million tokens; 0 or absent = cost unknown
output_price = 0.0

[models."faux/demo"]                # scripted responses (docs/model-access.md §5)
script = "faux/demo.json"           # relative to the catalog file
```

Catalogs from a task set (``models.toml`` at a task-set root) may define only ``faux``
models: a task set must never be able to point a real provider, and its key, elsewhere.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from harness.errors import UsageError

Api = Literal["openai-chat", "openai-responses", "anthropic-messages", "gemini"]
PROVIDERS = ("openai", "anthropic", "google", "faux")
CATALOG_FILENAME = "models.toml"

_DEFAULT_BASE = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
    "google": "https://generativelanguage.googleapis.com",
}
_DEFAULT_KEY = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "google": "GEMINI_API_KEY",
}
_DEFAULT_API: dict[str, Api] = {
    "openai": "openai-chat",
    "anthropic": "anthropic-messages",
    "google": "gemini",
    "faux": "openai-chat",
}
#: Host environment variables that move a provider's default endpoint (a proxy, vLLM).
BASE_URL_ENV = {
    "openai": "OPENAI_BASE_URL",
    "anthropic": "ANTHROPIC_BASE_URL",
    "google": "GOOGLE_GEMINI_BASE_URL",
}


@dataclass(frozen=True)
class Prices:
    """USD per million tokens. A price of 0 means unknown: cost is then not recorded."""

    input: float = 0.0
    output: float = 0.0
    cached_input: float | None = None

    @property
    def known(self) -> bool:
        """Whether any price is non-zero (otherwise no cost is ever computed)."""
        return self.input > 0 or self.output > 0

    def cost(
        self, input_tokens: int | None, output_tokens: int | None, cached: int | None
    ) -> float | None:
        """The cost of one call, or None when prices or token counts are unknown."""
        if not self.known or input_tokens is None or output_tokens is None:
            return None
        cached_n = min(cached or 0, input_tokens)
        cached_price = self.input if self.cached_input is None else self.cached_input
        total = (
            (input_tokens - cached_n) * self.input
            + cached_n * cached_price
            + output_tokens * self.output
        )
        return total / 1_000_000


@dataclass(frozen=True)
class ModelSpec:
    """One model: how to reach it and what it costs."""

    provider: str
    name: str
    upstream: str
    api: Api
    base_url: str | None = None
    #: Name of the credential (in the in-memory store) sent upstream; None = no auth.
    api_key_env: str | None = None
    prices: Prices = field(default_factory=Prices)
    #: Faux models: the script of responses.
    script: Path | None = None
    #: The APIs its endpoint serves (None: all of its provider's). An OpenAI-compatible
    #: server with only chat completions: the gateway answers Responses calls over chat.
    serves: tuple[Api, ...] | None = None
    source: str = "built-in"

    @property
    def id(self) -> str:
        """``provider/name``."""
        return f"{self.provider}/{self.name}"


def _builtin(provider: str, name: str, inp: float, out: float, cached: float | None) -> ModelSpec:
    return ModelSpec(
        provider=provider,
        name=name,
        upstream=name,
        api=_DEFAULT_API[provider],
        api_key_env=_DEFAULT_KEY[provider],
        prices=Prices(inp, out, cached),
    )


#: List prices (USD per million tokens) as published by the providers in 2025; a catalog
#: file overrides them when they change.
BUILTIN_MODELS: tuple[ModelSpec, ...] = (
    _builtin("openai", "gpt-4o", 2.50, 10.00, 1.25),
    _builtin("openai", "gpt-4o-mini", 0.15, 0.60, 0.075),
    _builtin("openai", "gpt-4.1", 2.00, 8.00, 0.50),
    _builtin("openai", "gpt-4.1-mini", 0.40, 1.60, 0.10),
    _builtin("openai", "gpt-4.1-nano", 0.10, 0.40, 0.025),
    _builtin("openai", "o3-mini", 1.10, 4.40, 0.55),
    _builtin("anthropic", "claude-sonnet-4-0", 3.00, 15.00, 0.30),
    _builtin("anthropic", "claude-opus-4-0", 15.00, 75.00, 1.50),
    _builtin("anthropic", "claude-3-5-haiku-latest", 0.80, 4.00, 0.08),
    _builtin("anthropic", "claude-3-7-sonnet-latest", 3.00, 15.00, 0.30),
    # Prompts up to 200k tokens (longer ones cost more: a catalog file can say so).
    _builtin("google", "gemini-2.5-pro", 1.25, 10.00, 0.31),
    _builtin("google", "gemini-2.5-flash", 0.30, 2.50, 0.075),
)

_ENTRY_KEYS = {
    "model",
    "base_url",
    "api_key_env",
    "api",
    "input_price",
    "output_price",
    "cached_input_price",
    "script",
    "serves",
}


def _number(path: Path, key: str, entry: Mapping[str, Any], field_name: str) -> float:
    value = entry.get(field_name, 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise UsageError(f"{path}: models.{key}.{field_name} must be a number ≥ 0")
    return float(value)


def _parse_entry(path: Path, key: str, entry: Any, *, faux_only: bool) -> ModelSpec:
    where = f"{path}: models.{key}"
    if not isinstance(entry, dict):
        raise UsageError(f"{where} must be a table")
    provider, sep, name = key.partition("/")
    if not sep or not provider or not name:
        raise UsageError(f"{where}: a model is named provider/name")
    if provider not in PROVIDERS:
        raise UsageError(f"{where}: unknown provider {provider!r} (known: {', '.join(PROVIDERS)})")
    if faux_only and provider != "faux":
        raise UsageError(
            f"{where}: a task set's {CATALOG_FILENAME} may define only faux models "
            "(real providers go in a catalog given with --models)"
        )
    unknown = sorted(set(entry) - _ENTRY_KEYS)
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(unknown)}")
    for text_key in ("model", "base_url", "api_key_env", "api", "script"):
        if text_key in entry and not isinstance(entry[text_key], str):
            raise UsageError(f"{where}.{text_key} must be a string")
    api = entry.get("api", _DEFAULT_API[provider])
    if api not in ("openai-chat", "openai-responses", "anthropic-messages", "gemini"):
        raise UsageError(
            f"{where}.api must be openai-chat, openai-responses, anthropic-messages or gemini"
        )
    if (provider == "google") != (api == "gemini") and provider != "faux":
        raise UsageError(f"{where}.api: google models speak gemini, which only they (and faux) do")
    script = None
    if provider == "faux":
        if "script" not in entry:
            raise UsageError(f'{where}: a faux model needs script = "path/to/script.json"')
        script = (path.parent / entry["script"]).resolve()
    elif "script" in entry:
        raise UsageError(f"{where}.script applies to faux models only")
    cached = entry.get("cached_input_price")
    prices = Prices(
        _number(path, key, entry, "input_price"),
        _number(path, key, entry, "output_price"),
        None if cached is None else _number(path, key, entry, "cached_input_price"),
    )
    if provider == "faux" and prices.known:
        raise UsageError(f"{where}: faux models have no cost")
    serves = _serves(where, provider, entry)
    key_env = entry.get("api_key_env", _DEFAULT_KEY.get(provider))
    return ModelSpec(
        provider=provider,
        name=name,
        upstream=entry.get("model", name),
        api=api,
        base_url=entry.get("base_url"),
        api_key_env=key_env or None,
        prices=prices,
        script=script,
        source=str(path),
        serves=serves,
    )


def _serves(where: str, provider: str, entry: Mapping[str, Any]) -> tuple[Api, ...] | None:
    """The ``serves`` list of an entry (OpenAI-compatible endpoints only)."""
    if "serves" not in entry:
        return None
    raw = entry["serves"]
    known: tuple[Api, ...] = ("openai-chat", "openai-responses")
    if provider != "openai":
        raise UsageError(f"{where}.serves applies to openai models only")
    if not isinstance(raw, list) or not raw or any(api not in known for api in raw):
        raise UsageError(
            f'{where}.serves must be a non-empty list of "openai-chat", "openai-responses"'
        )
    return tuple(api for api in known if api in raw)


def load_catalog_file(path: Path, *, faux_only: bool = False) -> list[ModelSpec]:
    """Read the ``[models."provider/name"]`` tables of a catalog file.

    Raises:
        UsageError: the file is unreadable or an entry is invalid (naming it).
    """
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"model catalog {path}: {exc}") from None
    unknown = sorted(set(data) - {"models"})
    if unknown:
        raise UsageError(f"model catalog {path}: unknown top-level key(s) {', '.join(unknown)}")
    models = data.get("models", {})
    if not isinstance(models, dict):
        raise UsageError(f"model catalog {path}: [models] must be a table")
    return [_parse_entry(path, k, v, faux_only=faux_only) for k, v in models.items()]


class ModelCatalog:
    """Known models by ``provider/name``: the built-ins, then catalog files (later wins)."""

    def __init__(self, models: Iterable[ModelSpec] = BUILTIN_MODELS) -> None:
        self._models: dict[str, ModelSpec] = {}
        for spec in models:
            self._models[spec.id] = spec

    def add(self, specs: Iterable[ModelSpec]) -> None:
        """Add or override models."""
        for spec in specs:
            self._models[spec.id] = spec

    def get(self, model_id: str) -> ModelSpec | None:
        """The model named ``provider/name``, or None."""
        return self._models.get(model_id)

    def ids(self) -> list[str]:
        """Every known model id, sorted."""
        return sorted(self._models)

    @classmethod
    def load(
        cls,
        files: Iterable[Path] = (),
        task_roots: Iterable[Path] = (),
        environ: Mapping[str, str] | None = None,
    ) -> ModelCatalog:
        """Built-ins + each task-set root's ``models.toml`` (faux only) + ``files``.

        ``environ`` supplies ``OPENAI_BASE_URL``/``ANTHROPIC_BASE_URL``, which move the
        built-in models of that provider (a proxy or a local server).
        """
        env = environ or {}
        builtins = []
        for spec in BUILTIN_MODELS:
            override = env.get(BASE_URL_ENV.get(spec.provider, ""), "")
            builtins.append(replace(spec, base_url=override) if override else spec)
        catalog = cls(builtins)
        seen: set[Path] = set()
        for root in task_roots:
            candidate = (root if root.is_dir() else root.parent) / CATALOG_FILENAME
            if candidate.is_file() and candidate.resolve() not in seen:
                seen.add(candidate.resolve())
                catalog.add(load_catalog_file(candidate, faux_only=True))
        for path in files:
            catalog.add(load_catalog_file(path))
        return catalog


def default_base_url(spec: ModelSpec) -> str | None:
    """Where requests for ``spec`` go (None for faux models)."""
    if spec.provider == "faux":
        return None
    return (spec.base_url or _DEFAULT_BASE[spec.provider]).rstrip("/")
