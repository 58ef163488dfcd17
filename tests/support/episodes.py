"""Shared pieces of the episode tests: the example task, run configs, a hostile solver."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import harness
from harness.config import AgentConfig, EnvConfig, RunConfig, SandboxConfig, TasksConfig
from harness.records import TrialRecord
from support.workers import WORKER, uid_base

#: The local sandbox's uid range for the episode tests (no other test file uses it).
UID_BASE = uid_base(62800)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"
HELLO = 'printf "Hello, world!\\n" > hello.txt'
#: Where a run of :func:`episode_config` is (under its ``tmp_path``); a name of this
#: worker's, as a run's name is what its sandboxes answer to on the host.
RUN_NAME = f"episodes-{WORKER}"

#: A solver that hunts for the canary everywhere it can reach and keeps what it finds.
HUNT = (
    HELLO + "; ( grep -rasI --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev "
    "-e CANARY / ; cat /proc/*/environ /proc/*/cmdline; env ) > found.txt 2>/dev/null; "
    'echo done > "$HARNESS_REPLY_FILE"; true'
)


def episode_config(
    tmp_path: Path,
    task: Path,
    cmd: str,
    env: dict[str, Any],
    *,
    backend: str = "local",
    **more: Any,
) -> RunConfig:
    """A run of ``task`` with a command agent running ``cmd`` under the env ``env``."""
    return RunConfig(
        tasks=TasksConfig(paths=[str(task)]),
        agent=AgentConfig(name="command", cmd=f"bash -c '{cmd}'"),
        sandbox=SandboxConfig(backend=backend, uid=UID_BASE, gid=UID_BASE),
        env=EnvConfig.model_validate(env),
        output_dir=str(tmp_path / "runs"),
        run_name=RUN_NAME,
        **more,
    )


def run_dir(config: RunConfig) -> Path:
    """The run dir of a config made by :func:`episode_config`."""
    return Path(config.output_dir, RUN_NAME)


def only(outcome: harness.RunOutcome) -> TrialRecord:
    """The one record of a run of one task."""
    assert len(outcome.records) == 1, outcome.records
    return outcome.records[0]


def hostile_task(tmp_path: Path, canary: str) -> Path:
    """hello-file with ``canary`` in the judge's rubric and in the simulated user's goal."""
    task = tmp_path / "hello-file"
    shutil.copytree(EXAMPLES / "hello-file", task)
    (task / "judge" / "rubric.md").write_text(f"Secret rubric {canary}: score 1 for hello.txt.\n")
    (task / "user" / "goal.md").write_text(f"Secret goal {canary}: get hello.txt.\n")
    return task
