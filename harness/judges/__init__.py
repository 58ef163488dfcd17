"""Judges: scores of a trial's evidence beside the verifier's (``[[verifier.judges]]``).

- ``structured-output`` (:mod:`.structured`): a JSON object must hold expected fields;
- ``tool-call`` (:mod:`.toolcall`): the transcript must hold a call of a tool with arguments;
- ``llm`` (:mod:`.llm`): a rubric graded by an explicitly named model through the gateway;
- plug-ins through the ``harness.judges`` entry points (:mod:`.registry`).

:mod:`.panel` decides which judges a trial gets and runs them; :mod:`.evidence` is how a
judge reads the evidence (as data). See docs/judges.md.
"""

from harness.judges.base import Judge, JudgeInput, JudgeOptions, ModelAccess, Verdict
from harness.judges.panel import (
    JudgePanel,
    PanelResult,
    build_panel,
    judge_problems,
    task_judge_specs,
)
from harness.judges.registry import JUDGES

__all__ = [
    "JUDGES",
    "Judge",
    "JudgeInput",
    "JudgeOptions",
    "JudgePanel",
    "ModelAccess",
    "PanelResult",
    "Verdict",
    "build_panel",
    "judge_problems",
    "task_judge_specs",
]
