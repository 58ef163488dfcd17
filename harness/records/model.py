"""Trial records: one JSON object per line of ``<run-dir>/trials.jsonl`` (docs/run-dir.md).

Every model here keeps unknown fields (``extra="allow"``), so a record written by an older
or newer version still loads and survives a load → rewrite round trip unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, WithJsonSchema, field_validator


def _text(value: Any) -> str:
    """Any ``str``, lone surrogates included (a name that is not UTF-8, read by the harness)."""
    if isinstance(value, str):
        return value
    raise ValueError("Input should be a valid string")


Text = Annotated[str, PlainValidator(_text), WithJsonSchema({"type": "string"})]
"""A record's string: any ``str``, lone surrogates included.

pydantic's own ``str`` refuses a lone surrogate, so a name the agent chose could make a
record impossible to build. In memory a record holds the real strings; ``trials.jsonl``
holds them escaped (:mod:`harness.records.lines`, docs/run-dir.md "Escaped strings").
"""


class TrialStatus(StrEnum):
    """How a trial ended. Only ``completed`` trials ran to the end without an error.

    ``internal_error`` is the harness's own failure (a bug, a record it could not write):
    never the agent's result, never retried within the run; ``--resume`` reruns it as a
    further attempt of the same trial.
    """

    COMPLETED = "completed"
    AGENT_TIMEOUT = "agent_timeout"
    AGENT_ERROR = "agent_error"
    ENVIRONMENT_ERROR = "environment_error"
    VERIFIER_ERROR = "verifier_error"
    CANCELLED = "cancelled"
    INTERNAL_ERROR = "internal_error"


class TaskRef(BaseModel):
    """Which task a trial ran.

    Attributes:
        name: Human-readable task name.
        key: Stable task key (unique within a task set); metrics group trials by it.
        hash: Content hash of the task directory.
        path: Where the task was loaded from.
        version: The task package's ``[task].version`` (schema 1.4), when it says one.
    """

    model_config = ConfigDict(extra="allow")

    name: Text
    key: Text
    hash: Text
    path: Text
    version: Text | None = None


class AgentRef(BaseModel):
    """Which agent (and model) ran the trial. Extra agent settings are kept as extra fields.

    Attributes:
        name: Agent name.
        model: Model identifier, if the agent uses one.
    """

    model_config = ConfigDict(extra="allow")

    name: Text
    model: Text | None = None


class SandboxRef(BaseModel):
    """Where the trial ran. Extra backend details are kept as extra fields.

    Attributes:
        backend: Sandbox backend name (``local``, ``docker``, ...).
        image: Container image reference, if any.
    """

    model_config = ConfigDict(extra="allow")

    backend: Text
    image: Text | None = None


class TrialError(BaseModel):
    """One error raised while running a trial.

    An error that a retry cannot change (a build error, a missing image, a limit the engine
    refuses) carries ``"retryable": false``; such a trial is never retried.

    Attributes:
        type: Error class or category.
        message: Human-readable message (never a secret).
        phase: Lifecycle phase it happened in (``prepare``, ``reset``, ``execute``, ...).
    """

    model_config = ConfigDict(extra="allow")

    type: Text
    message: Text
    phase: Text

    @property
    def retryable(self) -> bool:
        """False when a retry cannot change this error (absent means retryable)."""
        return bool((self.model_extra or {}).get("retryable", True))


class Usage(BaseModel):
    """Model usage of one trial. ``None`` means *not measured*, never zero.

    Attributes:
        input_tokens: Prompt tokens.
        output_tokens: Completion tokens.
        total_tokens: All tokens.
        cost_usd: Cost in US dollars.
        calls: Number of model calls.
        cached_tokens: Prompt tokens served from a provider cache (part of input_tokens).
        refused_calls: Requests the model gateway refused (bad token, path, host, budget).
    """

    model_config = ConfigDict(extra="allow")

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cost_usd: float | None = None
    calls: int | None = None
    cached_tokens: int | None = None
    refused_calls: int | None = None


class AttemptSummary(BaseModel):
    """An earlier attempt of a trial, kept in the final record's ``previous_attempts``.

    Attributes:
        attempt: The attempt's number.
        status: How it ended.
        errors: Its errors, the run error first.
        reward: Its reward, if it was graded.
        started_at: Start time (UTC).
        finished_at: End time (UTC).
        evidence_dir: Where its evidence was moved, relative to the run directory
            (``attempts/<trial id>/<attempt>``), if any was kept.
    """

    model_config = ConfigDict(extra="allow")

    attempt: int
    status: TrialStatus
    errors: list[TrialError] = Field(default_factory=list)
    reward: float | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    evidence_dir: Text | None = None

    @field_validator("started_at", "finished_at")
    @classmethod
    def _to_utc(cls, value: datetime | None) -> datetime | None:
        """Normalise timestamps to aware UTC (a naive timestamp is taken to be UTC)."""
        if value is None or value.tzinfo is None:
            return None if value is None else value.replace(tzinfo=UTC)
        return value.astimezone(UTC)

    @classmethod
    def of(cls, record: TrialRecord, *, evidence_dir: str | None = None) -> AttemptSummary:
        """Summarise a finished attempt's record."""
        return cls(
            attempt=record.attempt,
            status=record.status,
            errors=list(record.errors),
            reward=record.reward,
            started_at=record.started_at,
            finished_at=record.finished_at,
            evidence_dir=evidence_dir,
        )


