"""Find, load, validate and fingerprint task directories (docs/tasks.md, docs/harbor.md).

A *task dir* holds ``task.toml``, ``instruction.md`` and ``tests/test.sh`` (plus optional
``environment/``, ``solution/`` and ``workspace/``); a multi-step task has
``steps/<name>/instruction.md`` for each of its ``[[steps]]`` instead of ``instruction.md``,
and a task whose verifier runs in a separate container has ``tests/Dockerfile``. A *task
set* is a folder whose direct children are task dirs. Every path handed to :func:`discover`,
:func:`load_tasks` or :func:`check_tasks` is either one or the other; task sets are not
searched recursively.

Every problem is reported as a :class:`TaskError` that names the file (or task dir) and,
for config errors, the dotted field, on one line.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.errors import TaskError, TaskSetError
from harness.tasks.env_templates import check_templates
from harness.tasks.hashing import content_hash
from harness.tasks.limits import MAX_INSTRUCTION_BYTES, read_task_bytes
from harness.tasks.links import link_problems
from harness.tasks.migrate_tb1 import is_tb1_task_dir
from harness.tasks.model import TaskConfig
from harness.tasks.paths import (
    INSTRUCTION_MD,
    SOLVE_SCRIPT,
    STEPS_DIR,
    TASK_TOML,
    TEST_SCRIPT,
)
from harness.tasks.services import service_problems
from harness.tasks.steps import Step
from harness.tasks.task import Task
from sandbox.docker.compose_check import compose_file_problems

__all__ = [
    "TASK_TOML",
    "INSTRUCTION_MD",
    "TEST_SCRIPT",
    "SOLVE_SCRIPT",
    "Task",
    "TaskError",
    "TaskSetError",
    "check_tasks",
    "content_hash",
    "discover",
    "is_task_dir",
    "load_task",
    "load_tasks",
    "taskset_name",
]

_REPR_LIMIT = 60


def is_task_dir(path: Path) -> bool:
    """Tell whether ``path`` is a task dir, i.e. a directory holding ``task.toml``.

    Args:
        path: Any path.

    Returns:
        True when ``path/task.toml`` is a file.
    """
    return Path(path).is_dir() and (Path(path) / TASK_TOML).is_file()


def load_task(path: Path, root: Path | None = None) -> Task:
    """Load and validate one task dir.

    Args:
        path: The task dir.
        root: The task set root the key is relative to; defaults to ``path``'s parent.

    Returns:
        The loaded task.

    Raises:
        TaskError: The first problem found (use :func:`check_tasks` to get all of them).
    """
    task, problems = _inspect(Path(path), root)
    if problems:
        raise problems[0]
    assert task is not None
    return task


def discover(paths: Sequence[Path]) -> list[Path]:
    """Expand task dirs and task sets into a list of task dirs.

    Each path is either a task dir (taken as is) or a folder whose direct children include
    task dirs (a task set; only one level is searched, and children without ``task.toml``
    are ignored). Paths keep the order given; a task set's tasks are sorted by name. A task
    dir reached twice (e.g. through its set and on its own) is listed once.

    Args:
        paths: Task dirs and/or task sets.

    Returns:
        Task dir paths, built from the paths given (not resolved).

    Raises:
        TaskError: A path does not exist, is not a directory, or holds no task dirs.
        ValueError: ``paths`` is empty.
    """
    dirs, problems = _discover(paths)
    if problems:
        raise problems[0]
    return dirs


def check_tasks(paths: Sequence[Path]) -> tuple[list[Task], list[TaskError]]:
    """Load every task under ``paths`` and collect every problem instead of stopping.

    A task dir can yield several problems (e.g. missing ``instruction.md`` and missing
    ``tests/test.sh``, or several bad fields). Two tasks with the same key are a problem
    too; the first one is kept.

    Args:
        paths: Task dirs and/or task sets, as for :func:`discover`.

    Returns:
        The tasks that loaded cleanly, and all problems found, both in discovery order.

    Raises:
        ValueError: ``paths`` is empty.
    """
    dirs, problems = _discover(paths)
    tasks: list[Task] = []
    by_key: dict[str, Task] = {}
    for task_dir in dirs:
        task, task_problems = _inspect(task_dir, task_dir.parent)
        problems.extend(task_problems)
        if task is None:
            continue
        first = by_key.get(task.key)
        if first is not None:
            named = task.config.task.name is not None
            problems.append(
                TaskError(
                    task_dir / TASK_TOML if named else task_dir,
                    f"duplicate task key {task.key!r} (also used by {first.path})",
                    field="task.name" if named else None,
                )
            )
            continue
        by_key[task.key] = task
        tasks.append(task)
    return tasks, problems


def load_tasks(paths: Sequence[Path]) -> list[Task]:
    """Load every task under ``paths``, failing if anything is wrong.

    Args:
        paths: Task dirs and/or task sets, as for :func:`discover`.

    Returns:
        The tasks, in discovery order.

    Raises:
        TaskSetError: One or more problems; all of them are listed.
        ValueError: ``paths`` is empty.
    """
    tasks, problems = check_tasks(paths)
    if problems:
        raise TaskSetError(problems)
    return tasks


def taskset_name(paths: Sequence[Path]) -> str:
    """Name a task set after the folders given.

    Each path contributes its (resolved) final component, sanitised to ``[A-Za-z0-9._-]``
    (other runs of characters become ``-``); several names are joined with ``+``.

    Args:
        paths: The paths given to :func:`discover`.

    Returns:
        E.g. ``"tasks"`` for ``examples/tasks``, ``"set-a+set-b"`` for two sets.

    Raises:
        ValueError: ``paths`` is empty.
    """
    if not paths:
        raise ValueError("no task paths given")
    return "+".join(_sanitize(Path(path).resolve().name) for path in paths)


# --------------------------------------------------------------------------- internals


def _inspect(path: Path, root: Path | None) -> tuple[Task | None, list[TaskError]]:
    """Load one task dir, collecting every problem rather than stopping at the first."""
    if not path.exists():
        return None, [TaskError(path, "task directory does not exist")]
    if not path.is_dir():
        return None, [TaskError(path, "not a directory (expected a task dir)")]

    problems: list[TaskError] = link_problems(path)
    compose = path / "environment" / "docker-compose.yaml"
    if compose.is_file() and path.resolve() in compose.resolve().parents:
        # Hostile input: judged by allowlist before anything (compose included) reads it;
        # a link leaving the task is never read (it is link_problems' refusal).
        problems += [TaskError(compose, line) for line in compose_file_problems(compose, path)]
    config, multi_step = _read_config(path, problems)
    steps: list[Step] = []
    instruction: str | None = ""
    if multi_step:
        if config is not None:
            steps = _read_steps(path, config, problems)
    else:
        instruction = _read_instruction(path / INSTRUCTION_MD, path, problems)
    if config is not None:
        _check_config(path, config, problems)
    elif not multi_step and not (path / TEST_SCRIPT).is_file():
        problems.append(TaskError(path, f"missing {TEST_SCRIPT}"))
    if problems or config is None or instruction is None:
        return None, problems

    try:
        digest = content_hash(path, config)
    except OSError as exc:
        return None, [TaskError(path, f"cannot hash task content: {exc}")]

    absolute = path.resolve()
    name = config.task.name or absolute.name
    return (
        Task(
            name=name,
            key=config.task.name or _relative_key(absolute, root),
            hash=digest,
            path=absolute,
            config=config,
            instruction=instruction,
            steps=tuple(
                dataclasses.replace(step, path=absolute / STEPS_DIR / step.name) for step in steps
            ),
        ),
        [],
    )


def _check_config(path: Path, config: TaskConfig, problems: list[TaskError]) -> None:
    """Problems of a valid config: keys not implemented, templates, missing test files."""
    toml_path = path / TASK_TOML
    for key, reason in config.unsupported_keys():
        problems.append(TaskError(toml_path, f"not supported: {reason}", field=key))
    for key, message in service_problems(path, config):
        problems.append(TaskError(toml_path, message, field=key))
    tables = {
        "environment.env": config.environment.env,
        "verifier.env": config.verifier.env,
        "solution.env": config.solution.env,
    }
    for index, step in enumerate(config.steps or []):
        tables[f"steps[{index}].verifier.env"] = step.verifier.env
    for where, table in tables.items():
        for message in check_templates(table, where):
            field_name, _, text = message.partition(": ")
            problems.append(TaskError(toml_path, text, field=field_name))
    if config.environment.os == "windows":
        # Said before the tests' files: a Windows task's tests are not tests/test.sh.
        problems.append(
            TaskError(
                toml_path,
                '"windows" is not supported: the harness runs Linux containers only (Harbor '
                "runs Windows containers on a Windows Docker engine); run this task there",
                field="environment.os",
            )
        )
        return
    if config.steps:
        return  # each step's tests were checked with the step
    _check_tests(path, path / "tests", config.verifier_mode(), None, problems)


def _check_tests(
    task_dir: Path,
    context: Path,
    mode: str,
    step_test: Path | None,
    problems: list[TaskError],
    missing: str = f"missing {TEST_SCRIPT}",
) -> None:
    """The verifier's files: a test script (shared verifier) or a Dockerfile (separate)."""
    if mode == "separate":
        if not (context / "Dockerfile").is_file():
            rel = (context / "Dockerfile").relative_to(task_dir).as_posix()
            problems.append(
                TaskError(
                    task_dir,
                    f"missing {rel} (a separate verifier's image is built from "
                    f"{context.relative_to(task_dir).as_posix()}/ and holds /tests/test.sh)",
                )
            )
        return
    if step_test is None and not (task_dir / TEST_SCRIPT).is_file():
        problems.append(TaskError(task_dir, missing))


