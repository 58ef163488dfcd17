"""The run's side of the tasks' network policies: what the backend can enforce, the lines.

Before any trial: each task's policies on this run (``--network``, an undeclared default
the backend cannot enforce: :mod:`harness.tasks.networks`) are checked against the modes
the backend enforces (``Capacity.network_modes``); a declared policy it cannot enforce
refuses the task (exit 2). The run then says, in one line each, which tasks' agent phases
reach the internet and which tasks run without the network Harbor would have given them.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.executors.base import TrialExecutor
from harness.tasks import Task
from harness.tasks.model import StepSection
from harness.tasks.networks import (
    RunNetwork,
    declarable,
    refusal,
    run_network,
    task_networks,
    trial_networks,
)
from sandbox.backend import Capacity

_SHOWN = 5
"""Tasks named in a line before it just counts the rest."""


def network_problems(
    tasks: Sequence[Task],
    run: RunNetwork,
    capacity: Capacity | None,
    backend: str,
    executor: TrialExecutor | None = None,
) -> list[str]:
    """Why a task's policies cannot run on this backend and executor (one line per task)."""
    allowed = declarable(capacity)
    problems = []
    for task in tasks:
        policies = trial_networks(task.config, run, _steps(task))
        why = refusal(policies, allowed, backend)
        if why is not None and capacity is not None and not capacity.network:
            why += "; this runtime is registered with --network=none and gives no trial a network"
        for role, policy in policies.items():
            if why is None and executor is not None:
                why = executor.network_refusal(role, policy.mode, run.enforced)
        if why is not None:
            problems.append(f"{task.path / 'task.toml'}: {why}")
    return problems


def network_lines(tasks: Sequence[Task], run: RunNetwork) -> list[str]:
    """The run's lines about networks (none when no agent gets the internet and nothing changed).

    - which tasks' agent phases reach the internet, and with which policy;
    - which tasks run ``no-network`` where Harbor's default (``public``) was not enforceable.
    """
    online: list[str] = []
    downgraded: list[str] = []
    for task in tasks:
        effective = trial_networks(task.config, run, _steps(task))
        agent = effective["agent"]
        if agent.internet:
            hosts = ""
            if agent.mode == "allowlist":
                hosts = ": " + (", ".join(agent.allowed_hosts) or "no host")
            online.append(f"{task.name} ({agent.mode}{hosts})")
        stated = task_networks(task.config, _first(task))
        if any(not stated[r].declared and effective[r] != stated[r] for r in effective):
            downgraded.append(task.name)
    lines = []
    if online:
        lines.append(
            f"network: the agent phase of {len(online)} task(s) reaches the internet: "
            f"{_names(online)} (--network none forbids it)"
        )
    if downgraded:
        lines.append(
            f"network: {len(downgraded)} task(s) leave a phase's network_mode unstated, and "
            "it runs with no-network: Harbor's default is public, which this backend cannot "
            f"enforce ({_names(downgraded)})"
        )
    return lines


def _steps(task: Task) -> list[StepSection]:
    return [step.config for step in task.steps]


def _first(task: Task) -> StepSection | None:
    return task.steps[0].config if task.steps else None


def _names(items: list[str]) -> str:
    shown = ", ".join(items[:_SHOWN])
    return shown if len(items) <= _SHOWN else f"{shown} and {len(items) - _SHOWN} more"


__all__ = ["declarable", "network_lines", "network_problems", "run_network"]
