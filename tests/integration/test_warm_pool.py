"""The warm container pool: containers made ahead, used once, drained when the run ends."""

from __future__ import annotations

import secrets
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from harness.config import RunConfig
from harness.runner import execute_run, prepare_run
from sandbox.docker.engine import connect
from sandbox.docker.labels import RUN

pytestmark = pytest.mark.docker

TASK = Path(__file__).resolve().parents[2] / "bench" / "tasks" / "trivial"


def test_each_trial_gets_its_own_container_and_the_run_leaves_none(tmp_path: Path) -> None:
    config = RunConfig.model_validate(
        {
            "tasks": {"paths": [str(TASK)]},
            # Each trial lists what its workspace held, then leaves a file there: a reused
            # container or volume would show an earlier trial's file.
            "agent": {
                "name": "command",
                "cmd": 'bash -c \'x=$(ls -A {workspace}); printf %s "$x" > {workspace}/seen.txt; '
                "echo mine > {workspace}/mine.txt; sleep 0.5'",
            },
            "sandbox": {"backend": "docker"},
            "rollouts": 5,
            "concurrency": 2,
            "output_dir": str(tmp_path / "runs"),
        }
    )
    outcome = execute_run(prepare_run(config))
    assert all(r.ok and r.reward == 1.0 for r in outcome.records), outcome.records
    containers = [r.sandbox.model_dump().get("container") for r in outcome.records]
    assert len(set(containers)) == len(containers), containers  # used once, never reused
    for record in outcome.records:
        # A fresh workspace every time: nothing of an earlier trial's.
        seen = outcome.run_dir / "trials" / record.id / "workspace" / "seen.txt"
        assert seen.read_text() == "", seen.read_text()
    client = connect()
    name = outcome.run_dir.name
    left = client.containers.list(all=True, filters={"label": f"{RUN}={name}"})
    volumes = client.volumes.list(filters={"label": f"{RUN}={name}"})
    assert left == [] and volumes == [], (left, volumes)  # the warm ones were drained


def _tasks(root: Path, memory_mb: dict[str, int]) -> Path:
    """Copies of the trivial task under ``root``, named by ``memory_mb``'s keys."""
    for name, memory in memory_mb.items():
        task = root / name
        shutil.copytree(TASK, task)
        toml = (task / "task.toml").read_text().replace('"bench/trivial"', f'"warm/{name}"')
        (task / "task.toml").write_text(toml + f"\n[environment]\nmemory_mb = {memory}\n")
    return root


class Creations:
    """The containers the engine creates while this watches, by run (a live event stream).

    Read live, not replayed afterwards with ``since``: the engine replays only its last 256
    events, which the parallel suite's other runs can push past in seconds. A network made
    at the end marks where the stream has caught up.
    """

    def __init__(self) -> None:
        self._api = connect().api
        self._marker = f"warm-marker-{secrets.token_hex(4)}"
        self.runs: list[str] = []
        self._stream = self._api.events(
            filters={"type": ["container", "network"], "event": ["create"]}, decode=True
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for event in self._stream:
            attributes = (event.get("Actor") or {}).get("Attributes") or {}
            if event.get("Type") == "network" and attributes.get("name") == self._marker:
                return
            if event.get("Type") == "container":
                self.runs.append(str(attributes.get(RUN, "")))

    def of(self, run: str) -> int:
        """How many containers of the run ``run`` the engine created."""
        return self.runs.count(run)

    def __enter__(self) -> Creations:
        return self

    def __exit__(self, *_exc: object) -> None:
        network = self._api.create_network(self._marker)
        try:
            self._reader.join(timeout=60)
        finally:
            self._api.remove_network(network["Id"])
            self._stream.close()
        assert not self._reader.is_alive(), "the engine's event stream never caught up"


def _run(tasks: Path, out: Path) -> tuple[list[Any], str]:
    config = RunConfig.model_validate(
        {
            "tasks": {"paths": [str(tasks)]},
            "agent": {"name": "command", "cmd": "sleep 0.3"},
            "sandbox": {"backend": "docker"},
            "rollouts": 3,
            "concurrency": 1,
            "output_dir": str(out),
        }
    )
    outcome = execute_run(prepare_run(config))
    assert all(r.ok and r.reward == 1.0 for r in outcome.records), outcome.records
    return outcome.records, outcome.run_dir.name


def test_tasks_of_one_shape_share_the_warm_containers(tmp_path: Path) -> None:
    """Two tasks, rollouts interleaved (a b a b ...): the same shape, so warm ones serve both."""
    tasks = _tasks(tmp_path / "tasks", {"a": 512, "b": 512})
    with Creations() as created:
        records, run = _run(tasks, tmp_path / "runs")
    warm = [r for r in records if r.sandbox.model_dump().get("warm")]
    assert {r.task.name for r in warm} == {"warm/a", "warm/b"}, [r.sandbox for r in records]
    containers = [r.sandbox.model_dump().get("container") for r in records]
    assert len(set(containers)) == len(containers)  # each served one trial
    # One made ahead for after the last trial at most: drained, never a trial's.
    assert 0 < created.of(run) <= len(records) + 1


def test_shapes_that_alternate_make_no_container_only_to_throw_it_away(tmp_path: Path) -> None:
    """Two tasks of different shapes, interleaved: nothing is made ahead, so nothing wasted."""
    tasks = _tasks(tmp_path / "tasks", {"a": 512, "b": 640})
    with Creations() as created:
        records, run = _run(tasks, tmp_path / "runs")
    assert not any(r.sandbox.model_dump().get("warm") for r in records)
    assert created.of(run) == len(records)
