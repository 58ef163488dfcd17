"""Each phase's network policy, resolved from a task's tables (Harbor's rules).

- A phase's table wins over ``[environment]``: ``[agent]`` (a step's ``agent`` table over
  it) for the agent phase, which is the oracle's too; ``[verifier]`` (a step's ``verifier``
  table over it) for the verifier phase. A separate verifier's container takes its own
  ``[verifier.environment]`` as its environment.
- Each step of a multi-step task has its own policies (:func:`step_networks`), and each
  phase gets exactly its step's: steps may differ, and the trial's sandbox switches
  between them (``SandboxSpec.step_networks``, ``PhaseRequest.step``).
- ``allow_internet`` is the older spelling: ``true`` is ``public``, ``false``
  ``no-network``.
- A table that sets ``network_mode = "allowlist"`` without ``allowed_hosts`` takes the
  hosts of the table below it when that one is an allowlist too, else none (an empty
  allowlist lets nothing out, as in Harbor).
- Nothing said anywhere: :data:`DEFAULT_NETWORK_MODE` (Harbor's ``public``), with
  ``declared=False``. A backend that cannot enforce a filtered ``public`` runs such a phase
  as ``no-network`` instead, and the run says so once (:func:`enforceable`); a policy the
  task did declare is never weakened or widened: the task is refused before the run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from harness.tasks.model import StepSection, TaskConfig
from harness.tasks.network_keys import NetworkKeys
from sandbox.backend import Capacity
from sandbox.network_policy import NetworkMode, NetworkPolicy

#: The mode of a phase no table speaks about: Harbor's default. It gives every unstated
#: task the filtered internet where the backend enforces one (see :func:`enforceable`), and
#: ``no-network`` elsewhere: the one place to change it.
DEFAULT_NETWORK_MODE: NetworkMode = "public"

ROLES = ("agent", "verifier")


def _layer(
    below: NetworkPolicy | None, table: NetworkKeys | None, *, internet: bool | None = None
) -> NetworkPolicy | None:
    """``table``'s policy over ``below`` (``internet``: an ``allow_internet`` it holds)."""
    if table is None:
        return below
    mode = table.network_mode
    if mode is None and internet is not None:
        mode = "public" if internet else "no-network"
    if mode is None:
        if table.allowed_hosts is not None and below is not None and below.mode == "allowlist":
            return NetworkPolicy("allowlist", tuple(table.allowed_hosts))
        return below
    if mode != "allowlist":
        return NetworkPolicy(mode)
    if table.allowed_hosts is not None:
        return NetworkPolicy("allowlist", tuple(table.allowed_hosts))
    inherited = below.allowed_hosts if below is not None and below.mode == "allowlist" else ()
    return NetworkPolicy("allowlist", inherited)


def _environment(config: TaskConfig, role: str, step: StepSection | None) -> NetworkPolicy | None:
    env = config.environment
    if role == "verifier" and config.verifier_mode(step) == "separate":
        env = config.verifier_environment(step)
    internet = env.allow_internet if "allow_internet" in env.model_fields_set else None
    return _layer(None, env, internet=internet)


def task_networks(config: TaskConfig, step: StepSection | None = None) -> dict[str, NetworkPolicy]:
    """Each role's policy as the task states it (``declared=False``: Harbor's default).

    Args:
        config: The task's ``task.toml``.
        step: The step whose phases these are (None: a single-step task's).

    Returns:
        ``{"agent": ..., "verifier": ...}``.
    """
    found: dict[str, NetworkPolicy] = {}
    for role in ROLES:
        policy = _environment(config, role, step)
        policy = _layer(policy, config.agent if role == "agent" else config.verifier)
        if step is not None:
            policy = _layer(policy, step.agent if role == "agent" else step.verifier)
        found[role] = policy or NetworkPolicy(DEFAULT_NETWORK_MODE, declared=False)
    return found


@dataclass(frozen=True)
class RunNetwork:
    """What a run does with the tasks' policies.

    Attributes:
        agent: ``task`` (the task's policy) or ``none`` (every agent phase gets
            ``no-network``, whatever the task says; ``--network none``).
        enforced: The modes the backend enforces as docs/security.md describes them
            (``Capacity.network_modes``); None: the backend did not say, and only
            ``no-network`` is assumed filtered (a declared ``public`` runs as the backend
            always ran it).
    """

    agent: str = "task"
    enforced: frozenset[str] | None = None


def enforceable(policy: NetworkPolicy, run: RunNetwork, role: str) -> NetworkPolicy:
    """The policy a phase gets on this run (the run's override, an undeclared default).

    An undeclared ``public`` becomes ``no-network`` unless the backend enforces the filtered
    ``public``; the agent's policy becomes ``no-network`` under ``--network none``.
    """
    if role == "agent" and run.agent == "none" and policy.internet:
        return NetworkPolicy("no-network")
    if not policy.declared and policy.mode not in (run.enforced or frozenset()):
        return NetworkPolicy("no-network", declared=False)
    return policy


