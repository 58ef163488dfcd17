"""The ``llm`` judge: a model grades the trial against a rubric, through the model gateway.

The judge names its model explicitly (``model = "provider/name"``; there is no default and
the agent's model is not borrowed) and has its own per-trial budget (``max_calls``, default
1; ``max_tokens``; ``max_cost_usd``), enforced by a gateway of its own: the real key stays in
the harness process, as for agents. It sends the rubric, the task's instruction and what it
judges (the agent's final answer, its transcript, or a workspace file), and the model must
answer with one JSON object ``{"score": <number in [0, 1]>, "reasoning": "<text>"}`` (the
whole answer, or a fenced JSON block). The prompt, the raw answer and the reasoning are kept
in ``trials/<id>/judges/<name>.json``, the gateway's record in
``trials/<id>/judges/<name>.model_calls.jsonl``.

An answer that is not such an object, or a model call that fails, is a
:class:`~harness.errors.JudgeError`: the trial becomes a ``verifier_error`` with the reason.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator
from typing_extensions import override

from harness.judges.base import Judge, JudgeInput, JudgeOptions, ModelRequest, Verdict
from harness.judges.evidence import WorkspaceFile
from harness.judges.structured import parse_json_object
from harness.records.atomic import write_bytes_atomic
from harness.records.layout import JUDGES_DIRNAME

__all__ = ["JUDGES_DIRNAME", "LlmJudge", "answer_text", "request_for"]


SYSTEM_PROMPT = (
    "You grade the work of an AI agent against a rubric. Read the task, the rubric and the "
    "agent's output. Answer with exactly one JSON object and nothing else: "
    '{"score": <a number from 0 to 1>, "reasoning": "<why, briefly>"}.'
)
#: Characters of the judged text sent to the model, at most.
MAX_JUDGED_CHARS = 100_000


class LlmOptions(JudgeOptions):
    """Options of ``llm``.

    Attributes:
        model: The judge's model, ``provider/name`` (a catalog entry; faux in tests).
        rubric: What a good answer is.
        input: What is judged: ``final_answer``, ``transcript`` or ``file``.
        file: The workspace-relative file judged when ``input = "file"``.
        max_calls: Model calls per trial (its own budget).
        max_tokens: Tokens per trial (input plus output), if bounded.
        max_cost_usd: Cost per trial, if bounded (priced models only).
        max_output_tokens: ``max_tokens`` of the request (Anthropic needs one).
    """

    model: str = Field(min_length=3)
    rubric: str = Field(min_length=1)
    input: Literal["final_answer", "transcript", "file"] = "final_answer"
    file: WorkspaceFile | None = None
    max_calls: int = Field(default=1, ge=1, le=20)
    max_tokens: int | None = Field(default=None, ge=1)
    max_cost_usd: float | None = Field(default=None, gt=0)
    max_output_tokens: int = Field(default=1024, ge=1)

    @field_validator("model")
    @classmethod
    def _provider_name(cls, value: str) -> str:
        provider, sep, name = value.partition("/")
        if not sep or not provider or not name:
            raise ValueError("must be written provider/name (an explicit model, no default)")
        return value


def request_for(
    api: str, upstream: str, system: str, user: str, max_output: int
) -> tuple[str, dict[str, Any]]:
    """The gateway path and body of one judge request in the model's API."""
    if api == "anthropic-messages":
        return "/v1/messages", {
            "model": upstream,
            "max_tokens": max_output,
            "system": system,
            "messages": [{"role": "user", "content": user}],
        }
    if api == "openai-responses":
        return "/v1/responses", {
            "model": upstream,
            "instructions": system,
            "input": [{"role": "user", "content": user}],
            "max_output_tokens": max_output,
        }
    return "/v1/chat/completions", {
        "model": upstream,
        "max_tokens": max_output,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
    }


def _texts(parts: Any, kinds: tuple[str, ...]) -> str:
    if not isinstance(parts, list):
        return ""
    return "".join(
        str(part.get("text", ""))
        for part in parts
        if isinstance(part, dict) and part.get("type") in kinds
    )


