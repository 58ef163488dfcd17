"""The library API: harness.run does what `harness run` does; resume; load_run.

Real local sandbox, real trials; the environment is observed from inside the run.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.workers import uid_base

import harness
from harness import (
    AgentConfig,
    ConfigError,
    RunConfig,
    RunEvents,
    RunStart,
    SandboxConfig,
    TasksConfig,
    TrialRecord,
    TrialStatus,
)
from harness.tasks import Task

UID_BASE = uid_base(62300)


def _config(tmp_path: Path, task: Task, **changes: Any) -> RunConfig:
    base = RunConfig(
        tasks=TasksConfig(paths=[str(task.path)]),
        agent=AgentConfig(name="command", cmd="bash -c 'echo done > answer.txt'"),
        sandbox=SandboxConfig(uid=UID_BASE, gid=UID_BASE),
        rollouts=2,
        output_dir=str(tmp_path / "runs"),
    )
    return base.model_copy(update=changes)


class _Watcher(RunEvents):
    """Looks at the harness's own environment while trials run."""

    def __init__(self) -> None:
        self.env_at_start: dict[str, str] = {}
        self.finished: list[TrialRecord] = []

    def run_started(self, start: RunStart) -> None:
        self.env_at_start = dict(os.environ)

    def trial_finished(self, record: TrialRecord, done: int, total: int) -> None:
        self.finished.append(record)


@pytest.mark.root
def test_run_hides_provider_keys_while_it_runs_and_restores_them(
    tmp_path: Path, make_task: Callable[..., Task], monkeypatch: pytest.MonkeyPatch
) -> None:
    key = f"sk-api-{secrets.token_hex(12)}"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    watcher = _Watcher()
    outcome = harness.run(_config(tmp_path, make_task()), events=watcher)
    assert "OPENAI_API_KEY" not in watcher.env_at_start, "a trial could have inherited the key"
    assert os.environ["OPENAI_API_KEY"] == key  # restored
    assert outcome.exit_code == 0 and len(outcome.records) == 2
    assert [r.id for r in watcher.finished] == sorted(r.id for r in outcome.records)
    assert all(r.status is TrialStatus.COMPLETED and r.reward == 1.0 for r in outcome.records)
    files = [p for p in outcome.run_dir.rglob("*") if p.is_file()]
    assert not [p for p in files if key.encode() in p.read_bytes()]


def test_a_config_holding_a_provider_key_is_refused_before_anything_is_written(
    tmp_path: Path, make_task: Callable[..., Task], monkeypatch: pytest.MonkeyPatch
) -> None:
    key = f"sk-api-{secrets.token_hex(12)}"
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    config = _config(tmp_path, make_task(), agent=AgentConfig(name="command", cmd=f"a {key}"))
    with pytest.raises(ConfigError, match=r"config key\(s\) agent.cmd hold a provider credential"):
        harness.run(config)
    assert os.environ["ANTHROPIC_API_KEY"] == key
    assert not (tmp_path / "runs").exists()


@pytest.mark.root
def test_load_run_reads_back_typed_records_and_summary_and_resume_continues(
    tmp_path: Path, make_task: Callable[..., Task]
) -> None:
    config = _config(tmp_path, make_task(), run_name="api-run")
    outcome = harness.run(config)
    results = harness.load_run(outcome.run_dir)
    assert results.config == config
    assert results.records == outcome.records
    assert results.summary == outcome.summary and results.summary.mean_reward == 1.0
    assert results.status is not None and results.status["state"] == "finished"

    again = harness.resume(outcome.run_dir, concurrency=4)
    assert again.nothing_to_resume and again.exit_code == 0

    # A trial whose record is lost (a crash) is run again by resume; the other is kept.
    trials = outcome.run_dir / "trials.jsonl"
    first = trials.read_text().splitlines()[0]
    trials.write_text(first + "\n")
    resumed = harness.resume(outcome.run_dir, rerun=["agent_error"])
    assert resumed.invocation == 2 and len(resumed.records) == 2
    assert resumed.resume is not None and len(resumed.resume.kept) == 1

    with pytest.raises(ConfigError, match="rollouts: saved 2, given 3"):
        harness.resume(outcome.run_dir, config=config.model_copy(update={"rollouts": 3}))
