"""Terminal-Bench 1 → Harbor layout (``harness.tasks.migrate_tb1``), on TB1 tasks built here."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import yaml
from support.tb1 import SIDECAR_COMPOSE, STANDARD_COMPOSE, TASK_YAML, make_tb1

from harness.tasks import check_tasks
from harness.tasks.migrate_tb1 import migrate_tasks


def test_every_part_is_mapped_and_the_result_passes_tasks_check(tmp_path: Path) -> None:
    make_tb1(tmp_path / "src", "hello")
    results, problems = migrate_tasks([tmp_path / "src"], tmp_path / "out")
    assert problems == [] and [r.error for r in results] == [None]
    out = tmp_path / "out" / "hello"
    assert (out / "instruction.md").read_text() == "Write hi into hello.txt.\n"
    config = tomllib.loads((out / "task.toml").read_text())
    assert config["agent"]["timeout_sec"] == 120.0
    assert config["verifier"]["timeout_sec"] == 30.0
    assert config["metadata"]["difficulty"] == "easy"
    assert config["metadata"]["category"] == "file-operations"
    assert config["metadata"]["tags"] == ["smoke"]
    assert config["metadata"]["language"] == "bash"  # unknown keys are kept, and told
    assert any("'language'" in note for note in results[0].notes)
    dockerfile = (out / "environment" / "Dockerfile").read_text()
    assert "ENV TEST_DIR=/tests" in dockerfile and "ENV GREETING=hi" in dockerfile
    assert "WORKDIR /app" in dockerfile
    assert (out / "environment" / "data" / "seed.txt").read_text() == "seed\n"
    # The standard single client collapses into the Dockerfile.
    assert not (out / "environment" / "docker-compose.yaml").exists()
    assert (out / "tests" / "test_outputs.py").is_file()
    assert (out / "tests" / "run-tests.sh").is_file()
    assert (out / "solution" / "solve.sh").stat().st_mode & 0o111
    tasks, found = check_tasks([tmp_path / "out"])
    assert found == [] and [t.name for t in tasks] == ["hello"]


def test_test_sh_writes_the_reward_from_run_tests_exit_code(tmp_path: Path) -> None:
    make_tb1(tmp_path / "src", "hello", run_tests="#!/bin/bash\nset -e\n[ -f pass ]\nexit 0\n")
    migrate_tasks([tmp_path / "src"], tmp_path / "out")
    test_sh = tmp_path / "out" / "hello" / "tests" / "test.sh"
    for present, reward, code in ((True, "1", 0), (False, "0", 1)):
        work = tmp_path / f"work-{present}"
        verifier = tmp_path / f"verifier-{present}"
        work.mkdir()
        if present:
            (work / "pass").write_text("")
        done = subprocess.run(
            ["bash", str(test_sh)],
            cwd=work,
            env={"PATH": "/usr/bin:/bin", "HARNESS_VERIFIER_DIR": str(verifier)},
            check=False,
        )
        assert done.returncode == code
        assert (verifier / "reward.txt").read_text().strip() == reward


def test_a_compose_file_with_sidecars_becomes_environment_compose_translated(
    tmp_path: Path,
) -> None:
    task = make_tb1(tmp_path / "src", "with-db", compose=SIDECAR_COMPOSE)
    (task / "db").mkdir()
    (task / "db" / "Dockerfile").write_text("FROM harness/base:bookworm\n")
    results, _ = migrate_tasks([task], tmp_path / "out")
    assert results[0].error is None, results[0]
    env = tmp_path / "out" / "with-db" / "environment"
    compose = yaml.safe_load((env / "docker-compose.yaml").read_text())
    assert set(compose["services"]) == {"main", "db"}
    assert compose["services"]["main"]["depends_on"] == ["db"]
    assert compose["services"]["db"]["image"] == "tb__db"
    assert compose["services"]["db"]["environment"] == ["LOGS=/logs"]
    assert "T_BENCH" not in (env / "docker-compose.yaml").read_text()
    assert (env / "db" / "Dockerfile").is_file()
    tasks, found = check_tasks([tmp_path / "out"])
    assert found == [] and len(tasks) == 1


def test_what_cannot_be_mapped_is_reported_per_task(tmp_path: Path) -> None:
    src = tmp_path / "src"
    make_tb1(src, "no-verifier", run_tests=None)
    make_tb1(src, "no-instruction", task_yaml={"difficulty": "easy"})
    make_tb1(src, "yaml-solution", solution=None)
    (src / "yaml-solution" / "solution.yaml").write_text(
        yaml.safe_dump([{"command": "echo hi > hello.txt", "min_timeout_sec": 1}])
    )
    make_tb1(src, "no-solution", solution=None, task_yaml={**TASK_YAML, "parser_name": "swebench"})
    make_tb1(
        src,
        "old-format",
        task_yaml={"descriptions": [{"key": "base", "description": "Old style."}]},
    )
    results, _ = migrate_tasks([src], tmp_path / "out")
    by_name = {r.source.name: r for r in results}
    assert (
        by_name["no-verifier"].error is not None and "run-tests.sh" in by_name["no-verifier"].error
    )
    assert by_name["no-instruction"].error is not None
    assert "no instruction" in by_name["no-instruction"].error
    assert not (tmp_path / "out" / "no-verifier").exists()
    solve = tmp_path / "out" / "yaml-solution" / "solution" / "solve.sh"
    assert "echo hi > hello.txt" in solve.read_text()
    notes = by_name["no-solution"].notes
    assert any("no solution.sh" in n for n in notes) and any("swebench" in n for n in notes)
    old = tmp_path / "out" / "old-format" / "instruction.md"
    assert old.read_text() == "Old style.\n"
    tasks, found = check_tasks([tmp_path / "out"])
    assert found == [] and len(tasks) == 3


def test_a_helper_tb1_supplied_at_test_time_is_named(tmp_path: Path) -> None:
    run_tests = (
        "#!/bin/bash\nsource $TEST_DIR/setup-uv-pytest.sh\nbash ${TEST_DIR}/run-uv-pytest.sh\n"
    )
    task = make_tb1(tmp_path / "src", "uv", run_tests=run_tests)
    (task / "tests" / "run-uv-pytest.sh").write_text("true\n")
    results, _ = migrate_tasks([task], tmp_path / "out")
    helper_notes = [n for n in results[0].notes if "which is not in tests/" in n]
    assert len(helper_notes) == 1 and "setup-uv-pytest.sh" in helper_notes[0]


def test_tasks_check_names_a_tb1_dir_and_the_command(tmp_path: Path) -> None:
    make_tb1(tmp_path / "src", "hello")
    for path in (tmp_path / "src", tmp_path / "src" / "hello"):
        tasks, found = check_tasks([path])
        assert tasks == [] and len(found) == 1
        message = str(found[0])
        assert "Terminal-Bench 1" in message and "harness tasks migrate" in message


MOUNTING_COMPOSE = """services:
  agent-environment:
    build:
      context: .
      dockerfile: Dockerfile
    working_dir: {work}
    volumes:
      - ./tests:{work}/tests:ro
      - ./run-tests.sh:{work}/run-tests.sh:ro
      - ./seeds:/app/seeds
      - type: bind
        source: ./runs
        target: /app/runs
      - /var/run/docker.sock:/var/run/docker.sock
    command: tail -f /dev/null
