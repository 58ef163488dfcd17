"""Export trials as ATIF trajectories (Harbor's Agent Trajectory Interchange Format, v1.7).

One trajectory per trial, built from the trial record and its evidence dir:

- ``session.jsonl`` (docs/model-access.md §3): each ``system``/``user`` message becomes a
  ``system``/``user`` step; each assistant message becomes one ``agent`` step (text,
  ``tool_calls``, per-step token ``metrics``, ``model_name``, ``llm_call_count`` 1), whose
  ``observation`` collects the ``tool_result`` lines that follow it. A tool result whose
  id matches no tool call of that step is kept with ``source_call_id`` null and the id in
  the result's ``extra``; one before any agent step becomes a ``system`` step observation.
- ``model_calls.jsonl`` (§2): when it has any line, ``final_metrics`` comes from it (the
  gateway's numbers are authoritative); otherwise from the session's per-message usage,
  and without a session from the trial record's usage. Unknown totals are omitted.
- Trials without a session (``oracle``, ``nop``, command agents that keep none): the steps
  are the task instruction as one ``user`` step (read from ``<task.path>/instruction.md``;
  left out, with a note, when it cannot be read). ``notes`` says so, and, when
  ``model_calls.jsonl`` exists, how many model calls it holds: they count in
  ``final_metrics`` but are not turned into steps (their bodies are provider-specific).

Malformed evidence lines never stop an export: they are skipped and listed in ``notes``.
Every trajectory is validated against the ATIF models here before it is returned.

:func:`harness.export.export_run` writes one per trial (:mod:`harness.export.files`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from harness._version import __version__
from harness.export.atif_schema import (
    AtifAgent,
    AtifFinalMetrics,
    AtifMetrics,
    AtifObservation,
    AtifObservationResult,
    AtifStep,
    AtifToolCall,
    AtifTrajectory,
)
from harness.records import TrialRecord
from harness.records.layout import MODEL_CALLS_FILENAME, SESSION_FILENAME, TRIALS_DIRNAME
from harness.records.transcript import (
    JsonlRead,
    content_text,
    parse_timestamp,
    read_jsonl,
    usage_from_model_calls,
)
from harness.tasks.limits import MAX_INSTRUCTION_BYTES
from sandbox.beneath import is_file_beneath, read_beneath

INSTRUCTION_FILENAME = "instruction.md"
"""The task instruction inside a task dir."""


# --------------------------------------------------------------------------------------------
# Building a trajectory
# --------------------------------------------------------------------------------------------


def _iso(value: Any) -> str | None:
    """An ISO 8601 UTC timestamp (``...Z``), or None when ``value`` does not parse."""
    parsed = value if isinstance(value, datetime) else parse_timestamp(value)
    if parsed is None:
        return None
    return parsed.isoformat().replace("+00:00", "Z")


def _int(value: Any) -> int | None:
    """A reported non-negative count, or None."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _compact(data: Mapping[str, Any]) -> dict[str, Any] | None:
    """``data`` without None values; None when nothing is left."""
    kept = {key: value for key, value in data.items() if value is not None}
    return kept or None


