"""The tasks a run runs: loaded (``--skip-invalid`` keeps the valid ones), env resolved."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from harness.errors import TaskError, TaskSetError, UsageError
from harness.tasks.env_templates import EnvTemplateError, resolve_task_env
from harness.tasks.loader import check_tasks
from harness.tasks.task import Task
from sandbox.credentials import CredentialStore

__all__ = ["SkippedTasks", "load_runnable_tasks", "resolve_tasks_env"]


class SkippedTasks(list[TaskError]):
    """The problems of the tasks ``--skip-invalid`` left out (a list of :class:`TaskError`)."""


def load_runnable_tasks(
    paths: Sequence[Path], *, skip_invalid: bool = False
) -> tuple[list[Task], SkippedTasks]:
    """Load the tasks under ``paths``.

    Args:
        paths: Task dirs and/or task sets.
        skip_invalid: Keep the valid tasks and return the others' problems, instead of
            refusing the whole set.

    Raises:
        TaskSetError: a task is invalid (every problem listed), without ``skip_invalid``
            or when no task is valid at all.
    """
    tasks, problems = check_tasks(paths)
    if problems and (not skip_invalid or not tasks):
        raise TaskSetError(problems)
    return tasks, SkippedTasks(problems)


def resolve_tasks_env(
    tasks: Sequence[Task],
    environ: Mapping[str, str],
    credentials: CredentialStore,
    *,
    allowed: Collection[str] = (),
) -> list[Task]:
    """Resolve every task's ``${VAR}`` templates from the host.

    Args:
        tasks: The tasks.
        environ: The host's environment.
        credentials: The provider keys the harness took (refused even when allowed).
        allowed: The variables templates may read (``tasks.env_allow``, ``--task-env``);
            any other takes its ``:-default``.

    Raises:
        UsageError: a template names a variable not allowed (without a default), an unset
            one, or a credential the harness took.
    """
    refused = {name: credentials.get(name) or "" for name in credentials.names()}
    names = frozenset(allowed)
    resolved = []
    problems = []
    for task in tasks:
        try:
            resolved.append(resolve_task_env(task, environ, refused=refused, allowed=names))
        except EnvTemplateError as exc:
            problems.append(str(exc))
    if problems:
        raise UsageError("\n".join(problems))
    return resolved
