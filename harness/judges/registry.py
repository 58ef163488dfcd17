"""The judge types: the built-ins, and plug-ins from the ``harness.judges`` entry points.

A distribution adds a judge type by declaring a :class:`~harness.judges.base.Judge`
subclass::

    [project.entry-points."harness.judges"]
    my-judge = "my_package.judges:MyJudge"

and a task then uses it with ``[[verifier.judges]] type = "my-judge"``.
"""

from __future__ import annotations

from harness.judges.base import Judge
from harness.judges.llm import LlmJudge
from harness.judges.structured import StructuredOutputJudge
from harness.judges.toolcall import ToolCallJudge
from harness.registry import Registry, subclass_of

__all__ = ["BUILTIN_JUDGES", "JUDGES", "JUDGES_GROUP"]

JUDGES_GROUP = "harness.judges"
"""The entry-point group of judge types."""

JUDGES: Registry[type[Judge]] = Registry(JUDGES_GROUP, "judge type", subclass_of(Judge))
"""Judge types by name (``structured-output``, ``tool-call``, ``llm``, plug-ins)."""

BUILTIN_JUDGES: tuple[type[Judge], ...] = (StructuredOutputJudge, ToolCallJudge, LlmJudge)
"""The judge types that come with the harness."""

for _judge in BUILTIN_JUDGES:
    JUDGES.register(_judge.type_name, _judge)