"""


def test_bind_mounts_of_the_task_files_are_mapped_not_dropped(tmp_path: Path) -> None:
    """A TB1 compose file that mounts ./tests where run-tests.sh reads them still grades.

    The verifier's files appear at the mount point only when grading starts (replacing
    whatever the agent left there); other task files are copied into the image; a missing
    source is an empty dir, as Docker makes it; a host path is reported, not mounted.
    """
    work = tmp_path / "work"
    run_tests = (
        "#!/bin/bash\nset -e\n[ -x run-tests.sh ]\n[ ! -e tests/planted.py ]\n"
        "grep -q ok tests/test_outputs.py\n"
    )
    task = make_tb1(
        tmp_path / "src", "mounts", compose=MOUNTING_COMPOSE.format(work=work), run_tests=run_tests
    )
    (task / "tests" / "test_outputs.py").write_text("# ok\n")
    (task / "run-tests.sh").chmod(0o755)
    (task / "seeds").mkdir()
    (task / "seeds" / "s.txt").write_text("s\n")
    results, _ = migrate_tasks([task], tmp_path / "out")
    assert results[0].error is None, results[0]
    out = tmp_path / "out" / "mounts"
    dockerfile = (out / "environment" / "Dockerfile").read_text()
    assert "COPY seeds /app/seeds" in dockerfile and "RUN mkdir -p /app/runs" in dockerfile
    assert (out / "environment" / "seeds" / "s.txt").is_file()
    # The verifier's files stay out of the image (the agent never sees them).
    copies = [line for line in dockerfile.splitlines() if line.startswith("COPY")]
    assert not any("tests" in line or "run-tests" in line for line in copies)
    assert not (out / "environment" / "tests").exists()
    unmounted = [n for n in results[0].notes if "not mounted" in n]
    assert len(unmounted) == 1 and "docker.sock" in unmounted[0]
    assert "seeds" not in unmounted[0] and "runs" not in unmounted[0]
    # Only the standard client and task-file mounts: it collapses into the Dockerfile.
    assert not (out / "environment" / "docker-compose.yaml").exists()
    # What the agent left at the mount point is replaced by the task's own tests.
    (work / "tests").mkdir(parents=True)
    (work / "tests" / "planted.py").write_text("import os\n")
    verifier = tmp_path / "verifier"
    done = subprocess.run(
        ["bash", str(out / "tests" / "test.sh")],
        cwd=work,
        env={"PATH": "/usr/bin:/bin", "HARNESS_VERIFIER_DIR": str(verifier)},
        check=False,
    )
    assert done.returncode == 0
    assert (verifier / "reward.txt").read_text().strip() == "1"
    assert (work / "tests" / "test_outputs.py").read_text() == "# ok\n"
    tasks, found = check_tasks([tmp_path / "out"])
    assert found == [] and len(tasks) == 1


def test_a_mount_of_the_whole_task_dir_copies_it_and_places_the_verifier(tmp_path: Path) -> None:
    compose = (
        "services:\n  sandbox:\n    build: .\n    working_dir: /app\n    volumes:\n      - .:/app\n"
    )
    task = make_tb1(tmp_path / "src", "whole", compose=compose)
    results, _ = migrate_tasks([task], tmp_path / "out")
    assert results[0].error is None, results[0]
    out = tmp_path / "out" / "whole"
    assert "COPY . /app" in (out / "environment" / "Dockerfile").read_text()
    test_sh = (out / "tests" / "test.sh").read_text()
    assert 'place "$here" /app/tests' in test_sh
    assert 'place "$here"/run-tests.sh /app/run-tests.sh' in test_sh
    # The solution is never copied into the image the agent works in.
    assert not (out / "environment" / "solution.sh").exists()


def test_a_dockerfile_that_bakes_in_verifier_files_still_finds_them(tmp_path: Path) -> None:
    """``COPY /tests/pipeline/ /app/`` is context-relative, as is ``COPY run-tests.sh``."""
    task = make_tb1(tmp_path / "src", "baked")
    (task / "tests" / "pipeline").mkdir()
    (task / "tests" / "pipeline" / "step.py").write_text("pass\n")
    (task / "Dockerfile").write_text(
        "FROM harness/base:bookworm\nWORKDIR /app\nCOPY /tests/pipeline/ /app/\n"
        "COPY --chown=root:root run-tests.sh /app/run-tests.sh\n"
    )
    results, _ = migrate_tasks([task], tmp_path / "out")
    assert results[0].error is None, results[0]
    env = tmp_path / "out" / "baked" / "environment"
    assert (env / "tests" / "pipeline" / "step.py").is_file()
    assert (env / "run-tests.sh").is_file()


def test_a_task_missing_its_verifier_and_dockerfile_names_both(tmp_path: Path) -> None:
    task = make_tb1(tmp_path / "src", "stripped", run_tests=None, compose=None)
    (task / "Dockerfile").unlink()
    results, _ = migrate_tasks([task], tmp_path / "out")
    error = results[0].error
    assert error is not None and "run-tests.sh" in error and "Dockerfile" in error
    assert not error.startswith("stripped")  # the CLI prefixes the task's name itself


def test_a_verifier_that_downloads_when_grading_is_told_to_need_the_network(
    tmp_path: Path,
) -> None:
    """TB1 graded with the network; the harness's default has none."""
    run_tests = (
        "#!/bin/bash\ncurl -LsSf https://example.invalid/uv.sh | sh\nuv pip install pytest\n"
    )
    tmpfs = STANDARD_COMPOSE + "    tmpfs:\n      - /root/.cache:size=100M\n"
    make_tb1(tmp_path / "src", "online", run_tests=run_tests, compose=tmpfs)
    make_tb1(tmp_path / "src", "offline")
    for allow, expected in ((False, {"online"}), (True, set())):
        out = tmp_path / f"out-{allow}"
        results, _ = migrate_tasks([tmp_path / "src"], out, allow_internet=allow)
        told = {r.source.name for r in results if any("--allow-internet" in n for n in r.notes)}
        assert told == expected
    (online,) = [r for r in results if r.source.name == "online"]
    tmpfs_notes = [n for n in online.notes if "tmpfs" in n]
    assert len(tmpfs_notes) == 1 and "/root/.cache:size=100M" in tmpfs_notes[0]


