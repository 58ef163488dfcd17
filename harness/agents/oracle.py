"""The ``oracle`` agent: runs the task's reference solution (a check of the task itself)."""

from __future__ import annotations

from typing_extensions import override

from harness.agents.kinds import AgentCommand, SandboxAgent
from harness.errors import AgentConfigError
from harness.tasks import Task
from sandbox.backend import Sandbox


class OracleAgent(SandboxAgent):
    """Runs the task's reference ``solution/solve.sh``: a sanity check of the task itself."""

    name = "oracle"

    @override
    def check(self, task: Task) -> None:
        # A multi-step task needs every step's solution; a step (its view) its own.
        for view in [task] if task.step is not None else task.views():
            if view.solve_script is None or view.solution_dir is None:
                where = view.step.path if view.step is not None else view.path
                raise AgentConfigError(
                    f"{where / 'solution' / 'solve.sh'}: missing solution/solve.sh "
                    "(the oracle agent needs it)"
                )

    @override
    def prepare(self, task: Task, sandbox: Sandbox) -> None:
        self.check(task)
        assert task.solution_dir is not None
        # The solution enters only this trial's sandbox, and only for the oracle.
        sandbox.put_dir(task.solution_dir, sandbox.paths.solution, agent_readable=True)

    @override
    def command(self, task: Task, sandbox: Sandbox) -> AgentCommand:
        env = {"DEBIAN_FRONTEND": "noninteractive", **task.config.solution.env}
        return AgentCommand(["bash", f"{sandbox.paths.solution}/solve.sh"], env=env)


__all__ = ["OracleAgent"]
