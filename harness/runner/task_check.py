"""``harness tasks check`` against an engine: each task's CPUs, memory, GPUs and networks.

The static checks (:func:`harness.tasks.check_tasks`) read only the task dirs. A task that
asks more than the engine has, or a network policy its backend cannot enforce here, is as
invalid there as a missing test script: every attempt fails the same way. So ``tasks
check`` opens the backend a run would (``--sandbox``, the docker engine by default) and
asks it :meth:`SandboxBackend.problems_by_task` and the run's network check
(:func:`harness.runner.network.network_problems`, as ``--network task`` with the local
executor), the same checks ``harness run`` refuses with (and ``--skip-invalid`` skips).
Where no engine answers, it says so and keeps to the static checks.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field

from harness.backends.registry import SANDBOXES
from harness.config import SandboxConfig
from harness.runner.network import network_problems, run_network
from harness.tasks import Task
from sandbox.errors import HarnessError
from sandbox.plugin import BackendOptions, SandboxBackend

#: ``--sandbox none``: the static checks only.
NO_ENGINE = "none"

__all__ = ["NO_ENGINE", "EngineCheck", "check_against_engine"]


@dataclass
class EngineCheck:
    """What checking tasks against an engine found.

    Attributes:
        said: What the tasks were checked against (or why only statically), one line.
        problems: Every problem, each naming its task's ``task.toml``.
        refused: The keys of the tasks with a problem.
    """

    said: str
    problems: list[str] = field(default_factory=list)
    refused: set[str] = field(default_factory=set)


def check_against_engine(
    tasks: Sequence[Task], backend_name: str, runtime: str | None = None
) -> EngineCheck:
    """Check ``tasks`` against the engine of ``backend_name`` when it answers.

    Args:
        tasks: The tasks that passed the static checks.
        backend_name: An installed sandbox backend, or ``none``.
        runtime: The docker backend's runtime (``runsc``), if any.

    Returns:
        What was checked against and what it found; an unreachable engine (or a backend
        that cannot open here) is no problem of the tasks: the check says it kept to the
        static checks.
    """
    static = "static checks only: the tasks' CPUs, memory, GPUs and networks were not checked"
    if backend_name == NO_ENGINE:
        return EngineCheck(said=f"{static} (--sandbox none)")
    try:
        backend = _open(backend_name, runtime)
    except HarnessError as exc:
        return EngineCheck(said=f"{static}: {backend_name}: {_first_line(exc)}")
    try:
        against = backend.describe() or f"the {backend_name} backend"
        by_task = backend.problems_by_task([t.facts() for t in tasks])
        capacity = backend.capacity()
        run = run_network("task", capacity)
        for task in tasks:
            found = network_problems([task], run, capacity, backend.name)
            if found:
                by_task.setdefault(task.key, []).extend(found)
    except HarnessError as exc:
        return EngineCheck(said=f"{static}: {backend_name}: {_first_line(exc)}")
    finally:
        backend.close()
    problems = [problem for found in by_task.values() for problem in found]
    return EngineCheck(
        said=f"checked against the {against}", problems=problems, refused=set(by_task)
    )


def _open(name: str, runtime: str | None) -> SandboxBackend:
    backend_class = SANDBOXES.get(name)
    config = SandboxConfig(backend=name, runtime=runtime)
    # A run name of its own: closing the backend removes only what this check labelled.
    run_name = f"tasks-check-{secrets.token_hex(4)}"
    backend = backend_class(BackendOptions(run_name=run_name, config=config))
    backend.name = name
    return backend


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