def answer_text(api: str, body: Any) -> str | None:
    """The text of a model's answer in its API's shape, or None when it has none."""
    if not isinstance(body, dict):
        return None
    if api == "anthropic-messages":
        text = _texts(body.get("content"), ("text",))
    elif api == "openai-responses":
        output = body.get("output")
        messages = output if isinstance(output, list) else []
        text = "".join(
            _texts(item.get("content"), ("output_text",))
            for item in messages
            if isinstance(item, dict) and item.get("type") == "message"
        )
    else:
        choices = body.get("choices")
        first = choices[0] if isinstance(choices, list) and choices else None
        message = first.get("message") if isinstance(first, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        text = content if isinstance(content, str) else ""
    return text or None


class LlmJudge(Judge):
    """A rubric graded by an explicitly named model through the gateway, on its own budget."""

    type_name = "llm"
    Options = LlmOptions

    @property
    def _options(self) -> LlmOptions:
        assert isinstance(self.options, LlmOptions)
        return self.options

    @override
    def models(self) -> list[str]:
        return [self._options.model]

    def _judged(self, trial: JudgeInput) -> str:
        options = self._options
        if options.input == "file":
            if options.file is None:
                raise self.fail("input = 'file' needs file = 'PATH'")
            read = trial.evidence.workspace_file(options.file)
            if read.data is None:
                return f"(the agent left no usable {options.file}: {read.problem})"
            return read.data.decode("utf-8", "replace")
        if options.input == "transcript":
            events = trial.evidence.transcript
            if events is None:
                raise self.fail("the trial has no transcript (its agent keeps no session)")
            return "\n".join(json.dumps(e, ensure_ascii=False) for e in events)
        answer = trial.evidence.final_answer()
        if answer is None:
            raise self.fail("the trial has no transcript, so no final answer to judge")
        return answer or "(the agent gave no final answer)"

    def _prompt(self, trial: JudgeInput) -> str:
        judged = self._judged(trial)
        if len(judged) > MAX_JUDGED_CHARS:
            judged = (
                judged[:MAX_JUDGED_CHARS] + f"\n[... {len(judged) - MAX_JUDGED_CHARS} chars cut]"
            )
        options = self._options
        return (
            f"# Task given to the agent\n\n{trial.task.instruction}\n\n"
            f"# Rubric\n\n{options.rubric}\n\n"
            f"# The agent's {options.input.replace('_', ' ')}\n\n{judged}\n"
        )

    def _verdict(self, answer: str | None) -> tuple[float, str | None]:
        """(score, reasoning) from the model's answer; malformed is a JudgeError."""
        if answer is None:
            raise self.fail("the model's answer has no text")
        found, problem = parse_json_object(answer)
        if found is None:
            raise self.fail(f"malformed answer: it {problem}: {answer[:200]!r}")
        score = found.get("score")
        if isinstance(score, bool) or not isinstance(score, int | float):
            raise self.fail(f"malformed answer: 'score' is not a number: {answer[:200]!r}")
        if not math.isfinite(score) or not 0.0 <= score <= 1.0:
            raise self.fail(f"malformed answer: 'score' {score!r} is not in [0, 1]")
        reasoning = found.get("reasoning")
        return float(score), reasoning if isinstance(reasoning, str) else None

    @override
    def score(self, trial: JudgeInput) -> Verdict:
        options = self._options
        if trial.models is None:
            raise self.fail("no model access was set up for this run")
        folder = trial.evidence.directory / JUDGES_DIRNAME
        folder.mkdir(parents=True, exist_ok=True)
        api = trial.models.api(options.model)
        path, body = request_for(
            api,
            trial.models.upstream(options.model),
            SYSTEM_PROMPT,
            self._prompt(trial),
            options.max_output_tokens,
        )
        budget = {
            "max_calls": options.max_calls,
            "max_tokens": options.max_tokens,
            "max_cost_usd": options.max_cost_usd,
        }
        reply = trial.models.call(
            ModelRequest(
                model=options.model,
                budget=budget,
                path=path,
                body=body,
                record=folder / f"{self.name}.model_calls.jsonl",
                trial_id=trial.trial_id,
                task_name=trial.task.name,
            )
        )
        answer = answer_text(api, reply.body) if reply.status < 400 else None
        record: dict[str, Any] = {
            "judge": self.name,
            "model": options.model,
            "prompt": body,
            "status": reply.status,
            "answer": answer,
        }
        try:
            if reply.status >= 400:
                raise self.fail(f"model call failed: HTTP {reply.status}: {reply.body}")
            score, reasoning = self._verdict(answer)
            record.update(score=score, reasoning=reasoning)
        except Exception as exc:
            record["error"] = str(exc)
            raise
        finally:
            _write_json(folder / f"{self.name}.json", record)
        return Verdict(
            score,
            {
                "model": options.model,
                "reasoning": reasoning,
                "evidence": f"{JUDGES_DIRNAME}/{self.name}.json",
            },
        )


def _write_json(path: Path, data: Any) -> None:
    write_bytes_atomic(
        path, (json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n").encode()
    )
