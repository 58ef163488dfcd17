"""The run's side of the tasks' network policies: what the backend can enforce, the lines.

Before any trial: each task's policies on this run (``--network``, an undeclared default
the backend cannot enforce: :mod:`harness.tasks.networks`) are checked against the modes
the backend enforces (``Capacity.network_modes``); a declared policy it cannot enforce
refuses the task (exit 2). The run then says, in one line each, which tasks' agent phases
reach the internet and which tasks run without the network Harbor would have given them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from harness.executors.base import TrialExecutor
from harness.tasks import Task
from harness.tasks.model import StepSection
from harness.tasks.networks import (
    RunNetwork,
    declarable,
    refusal,
    run_network,
    sandbox_networks,
    task_networks,
    trial_networks,
)
from sandbox.backend import Capacity
from sandbox.network_policy import NetworkPolicy

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
        if why is None and (capacity is None or capacity.network_modes is None):
            # The trial's own sandbox only: a separate verifier has a container of its own.
            why = _one_network_only(sandbox_networks(task.config, run, _steps(task)), backend)
        if why is not None and capacity is not None and not capacity.network:
            why += "; this runtime is registered with --network=none and gives no trial a network"
        for role, policy in policies.items():
            if why is None and executor is not None:
                why = executor.network_refusal(role, policy.mode, run.enforced)
        if why is not None:
            problems.append(f"{task.path / 'task.toml'}: {why}")
    return problems


def _one_network_only(policies: Mapping[str, NetworkPolicy], backend: str) -> str | None:
    """Why a backend giving a trial ONE network cannot keep these phases apart (None: it can).

    A backend that does not say which modes it enforces (``Capacity.network_modes``) gives
    every phase the union (``SandboxSpec.allow_internet``): a phase kept off the internet
    while another phase has it would get it too.
    """
    online = sorted(role for role, policy in policies.items() if policy.internet)
    offline = sorted(role for role, policy in policies.items() if not policy.internet)
    if not online or not offline:
        return None
    return (
        f"the {offline[0]} phase's network_mode = 'no-network' cannot be kept while the "
        f"{online[0]} phase has {policies[online[0]].mode!r}: the {backend} backend gives all "
        "phases of a trial one network here; run the task where per-phase policies are "
        "enforced, or with --network none if only the agent phase has the internet"
    )


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
