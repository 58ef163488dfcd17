"""End-to-end: ``harness tasks list`` and ``harness tasks check`` as subprocesses."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def test_list_shows_the_four_examples(e2e: Any) -> None:
    result = e2e.run("tasks", "list", e2e.EXAMPLES)
    assert result.code == 0, result
    rows = [line for line in result.stdout.splitlines() if "harness-examples/" in line]
    assert len(rows) == 4, result
    for key in e2e.EXAMPLE_KEYS:
        assert sum(key in row for row in rows) == 1, f"{key} not listed once:\n{result}"
    assert result.error_lines() == []


def test_check_accepts_the_examples(e2e: Any) -> None:
    result = e2e.run("tasks", "check", e2e.EXAMPLES)
    assert result.code == 0, result
    assert "4 task(s) OK" in result.stdout


def test_check_accepts_a_single_task_dir(e2e: Any) -> None:
    result = e2e.run("tasks", "check", e2e.EXAMPLES / "hello-file")
    assert result.code == 0, result
    assert "1 task(s) OK" in result.stdout


def _broken_set(e2e: Any, parent: Path) -> Path:
    root = parent / "broken"
    e2e.make_task(root, "fine")
    e2e.make_task(root, "no-instruction", instruction=None)
    e2e.make_task(root, "wrong-type", toml='[agent]\ntimeout_sec = "ten"\n')
    return root


def test_check_lists_every_problem(e2e: Any, tmp_path: Path) -> None:
    result = e2e.run("tasks", "check", _broken_set(e2e, tmp_path))
    assert result.code == 2, result
    err = result.stderr
    assert "no-instruction" in err and "instruction.md" in err, result
    assert "wrong-type" in err and "task.toml" in err and "agent.timeout_sec" in err, result
    assert "2 problem(s)" in err, result
    problem_lines = [line for line in result.error_lines() if line.startswith("error:")]
    assert len(problem_lines) == 2, result
    assert "Traceback" not in err


def test_check_lists_several_problems_of_one_task(e2e: Any, tmp_path: Path) -> None:
    task = e2e.make_task(tmp_path, "twice-broken", instruction=None, test_sh=None)
    result = e2e.run("tasks", "check", task)
    assert result.code == 2, result
    assert "instruction.md" in result.stderr and "tests/test.sh" in result.stderr, result


def test_list_flags_broken_tasks(e2e: Any, tmp_path: Path) -> None:
    result = e2e.run("tasks", "list", _broken_set(e2e, tmp_path))
    assert result.code == 2, result
    assert "e2e/fine" in result.stdout
    assert "no-instruction" in result.stderr and "agent.timeout_sec" in result.stderr, result


def test_check_reports_duplicate_keys(e2e: Any, tmp_path: Path) -> None:
    root = tmp_path / "dupes"
    same = '[task]\nname = "e2e/same"\n'
    e2e.make_task(root, "one", toml=same)
    e2e.make_task(root, "two", toml=same)
    result = e2e.run("tasks", "check", root)
    assert result.code == 2, result
    assert "duplicate" in result.stderr and "e2e/same" in result.stderr, result


def test_unknown_keys_are_kept_not_fatal(e2e: Any, tmp_path: Path) -> None:
    toml = '[task]\nname = "e2e/extra"\nfancy = 1\n\n[agent]\ntimeout_sec = 30\nmood = "calm"\n'
    task = e2e.make_task(tmp_path, "extra", toml=toml)
    result = e2e.run("tasks", "check", task)
    assert result.code == 0, result
    assert "agent.mood" in result.stderr and "task.fancy" in result.stderr, result
    out = tmp_path / "out"
    run = e2e.run("run", task, "--agent", "oracle", "-o", out, "--json")
    assert run.code == 0, run
    assert run.json()["mean_reward"] == 1.0


def test_check_missing_path(e2e: Any, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    result = e2e.run("tasks", "check", missing)
    assert result.code == 2, result
    assert "nowhere" in result.stderr and "does not exist" in result.stderr, result
