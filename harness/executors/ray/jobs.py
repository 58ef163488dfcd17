"""What travels between the driver and a Ray worker: a trial job, its result, archives.

Everything here is plain data (no Ray import): a :class:`TrialJob` goes to a worker as a Ray
task argument, a :class:`TrialResult` comes back as the task's return value. Neither ever
holds a provider key: the job carries the trial's revocable gateway token (what its sandbox
gets anyway) and a ticket for the driver's bridge, both valid for one attempt.

Task dirs travel as tar archives (put into the object store once per task content hash) and
evidence comes back as one: a worker node shares no filesystem with the driver.
"""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.models.catalog import ModelSpec
from sandbox.run_tmp import NODE_DIR_PREFIX


def node_run_dir(run_name: str) -> Path:
    """The node-local dir of a run (task copies and trial scratch), created root-only."""
    path = Path(tempfile.gettempdir()) / f"{NODE_DIR_PREFIX}{run_name}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


@dataclass(frozen=True)
class BridgeAddress:
    """Where the driver's bridge listens, and the ticket of one attempt."""

    host: str
    port: int
    ticket: str = field(repr=False)


@dataclass(frozen=True)
class TrialJob:
    """One attempt of one trial, as a worker runs it.

    Attributes:
        run_name: The run's name (labels, node dirs).
        config: The run's config as JSON (the worker builds agent and backend from it).
        versions: The run's versions (copied into the record).
        trial_id: The planned trial's id.
        rollout: Its rollout index.
        attempt: The attempt number.
        task_key: The task's key on the driver (the worker's copy keeps it).
        task_hash: The task's content hash (the worker's copy must match it).
        task_dirname: The task dir's name (its default name).
        task_env: The task's env tables as the driver resolved them from its environment
            (by :func:`~harness.tasks.env_templates.env_tables` name): a worker node's
            environment is not the run's.
        bridge: The driver's bridge and this attempt's ticket.
        model: The run's model spec (names its key variable, never holds a key).
        gateway_token: The trial's gateway token, when the agent uses the model.
        network_modes: The modes the driver's backend enforces (``RunNetwork.enforced``):
            the worker gives each phase the policy the driver planned and checked, not
            one its own host would pick (an unstated ``public`` quietly becoming
            ``no-network`` on a node that cannot filter); the node's sandbox refuses a
            policy it cannot enforce. Each step's policies are resolved on the worker
            from the task itself with these modes, as the driver checked them (every
            step's phases: ``harness.runner.network``). None: the backend declares none.
        agent_install: The agent's install as the driver checked it before any trial (its
            record's ``agent.install``: an installed agent's cache entry, with its
            ``tree``): the node's own must hold the same files. None: nothing installed.
    """

    run_name: str
    config: str
    versions: dict[str, str]
    trial_id: str
    rollout: int
    attempt: int
    task_key: str
    task_hash: str
    task_dirname: str
    task_env: dict[str, dict[str, str]] = field(repr=False)
    bridge: BridgeAddress
    model: ModelSpec | None = None
    gateway_token: str | None = field(default=None, repr=False)
    network_modes: tuple[str, ...] | None = None
    agent_install: dict[str, Any] | None = None


@dataclass(frozen=True)
class TrialResult:
    """What a worker sends back: the attempt's record and its evidence.

    Attributes:
        record: The :class:`~harness.records.TrialRecord` as JSON.
        evidence: ``trials/<id>/`` as an uncompressed tar archive.
        node: The node's IP address (for the log).
    """

    record: str
    evidence: bytes = field(repr=False)
    node: str = ""


def pack_dir(path: Path) -> bytes:
    """``path``'s content as a tar archive (symlinks kept as links, never followed)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for entry in sorted(os.listdir(path)):
            archive.add(path / entry, arcname=entry, recursive=True)
    return buffer.getvalue()


def unpack_dir(data: bytes, target: Path) -> None:
    """Extract a :func:`pack_dir` archive into ``target`` (created if missing).

    The ``data`` filter refuses absolute names, ``..``, links leaving ``target`` and device
    files, and drops set-id bits: an archive cannot write outside ``target``.
    """
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as archive:
        archive.extractall(target, filter="data")


__all__ = [
    "BridgeAddress",
    "TrialJob",
    "TrialResult",
    "node_run_dir",
    "pack_dir",
    "unpack_dir",
]
