"""The run's side of the tasks' network policies: what the backend can enforce, the lines.

Before any trial: each task's policies on this run (``--network``, an undeclared default
the backend cannot enforce: :mod:`harness.tasks.networks`) are checked against the modes
the backend enforces (``Capacity.network_modes``); a declared policy it cannot enforce
refuses the task (exit 2). The run then says, in one line each, which tasks' agent phases
reach the internet and which tasks run without the network Harbor would have given them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from harness.executors.base import TrialExecutor
from harness.tasks import Task
from harness.tasks.model import StepSection
from harness.tasks.networks import (
    RunNetwork,
    declarable,
    refusal,
    run_network,
    sandbox_networks,
    sandbox_step_networks,
    step_networks,
    task_networks,
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
    """Why a task's policies cannot run on this backend and executor (one line per task).

    Every step's phases are checked (each gets its own policy); a refusal names the step.
    """
    allowed = declarable(capacity)
    problem = capacity.network_problem if capacity is not None else None
    problems = []
    for task in tasks:
        steps = _steps(task)
        by_step = _by_step(task, step_networks(task.config, run, steps))
        why = _first(by_step, lambda table: refusal(table, allowed, backend, problem))
        if why is None and (capacity is None or capacity.network_modes is None):
            # The trial's own sandbox only: a separate verifier has a container of its own.
            tables = [sandbox_networks(task.config, run, steps)]
            tables += sandbox_step_networks(task.config, run, steps)
            why = _one_network_only(tables, backend)
        if why is not None and capacity is not None and not capacity.network and not problem:
            why += "; this runtime is registered with --network=none and gives no trial a network"
        if why is None and executor is not None:
            why = _first(by_step, lambda table: _executor_refusal(executor, table, run))
        if why is not None:
            problems.append(f"{task.path / 'task.toml'}: {why}")
    return problems


def _first(
    by_step: list[tuple[str, dict[str, NetworkPolicy]]],
    check: Callable[[dict[str, NetworkPolicy]], str | None],
) -> str | None:
    """The first step's refusal by ``check``, prefixed with the step (None: none refused)."""
    for where, table in by_step:
        why = check(table)
        if why is not None:
            return where + why
    return None


def _executor_refusal(
    executor: TrialExecutor, table: dict[str, NetworkPolicy], run: RunNetwork
) -> str | None:
    """Why ``executor`` cannot run a phase of these (None: it can run them all)."""
    for role, policy in table.items():
        why = executor.network_refusal(role, policy.mode, run.enforced)
        if why is not None:
            return why
    return None


def _by_step(
    task: Task, tables: list[dict[str, NetworkPolicy]]
) -> list[tuple[str, dict[str, NetworkPolicy]]]:
    """Each step's policies with the prefix a line about them takes (none without steps)."""
    if not task.steps:
        return [("", tables[0])]
    return [
        (f"step {step.name!r}: ", table) for step, table in zip(task.steps, tables, strict=True)
    ]


def _one_network_only(tables: Sequence[Mapping[str, NetworkPolicy]], backend: str) -> str | None:
    """Why a backend giving a trial ONE network cannot keep these phases apart (None: it can).

    A backend that does not say which modes it enforces (``Capacity.network_modes``) gives
    every phase of every step the union (``SandboxSpec.allow_internet``): a phase kept off
    the internet while another phase has it would get it too.
    """
    policies = [(role, policy) for table in tables for role, policy in table.items()]
    online = [(role, policy) for role, policy in policies if policy.internet]
    offline = sorted(role for role, policy in policies if not policy.internet)
    if not online or not offline:
        return None
    role, policy = online[0]
    return (
        f"the {offline[0]} phase's network_mode = 'no-network' cannot be kept while the "
        f"{role} phase has {policy.mode!r}: the {backend} backend gives all "
        "phases of a trial one network here; run the task where per-phase policies are "
        "enforced, or with --network none if only the agent phase has the internet"
    )


def network_lines(tasks: Sequence[Task], run: RunNetwork) -> list[str]:
    """The run's lines about networks (none when no agent gets the internet and nothing changed).

    - which tasks' agent phases (of any step) reach the internet, and with which policy;
    - which tasks run ``no-network`` where Harbor's default (``public``) was not enforceable.
    """
    online: list[str] = []
    downgraded: list[str] = []
    for task in tasks:
        steps = _steps(task)
        effective = step_networks(task.config, run, steps)
        if not task.steps:
            if effective[0]["agent"].internet:
                online.append(f"{task.name} ({_policy(effective[0]['agent'])})")
        else:  # a multi-step task: the steps whose agent has it
            reached = [
                f"{step.name}: {_policy(table['agent'])}"
                for step, table in zip(task.steps, effective, strict=True)
                if table["agent"].internet
            ]
            if reached:
                online.append(f"{task.name} ({'; '.join(reached)})")
        stated = [task_networks(task.config, step) for step in steps] or [
            task_networks(task.config)
        ]
        if any(
            not said[role].declared and got[role] != said[role]
            for said, got in zip(stated, effective, strict=True)
            for role in got
        ):
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


def _policy(policy: NetworkPolicy) -> str:
    """A policy as a run's line names it: its mode, and an allowlist's hosts."""
    if policy.mode != "allowlist":
        return policy.mode
    return f"allowlist: {', '.join(policy.allowed_hosts) or 'no host'}"


def _steps(task: Task) -> list[StepSection]:
    return [step.config for step in task.steps]


def _names(items: list[str]) -> str:
    shown = ", ".join(items[:_SHOWN])
    return shown if len(items) <= _SHOWN else f"{shown} and {len(items) - _SHOWN} more"


__all__ = ["declarable", "network_lines", "network_problems", "run_network"]
