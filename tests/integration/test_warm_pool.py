"""The warm container pool: containers made ahead, used once, drained when the run ends."""

from __future__ import annotations

from pathlib import Path

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
                "cmd": "bash -c 'x=$(ls -A {workspace}); printf %s \"$x\" > {workspace}/seen.txt; "
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