def _read_steps(path: Path, config: TaskConfig, problems: list[TaskError]) -> list[Step]:
    """Each ``[[steps]]`` entry's dir, instruction and test script."""
    steps = []
    for index, entry in enumerate(config.steps or []):
        step_dir = path / STEPS_DIR / entry.name
        rel = f"{STEPS_DIR}/{entry.name}"
        if not step_dir.is_dir():
            problems.append(TaskError(path, f"missing {rel}/ (step {entry.name!r})"))
            continue
        text = _read_instruction(step_dir / INSTRUCTION_MD, step_dir, problems)
        step = Step(index=index, path=step_dir, instruction=text or "", config=entry)
        context = step.tests_dir or path / "tests"
        _check_tests(
            path,
            context,
            config.verifier_mode(entry),
            step.test_script,
            problems,
            missing=f"missing {rel}/tests/test.sh or the shared {TEST_SCRIPT}",
        )
        if text is not None:
            steps.append(step)
    return steps


def _read_config(task_dir: Path, problems: list[TaskError]) -> tuple[TaskConfig | None, bool]:
    """Parse and validate ``task.toml``; append problems and return None on failure.

    Returns:
        The config (None on failure) and whether the document declares ``[[steps]]``
        (known even when the config is invalid, so the right files are asked for).
    """
    toml_path = task_dir / TASK_TOML
    if not toml_path.is_file():
        problems.append(TaskError(task_dir, f"missing {TASK_TOML}"))
        return None, False
    try:
        raw = tomllib.loads(toml_path.read_bytes().decode("utf-8"))
    except OSError as exc:
        problems.append(TaskError(toml_path, f"cannot read: {exc.strerror or exc}"))
        return None, False
    except UnicodeDecodeError as exc:
        problems.append(TaskError(toml_path, f"not valid UTF-8 (byte {exc.start})"))
        return None, False
    except tomllib.TOMLDecodeError as exc:
        problems.append(TaskError(toml_path, f"invalid TOML: {exc}"))
        return None, False
    multi_step = "steps" in raw
    try:
        return TaskConfig.model_validate(raw), multi_step
    except ValidationError as exc:
        problems.extend(_validation_problems(toml_path, raw, exc))
        return None, multi_step


