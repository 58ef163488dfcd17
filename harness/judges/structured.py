"""The ``structured-output`` judge: a JSON object must hold fields equal to expected values.

The object is a workspace file the agent wrote (``file = "answer.json"``) or, without
``file``, the agent's final answer (the whole text as JSON, else its last fenced JSON
block). The score is the share of expected fields present with an equal value; with
``strict = true`` each unexpected field counts as a miss too. An answer that is missing,
not JSON or not an object scores 0: what the agent produced is data, never a judge error.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import Field
from typing_extensions import override

from harness.judges.base import Judge, JudgeInput, JudgeOptions, Verdict
from harness.judges.evidence import WorkspaceFile

__all__ = ["StructuredOutputJudge", "parse_json_object", "same_json"]

_FENCED = re.compile(r"```[A-Za-z0-9_-]*\s*\n(.*?)```", re.DOTALL)


def same_json(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1``, ``1`` is ``1.0``, containers compared deeply."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def parse_json_object(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """The JSON object in ``text`` (whole, else the last fenced block), or why there is none."""
    candidates = [text]
    candidates += reversed(_FENCED.findall(text))
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value, None
        return None, f"holds JSON {type(value).__name__}, not an object"
    return None, "holds no JSON object"


class StructuredOptions(JudgeOptions):
    """Options of ``structured-output``.

    Attributes:
        expected: Field → expected value (a non-empty table).
        file: A workspace-relative JSON file; default: the agent's final answer.
        strict: Unexpected fields count as misses.
    """

    expected: dict[str, Any] = Field(min_length=1)
    file: WorkspaceFile | None = None
    strict: bool = False


class StructuredOutputJudge(Judge):
    """A JSON object (a workspace file or the final answer) must hold the expected fields."""

    type_name = "structured-output"
    Options = StructuredOptions

    def _answer(self, trial: JudgeInput) -> tuple[dict[str, Any] | None, str, str | None]:
        """(object, where it came from, why there is none)."""
        options = self.options
        assert isinstance(options, StructuredOptions)
        if options.file is not None:
            read = trial.evidence.workspace_file(options.file)
            if read.data is None:
                return None, options.file, read.problem
            found, problem = parse_json_object(read.data.decode("utf-8", "replace"))
            return found, options.file, problem
        answer = trial.evidence.final_answer()
        if answer is None:
            raise self.fail(
                "the trial has no transcript, so no final answer (only agents that keep a "
                "session, e.g. builtin, have one); judge a workspace file with `file` instead"
            )
        if not answer.strip():
            return None, "final answer", "is empty"
        found, problem = parse_json_object(answer)
        return found, "final answer", problem

    @override
    def score(self, trial: JudgeInput) -> Verdict:
        options = self.options
        assert isinstance(options, StructuredOptions)
        found, source, problem = self._answer(trial)
        if found is None:
            return Verdict(0.0, {"source": source, "reason": f"{source} {problem}"})
        mismatched = {
            key: {"expected": want, "found": found.get(key, "<missing>")}
            for key, want in options.expected.items()
            if key not in found or not same_json(found[key], want)
        }
        extra = sorted(set(found) - set(options.expected)) if options.strict else []
        total = len(options.expected) + len(extra)
        matched = len(options.expected) - len(mismatched)
        detail: dict[str, Any] = {"source": source, "matched": matched, "of": total}
        if mismatched:
            detail["mismatched"] = mismatched
        if extra:
            detail["unexpected"] = extra
        return Verdict(matched / total, detail)