def effective_networks(
    config: TaskConfig, run: RunNetwork, step: StepSection | None = None
) -> dict[str, NetworkPolicy]:
    """Each role's policy on this run (:func:`task_networks` through :func:`enforceable`)."""
    return {
        role: enforceable(policy, run, role) for role, policy in task_networks(config, step).items()
    }


def step_networks(
    config: TaskConfig, run: RunNetwork, steps: Iterable[StepSection] = ()
) -> list[dict[str, NetworkPolicy]]:
    """Each step's policies on this run, in order: each phase gets exactly its step's.

    A task without steps: one entry, the task's. The oracle's phase is the agent's.
    """
    listed = list(steps)
    if not listed:
        return [effective_networks(config, run)]
    return [effective_networks(config, run, step) for step in listed]


def trial_networks(
    config: TaskConfig, run: RunNetwork, steps: Iterable[StepSection] = ()
) -> dict[str, NetworkPolicy]:
    """A trial's first step's policies (the task's, without steps; the record's posture)."""
    return step_networks(config, run, steps)[0]


def _in_sandbox(
    config: TaskConfig, run: RunNetwork, step: StepSection | None
) -> dict[str, NetworkPolicy]:
    """A step's policies in the trial's own sandbox (a separate verifier's are its own)."""
    networks = effective_networks(config, run, step)
    if config.verifier_mode(step) == "separate":
        stated = _environment(config, "agent", step)
        default = NetworkPolicy(DEFAULT_NETWORK_MODE, declared=False)
        networks["verifier"] = enforceable(stated or default, run, "verifier")
    return networks


def sandbox_networks(
    config: TaskConfig, run: RunNetwork, steps: Iterable[StepSection] = ()
) -> dict[str, NetworkPolicy]:
    """The policies of the trial's own sandbox for a phase of no step (its spec's ``networks``).

    The first step's (the task's healthcheck runs before it), except that with a separate
    verifier the verifier role's phases in this sandbox (the healthcheck) get the
    environment's policy: the ``[verifier]`` policy is the separate container's.
    """
    return _in_sandbox(config, run, next(iter(steps), None))


def sandbox_step_networks(
    config: TaskConfig, run: RunNetwork, steps: Iterable[StepSection] = ()
) -> tuple[dict[str, NetworkPolicy], ...]:
    """Each step's policies in the trial's own sandbox (its spec's ``step_networks``).

    As :func:`sandbox_networks`, per step; empty for a task without steps.
    """
    return tuple(_in_sandbox(config, run, step) for step in steps)


def with_network(posture: dict[str, Any] | None, policy: NetworkPolicy) -> dict[str, Any]:
    """A record's ``posture`` (or ``verifier_posture``) with the phase's ``network``."""
    return {**(posture or {}), "network": policy.to_json()}


def run_network(agent: str, capacity: Capacity | None) -> RunNetwork:
    """The run's :class:`RunNetwork`: ``--network`` and what the backend enforces."""
    return RunNetwork(
        agent=agent, enforced=capacity.network_modes if capacity is not None else None
    )


def declarable(capacity: Capacity | None) -> frozenset[str]:
    """The modes a task may declare on this backend.

    The backend's own list when it gives one; else the runtime's network as it always
    was: ``public`` (the engine's network) when it has one, ``no-network`` always.
    """
    if capacity is not None and capacity.network_modes is not None:
        return capacity.network_modes
    if capacity is not None and not capacity.network:
        return frozenset({"no-network"})
    return frozenset({"no-network", "public"})


def refusal(
    policies: Mapping[str, NetworkPolicy],
    enforced: frozenset[str],
    backend: str,
    problem: str | None = None,
) -> str | None:
    """Why a backend enforcing ``enforced`` cannot run these declared policies (None: it can).

    Args:
        policies: Each role's policy.
        enforced: The modes the backend enforces.
        backend: Its name.
        problem: Why the other modes are not enforced there and how to get them
            (``Capacity.network_problem``); None: the backend did not say.
    """
    for role, policy in policies.items():
        if policy.declared and policy.mode not in enforced:
            fix = problem or "run the task on a backend that enforces it"
            agent = ", or with --network none for the agent phase" if role == "agent" else ""
            return (
                f"the {role} phase's network_mode = {policy.mode!r} cannot be enforced by "
                f"the {backend} backend (it enforces: {', '.join(sorted(enforced))}): "
                f"{fix}{agent}"
            )
    return None


__all__ = [
    "DEFAULT_NETWORK_MODE",
    "ROLES",
    "RunNetwork",
    "declarable",
    "effective_networks",
    "enforceable",
    "refusal",
    "run_network",
    "sandbox_networks",
    "sandbox_step_networks",
    "step_networks",
    "task_networks",
    "trial_networks",
    "with_network",
]
