"""How a trial's ``cpus`` and ``memory_mb`` are applied: Harbor 0.22's enforcement policies.

A run chooses, per resource (``--cpus``, ``--memory``; ``sandbox.cpu_policy`` and
``sandbox.memory_policy``), what the task's number becomes:

- ``limit`` (the default, Harbor's docker default): a hard cap (docker ``--cpus`` and
  ``--memory`` with no swap beyond it; the local sandbox's ``cpu.max`` and
  ``memory.max``);
- ``request``: a reservation only, no cap (docker ``--cpu-shares`` of 1024 per CPU and
  ``--memory-reservation``; the local sandbox's ``cpu.weight`` and ``memory.low``): the
  trial may use more when the host has it, and its memory is then bounded by the host
  alone;
- ``guarantee``: both;
- ``ignore``: neither.

Each backend applies what it can and the record says what held
(``sandbox.limits.enforced``: ``true`` where the cap held, ``"request"`` where only the
reservation did, ``false`` where nothing did; ``sandbox.limits.policy`` what was asked).
"""

from __future__ import annotations

from typing import Literal

ResourcePolicy = Literal["limit", "request", "guarantee", "ignore"]
#: Every policy, in the order help texts list them.
POLICIES: tuple[ResourcePolicy, ...] = ("limit", "request", "guarantee", "ignore")


def caps(policy: str) -> bool:
    """Whether ``policy`` sets a hard cap."""
    return policy in ("limit", "guarantee")


def reserves(policy: str) -> bool:
    """Whether ``policy`` sets a reservation (a weight, a protected minimum)."""
    return policy in ("request", "guarantee")


def enforced_value(policy: str, *, cap_held: bool, reservation_held: bool) -> bool | str:
    """What the record says held: True (the cap), ``"request"`` (a reservation), False."""
    if caps(policy) and cap_held:
        return True
    if reserves(policy) and reservation_held:
        return "request"
    return False


__all__ = ["POLICIES", "ResourcePolicy", "caps", "enforced_value", "reserves"]
