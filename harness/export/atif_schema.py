"""ATIF (Harbor's Agent Trajectory Interchange Format) v1.7: the schema, as pydantic models.

The subset of fields this harness reads and writes, validated strictly (unknown fields are
errors): :class:`AtifTrajectory` holds an :class:`AtifAgent` and :class:`AtifStep` s with
their tool calls, observations and metrics. :mod:`harness.export.atif` builds them from a
trial's evidence.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from harness.records.transcript import parse_timestamp

ATIF_SCHEMA_VERSION: Literal["ATIF-v1.7"] = "ATIF-v1.7"
"""The ATIF version this module writes."""

_STRICT = ConfigDict(extra="forbid")

AGENT_ONLY_FIELDS = (
    "model_name",
    "reasoning_effort",
    "reasoning_content",
    "tool_calls",
    "metrics",
    "llm_call_count",
)
"""Step fields only ``source="agent"`` steps may carry."""


class AtifToolCall(BaseModel):
    """One tool call of an agent step.

    Attributes:
        tool_call_id: Id the observation results refer to (``source_call_id``).
        function_name: The tool's name.
        arguments: The arguments (a JSON object, possibly empty).
        extra: Custom metadata.
    """

    model_config = _STRICT

    tool_call_id: str
    function_name: str
    arguments: dict[str, Any]
    extra: dict[str, Any] | None = None


class AtifObservationResult(BaseModel):
    """One result in an observation.

    Attributes:
        source_call_id: The ``tool_call_id`` it answers (same step), or None.
        content: The result text.
        extra: Custom metadata.
    """

    model_config = _STRICT

    source_call_id: str | None = None
    content: str | None = None
    extra: dict[str, Any] | None = None


class AtifObservation(BaseModel):
    """Environment feedback of a step.

    Attributes:
        results: The results.
    """

    model_config = _STRICT

    results: list[AtifObservationResult] = Field(default_factory=list)


class AtifMetrics(BaseModel):
    """LLM metrics of one agent step.

    Attributes:
        prompt_tokens: Input tokens (cached ones included).
        completion_tokens: Output tokens.
        cached_tokens: Prompt tokens served from a cache.
        cost_usd: Cost of the step.
        extra: Custom metrics.
    """

    model_config = _STRICT

    prompt_tokens: int | None = Field(default=None, ge=0)
    completion_tokens: int | None = Field(default=None, ge=0)
    cached_tokens: int | None = Field(default=None, ge=0)
    cost_usd: float | None = None
    extra: dict[str, Any] | None = None


class AtifStep(BaseModel):
    """One step: a system prompt, a user message, or an agent turn.

    Attributes:
        step_id: 1-based ordinal.
        timestamp: ISO 8601 time of the step.
        source: ``system``, ``user`` or ``agent``.
        model_name: Model of this turn (agent only).
        reasoning_effort: Effort setting (agent only).
        message: The text (may be empty).
        reasoning_content: Explicit reasoning (agent only).
        tool_calls: Tool calls (agent only).
        observation: Results of the tool calls, or of a system operation.
        metrics: Token and cost metrics (agent only).
        is_copied_context: Whether the step was copied from an earlier context.
        llm_call_count: LLM calls behind the step (agent only).
        extra: Custom metadata.
    """

    model_config = _STRICT

    step_id: int = Field(ge=1)
    timestamp: str | None = None
    source: Literal["system", "user", "agent"]
    model_name: str | None = None
    reasoning_effort: str | float | None = None
    message: str
    reasoning_content: str | None = None
    tool_calls: list[AtifToolCall] | None = None
    observation: AtifObservation | None = None
    metrics: AtifMetrics | None = None
    is_copied_context: bool | None = None
    llm_call_count: int | None = Field(default=None, ge=0)
    extra: dict[str, Any] | None = None

    @field_validator("timestamp")
    @classmethod
    def _iso_timestamp(cls, value: str | None) -> str | None:
        """Timestamps must be ISO 8601."""
        if value is not None and parse_timestamp(value) is None:
            raise ValueError(f"not an ISO 8601 timestamp: {value!r}")
        return value

    @model_validator(mode="after")
    def _agent_only_fields(self) -> AtifStep:
        """Agent-only fields appear only on ``source="agent"`` steps."""
        if self.source != "agent":
            present = [name for name in AGENT_ONLY_FIELDS if getattr(self, name) is not None]
            if present:
                raise ValueError(
                    f"step {self.step_id} ({self.source}) has agent-only fields: "
                    + ", ".join(present)
                )
        return self


class AtifAgent(BaseModel):
    """The agent system behind a trajectory.

    Attributes:
        name: Agent name.
        version: Agent (here: harness) version.
        model_name: Default model.
        tool_definitions: Tools offered to the model.
        extra: Custom configuration.
    """

    model_config = _STRICT

    name: str
    version: str
    model_name: str | None = None
    tool_definitions: list[dict[str, Any]] | None = None
    extra: dict[str, Any] | None = None


class AtifFinalMetrics(BaseModel):
    """Totals over the whole trajectory.

    Attributes:
        total_prompt_tokens: Input tokens.
        total_completion_tokens: Output tokens.
        total_cached_tokens: Cached input tokens.
        total_cost_usd: Cost in US dollars.
        total_steps: Number of steps.
        extra: Custom totals.
    """

    model_config = _STRICT

    total_prompt_tokens: int | None = Field(default=None, ge=0)
    total_completion_tokens: int | None = Field(default=None, ge=0)
    total_cached_tokens: int | None = Field(default=None, ge=0)
    total_cost_usd: float | None = None
    total_steps: int | None = Field(default=None, ge=0)
    extra: dict[str, Any] | None = None


class AtifTrajectory(BaseModel):
    """An ATIF v1.7 trajectory (no subagent embedding: the harness has no subagents).

    Attributes:
        schema_version: ``ATIF-v1.7``.
        session_id: Run-scoped id (the run name).
        trajectory_id: Document id (the trial id).
        agent: The agent.
        steps: The steps; ``step_id`` runs 1, 2, 3, ...
        notes: Explanations of gaps or format discrepancies.
        final_metrics: Totals.
        extra: Custom metadata (task, reward, status, ...).
    """

    model_config = _STRICT

    schema_version: Literal["ATIF-v1.7"] = ATIF_SCHEMA_VERSION
    session_id: str | None = None
    trajectory_id: str | None = None
    agent: AtifAgent
    steps: list[AtifStep]
    notes: str | None = None
    final_metrics: AtifFinalMetrics | None = None
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> AtifTrajectory:
        """Step ids are sequential from 1; results refer to tool calls of their own step."""
        for index, step in enumerate(self.steps, 1):
            if step.step_id != index:
                raise ValueError(f"step_id {step.step_id} at position {index}: must be {index}")
            if step.observation is None:
                continue
            ids = {call.tool_call_id for call in step.tool_calls or []}
            for result in step.observation.results:
                if result.source_call_id is not None and result.source_call_id not in ids:
                    raise ValueError(
                        f"step {index}: observation refers to unknown tool call "
                        f"{result.source_call_id!r}"
                    )
        return self

    def to_json_dict(self) -> dict[str, Any]:
        """The trajectory as JSON data, unset optional fields left out.

        Returns:
            A JSON-serialisable dict.
        """
        return self.model_dump(mode="json", exclude_none=True)


__all__ = [
    "AGENT_ONLY_FIELDS",
    "ATIF_SCHEMA_VERSION",
    "AtifAgent",
    "AtifFinalMetrics",
    "AtifMetrics",
    "AtifObservation",
    "AtifObservationResult",
    "AtifStep",
    "AtifToolCall",
    "AtifTrajectory",
]
