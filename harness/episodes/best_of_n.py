"""Built-in envs ``single`` and ``best-of-n``: one agent, or n independent attempts."""

from __future__ import annotations

import threading

from pydantic import Field
from typing_extensions import override

from harness.episodes.env import Agents, Env, EnvParams
from harness.episodes.records import Episode, Trace
from harness.tasks import Task


class SingleEnv(Env):
    """One agent, one run: today's trial (the default env; the runner runs it as a trial)."""

    id = "single"

    @override
    def run(self, task: Task, agents: Agents) -> None:
        agents.agent.run(task)


class BestOfNParams(EnvParams):
    """``n`` attempts; an episode passes when one reaches ``threshold``."""

    n: int = Field(default=4, ge=1, le=1024)
    threshold: float = 1.0


class BestOfNEnv(Env):
    """n independent attempts, each in its own sandbox with its own token and budget.

    The attempts start together; ``max_concurrent_agents`` (default 1) bounds how many run
    at once. ``finalize`` marks ``best`` (1.0) on every attempt that ties the top reward and
    sets ``pass_at_n`` when one reaches the threshold; the episode's reward is the top one.
    A crashed attempt is a trace with its error; it never fails the episode.
    """

    id = "best-of-n"
    Params = BestOfNParams

    @override
    def run(self, task: Task, agents: Agents) -> None:
        params = self.params
        assert isinstance(params, BestOfNParams)
        failures: list[BaseException] = []

        def attempt(index: int) -> None:
            try:
                agents.agent.run(task, name=f"agent-{index}")
            except BaseException as exc:  # the env's own failure: raised below
                failures.append(exc)

        threads = [
            threading.Thread(target=attempt, args=(i,), name=f"best-of-n-{i}", daemon=True)
            for i in range(1, params.n + 1)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failures:
            raise failures[0]

    @override
    def finalize(self, task: Task, episode: Episode) -> None:
        params = self.params
        assert isinstance(params, BestOfNParams)
        traces = episode.by_role("agent")
        top = best_reward(traces)
        passed = 1.0 if top is not None and top >= params.threshold else 0.0
        for trace in traces:
            trace.metrics["best"] = 1.0 if top is not None and trace.reward == top else 0.0
            trace.metrics["pass_at_n"] = passed
        episode.metrics["pass_at_n"] = passed
        episode.reward = top
        episode.rewards = {} if top is None else {"best": top, "pass_at_n": passed}


def best_reward(traces: list[Trace]) -> float | None:
    """The top reward among the scored traces (None when none was scored)."""
    scored = [trace.reward for trace in traces if trace.reward is not None]
    return max(scored) if scored else None


__all__ = ["BestOfNEnv", "BestOfNParams", "SingleEnv", "best_reward"]
