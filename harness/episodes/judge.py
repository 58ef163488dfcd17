"""Built-in env ``judge``: a solver, then a judge agent whose verdict becomes the reward.

The rubric is the task's ``judge/rubric.md`` (``rubric_file``): it never enters a sandbox a
solver runs in while the solver lives. ``shared``: the judge runs in the solver's sandbox
once every solver process is dead, on the gateway socket handed over to it (the solver's
token dies; the judge has its own token and budget). ``isolated`` (default): the judge gets
a fresh sandbox holding only the solver's declared artifacts (and ``/logs/artifacts``),
copied through the same evidence code a separate verifier uses. The judge writes
``{"score": 0..1, "reason": ...}`` to ``$HARNESS_VERDICT_FILE`` (a fresh dir it owns).
"""

from __future__ import annotations

from typing import Literal

from typing_extensions import override

from harness.config import AgentConfig
from harness.episodes.env import Agents, Env, EnvParams
from harness.episodes.records import Episode
from harness.episodes.trials import EpisodeTrial
from harness.errors import UsageError
from harness.records import TrialStatus
from harness.tasks import Task
from harness.tasks.limits import MAX_TASK_TEXT_BYTES, read_task_text

JUDGE_PROMPT = """You are the judge of another agent's work.

The task it was given:
---
{instruction}
---

Grade its work against this rubric:
---
{rubric}
---

Its work is in {where}. Inspect it (read files, run commands); do not change it.
Then write your verdict as JSON, {{"score": <0..1>, "reason": "<why>"}}, to the file
named by $HARNESS_VERDICT_FILE.
"""


class JudgeParams(EnvParams):
    """``mode``, where the rubric is, and how task and judge rewards weigh."""

    mode: Literal["shared", "isolated"] = "isolated"
    rubric_file: str = "judge/rubric.md"
    task_weight: float = 0.0
    judge_weight: float = 1.0


class JudgeEnv(Env):
    """A solver, then an agentic judge (``shared`` or ``isolated``)."""

    id = "judge"
    roles = {"solver": None, "judge": AgentConfig(name="builtin")}
    Params = JudgeParams

    @property
    def _params(self) -> JudgeParams:
        assert isinstance(self.params, JudgeParams)
        return self.params

    def rubric(self, task: Task) -> str:
        """The task's rubric (read by the harness; never put where a solver can read it)."""
        text = read_task_text(task.path, self._params.rubric_file, MAX_TASK_TEXT_BYTES)
        if text is None:
            raise UsageError(f"{task.name}: no rubric at {self._params.rubric_file}")
        return text

    @override
    def check(self, task: Task) -> None:
        # Beneath the task dir, no link followed, at most MAX_TASK_TEXT_BYTES (else TaskError).
        if read_task_text(task.path, self._params.rubric_file, MAX_TASK_TEXT_BYTES) is None:
            raise UsageError(
                f"{task.name}: the judge env needs a rubric at {self._params.rubric_file} in "
                "the task dir (set env.rubric_file to another path)"
            )

    @override
    def run(self, task: Task, agents: Agents) -> None:
        params = self._params
        rubric = self.rubric(task)

        def judge(solver: EpisodeTrial) -> None:
            if solver.status is not TrialStatus.COMPLETED or solver.errors:
                raise RuntimeError("the solver's rollout failed, so the judge never ran")
            assert solver.sandbox is not None
            where = (
                "this sandbox (the solver's workspace is your working directory)"
                if params.mode == "shared"
                else "the artifacts the task declares, copied into this fresh sandbox"
            )
            instruction = JUDGE_PROMPT.format(
                instruction=task.instruction.strip(), rubric=rubric.strip(), where=where
            )
            agents.judge.judge(solver, mode=params.mode, instruction=instruction)

        agents.solver.run(task, after=judge, keep_access=params.mode == "shared")

    @override
    def finalize(self, task: Task, episode: Episode) -> None:
        params = self._params
        solver = episode.by_role("solver")
        judges = episode.by_role("judge")
        judged = judges[0].reward if judges else None
        task_reward = solver[0].reward if solver else None
        if judged is None:
            return
        total = params.task_weight + params.judge_weight
        score = params.judge_weight * judged + params.task_weight * (task_reward or 0.0)
        episode.reward = score / total if total else judged
        episode.rewards = {"judge": judged}
        if task_reward is not None:
            episode.rewards["task"] = task_reward


__all__ = ["JudgeEnv", "JudgeParams"]
