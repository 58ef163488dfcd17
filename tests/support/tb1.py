"""Terminal-Bench 1 task dirs as TB1 lays them out, built by the tests (no fetched task)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

STANDARD_COMPOSE = """services:
  client:
    build:
      dockerfile: Dockerfile
    image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}
    container_name: ${T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME}
    command: [ "sh", "-c", "sleep infinity" ]
    environment:
      - TEST_DIR=${T_BENCH_TEST_DIR}
      - GREETING=hi
    working_dir: /app
    volumes:
      - ${T_BENCH_TASK_LOGS_PATH}:${T_BENCH_CONTAINER_LOGS_PATH}
      - ${T_BENCH_TASK_AGENT_LOGS_PATH}:${T_BENCH_CONTAINER_AGENT_LOGS_PATH}
"""

SIDECAR_COMPOSE = """services:
  client:
    build:
      context: .
    image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}
    command: [ "sh", "-c", "sleep infinity" ]
    environment:
      - TEST_DIR=${T_BENCH_TEST_DIR}
    depends_on: [db]
    volumes:
      - ${T_BENCH_TASK_LOGS_PATH}:${T_BENCH_CONTAINER_LOGS_PATH}
  db:
    build:
      context: ./db
    image: ${T_BENCH_TASK_DOCKER_NAME_PREFIX}__db
    environment:
      - LOGS=${T_BENCH_CONTAINER_LOGS_PATH}
"""

TASK_YAML = {
    "instruction": "Write hi into hello.txt.",
    "author_name": "someone",
    "author_email": "someone@example.invalid",
    "difficulty": "easy",
    "category": "file-operations",
    "tags": ["smoke"],
    "parser_name": "pytest",
    "max_agent_timeout_sec": 120,
    "max_test_timeout_sec": 30,
    "run_tests_in_same_shell": False,
    "language": "bash",
}


def make_tb1(
    parent: Path,
    name: str,
    *,
    task_yaml: dict[str, object] | None = None,
    compose: str | None = STANDARD_COMPOSE,
    run_tests: str | None = '#!/bin/bash\n[ "$(cat hello.txt)" = hi ]\n',
    solution: str | None = "#!/bin/bash\necho hi > hello.txt\n",
) -> Path:
    """A TB1 task dir as Terminal-Bench 1 lays one out."""
    task = parent / name
    (task / "tests").mkdir(parents=True)
    (task / "task.yaml").write_text(yaml.safe_dump(task_yaml or TASK_YAML))
    (task / "Dockerfile").write_text("FROM harness/base:bookworm\nWORKDIR /app\nCOPY data/ /app/\n")
    (task / "data").mkdir()
    (task / "data" / "seed.txt").write_text("seed\n")
    (task / "tests" / "test_outputs.py").write_text("def test_ok():\n    assert True\n")
    if compose is not None:
        (task / "docker-compose.yaml").write_text(compose)
    if run_tests is not None:
        (task / "run-tests.sh").write_text(run_tests)
    if solution is not None:
        (task / "solution.sh").write_text(solution)
    return task


def migrate(e2e: Any, tb1_dir: Path, harbor_dir: Path) -> Any:
    """``harness tasks migrate TB1_DIR -o HARBOR_DIR`` through the e2e CLI; it must succeed."""
    migrated = e2e.run("tasks", "migrate", tb1_dir, "-o", harbor_dir)
    assert migrated.code == 0, migrated
    return migrated


def assert_oracle_1_and_nop_0(e2e: Any, harbor_dir: Path, sandbox: list[str], out: Path) -> None:
    """Run the migrated tasks with ``oracle`` and with ``nop`` (a run dir each below ``out``):
    each run's one record is completed, with reward 1 for the oracle and 0 for nop.
    """
    for agent, reward in (("oracle", 1.0), ("nop", 0.0)):
        runs = out / f"runs-{agent}"
        result = e2e.run(
            "run", harbor_dir, "--agent", agent, *sandbox, "-o", runs,
            "--display", "none", "--json", timeout=600,
        )  # fmt: skip
        (record,) = e2e.read_run(e2e.only_run_dir(runs)).records
        assert record["status"] == "completed", (result, record)
        assert record["reward"] == reward, (agent, result, record)