def _validation_problems(
    toml_path: Path, raw: dict[str, Any], exc: ValidationError
) -> list[TaskError]:
    """Turn a pydantic error into one :class:`TaskError` per offending field."""
    problems: list[TaskError] = []
    seen: set[str] = set()
    for error in exc.errors(include_url=False):
        loc = [str(part) for part in error["loc"]]
        if loc[:1] == ["schema_version"] and "schema_version" not in raw and "version" in raw:
            loc[0] = "version"  # the legacy key the user actually wrote
        dotted = ".".join(loc)
        if dotted in seen:
            continue
        seen.add(dotted)
        message = _describe(error["type"], error["msg"], error.get("input"))
        problems.append(TaskError(toml_path, message, field=dotted or None))
    return problems


def _describe(kind: str, message: str, value: object) -> str:
    """Phrase a pydantic error in TOML terms, with the offending value when it is short."""
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        message = "Input should be a TOML table"
    if isinstance(value, dict):
        return f"{message} (got a table)"
    if isinstance(value, list):
        return f"{message} (got an array)"
    if isinstance(value, bool):
        return f"{message} (got {str(value).lower()})"
    text = repr(value)
    if len(text) > _REPR_LIMIT:
        text = text[: _REPR_LIMIT - 3] + "..."
    return f"{message} (got {text})"


