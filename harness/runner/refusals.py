"""The tasks the run's sandbox backend and executor cannot run at all, before anything runs.

A task asking more CPUs, memory or GPUs than the engine has, or a network the runtime
cannot give, fails the same way on every attempt. Without ``--skip-invalid`` the run is
refused up front, every such task named with how to fix it; with it, such tasks are left
out like the tasks that do not load, and the others run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from harness.errors import TaskError, UsageError
from harness.executors.base import TrialExecutor
from harness.tasks import Task
from sandbox.plugin import SandboxBackend

__all__ = ["refuse_places"]


def refuse_places(
    backend: SandboxBackend,
    executor: TrialExecutor,
    tasks: Sequence[Task],
    *,
    skip_invalid: bool,
    more: Callable[[Sequence[Task]], list[str]] | None = None,
) -> dict[str, list[TaskError]]:
    """The tasks ``--skip-invalid`` leaves out for the backend's or executor's sake.

    Args:
        backend: The run's sandbox backend (opened).
        executor: The run's executor (opened).
        tasks: The selected tasks.
        skip_invalid: Leave refused tasks out instead of refusing the run.
        more: The run's own checks of the tasks against the places (their network
            policies), one line per problem.

    Returns:
        Each refused task's key and its problems (empty without ``skip_invalid``: then
        any problem raises).

    Raises:
        UsageError: A task cannot run here (every problem listed), without
            ``skip_invalid`` or when no task is left.
    """
    if not skip_invalid:
        problems = backend.task_problems([t.facts() for t in tasks]) + executor.task_problems(tasks)
        problems += more(tasks) if more is not None else []
        if problems:
            raise UsageError("\n".join(problems))
        return {}
    refused: dict[str, list[TaskError]] = {}
    by_task = backend.problems_by_task([t.facts() for t in tasks])
    for task in tasks:
        problems = by_task.get(task.key, []) + executor.task_problems([task])
        problems += more([task]) if more is not None else []
        if problems:
            refused[task.key] = [_task_error(task, problem) for problem in problems]
    if refused and len(refused) == len(tasks):
        listed = [str(error) for errors in refused.values() for error in errors]
        raise UsageError("\n".join(listed) + "\nno selected task can run here")
    return refused


def _task_error(task: Task, problem: str) -> TaskError:
    """``problem`` as the task's :class:`TaskError` (its ``path:`` prefix, if any, kept once)."""
    for where in (task.path / "task.toml", task.path):
        prefix = f"{where}: "
        if problem.startswith(prefix):
            return TaskError(Path(where), problem[len(prefix) :])
    return TaskError(task.path, problem)