class TrialRecord(BaseModel):
    """One trial's outcome: a line of ``trials.jsonl`` (docs/run-dir.md, contract).

    Attributes:
        id: Stable trial id (a retried trial keeps its id; the latest record wins).
        task: The task.
        agent: The agent.
        sandbox: The sandbox.
        rollout: Rollout index of this trial for its task.
        attempt: Attempt number (1 for the first try; retries and ``--resume`` reruns count
            on).
        status: How the trial ended (decided by the final attempt).
        ok: Whether the trial ran and was graded without an error.
        reward: The main reward, or ``None`` when the trial was not graded.
        rewards: All named rewards.
        errors: Errors of this (final) attempt, the run error first.
        previous_attempts: Earlier attempts of the trial, oldest first, each with its
            status and errors: nothing an earlier attempt reported is lost.
        timings: Phase name → seconds (``total`` for the whole trial, when known).
        usage: Model usage; missing telemetry is ``None``.
        versions: Component → version.
        started_at: Start time (timezone-aware, UTC).
        finished_at: End time (timezone-aware, UTC).
        evidence_dir: Evidence directory relative to the run directory.
        events: Security-relevant events (tampering, surviving processes, ...).
        posture: The agent phase's posture self-check, if it ran.
        verifier_posture: The verifier phase's (uid, capabilities, no_new_privs, seccomp).
    """

    model_config = ConfigDict(extra="allow")

    id: Text
    task: TaskRef
    agent: AgentRef
    sandbox: SandboxRef
    rollout: int = 0
    attempt: int = 1
    status: TrialStatus
    ok: bool
    reward: float | None = None
    rewards: dict[Text, float] = Field(default_factory=dict)
    errors: list[TrialError] = Field(default_factory=list)
    previous_attempts: list[AttemptSummary] = Field(default_factory=list)
    timings: dict[Text, float] = Field(default_factory=dict)
    usage: Usage = Field(default_factory=Usage)
    versions: dict[Text, Text] = Field(default_factory=dict)
    started_at: datetime
    finished_at: datetime
    evidence_dir: Text | None = None
    events: list[dict[Text, Any]] = Field(default_factory=list)
    posture: dict[Text, Any] | None = None
    verifier_posture: dict[Text, Any] | None = None

    @field_validator("started_at", "finished_at")
    @classmethod
    def _to_utc(cls, value: datetime) -> datetime:
        """Normalise timestamps to aware UTC (a naive timestamp is taken to be UTC)."""
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def tampered_verdict(record: TrialRecord) -> bool:
    """Whether the record's verdict was taken after the agent's tampering.

    A verifier in the agent's container ran after an agent phase changed what it reads
    (the record's ``tampered_verdict``, set only then: docs/run-dir.md).
    """
    return (record.model_extra or {}).get("tampered_verdict") is True


def verdict_with_agent_processes(record: TrialRecord) -> bool:
    """Whether the record's verdict was taken with the agent's processes alive.

    ``agent_services = keep``: a verifier ran beside services the agent left listening
    (the record's non-empty ``agent_processes_alive``: docs/run-dir.md).
    """
    alive = (record.model_extra or {}).get("agent_processes_alive")
    return record.reward is not None and isinstance(alive, list) and bool(alive)


def latest_by_id(records: Iterable[TrialRecord]) -> dict[str, TrialRecord]:
    """Map each trial id to its last record (later records supersede earlier ones).

    Args:
        records: Records in file order.

    Returns:
        Trial id → latest record, in order of each id's first appearance.
    """
    latest: dict[str, TrialRecord] = {}
    for record in records:
        latest[record.id] = record
    return latest


__all__ = [
    "AgentRef",
    "AttemptSummary",
    "SandboxRef",
    "TaskRef",
    "Text",
    "TrialError",
    "TrialRecord",
    "TrialStatus",
    "Usage",
    "latest_by_id",
    "tampered_verdict",
    "verdict_with_agent_processes",
]
