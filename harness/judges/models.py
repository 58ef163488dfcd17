"""Model access for judges: each call through a model gateway of its own, on its own budget.

A judge's model is named explicitly and checked before any trial (it must be in the model
catalog, with its key in the harness's in-memory store). Each call starts a gateway for that
model with the judge's per-trial budget, makes one in-process call (recorded like an agent's
call, in the ``model_calls.jsonl`` format) and closes it: the real key never leaves this
process and the agent's gateway and budget are never touched.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from typing_extensions import override

from harness.gateway import Budget, Gateway, make_provider
from harness.judges.base import ModelAccess, ModelReply, ModelRequest
from harness.models.catalog import ModelCatalog, ModelSpec
from harness.models.selection import select_model
from sandbox.credentials import CredentialStore

__all__ = ["JudgeModels"]


class JudgeModels(ModelAccess):
    """:class:`~harness.judges.base.ModelAccess` over the run's catalog and credentials.

    Args:
        catalog: Known models (the run's ``--models`` files and task sets' faux models).
        credentials: The in-memory key store of the run.
    """

    def __init__(self, catalog: ModelCatalog, credentials: CredentialStore) -> None:
        self.catalog = catalog
        self.credentials = credentials

    @classmethod
    def load(
        cls,
        models: list[str],
        task_roots: list[str],
        credentials: CredentialStore,
        environ: Mapping[str, str],
    ) -> JudgeModels:
        """The catalog a run sees (``config.models`` and its task sets' ``models.toml``)."""
        catalog = ModelCatalog.load(
            files=[Path(p) for p in models],
            task_roots=[Path(p) for p in task_roots],
            environ=environ,
        )
        return cls(catalog, credentials)

    def spec(self, model: str) -> ModelSpec:
        """The model's spec, checked like a run's model.

        Raises:
            ModelSelectionError: Unknown, or without its key.
        """
        choice = select_model(
            model, {}, self.catalog, credentials=set(self.credentials.names()), required=True
        )
        assert choice is not None
        return choice.spec

    @override
    def api(self, model: str) -> str:
        return self.spec(model).api

    @override
    def upstream(self, model: str) -> str:
        return self.spec(model).upstream

    @override
    def call(self, request: ModelRequest) -> ModelReply:
        spec = self.spec(request.model)
        budget = request.budget
        gateway = Gateway(
            spec,
            make_provider(spec, self.credentials),
            budget=Budget(
                budget.get("max_calls"), budget.get("max_tokens"), budget.get("max_cost_usd")
            ),
            redact=self.credentials.redact,
        )
        gateway.start()
        access_id = f"{request.trial_id}--judge"
        try:
            gateway.open_trial(access_id, request.task_name, request.record)
            status, body = gateway.call(access_id, request.path, request.body)
            usage = gateway.revoke(access_id)
        finally:
            gateway.close()
        return ModelReply(status, body, usage)
