"""Who a task's agent would be under Harbor, and the run's one line about it.

Harbor runs the agent as ``[agent].user``, else as the image's ``USER``: root for most
images (Terminal-Bench 2's among them). ``sandbox.agent_root`` (``--agent-root``) decides
what the harness does with that (docs/security.md, "A root agent"): ``never`` (the default)
runs every agent as an unprivileged uid, and the run says once, before any trial, which
tasks' agents wanted root; ``isolated`` and ``allow`` run them as that user, and the line
says which tasks' agents run as root and behind which boundary.

What the image's ``USER`` is becomes known only once the image is built or pulled; up front
the final stage's ``USER`` of ``environment/Dockerfile`` decides, and a task without one
(or with only a ``docker_image``) is taken to want root, as Harbor's default images do. Each
trial's record says what really applied (``posture.identity``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from sandbox.plugin import TaskFacts
from sandbox.users import is_root_user

#: How many task names the line lists before it counts the rest.
MAX_NAMED = 10
_USER = re.compile(r"^\s*USER\s+(\S+)", re.IGNORECASE | re.MULTILINE)
_FROM = re.compile(r"^\s*FROM\s", re.IGNORECASE | re.MULTILINE)


def dockerfile_user(dockerfile: Path | None) -> str | None:
    """The final stage's ``USER`` of a Dockerfile (None: unset, unreadable or no file)."""
    if dockerfile is None:
        return None
    try:
        text = dockerfile.read_text(errors="replace")
    except OSError:
        return None
    stages = list(_FROM.finditer(text))
    final = text[stages[-1].start() :] if stages else text
    users = _USER.findall(final)
    return users[-1] if users else None


def wants_root(task: TaskFacts, *, images: bool = True) -> bool:
    """Whether any agent phase of ``task`` would run as root under Harbor's rule.

    ``images``: an unset ``[agent].user`` defers to the image (False where the backend
    runs no image, as the local sandbox: then only an explicit root counts).
    """
    for user in task.agent_users:
        if user is None and not images:
            continue
        if user is None:
            user = dockerfile_user(task.dockerfile)
        if user is None or is_root_user(user):
            return True
    return False


def _names(tasks: Sequence[TaskFacts]) -> str:
    names = [task.name for task in tasks[:MAX_NAMED]]
    more = len(tasks) - len(names)
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


def announcement(
    tasks: Sequence[TaskFacts], rule: str, boundary: str, *, images: bool = True
) -> str | None:
    """The run's one line about root agents (None: no task's agent wants root).

    Args:
        tasks: The run's tasks.
        rule: ``sandbox.agent_root``.
        boundary: What stands between a root agent and the host besides the container:
            ``gvisor``, ``userns-remap``, ``rootless`` or ``none``.
        images: The backend runs the tasks' images (see :func:`wants_root`).
    """
    rooted = [task for task in tasks if wants_root(task, images=images)]
    if not rooted:
        return None
    count = f"{len(rooted)} task(s)"
    if rule == "never":
        return (
            f"agents of {count} would run as root under Harbor ([agent].user, else the "
            f"image's USER): {_names(rooted)}; they run as an unprivileged uid here "
            "(--agent-root never), so a solution that needs root fails; --agent-root "
            "isolated (with --runtime runsc) or allow runs them as Harbor does"
        )
    second = "no second boundary" if boundary == "none" else f"behind {boundary}"
    return (
        f"agents of {count} run as their task's or image's user, root included "
        f"(--agent-root {rule}, {second}): {_names(rooted)}"
    )


__all__ = ["MAX_NAMED", "announcement", "dockerfile_user", "wants_root"]
