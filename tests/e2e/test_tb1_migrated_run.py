"""End-to-end: a Terminal-Bench 1 task built here, migrated by the CLI, then run and graded.

The oracle (the TB1 ``solution.sh``) must get reward 1 and ``nop`` reward 0, on the local
sandbox and on docker (runc and gVisor) (the TB1 Dockerfile is ``FROM harness/base:bookworm``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.docker import docker_client, require_image
from support.tb1 import assert_oracle_1_and_nop_0, make_tb1, migrate


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
    migrated = migrate(e2e, tmp_path / "tb1", tmp_path / "harbor")
    assert "1 task(s) migrated" in migrated.stdout
    checked = e2e.run("tasks", "check", tmp_path / "harbor")
    assert checked.code == 0, checked
    assert_oracle_1_and_nop_0(e2e, tmp_path / "harbor", sandbox, tmp_path)
