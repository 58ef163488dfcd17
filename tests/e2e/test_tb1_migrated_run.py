"""End-to-end: a Terminal-Bench 1 task built here, migrated by the CLI, then run and graded.

The oracle (the TB1 ``solution.sh``) must get reward 1 and ``nop`` reward 0, on the local
sandbox and on docker (runc and gVisor) (the TB1 Dockerfile is ``FROM harness/base:bookworm``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.docker import docker_client, require_image
from support.tb1 import make_tb1


@pytest.mark.parametrize(
    "backend",
    [
        "local",
        pytest.param("docker", marks=pytest.mark.docker),
        pytest.param("runsc", marks=pytest.mark.docker),
    ],
)
def test_a_migrated_tb1_task_runs_oracle_1_and_nop_0(
    e2e: Any, tmp_path: Path, backend: str
) -> None:
    sandbox = ["--sandbox", "local"] if backend == "local" else ["--sandbox", "docker"]
    if backend == "runsc":
        sandbox += ["--runtime", "runsc"]
    if backend != "local":
        require_image(docker_client())
    make_tb1(tmp_path / "tb1", "hello")
    migrated = e2e.run("tasks", "migrate", tmp_path / "tb1", "-o", tmp_path / "harbor")
    assert migrated.code == 0, migrated
    assert "1 task(s) migrated" in migrated.stdout
    checked = e2e.run("tasks", "check", tmp_path / "harbor")
    assert checked.code == 0, checked
    for agent, reward in (("oracle", 1.0), ("nop", 0.0)):
        out = tmp_path / f"runs-{agent}"
        result = e2e.run(
            "run", tmp_path / "harbor", "--agent", agent, *sandbox, "-o", out,
            "--display", "none", "--json", timeout=600,
        )  # fmt: skip
        (record,) = e2e.read_run(e2e.only_run_dir(out)).records
        assert record["status"] == "completed", (result, record)
        assert record["reward"] == reward, (agent, result, record)
