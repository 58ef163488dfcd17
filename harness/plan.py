"""Planning a run: tasks × rollouts, with a seeded shuffle and stable trial ids."""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Sequence

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


def select_tasks(
    tasks: Sequence[Task], *, num_tasks: int | None, shuffle: bool, seed: int
) -> list[Task]:
    """Pick the tasks of a run: all, or the first ``num_tasks`` after an optional shuffle."""
    chosen = list(tasks)
    if shuffle:
        random.Random(seed).shuffle(chosen)
    if num_tasks is not None:
        chosen = chosen[:num_tasks]
    return chosen


def plan_trials(tasks: Sequence[Task], *, rollouts: int) -> list[TrialPlan]:
    """Every (task, rollout) pair, rollouts of one task interleaved across tasks."""
    return [
        TrialPlan(id=trial_id(task, r), task=task, rollout=r)
        for r in range(rollouts)
        for task in tasks
    ]
