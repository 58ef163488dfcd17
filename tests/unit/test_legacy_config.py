"""A config.toml written by harness 0.1.0 (flat keys) loads into the sections and resumes.

The fixture (tests/fixtures/legacy-run-0.1.0) was written by the code before config
sections existed; see its README.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from harness.config import ConfigError, load_saved_config, resume_config, save_config
from sandbox.options import DEFAULT_SANDBOX_GID, DEFAULT_SANDBOX_UID

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "legacy-run-0.1.0"


def test_the_fixture_is_a_flat_0_1_config() -> None:
    text = (FIXTURE / "run" / "config.toml").read_text()
    assert '"agent" = "command"' in text and '"agent_cmd" = ' in text
    assert '"task_names" = ["copy-*"]' in text and '"sandbox_uid" = 65532' in text


def test_a_0_1_config_loads_into_the_sections(
    tmp_path: Path, legacy_run: Callable[[Path], Path]
) -> None:
    run_dir = legacy_run(tmp_path)
    config = load_saved_config(run_dir)
    assert config.agent.name == "command"
    assert config.agent.cmd == "cp {instruction_file} {workspace}/answer.txt"
    assert config.agent.kwargs == {}
    assert config.sandbox.backend == "local" and config.sandbox.runtime is None
    # 0.1's default ids held nobody (65534): they load as today's default.
    assert (config.sandbox.uid, config.sandbox.gid) == (DEFAULT_SANDBOX_UID, DEFAULT_SANDBOX_GID)
    assert config.tasks.paths == [str(tmp_path / "tasks")]
    assert config.tasks.names == ["copy-*"] and config.tasks.categories == ["fixture"]
    assert config.tasks.exclude == [] and not config.tasks.shuffle and config.tasks.seed == 0
    assert config.rollouts == 2 and config.concurrency == 1 and config.threshold == 0.5
    assert config.retry.max_retries == 1 and config.budget.max_calls == 3
    assert config.output_dir == str(tmp_path / "runs") and config.run_name == "legacy"


def test_a_0_1_run_dir_resumes_with_free_keys_and_flat_options(
    tmp_path: Path, legacy_run: Callable[[Path], Path]
) -> None:
    run_dir = legacy_run(tmp_path)
    saved = load_saved_config(run_dir)
    faster = resume_config(run_dir, options={"concurrency": 4})
    assert faster.concurrency == 4 and faster.model_copy(update={"concurrency": 1}) == saved
    # The same values given again, flat as 0.1 spelled them or in sections, agree.
    assert resume_config(run_dir, options={"agent": "command", "task_names": ["copy-*"]}) == saved
    assert resume_config(run_dir, sets=["agent.name=command", "tasks.seed=0"]) == saved
    with pytest.raises(ConfigError) as info:
        resume_config(run_dir, sets=["agent_cmd=echo"])
    saved_cmd = '"cp {instruction_file} {workspace}/answer.txt"'
    assert f'agent.cmd: saved {saved_cmd}, given "echo"' in str(info.value)


def test_a_resaved_0_1_config_is_written_in_sections_and_reads_back(
    tmp_path: Path, legacy_run: Callable[[Path], Path]
) -> None:
    config = load_saved_config(legacy_run(tmp_path))
    again = tmp_path / "again"
    again.mkdir()
    save_config(config, again / "config.toml")
    text = (again / "config.toml").read_text()
    assert '["run"."agent"]' in text and '"agent_cmd"' not in text
    assert load_saved_config(again) == config


def test_a_flat_expose_of_the_current_0_1_code_loads_into_the_sandbox_section(
    tmp_path: Path, legacy_run: Callable[[Path], Path]
) -> None:
    run_dir = legacy_run(tmp_path)
    path = run_dir / "config.toml"
    text = path.read_text()
    path.write_text(
        text.replace(
            '"sandbox_gid" = 65532\n', '"sandbox_gid" = 65532\n"expose" = ["/opt/tools"]\n'
        )
    )
    assert load_saved_config(run_dir).sandbox.expose == ["/opt/tools"]
