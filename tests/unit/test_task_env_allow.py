"""``${VAR}`` reads only what the run allows (``--task-env``, ``tasks.env_allow``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config import resolve_config
from harness.errors import ConfigError, UsageError
from harness.tasks import load_task
from harness.tasks.runnable import resolve_tasks_env
from sandbox.credentials import CredentialStore


def _task(tmp_path: Path, env: str) -> Path:
    root = tmp_path / "t"
    (root / "tests").mkdir(parents=True)
    (root / "task.toml").write_text(f"[environment]\nenv = {{ {env} }}\n")
    (root / "instruction.md").write_text("x\n")
    (root / "tests" / "test.sh").write_text("")
    return root


def test_an_unlisted_variable_takes_its_default_or_names_the_option(tmp_path: Path) -> None:
    task = load_task(_task(tmp_path, 'A = "${AWS_SECRET_ACCESS_KEY}", B = "${GITHUB_TOKEN:-no}"'))
    environ = {"AWS_SECRET_ACCESS_KEY": "aws-canary", "GITHUB_TOKEN": "gh-canary"}
    with pytest.raises(UsageError, match="--task-env AWS_SECRET_ACCESS_KEY"):
        resolve_tasks_env([task], environ, CredentialStore())
    (resolved,) = resolve_tasks_env(
        [task], environ, CredentialStore(), allowed=["AWS_SECRET_ACCESS_KEY"]
    )
    assert resolved.config.environment.env == {"A": "aws-canary", "B": "no"}


def test_a_provider_key_is_refused_even_when_allowed(tmp_path: Path) -> None:
    task = load_task(_task(tmp_path, 'K = "${OPENAI_API_KEY}"'))
    store = CredentialStore()
    store.set("OPENAI_API_KEY", "sk-canary")
    with pytest.raises(UsageError, match="provider credential"):
        resolve_tasks_env([task], {}, store, allowed=["OPENAI_API_KEY"])


def test_env_allow_is_a_list_of_variable_names() -> None:
    config = resolve_config(options={"tasks": {"paths": ["x"], "env_allow": ["B", "A", "B"]}})
    assert config.tasks.env_allow == ["A", "B"]
    with pytest.raises(ConfigError, match="not an environment variable name"):
        resolve_config(options={"tasks": {"paths": ["x"], "env_allow": ["A=1"]}})
