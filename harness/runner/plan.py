"""Planning a run: select tasks, then tasks × rollouts with a seeded shuffle and stable ids."""

from __future__ import annotations

import fnmatch
import hashlib
import random
import re
from collections.abc import Sequence

from harness.errors import UsageError
from harness.tasks import Task
from harness.trial import TrialPlan

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def slug(text: str, limit: int = 48) -> str:
    """A filesystem- and label-safe version of ``text``."""
    cleaned = _UNSAFE.sub("-", text).strip("-.") or "x"
    return cleaned[:limit]


def trial_id(task: Task, rollout: int) -> str:
    """A stable, readable trial id: the same task and rollout always get the same id."""
    digest = hashlib.sha256(task.key.encode()).hexdigest()[:6]
    return f"{slug(task.key)}-{digest}.r{rollout}"


def _matches(task: Task, globs: Sequence[str]) -> bool:
    """Whether the task's name or key matches one of ``globs`` (``fnmatch``, case-sensitive)."""
    return any(
        fnmatch.fnmatchcase(task.name, glob) or fnmatch.fnmatchcase(task.key, glob)
        for glob in globs
    )


def filter_tasks(
    tasks: Sequence[Task],
    *,
    names: Sequence[str] = (),
    exclude: Sequence[str] = (),
    categories: Sequence[str] = (),
) -> list[Task]:
    """Keep the tasks a selection asks for, in their original order.

    Args:
        tasks: The loaded tasks.
        names: Globs; when given, a task is kept only if its name or key matches one.
        exclude: Globs; a task whose name or key matches one is dropped.
        categories: When given, a task is kept only if its ``[metadata].category`` is one of
            these (compared case-insensitively).

    Returns:
        The selected tasks.

    Raises:
        UsageError: Tasks were loaded but the selection leaves none, naming the filters.
    """
    wanted_categories = {c.casefold() for c in categories}
    chosen = [
        task
        for task in tasks
        if (not names or _matches(task, names))
        and not (exclude and _matches(task, exclude))
        and (not wanted_categories or (task.category or "").casefold() in wanted_categories)
    ]
    if tasks and not chosen:
        filters = [f"--task-name {glob}" for glob in names]
        filters += [f"--exclude {glob}" for glob in exclude]
        filters += [f"--category {name}" for name in categories]
        raise UsageError(
            f"no task matches the selection ({' '.join(filters)}) among {len(tasks)} loaded "
            "task(s); `harness tasks list PATHS` shows their names, keys and categories"
        )
    return chosen


def select_tasks(
    tasks: Sequence[Task],
    *,
    num_tasks: int | None,
    shuffle: bool,
    seed: int,
    names: Sequence[str] = (),
    exclude: Sequence[str] = (),
    categories: Sequence[str] = (),
) -> list[Task]:
    """Pick the tasks of a run: filter, then an optional seeded shuffle, then the first N.

    Raises:
        UsageError: The filters leave no task (see :func:`filter_tasks`).
    """
    chosen = filter_tasks(tasks, names=names, exclude=exclude, categories=categories)
    if shuffle:
        random.Random(seed).shuffle(chosen)
    if num_tasks is not None:
        chosen = chosen[:num_tasks]
    return chosen


def plan_trials(
    tasks: Sequence[Task], *, rollouts: int, only: Sequence[str] = ()
) -> list[TrialPlan]:
    """Every (task, rollout) pair, rollouts of one task interleaved across tasks.

    Args:
        tasks: The selected tasks.
        rollouts: Trials per task.
        only: When given, keep only the trials with these ids (``tasks.trial_ids``).

    Raises:
        UsageError: An id in ``only`` is not a trial of the plan.
    """
    plans = [
        TrialPlan(id=trial_id(task, r), task=task, rollout=r)
        for r in range(rollouts)
        for task in tasks
    ]
    if not only:
        return plans
    wanted = set(only)
    unknown = sorted(wanted - {plan.id for plan in plans})
    if unknown:
        raise UsageError(
            f"tasks.trial_ids: {', '.join(unknown)} not among the {len(plans)} planned "
            "trial(s) (the tasks, selection and rollouts decide which ids exist)"
        )
    return [plan for plan in plans if plan.id in wanted]
