"""Model access for a run: pick the model (explicitly), then start the gateway for it."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from pathlib import Path

from harness.agents.kinds import Agent
from harness.config import BudgetConfig, GatewayConfig, RunConfig
from harness.gateway import Budget, Gateway, Limits, load_faux_script, make_provider
from harness.gateway.limits import MIB
from harness.models.catalog import ModelCatalog
from harness.models.selection import ModelChoice, requested_model, select_model
from sandbox.credentials import CredentialStore


def resolve_model(
    config: RunConfig,
    agent: Agent,
    credentials: CredentialStore,
    environ: Mapping[str, str],
) -> ModelChoice | None:
    """Choose the run's model before any trial starts, or None if the agent needs none.

    Raises:
        ModelSelectionError: a contract message (docs/model-access.md, harness.models).
        UsageError: a catalog or faux script is invalid.
    """
    if agent.model_use == "none":
        return None
    catalog = ModelCatalog.load(
        files=[Path(p) for p in config.models],
        task_roots=[Path(p) for p in config.tasks.paths],
        environ=environ,
    )
    asked = requested_model(config.model, environ)
    spec = catalog.get(asked[0]) if asked is not None else None
    if spec is not None and spec.api_key_env and spec.api_key_env not in credentials.names():
        # A catalog names its own key variable (VLLM_API_KEY, ...): it leaves the
        # environment now, like the well-known ones did at start-up.
        if isinstance(environ, MutableMapping):
            credentials.hide_from_env([spec.api_key_env], env=environ)
        elif environ.get(spec.api_key_env):
            credentials.set(spec.api_key_env, environ[spec.api_key_env])
    choice = select_model(
        config.model,
        environ,
        catalog,
        credentials=set(credentials.names()),
        required=agent.model_use == "required",
    )
    if choice is None:
        return None
    if choice.spec.script is not None:
        load_faux_script(choice.spec.script)  # a broken script fails now, not in trial 1
    agent.bind_model(choice.spec)
    return choice


def gateway_limits(config: GatewayConfig) -> Limits:
    """The gateway's per-trial caps from the ``[gateway]`` section."""
    return Limits(
        max_connections=config.max_connections,
        max_request_bytes=int(config.max_request_mb * MIB),
        max_memory_bytes=int(config.max_memory_mb * MIB),
        max_recorded_refusals=config.max_recorded_refusals,
    )


def start_gateway(
    choice: ModelChoice,
    credentials: CredentialStore,
    budget: BudgetConfig,
    limits: GatewayConfig | None = None,
) -> Gateway:
    """Start the run's gateway; the real key stays in this process's memory."""
    gateway = Gateway(
        choice.spec,
        make_provider(choice.spec, credentials),
        budget=Budget(budget.max_calls, budget.max_tokens, budget.max_cost_usd),
        limits=gateway_limits(limits or GatewayConfig()),
        redact=credentials.redact,
    )
    gateway.start()
    return gateway


__all__ = ["gateway_limits", "resolve_model", "start_gateway"]
