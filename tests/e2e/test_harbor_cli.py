"""The CLI on Harbor task sets: warnings and errors of ``tasks check``, ``--skip-invalid``."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def test_check_warns_about_unknown_keys_and_refuses_unsupported_ones(
    e2e: Any, tmp_path: Path
) -> None:
    fine = e2e.make_task(tmp_path / "set", "fine", toml="[environment]\nshiny_new_key = 1\n")
    result = e2e.run("tasks", "check", fine)
    assert result.code == 0, result
    assert "1 task(s) OK" in result.stdout
    assert result.error_lines() == [
        f"warning: {fine / 'task.toml'}: environment.shiny_new_key: unknown key (ignored; a "
        "typo, or a newer Harbor key this harness does not know)"
    ], result
    toml = '[environment]\nallow_internet = false\nnetwork_mode = "public"\n'
    e2e.make_task(tmp_path / "set", "policy", toml=toml)
    result = e2e.run("tasks", "check", tmp_path / "set")
    assert result.code == 2, result
    assert "allow_internet = false (network_mode = 'no-network') contradicts" in result.stderr


def test_skip_invalid_runs_the_valid_tasks_and_lists_the_others(e2e: Any, tmp_path: Path) -> None:
    root = tmp_path / "set"
    e2e.make_task(root, "good")
    e2e.make_task(root, "broken", instruction=None)
    refused = e2e.run("run", root, "--agent", "nop", "-o", tmp_path / "a", "--display", "none")
    assert refused.code == 2 and "missing instruction.md" in refused.stderr, refused
    e2e.assert_nothing_created(tmp_path / "a")
    out = tmp_path / "b"
    result = e2e.run(
        "run", root, "--agent", "nop", "--skip-invalid", "-o", out, "--display", "none"
    )
    assert result.code == 0, result
    assert f"skipped invalid task: {root / 'broken'}: missing instruction.md" in result.stderr
    records = e2e.read_run(e2e.only_run_dir(out)).records
    assert [r["task"]["name"] for r in records] == ["e2e/good"]


def test_a_task_reading_a_taken_credential_stops_the_run(e2e: Any, tmp_path: Path) -> None:
    task = e2e.make_task(
        tmp_path / "set", "leaky", toml='[environment]\nenv = { K = "${OPENAI_API_KEY}" }\n'
    )
    result = e2e.run(
        "run",
        task,
        "--agent",
        "nop",
        "-o",
        tmp_path / "runs",
        "--display",
        "none",
        env={"OPENAI_API_KEY": "sk-canary-not-real"},
    )
    assert result.code == 2, result
    assert "${OPENAI_API_KEY} is a provider credential" in result.stderr
    assert "sk-canary-not-real" not in result.stdout + result.stderr
    e2e.assert_nothing_created(tmp_path / "runs")