@dataclass
class _Builder:
    """Turns session lines into steps."""

    model_name: str | None
    steps: list[AtifStep] = field(default_factory=list)
    session_line: dict[str, Any] | None = None
    end_line: dict[str, Any] | None = None
    usage_in: int | None = None
    usage_out: int | None = None
    usage_cached: int | None = None
    _agent: AtifStep | None = None

    def _next_id(self) -> int:
        return len(self.steps) + 1

    def add_line(self, line: Mapping[str, Any]) -> None:
        kind = line.get("type")
        if kind == "session" and self.session_line is None:
            self.session_line = dict(line)
        elif kind == "end":
            self.end_line = dict(line)
        elif kind == "message":
            role = line.get("role")
            if role == "assistant":
                self._add_agent(line)
            elif role in ("system", "user"):
                self._agent = None
                self.steps.append(
                    AtifStep(
                        step_id=self._next_id(),
                        timestamp=_iso(line.get("timestamp")),
                        source="system" if role == "system" else "user",
                        message=content_text(line.get("content")),
                    )
                )
        elif kind == "tool_result":
            self._add_result(line)

    def _add_agent(self, line: Mapping[str, Any]) -> None:
        step_id = self._next_id()
        calls: list[AtifToolCall] = []
        raw_calls = line.get("tool_calls")
        for index, call in enumerate(raw_calls if isinstance(raw_calls, list) else [], 1):
            if not isinstance(call, Mapping):
                continue
            extra: dict[str, Any] = {}
            call_id = call.get("id")
            if not isinstance(call_id, str) or not call_id:
                call_id = f"step{step_id}-call{index}"
                extra["synthetic_id"] = True
            arguments = call.get("arguments")
            if not isinstance(arguments, dict):
                extra["raw_arguments"] = arguments
                arguments = {}
            name = call.get("name")
            calls.append(
                AtifToolCall(
                    tool_call_id=call_id,
                    function_name=name if isinstance(name, str) else content_text(name),
                    arguments=arguments,
                    extra=extra or None,
                )
            )
        usage = line.get("usage")
        usage = usage if isinstance(usage, Mapping) else {}
        prompt = _int(usage.get("input_tokens"))
        completion = _int(usage.get("output_tokens"))
        cached = _int(usage.get("cached_tokens"))
        self.usage_in = _plus(self.usage_in, prompt)
        self.usage_out = _plus(self.usage_out, completion)
        self.usage_cached = _plus(self.usage_cached, cached)
        metrics = None
        if prompt is not None or completion is not None or cached is not None:
            metrics = AtifMetrics(
                prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached
            )
        stop_reason = line.get("stop_reason")
        step = AtifStep(
            step_id=step_id,
            timestamp=_iso(line.get("timestamp")),
            source="agent",
            model_name=self.model_name,
            message=content_text(line.get("content")),
            tool_calls=calls or None,
            metrics=metrics,
            llm_call_count=1,
            extra={"stop_reason": stop_reason} if stop_reason is not None else None,
        )
        self.steps.append(step)
        self._agent = step

    def _add_result(self, line: Mapping[str, Any]) -> None:
        call_id = line.get("tool_call_id")
        is_error = line.get("is_error")
        extra = _compact(
            {
                "name": line.get("name"),
                "is_error": is_error if isinstance(is_error, bool) else None,
                "duration_ms": line.get("duration_ms"),
                "timestamp": _iso(line.get("timestamp")),
            }
        )
        target = self._agent
        if target is None:
            # A result before any agent turn: keep it, as a system-step observation.
            target = AtifStep(
                step_id=self._next_id(),
                timestamp=_iso(line.get("timestamp")),
                source="system",
                message="",
                observation=AtifObservation(),
            )
            self.steps.append(target)
            self._agent = None
        known = {call.tool_call_id for call in target.tool_calls or []}
        if isinstance(call_id, str) and call_id in known:
            source_call_id: str | None = call_id
        else:
            source_call_id = None
            extra = {**(extra or {}), "tool_call_id": call_id}
        if target.observation is None:
            target.observation = AtifObservation()
        target.observation.results.append(
            AtifObservationResult(
                source_call_id=source_call_id,
                content=content_text(line.get("content")),
                extra=extra,
            )
        )


def _plus(total: int | None, value: int | None) -> int | None:
    if value is None:
        return total
    return value if total is None else total + value


def _tool_definitions(tools: Any) -> list[dict[str, Any]] | None:
    """Tool definitions from the session line's ``tools`` (names, or full definitions)."""
    if not isinstance(tools, list):
        return None
    definitions: list[dict[str, Any]] = []
    for tool in tools:
        if isinstance(tool, str):
            definitions.append({"type": "function", "function": {"name": tool}})
        elif isinstance(tool, dict):
            definitions.append(tool)
    return definitions or None


def _evidence_jsonl(evidence_dir: Path, name: str) -> JsonlRead:
    """An evidence JSONL file; a link (or one reached through a link) reads as absent."""
    if not is_file_beneath(evidence_dir, name):
        return JsonlRead()
    return read_jsonl(evidence_dir / name)


def _read_instruction(record: TrialRecord) -> str | None:
    """The task instruction, from ``<task.path>/instruction.md``, if it can be read.

    Read beneath the task dir without following a link (a forged record may name any dir),
    at most :data:`~harness.tasks.limits.MAX_INSTRUCTION_BYTES`.
    """
    read = read_beneath(record.task.path, INSTRUCTION_FILENAME, MAX_INSTRUCTION_BYTES)
    if read is None:
        return None
    return read.data.decode("utf-8", errors="replace")


def _malformed_note(name: str, read: JsonlRead) -> str | None:
    """A note on lines of ``name`` that were skipped, or None."""
    parts = []
    if read.errors:
        lines = ", ".join(str(error["line"]) for error in read.errors)
        parts.append(f"{name}: {len(read.errors)} malformed line(s) skipped (line {lines}).")
    if read.torn_line is not None:
        parts.append(f"{name}: torn last line {read.torn_line} ignored.")
    return " ".join(parts) or None


def _default_session_id(evidence_dir: Path) -> str | None:
    """The run name, when ``evidence_dir`` is ``<run>/trials/<id>``."""
    evidence_dir = Path(evidence_dir).absolute()
    if evidence_dir.parent.name == TRIALS_DIRNAME:
        return evidence_dir.parent.parent.name or None
    return None