def test_an_empty_task_yaml_is_said_to_be_empty(tmp_path: Path) -> None:
    task = make_tb1(tmp_path / "src", "template")
    (task / "task.yaml").write_text("")
    make_tb1(tmp_path / "src", "listed")
    (tmp_path / "src" / "listed" / "task.yaml").write_text("- a\n")
    results, _ = migrate_tasks([tmp_path / "src"], tmp_path / "out")
    errors = {r.source.name: r.error for r in results}
    assert errors == {
        "listed": "task.yaml is a list, not a mapping",
        "template": "task.yaml is empty",
    }


def test_a_compose_file_with_anchors_within_the_caps_still_converts(tmp_path: Path) -> None:
    """Aliases are capped by what they expand to, not refused: compose files use them."""
    compose = "x-env: &env\n  - LOGS=/logs\n" + SIDECAR_COMPOSE.replace(
        "    environment:\n      - LOGS=${T_BENCH_CONTAINER_LOGS_PATH}\n", "    environment: *env\n"
    )
    assert "*env" in compose
    task = make_tb1(tmp_path / "src", "anchored", compose=compose)
    (task / "db").mkdir()
    (task / "db" / "Dockerfile").write_text("FROM harness/base:bookworm\n")
    results, _ = migrate_tasks([task], tmp_path / "out")
    assert results[0].error is None, results[0].error
    converted = yaml.safe_load(
        (tmp_path / "out/anchored/environment/docker-compose.yaml").read_text()
    )
    assert converted["services"]["db"]["environment"] == ["LOGS=/logs"]


def test_a_task_yaml_past_its_cap_or_with_bad_values_fails_naming_why(tmp_path: Path) -> None:
    big = make_tb1(tmp_path / "src", "big")
    (big / "task.yaml").write_text("instruction: " + "x" * (1 << 20) + "\n")
    odd = make_tb1(tmp_path / "src", "odd", task_yaml={**TASK_YAML, "max_test_timeout_sec": "x"})
    nulls = make_tb1(tmp_path / "src", "nulls", task_yaml={**TASK_YAML, "tags": [None]})
    results, _ = migrate_tasks([big, odd, nulls], tmp_path / "out")
    errors = {r.source.name: r.error or "" for r in results}
    assert "larger than 1 MiB" in errors["big"]
    assert "max_test_timeout_sec is 'x', not a number" in errors["odd"]
    assert "task.toml cannot hold" in errors["nulls"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == []
