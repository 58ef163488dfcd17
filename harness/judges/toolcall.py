"""The ``tool-call`` judge: the transcript must hold a call of this tool with these arguments.

The calls are the ``tool_call`` events of the trial's ``transcript.jsonl`` (what the agent
asked its tools to do, as its session recorded it). ``match = "subset"`` (the default)
needs every given argument equal; ``"exact"`` needs the arguments to be exactly these.
``succeeded = true`` counts only calls whose result was not an error. The score is 1 when
at least ``min_calls`` calls match, else 0. A transcript says what the agent asked for, not
that the world changed: judge the workspace (the verifier, or ``structured-output``) for that.

A trial without a transcript (an agent that keeps no session) cannot be judged this way:
that is a :class:`~harness.errors.JudgeError`, not a score.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field
from typing_extensions import override

from harness.judges.base import Judge, JudgeInput, JudgeOptions, Verdict
from harness.judges.structured import same_json

__all__ = ["ToolCallJudge"]

#: Calls of the tool listed in a verdict, at most.
_SHOWN = 5


class ToolCallOptions(JudgeOptions):
    """Options of ``tool-call``.

    Attributes:
        tool: The tool's name.
        arguments: Arguments the call must have.
        match: ``subset`` (the given ones equal) or ``exact`` (exactly these).
        succeeded: Only calls whose result was not an error count.
        min_calls: How many matching calls are needed.
    """

    tool: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)
    match: Literal["subset", "exact"] = "subset"
    succeeded: bool = False
    min_calls: int = Field(default=1, ge=1)


class ToolCallJudge(Judge):
    """The transcript must contain a call with this name and these arguments."""

    type_name = "tool-call"
    Options = ToolCallOptions

    def _matches(self, call: dict[str, Any]) -> bool:
        options = self.options
        assert isinstance(options, ToolCallOptions)
        arguments = call.get("arguments")
        if not isinstance(arguments, dict):
            return not options.arguments and options.match == "subset"
        if options.match == "exact":
            return same_json(arguments, options.arguments)
        return all(
            key in arguments and same_json(arguments[key], value)
            for key, value in options.arguments.items()
        )

    @override
    def score(self, trial: JudgeInput) -> Verdict:
        options = self.options
        assert isinstance(options, ToolCallOptions)
        try:
            calls = trial.evidence.tool_calls()
        except LookupError:
            raise self.fail(
                "the trial has no transcript (its agent keeps no session.jsonl; only such "
                "agents, e.g. builtin, can be judged by their tool calls)"
            ) from None
        named = [call for call in calls if call.get("name") == options.tool]
        matching = [
            call
            for call in named
            if self._matches(call) and not (options.succeeded and call["failed"])
        ]
        detail: dict[str, Any] = {
            "tool": options.tool,
            "matching_calls": len(matching),
            "needed": options.min_calls,
            "calls_of_tool": len(named),
        }
        if named and not matching:
            detail["seen_arguments"] = [call.get("arguments") for call in named[:_SHOWN]]
        return Verdict(1.0 if len(matching) >= options.min_calls else 0.0, detail)