def _read_instruction(md_path: Path, owner: Path, problems: list[TaskError]) -> str | None:
    """Read an ``instruction.md``; append problems and return None on failure.

    Read beneath its dir without following a link, in bounded chunks, at most
    :data:`~harness.tasks.limits.MAX_INSTRUCTION_BYTES` (a larger one is refused).
    """
    if not md_path.is_file() and not md_path.is_symlink():
        problems.append(TaskError(owner, f"missing {INSTRUCTION_MD}"))
        return None
    try:
        raw = read_task_bytes(md_path.parent, md_path.name, MAX_INSTRUCTION_BYTES)
        if raw is None:
            problems.append(TaskError(owner, f"missing {INSTRUCTION_MD}"))
            return None
        text = raw.decode("utf-8")
    except TaskError as exc:
        if not any(p.path == exc.path for p in problems):  # a link: named once
            problems.append(exc)
        return None
    except UnicodeDecodeError as exc:
        problems.append(TaskError(md_path, f"not valid UTF-8 (byte {exc.start})"))
        return None
    if not text.strip():
        problems.append(TaskError(md_path, "instruction is empty"))
        return None
    return text


def _discover(paths: Sequence[Path]) -> tuple[list[Path], list[TaskError]]:
    """Expand ``paths`` into task dirs, collecting problems with the paths themselves."""
    if not paths:
        raise ValueError("no task paths given")
    found: list[Path] = []
    seen: set[Path] = set()
    problems: list[TaskError] = []
    for given in map(Path, paths):
        if not given.exists():
            problems.append(TaskError(given, "path does not exist"))
            continue
        if not given.is_dir():
            problems.append(
                TaskError(given, "not a directory (expected a task dir or a folder of task dirs)")
            )
            continue
        if is_task_dir(given):
            candidates = [given]
        else:
            candidates = sorted(
                (child for child in given.iterdir() if is_task_dir(child)),
                key=lambda child: child.name,
            )
            if not candidates:
                problems.append(TaskError(given, _nothing_found(given)))
                continue
        for candidate in candidates:
            resolved = candidate.resolve()
            if resolved not in seen:
                seen.add(resolved)
                found.append(candidate)
    return found, problems


def _nothing_found(given: Path) -> str:
    """Why ``given`` holds no task dir; a Terminal-Bench 1 task (set) is named as such."""
    if is_tb1_task_dir(given) or any(is_tb1_task_dir(child) for child in given.iterdir()):
        return (
            "this is a Terminal-Bench 1 task (set) (task.yaml, run-tests.sh): convert it with "
            f"`harness tasks migrate {given} -o DEST`, then run DEST"
        )
    return "no task directories found (a task dir holds task.toml)"


def _relative_key(task_dir: Path, root: Path | None) -> str:
    """The task dir's posix path relative to ``root`` (default: its parent)."""
    if root is not None:
        try:
            rel = task_dir.relative_to(Path(root).resolve()).as_posix()
        except ValueError:
            rel = ""
        if rel and rel != ".":
            return rel
    return task_dir.name


def _sanitize(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip(".-")
    return cleaned or "tasks"
