"""The episode's part of a record: its agents' traces (docs/episodes.md).

An episode is recorded as one line of ``trials.jsonl``, a :class:`~harness.records.TrialRecord`
whose extra field ``episode`` holds an :class:`EpisodeRecord`: an old reader sees a trial (its
reward, status, usage summed over the agents) and keeps the rest as an unknown field. A
``single`` env writes today's record, without ``episode``. :class:`Episode` is the running
episode the record is made from.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness.records import TrialError, TrialRecord, TrialStatus, Usage

EPISODE_FIELD = "episode"
"""The name of the record's extra field that holds the episode."""


class Trace(BaseModel):
    """One agent's run inside an episode.

    Attributes:
        name: The agent's name in the episode (``agent-2``, ``solver``, ``judge``...).
        role: The env's role it plays (``agent``, ``solver``, ``judge``, ``user``...).
        agent: The agent that played it (``builtin``, ``command``...).
        id: Its own trial id (its gateway token and sandbox are keyed by it).
        status: How it ended.
        ok: Whether it ran (and was graded, when it is graded) without an error.
        reward: Its reward (None when it was not scored).
        rewards: Its named rewards.
        metrics: Numbers the env recorded on it (``best``, ``user_turns``...).
        info: What else the env recorded (a verdict, the turns...).
        usage: Its model usage.
        errors: Its errors (an agent's failure is data, never the episode's error).
        evidence_dir: Its evidence, relative to the run dir.
        started_at: Start (UTC).
        finished_at: End (UTC).
        timings: Its phases' seconds.
        sandbox: Its sandbox (backend, image, ids).
        posture: Its agent phase's posture check.
    """

    model_config = ConfigDict(extra="allow")

    name: str
    role: str
    agent: str
    id: str
    status: TrialStatus
    ok: bool
    reward: float | None = None
    rewards: dict[str, float] = Field(default_factory=dict)
    metrics: dict[str, float] = Field(default_factory=dict)
    info: dict[str, Any] = Field(default_factory=dict)
    usage: Usage = Field(default_factory=Usage)
    errors: list[TrialError] = Field(default_factory=list)
    evidence_dir: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    timings: dict[str, float] = Field(default_factory=dict)
    sandbox: dict[str, Any] | None = None
    posture: dict[str, Any] | None = None


class EpisodeRecord(BaseModel):
    """The episode of a record (its ``episode`` field).

    Attributes:
        env: The env's id and its parameters.
        ok: ``all(trace.ok)`` and no env error.
        complete: The env's ``complete()`` verdict: whether ``--resume`` keeps it.
        errors: The env's errors across the episode's attempts, oldest first.
        traces: The agents' traces, in completion order.
        metrics: Episode-wide numbers the env recorded (``pass_at_n``...).
        usage_by_agent: Each agent's model usage (the record's ``usage`` is their sum).
    """

    model_config = ConfigDict(extra="allow")

    env: dict[str, Any]
    ok: bool
    complete: bool
    errors: list[TrialError] = Field(default_factory=list)
    traces: list[Trace] = Field(default_factory=list)
    metrics: dict[str, float] = Field(default_factory=dict)
    usage_by_agent: dict[str, Usage] = Field(default_factory=dict)


@dataclass
class Episode:
    """One running episode: its traces (completion order), errors, and scores.

    ``finalize`` sets ``reward``/``rewards`` (the record's, which metrics use) and may add
    ``metrics``; a trace's own metrics go on the trace.
    """

    traces: list[Trace] = field(default_factory=list)
    errors: list[TrialError] = field(default_factory=list)
    reward: float | None = None
    rewards: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def ok(self) -> bool:
        """Every agent ran without an error, and the env raised none."""
        return not self.errors and all(trace.ok for trace in self.traces)

    def add(self, trace: Trace) -> None:
        """Append a finished agent's trace (any thread)."""
        with self._lock:
            self.traces.append(trace)

    def by_role(self, role: str) -> list[Trace]:
        """The traces of one role, in completion order."""
        return [trace for trace in self.traces if trace.role == role]


def episode_of(record: TrialRecord) -> EpisodeRecord | None:
    """The episode of a record, or None for a single agent's trial."""
    raw = (record.model_extra or {}).get(EPISODE_FIELD)
    if raw is None:
        return None
    return raw if isinstance(raw, EpisodeRecord) else EpisodeRecord.model_validate(raw)


def failure_errors(record: TrialRecord) -> list[TrialError]:
    """The errors that explain a failed attempt: the record's, and its failed agents'.

    The retry rules, the engine watch and the disk guard read these: an agent of an
    episode that failed on an engine outage or a full run dir is the run's fault too.
    """
    errors = list(record.errors)
    episode = episode_of(record)
    if episode is not None:
        errors += [e for trace in episode.traces if not trace.ok for e in trace.errors]
    return errors


def with_history(record: TrialRecord) -> TrialRecord:
    """An episode's record with its ``errors`` across attempts (oldest first)."""
    episode = episode_of(record)
    if episode is None or not record.previous_attempts:
        return record
    earlier = [e for attempt in record.previous_attempts for e in attempt.errors]
    updated = episode.model_copy(update={"errors": [*earlier, *record.errors]})
    return record.model_copy(update={EPISODE_FIELD: updated.model_dump(mode="json")})


def sum_usage(usages: list[Usage]) -> Usage:
    """The sum of several usages (a field is None when no usage reported it)."""
    total: dict[str, Any] = {}
    for name in Usage.model_fields:
        values = [getattr(u, name) for u in usages if getattr(u, name) is not None]
        total[name] = sum(values) if values else None
    return Usage(**total)


__all__ = [
    "EPISODE_FIELD",
    "Episode",
    "EpisodeRecord",
    "Trace",
    "episode_of",
    "failure_errors",
    "sum_usage",
    "with_history",
]