def trajectory_for_trial(  # noqa: C901
    record: TrialRecord, evidence_dir: Path, *, session_id: str | None = None
) -> dict[str, Any]:
    """Build the ATIF-v1.7 trajectory of one trial.

    See the module docstring for how steps and metrics are derived. Bad evidence lines are
    skipped and noted; nothing in the evidence makes this raise.

    Args:
        record: The trial's (latest) record.
        evidence_dir: The trial's evidence dir (``<run>/trials/<trial-id>``).
        session_id: The run name; by default taken from ``evidence_dir``'s location.

    Returns:
        The trajectory as JSON data (validated against :class:`AtifTrajectory`).
    """
    evidence_dir = Path(evidence_dir)
    session = _evidence_jsonl(evidence_dir, SESSION_FILENAME)
    calls = _evidence_jsonl(evidence_dir, MODEL_CALLS_FILENAME)
    notes: list[str] = []

    builder = _Builder(model_name=record.agent.model)
    for line in session.lines:
        builder.add_line(line)
    session_line = builder.session_line or {}
    session_model = session_line.get("model")
    if isinstance(session_model, str) and session_model:
        builder.model_name = session_model
        for step in builder.steps:
            if step.source == "agent":
                step.model_name = session_model
    steps = builder.steps
    has_session = session.exists and bool(steps)

    if not has_session:
        if session.exists:
            notes.append("session.jsonl holds no messages; steps hold only the task instruction.")
        else:
            notes.append(
                f"No session.jsonl: agent {record.agent.name!r} keeps no session, so the steps "
                "hold only the task instruction."
            )
        steps = []
        instruction = _read_instruction(record)
        if instruction is None:
            notes.append(
                f"The instruction could not be read from {record.task.path}/{INSTRUCTION_FILENAME}."
            )
        else:
            steps.append(
                AtifStep(
                    step_id=1,
                    timestamp=_iso(record.started_at),
                    source="user",
                    message=instruction,
                )
            )
        if calls.exists:
            notes.append(
                f"model_calls.jsonl holds {len(calls.lines)} model call(s) made by the agent; "
                "they are counted in final_metrics but not turned into steps."
            )
    for name, read in ((SESSION_FILENAME, session), (MODEL_CALLS_FILENAME, calls)):
        note = _malformed_note(name, read)
        if note:
            notes.append(note)

    # Final metrics: the gateway's numbers win; then the session's; then the record's.
    metrics_extra: dict[str, Any] = {}
    if calls.lines:
        usage = usage_from_model_calls(calls.lines)
        totals = (usage.input_tokens, usage.output_tokens, usage.cached_tokens, usage.cost_usd)
        metrics_extra = {"usage_source": MODEL_CALLS_FILENAME, "model_calls": usage.calls}
    elif has_session:
        totals = (builder.usage_in, builder.usage_out, builder.usage_cached, None)
        metrics_extra = {"usage_source": SESSION_FILENAME}
    else:
        recorded = record.usage
        # A field of Usage in newer records, an extra field in older ones.
        cached = getattr(recorded, "cached_tokens", None)
        if cached is None:
            cached = (recorded.model_extra or {}).get("cached_tokens")
        totals = (recorded.input_tokens, recorded.output_tokens, _int(cached), recorded.cost_usd)
        metrics_extra = {"usage_source": "trial_record"}
        if recorded.calls is not None:
            metrics_extra["model_calls"] = recorded.calls
    final_metrics = AtifFinalMetrics(
        total_prompt_tokens=totals[0],
        total_completion_tokens=totals[1],
        total_cached_tokens=totals[2],
        total_cost_usd=totals[3],
        total_steps=len(steps),
        extra=metrics_extra,
    )

    agent_extras = dict(record.agent.model_extra or {})
    agent_extras.update(
        {
            "api": session_line.get("api"),
            "max_turns": session_line.get("max_turns"),
            "session_agent": session_line.get("agent"),
            "session_version": session_line.get("version"),
        }
    )
    agent = AtifAgent(
        name=record.agent.name,
        version=record.versions.get("harness") or __version__,
        model_name=builder.model_name,
        tool_definitions=_tool_definitions(session_line.get("tools")),
        extra=_compact(agent_extras),
    )

    extra: dict[str, Any] = {
        "task": {"name": record.task.name, "key": record.task.key, "hash": record.task.hash},
        "reward": record.reward,
        "rewards": dict(record.rewards),
        "status": record.status.value,
        "ok": record.ok,
        "rollout": record.rollout,
        "attempt": record.attempt,
    }
    if record.errors:
        extra["errors"] = [error.model_dump(mode="json") for error in record.errors]
    if builder.end_line is not None:
        end = builder.end_line
        extra["agent_end"] = {
            "ok": end.get("ok"),
            "error": end.get("error"),
            "turns": end.get("turns"),
        }

    trajectory = AtifTrajectory(
        session_id=session_id if session_id is not None else _default_session_id(evidence_dir),
        trajectory_id=record.id,
        agent=agent,
        steps=steps,
        notes=" ".join(notes) or None,
        final_metrics=final_metrics,
        extra=extra,
    )
    # Steps were completed after they were created (observations, model names): validate
    # the finished document once more, from plain data.
    return AtifTrajectory.model_validate(trajectory.model_dump()).to_json_dict()


__all__ = ["trajectory_for_trial"]
