"""A loaded task, and its views: the task itself, or one step of a multi-step task.

A :class:`Task` is what :mod:`harness.tasks.loader` returns once a task dir is valid. Its
properties say where the task's parts are and what applies to what runs now: in a step's
view (:meth:`Task.views`), the step's instruction, solution, users, timeouts, healthcheck
and artifacts, over the task's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from harness.tasks.model import Artifact, CollectHook, Healthcheck, TaskConfig
from harness.tasks.paths import SOLVE_SCRIPT, TEST_SCRIPT, dir_or_none, file_or_none
from harness.tasks.steps import Step
from sandbox.plugin import TaskFacts

__all__ = ["Task"]


@dataclass(frozen=True)
class Task:
    """A loaded, validated task.

    Equality and hashing use ``name``, ``key``, ``hash`` and ``path``; ``hash`` already covers
    the config and the instruction.

    Attributes:
        name: ``[task].name``, else the task dir's name.
        key: Stable identifier that goes into every record: ``[task].name`` when set, else
            the task dir's path relative to its task set root, in posix form (for a task dir
            given on its own, the root is its parent, so the key is the dir's name either
            way).
        hash: sha256 hex digest of the task's content; see :func:`content_hash`.
        path: Absolute path of the task dir.
        config: The validated ``task.toml``.
        instruction: The text of ``instruction.md`` (of the step, in a step's view; empty
            for a multi-step task itself).
        steps: The steps of a multi-step task (empty for a single-step task).
        step: In a step's view (:meth:`views`), the step; its instruction, solution and
            agent settings are the view's.
    """

    name: str
    key: str
    hash: str
    path: Path
    config: TaskConfig = field(compare=False, repr=False)
    instruction: str = field(compare=False, repr=False)
    steps: tuple[Step, ...] = field(default=(), compare=False, repr=False)
    step: Step | None = field(default=None, compare=False, repr=False)

    def views(self) -> list[Task]:
        """What runs, in order: one view per step of a multi-step task, else the task."""
        if not self.steps:
            return [self]
        return [
            dataclasses.replace(self, instruction=step.instruction, step=step)
            for step in self.steps
        ]

    def facts(self) -> TaskFacts:
        """What a sandbox backend is told about this task before the run."""
        env = self.config.environment
        return TaskFacts(
            key=self.key,
            name=self.name,
            path=self.path,
            dockerfile=self.dockerfile,
            compose_file=self.compose_file,
            docker_image=env.docker_image,
            cpus=env.cpus,
            memory_mb=env.memory_mb,
            gpus=env.gpus,
            build_timeout_sec=env.build_timeout_sec,
            verifier_user=self.config.verifier.user,
            agent_users=tuple(view.agent_user for view in self.views()),
        )

    @property
    def artifacts(self) -> list[Artifact]:
        """Paths collected after the task (or this step): the task's, then the step's."""
        extra = self.step.config.artifacts if self.step is not None else []
        return [*self.config.artifacts, *extra]

    @property
    def collect_hooks(self) -> list[CollectHook]:
        """``[[verifier.collect]]`` hooks run before this grading: the task's, the step's."""
        extra = self.step.config.verifier.collect if self.step is not None else []
        return [*self.config.verifier.collect, *extra]

    @property
    def healthcheck(self) -> Healthcheck | None:
        """The step's own healthcheck (run before its agent), in a step's view."""
        return self.step.config.healthcheck if self.step is not None else None

    @property
    def agent_user(self) -> str | int | None:
        """The user the agent runs as (the step's, else ``[agent].user``)."""
        if self.step is not None and self.step.config.agent.user is not None:
            return self.step.config.agent.user
        return self.config.agent.user

    @property
    def verifier_user(self) -> str | int | None:
        """The user the verifier runs as (the step's, else ``[verifier].user``)."""
        if self.step is not None and self.step.config.verifier.user is not None:
            return self.step.config.verifier.user
        return self.config.verifier.user

    @property
    def verifier_env(self) -> dict[str, str]:
        """The verifier's env table (the task's, then the step's), unresolved."""
        extra = self.step.config.verifier.env if self.step is not None else {}
        return {**self.config.verifier.env, **extra}

    @property
    def verifier_mode(self) -> str:
        """``shared`` or ``separate``: where this task's (or step's) verifier runs."""
        return self.config.verifier_mode(self.step.config if self.step is not None else None)

    @property
    def verifier_context(self) -> Path:
        """The build context of a separate verifier (the step's ``tests/``, else the task's)."""
        if self.step is not None and self.step.tests_dir is not None:
            return self.step.tests_dir
        return self.tests_dir

    @property
    def grading_test_script(self) -> str:
        """The verifier script, relative to ``tests/`` once the dirs are merged."""
        return "test.sh"

    @property
    def tests_dir(self) -> Path:
        """The ``tests/`` dir (copied into the sandbox only for grading)."""
        return self.path / "tests"

    @property
    def test_script(self) -> Path:
        """The verifier script, ``tests/test.sh`` (always present in a loaded task)."""
        return self.path / TEST_SCRIPT

    @property
    def test_dirs(self) -> list[Path]:
        """The dirs copied to the tests dir for grading, in order (later files win).

        The task's shared ``tests/`` (when present), then the step's own ``tests/``.
        """
        dirs = [d for d in (dir_or_none(self.tests_dir),) if d is not None]
        if self.step is not None and self.step.tests_dir is not None:
            dirs.append(self.step.tests_dir)
        return dirs

    @property
    def solution_dir(self) -> Path | None:
        """The ``solution/`` dir (the step's, in a step's view), or None when absent."""
        if self.step is not None:
            return self.step.solution_dir
        return dir_or_none(self.path / "solution")

    @property
    def solve_script(self) -> Path | None:
        """The reference ``solution/solve.sh`` (the step's, in a step's view), or None."""
        if self.step is not None:
            return self.step.solve_script
        return file_or_none(self.path / SOLVE_SCRIPT)

    @property
    def workspace_dir(self) -> Path | None:
        """The optional ``workspace/`` dir seeded into the trial workspace, or None."""
        return dir_or_none(self.path / "workspace")

    @property
    def environment_dir(self) -> Path | None:
        """The ``environment/`` dir (the image build context), or None when absent."""
        return dir_or_none(self.path / "environment")

    @property
    def dockerfile(self) -> Path | None:
        """``environment/Dockerfile``, or None when absent."""
        return file_or_none(self.path / "environment" / "Dockerfile")

    @property
    def compose_file(self) -> Path | None:
        """``environment/docker-compose.yaml`` (sidecars), or None when absent."""
        return file_or_none(self.path / "environment" / "docker-compose.yaml")

    @property
    def category(self) -> str | None:
        """``[metadata].category`` when it is a string, else None."""
        value = self.config.metadata.get("category")
        return value if isinstance(value, str) else None

    @property
    def difficulty(self) -> str | None:
        """``[metadata].difficulty`` when it is a string, else None."""
        value = self.config.metadata.get("difficulty")
        return value if isinstance(value, str) else None

    @property
    def agent_timeout_sec(self) -> float | None:
        """The step's agent timeout, else ``[agent].timeout_sec`` (None means no limit)."""
        if self.step is not None and self.step.config.agent.timeout_sec is not None:
            return self.step.config.agent.timeout_sec
        return self.config.agent.timeout_sec

    @property
    def verifier_timeout_sec(self) -> float:
        """The step's verifier timeout, else ``[verifier].timeout_sec``."""
        if self.step is not None and self.step.config.verifier.timeout_sec is not None:
            return self.step.config.verifier.timeout_sec
        return self.config.verifier.timeout_sec

    @property
    def unknown_keys(self) -> list[str]:
        """Dotted paths of the ``task.toml`` keys this harness does not recognise."""
        return self.config.unknown_keys()
