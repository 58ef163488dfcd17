"""End-to-end: a TB1 task whose compose file bind-mounts its tests where run-tests.sh reads them.

Community TB1 tasks mount ``./tests:/app/tests:ro`` and run ``pytest tests/...`` from
``/app``. Migrated, ``tests/test.sh`` puts the tests there when grading starts; in a real
container (runc and gVisor) the oracle must get reward 1 and ``nop`` reward 0, and the agent
must not see the tests while it works.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.docker import docker_client, require_image
from support.tb1 import assert_oracle_1_and_nop_0, make_tb1, migrate

COMPOSE = """services:
  agent-environment:
    build:
      context: .
      dockerfile: Dockerfile
    working_dir: /app
    volumes:
      - ./tests:/app/tests:ro
    command: tail -f /dev/null
"""
# The verdict needs the mounted tests at /app/tests, and the agent's hello.txt.
RUN_TESTS = (
    '#!/bin/bash\nset -e\ngrep -qx secret-marker tests/marker\n[ "$(cat hello.txt)" = hi ]\n'
)
# The oracle solves it only if it cannot see the tests while it works.
SOLUTION = (
    "#!/bin/bash\n"
    "if [ -e /app/tests/marker ]; then echo saw-tests > /app/hello.txt; exit 0; fi\n"
    "echo hi > /app/hello.txt\n"
)


@pytest.mark.docker
@pytest.mark.parametrize("runtime", ["runc", "runsc"])
def test_a_tb1_task_mounting_its_tests_grades_oracle_1_and_nop_0(
    e2e: Any, tmp_path: Path, runtime: str
) -> None:
    require_image(docker_client())
    task = make_tb1(
        tmp_path / "tb1", "mounted-tests", compose=COMPOSE, run_tests=RUN_TESTS, solution=SOLUTION
    )
    (task / "tests" / "marker").write_text("secret-marker\n")
    migrate(e2e, tmp_path / "tb1", tmp_path / "harbor")
    sandbox = ["--sandbox", "docker", "--runtime", runtime]
    assert_oracle_1_and_nop_0(e2e, tmp_path / "harbor", sandbox, tmp_path)
