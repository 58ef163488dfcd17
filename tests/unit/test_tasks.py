"""Unit tests for harness.tasks: task.toml model, loading, errors, hashing, discovery."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from support.docker import prerequisite_missing

from harness.tasks import (
    Task,
    TaskConfig,
    TaskError,
    TaskSetError,
    check_tasks,
    content_hash,
    discover,
    is_task_dir,
    load_task,
    load_tasks,
    taskset_name,
)

FULL_TOML = """\
schema_version = "1.1"
source = "terminal-bench"

[task]
name = "org/full-task"
description = "Does everything"
keywords = ["x"]

[metadata]
difficulty = "hard"
category = "security"
tags = ["a", "b"]

[agent]
timeout_sec = 120
user = "agent"

[verifier]
timeout_sec = 30.5
user = 0
env = { MODE = "strict" }
environment_mode = "shared"

[solution]
env = { HINT = "yes" }

[environment]
docker_image = "ubuntu:24.04"
cpus = 2.5
memory_mb = 4096
storage_mb = 10240
allow_internet = true
workdir = "/app"
env = { FOO = "bar" }
build_timeout_sec = 900
gpus = 0

frobnicate = 3

[environment.healthcheck]
command = "true"
"""


def make_task(
    parent: Path,
    dirname: str = "t1",
    toml: str | None = "",
    instruction: str | None = "Do the thing.\n",
    test_sh: bool = True,
    files: dict[str, str] | None = None,
) -> Path:
    """Create a task dir under ``parent``; ``None`` leaves a piece out."""
    task_dir = parent / dirname
    task_dir.mkdir(parents=True)
    if toml is not None:
        (task_dir / "task.toml").write_text(toml)
    if instruction is not None:
        (task_dir / "instruction.md").write_text(instruction)
    if test_sh:
        (task_dir / "tests").mkdir()
        (task_dir / "tests" / "test.sh").write_text("#!/bin/sh\necho 1 > reward.txt\n")
    for rel, text in (files or {}).items():
        target = task_dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return task_dir


def one_error(task_dir: Path) -> TaskError:
    with pytest.raises(TaskError) as info:
        load_task(task_dir)
    return info.value


def assert_one_line(error: Exception) -> None:
    text = str(error)
    assert text and "\n" not in text and "\r" not in text


# --------------------------------------------------------------------------- model


def test_every_section_parsed(tmp_path: Path) -> None:
    task_dir = make_task(
        tmp_path,
        toml=FULL_TOML,
        files={
            "environment/Dockerfile": "FROM ubuntu:24.04\n",
            "solution/solve.sh": "#!/bin/sh\n",
            "workspace/seed.txt": "seed\n",
        },
    )
    task = load_task(task_dir)
    cfg = task.config

    assert cfg.schema_version == "1.1"
    assert cfg.task.name == "org/full-task"
    assert cfg.task.description == "Does everything"
    assert cfg.metadata == {"difficulty": "hard", "category": "security", "tags": ["a", "b"]}
    assert cfg.agent.timeout_sec == 120.0
    assert isinstance(cfg.agent.timeout_sec, float)
    assert cfg.agent.user == "agent"
    assert cfg.verifier.timeout_sec == 30.5
    assert cfg.verifier.user == 0
    assert cfg.verifier.env == {"MODE": "strict"}
    assert cfg.solution.env == {"HINT": "yes"}
    env = cfg.environment
    assert env.docker_image == "ubuntu:24.04"
    assert env.cpus == 2.5
    assert env.memory_mb == 4096
    assert env.storage_mb == 10240
    assert env.allow_internet is True
    assert env.workdir == "/app"
    assert env.env == {"FOO": "bar"}
    assert env.build_timeout_sec == 900.0

    assert task.name == "org/full-task"
    assert task.key == "org/full-task"
    assert task.path == task_dir.resolve()
    assert task.path.is_absolute()
    assert task.instruction == "Do the thing.\n"
    assert task.category == "security"
    assert task.difficulty == "hard"
    assert task.agent_timeout_sec == 120.0
    assert task.verifier_timeout_sec == 30.5
    assert task.tests_dir == task.path / "tests"
    assert task.test_script == task.path / "tests" / "test.sh"
    assert task.solution_dir == task.path / "solution"
    assert task.solve_script == task.path / "solution" / "solve.sh"
    assert task.workspace_dir == task.path / "workspace"
    assert task.environment_dir == task.path / "environment"
    assert task.dockerfile == task.path / "environment" / "Dockerfile"
    assert len(task.hash) == 64
    int(task.hash, 16)


def test_defaults_and_optional_parts(tmp_path: Path) -> None:
    task = load_task(make_task(tmp_path, "plain"))
    cfg = task.config
    assert cfg.schema_version is None
    assert cfg.task.name is None
    assert cfg.metadata == {}
    assert cfg.agent.timeout_sec == 600.0
    assert cfg.agent.user is None
    assert cfg.verifier.timeout_sec == 600.0
    assert cfg.verifier.env == {}
    assert cfg.solution.env == {}
    env = cfg.environment
    assert env.docker_image is None
    assert env.cpus == 1.0
    assert env.memory_mb == 2048
    assert env.storage_mb is None
    # The field's default; the phases' policy is Harbor's (test_task_networks.py).
    assert env.allow_internet is False and env.network_mode is None
    assert env.workdir is None
    assert env.build_timeout_sec == 600.0
    assert task.name == "plain"
    assert task.key == "plain"
    assert task.category is None
    assert task.solution_dir is None
    assert task.solve_script is None
    assert task.workspace_dir is None
    assert task.environment_dir is None
    assert task.dockerfile is None
    assert task.unknown_keys == []


def test_legacy_version_key(tmp_path: Path) -> None:
    task = load_task(make_task(tmp_path, toml='version = "1.0"\n'))
    assert task.config.schema_version == "1.0"
    assert task.unknown_keys == []

    both = TaskConfig.model_validate({"version": "1.0", "schema_version": "1.2"})
    assert both.schema_version == "1.2"
    assert both.unknown_keys() == ["version"]


def test_unknown_keys_kept_top_level_and_nested(tmp_path: Path) -> None:
    task = load_task(make_task(tmp_path, toml=FULL_TOML))
    assert task.unknown_keys == ["environment.frobnicate"]
    cfg = task.config
    assert cfg.model_extra == {}
    assert cfg.environment.model_extra == {"frobnicate": 3}
    assert cfg.environment.healthcheck is not None
    assert cfg.environment.healthcheck.command == "true"
    assert cfg.task.keywords == ["x"]
    assert cfg.source == "terminal-bench"


def test_ints_accepted_for_floats() -> None:
    cfg = TaskConfig.model_validate({"environment": {"cpus": 2}, "verifier": {"timeout_sec": 5}})
    assert cfg.environment.cpus == 2.0
    assert cfg.verifier.timeout_sec == 5.0


def test_normalized_json_is_canonical() -> None:
    a = TaskConfig.model_validate({"agent": {"timeout_sec": 600}})
    b = TaskConfig.model_validate({})
    assert a.normalized_json() == b.normalized_json()
    c = TaskConfig.model_validate({"agent": {"timeout_sec": 601}})
    assert a.normalized_json() != c.normalized_json()


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("toml", "field", "fragment"),
    [
        ('[agent]\ntimeout_sec = "ten"\n', "agent.timeout_sec", "valid number (got 'ten')"),
        ("[agent]\ntimeout_sec = 0\n", "agent.timeout_sec", "greater than 0"),
        ("[agent]\ntimeout_sec = -5\n", "agent.timeout_sec", "greater than 0"),
        ("[agent]\nuser = 1.5\n", "agent.user", "user name"),
        ("[agent]\nuser = true\n", "agent.user", "user name"),
        ('[verifier]\ntimeout_sec = "1"\n', "verifier.timeout_sec", "valid number"),
        ("[verifier]\nenv = { PORT = 8080 }\n", "verifier.env.PORT", "valid string (got 8080)"),
        ("[solution]\nenv = 3\n", "solution.env", "TOML table (got 3)"),
        ('[environment]\ncpus = "2"\n', "environment.cpus", "valid number (got '2')"),
        ("[environment]\ncpus = 0\n", "environment.cpus", "greater than 0"),
        ("[environment]\nmemory_mb = 2048.0\n", "environment.memory_mb", "valid integer"),
        ("[environment]\nmemory_mb = -1\n", "environment.memory_mb", "greater than 0"),
        ("[environment]\nmemory_mb = true\n", "environment.memory_mb", "valid integer (got true)"),
        ("[environment]\nallow_internet = 1\n", "environment.allow_internet", "valid boolean"),
        (
            '[environment]\nallow_internet = "yes"\n',
            "environment.allow_internet",
            "valid boolean",
        ),
        ("[environment]\ndocker_image = 3\n", "environment.docker_image", "valid string"),
        ("[environment]\nbuild_timeout_sec = inf\n", "environment.build_timeout_sec", "finite"),
        ("[task]\nname = 42\n", "task.name", "valid string"),
        ('[task]\nname = ""\n', "task.name", "at least 1"),
        ('metadata = "x"\n', "metadata", "TOML table (got 'x')"),
        ("agent = 5\n", "agent", "TOML table (got 5)"),
        ("[environment]\nworkdir = [1]\n", "environment.workdir", "(got an array)"),
        ("version = 2\n", "version", "valid string"),
    ],
)
def test_wrong_types_name_file_and_field(
    tmp_path: Path, toml: str, field: str, fragment: str
) -> None:
    task_dir = make_task(tmp_path, toml=toml)
    error = one_error(task_dir)
    assert error.path == task_dir / "task.toml"
    assert error.field == field
    assert fragment in error.message
    assert_one_line(error)
    assert str(error) == f"{task_dir / 'task.toml'}: {field}: {error.message}"


def test_error_string_format(tmp_path: Path) -> None:
    task_dir = make_task(tmp_path, "foo", toml='[agent]\ntimeout_sec = "ten"\n')
    error = one_error(task_dir)
    assert str(error) == (
        f"{task_dir}/task.toml: agent.timeout_sec: Input should be a valid number (got 'ten')"
    )


def test_several_bad_fields_each_reported_once(tmp_path: Path) -> None:
    task_dir = make_task(
        tmp_path, toml='[agent]\ntimeout_sec = "x"\nuser = 2.5\n[environment]\ncpus = "1"\n'
    )
    tasks, problems = check_tasks([task_dir])
    assert tasks == []
    assert sorted(p.field or "" for p in problems) == [
        "agent.timeout_sec",
        "agent.user",
        "environment.cpus",
    ]
    for problem in problems:
        assert_one_line(problem)


def test_malformed_toml_names_line_and_column(tmp_path: Path) -> None:
    task_dir = make_task(tmp_path, toml='[agent]\ntimeout_sec = "unterminated\n')
    error = one_error(task_dir)
    assert error.path == task_dir / "task.toml"
    assert error.field is None
    assert "invalid TOML" in error.message
    assert "line 2" in error.message and "column" in error.message
    assert_one_line(error)


def test_non_utf8_toml(tmp_path: Path) -> None:
    task_dir = make_task(tmp_path)
    (task_dir / "task.toml").write_bytes(b'[task]\nname = "\xff"\n')
    error = one_error(task_dir)
    assert error.path == task_dir / "task.toml"
    assert "UTF-8" in error.message


def test_missing_dir(tmp_path: Path) -> None:
    error = one_error(tmp_path / "nope")
    assert error.path == tmp_path / "nope"
    assert error.field is None
    assert "does not exist" in error.message
    assert_one_line(error)


def test_path_is_a_file(tmp_path: Path) -> None:
    file = tmp_path / "f"
    file.write_text("x")
    assert "not a directory" in one_error(file).message


def test_missing_task_toml(tmp_path: Path) -> None:
    task_dir = make_task(tmp_path, toml=None)
    error = one_error(task_dir)
    assert error.path == task_dir
    assert error.field is None
    assert error.message == "missing task.toml"
    assert not is_task_dir(task_dir)


def test_missing_instruction(tmp_path: Path) -> None:
    task_dir = make_task(tmp_path, instruction=None)
    error = one_error(task_dir)
    assert error.path == task_dir
    assert error.field is None
    assert error.message == "missing instruction.md"


@pytest.mark.parametrize("text", ["", "  \n\n\t"])
def test_empty_instruction(tmp_path: Path, text: str) -> None:
    task_dir = make_task(tmp_path, instruction=text)
    error = one_error(task_dir)
    assert error.path == task_dir / "instruction.md"
    assert "empty" in error.message
    assert_one_line(error)


def test_missing_test_script(tmp_path: Path) -> None:
    task_dir = make_task(tmp_path, test_sh=False)
    error = one_error(task_dir)
    assert error.path == task_dir
    assert error.field is None
    assert error.message == "missing tests/test.sh"
    assert str(error) == f"{task_dir}: missing tests/test.sh"


def test_test_script_must_be_a_file(tmp_path: Path) -> None:
    task_dir = make_task(tmp_path, test_sh=False)
    (task_dir / "tests" / "test.sh").mkdir(parents=True)
    assert one_error(task_dir).message == "missing tests/test.sh"


def test_check_tasks_collects_every_problem_of_a_dir(tmp_path: Path) -> None:
    bad = make_task(
        tmp_path, "bad", toml="[agent]\ntimeout_sec = true\n", instruction=None, test_sh=False
    )
    good = make_task(tmp_path, "good")
    tasks, problems = check_tasks([tmp_path])
    assert [t.path for t in tasks] == [good.resolve()]
    assert [(p.path, p.field, p.message) for p in problems] == [
        (bad / "task.toml", "agent.timeout_sec", "Input should be a valid number (got true)"),
        (bad, None, "missing instruction.md"),
        (bad, None, "missing tests/test.sh"),
    ]


def test_load_tasks_raises_task_set_error_listing_all(tmp_path: Path) -> None:
    make_task(tmp_path, "a", instruction=None)
    make_task(tmp_path, "b", test_sh=False)
    make_task(tmp_path, "c")
    with pytest.raises(TaskSetError) as info:
        load_tasks([tmp_path])
    problems = info.value.problems
    assert len(problems) == 2
    lines = str(info.value).splitlines()
    assert lines == [str(p) for p in problems]
    assert lines[0].endswith("a: missing instruction.md")
    assert lines[1].endswith("b: missing tests/test.sh")


def test_duplicate_keys(tmp_path: Path) -> None:
    make_task(tmp_path, "one", toml='[task]\nname = "same"\n')
    second = make_task(tmp_path, "two", toml='[task]\nname = "same"\n')
    tasks, problems = check_tasks([tmp_path])
    assert [t.key for t in tasks] == ["same"]
    assert len(problems) == 1
    assert problems[0].path == second / "task.toml"
    assert problems[0].field == "task.name"
    assert "duplicate task key 'same'" in problems[0].message
    with pytest.raises(TaskSetError):
        load_tasks([tmp_path])


def test_duplicate_dir_keys_across_sets(tmp_path: Path) -> None:
    make_task(tmp_path / "set1", "x")
    make_task(tmp_path / "set2", "x")
    _, problems = check_tasks([tmp_path / "set1", tmp_path / "set2"])
    assert len(problems) == 1
    assert problems[0].path == tmp_path / "set2" / "x"
    assert problems[0].field is None


# --------------------------------------------------------------------------- hash


def test_hash_stable_across_copy_and_mtime(tmp_path: Path) -> None:
    src = make_task(
        tmp_path / "a", "task", toml=FULL_TOML, files={"environment/Dockerfile": "FROM x\n"}
    )
    os.symlink("../tests/test.sh", src / "environment" / "link")
    original = load_task(src).hash

    for path in src.rglob("*"):
        os.utime(path, (1_000_000, 1_000_000), follow_symlinks=False)
    assert load_task(src).hash == original

    copy = tmp_path / "elsewhere" / "renamed"
    shutil.copytree(src, copy, symlinks=True)
    assert load_task(copy).hash == original
    assert load_task(src).hash == original


def test_hash_ignores_dir_name_without_task_name(tmp_path: Path) -> None:
    src = make_task(tmp_path, "first")
    copy = tmp_path / "second"
    shutil.copytree(src, copy)
    a, b = load_task(src), load_task(copy)
    assert a.hash == b.hash
    assert (a.key, b.key) == ("first", "second")


@pytest.mark.parametrize(
    "change",
    [
        lambda d: (d / "tests" / "test.sh").write_text("#!/bin/sh\necho 0 > reward.txt\n"),
        lambda d: (d / "instruction.md").write_text("Do another thing.\n"),
        lambda d: (d / "task.toml").write_text("[agent]\ntimeout_sec = 60\n"),
        lambda d: (d / "task.toml").write_text("[agent]\ntimeout_sec = 600\n"),  # same config
        lambda d: (d / "workspace").mkdir() or (d / "workspace" / "new.txt").write_text(""),
        lambda d: shutil.copy(d / "tests" / "test.sh", d / "tests" / "test.sh.bak"),
        lambda d: os.symlink("instruction.md", d / "link"),
    ],
)
def test_hash_changes_with_any_file(tmp_path: Path, change: object) -> None:
    task_dir = make_task(tmp_path)
    before = load_task(task_dir).hash
    assert callable(change)
    change(task_dir)
    assert load_task(task_dir).hash != before


def test_hash_changes_with_config_only(tmp_path: Path) -> None:
    task_dir = make_task(tmp_path)
    config = TaskConfig.model_validate({})
    other = TaskConfig.model_validate({"environment": {"cpus": 2}})
    assert content_hash(task_dir, config) != content_hash(task_dir, other)
    assert content_hash(task_dir, config) == content_hash(task_dir, config)


def _hash(task_dir: Path) -> str:
    """The content hash as the loader computes it (a task with an escaping link is refused
    at load, so the hasher is asked directly)."""
    return content_hash(task_dir, TaskConfig.model_validate({}))


def test_hash_symlink_target_matters_not_content(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("one")
    task_dir = make_task(tmp_path, "t")
    os.symlink(outside, task_dir / "link")
    before = _hash(task_dir)
    outside.write_text("two: the target's content is never read")
    assert _hash(task_dir) == before
    (task_dir / "link").unlink()
    os.symlink(tmp_path / "elsewhere.txt", task_dir / "link")  # dangling is fine
    assert _hash(task_dir) != before


def test_hash_does_not_follow_symlinks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = tmp_path / "outside" / "big.bin"
    big.parent.mkdir()
    with big.open("wb") as handle:
        handle.truncate(64 * 1024 * 1024)  # sparse, cheap to create
    big_dir = tmp_path / "outside" / "dir"
    big_dir.mkdir()
    (big_dir / "secret").write_text("secret")
    task_dir = make_task(tmp_path, "t")
    os.symlink(big, task_dir / "big-link")
    os.symlink(big_dir, task_dir / "dir-link")

    opened: list[str] = []
    real_open = os.open

    def spy_open(path: str, flags: int, *args: int, **kwargs: int) -> int:
        opened.append(os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy_open)
    digest = _hash(task_dir)
    monkeypatch.undo()

    assert opened, "the spy saw no file reads"
    assert not any("big" in p or "secret" in p or "dir-link" in p for p in opened)
    (big_dir / "secret").write_text("changed")
    assert _hash(task_dir) == digest
    # Such a task is refused at load: its links leave the task dir.
    with pytest.raises(TaskError, match="leaves the task dir"):
        load_task(task_dir)


def test_fifo_is_never_opened(tmp_path: Path) -> None:
    if not hasattr(os, "mkfifo"):
        prerequisite_missing("os.mkfifo (fifos on this platform)")
    task_dir = make_task(tmp_path)
    os.mkfifo(task_dir / "pipe")
    assert len(load_task(task_dir).hash) == 64  # would hang if it were read


# --------------------------------------------------------------------------- discovery


def test_discover_task_dir(tmp_path: Path) -> None:
    task_dir = make_task(tmp_path, "solo")
    assert is_task_dir(task_dir)
    assert discover([task_dir]) == [task_dir]


def test_discover_task_set(tmp_path: Path) -> None:
    task_set = tmp_path / "set"
    for name in ["b", "a", "c"]:
        make_task(task_set, name)
    (task_set / "not-a-task").mkdir()
    (task_set / "README.md").write_text("hi")
    make_task(task_set / "nested", "deep")  # two levels down: not searched
    assert discover([task_set]) == [task_set / "a", task_set / "b", task_set / "c"]


def test_discover_keeps_path_order_and_dedupes(tmp_path: Path) -> None:
    set1, set2 = tmp_path / "s1", tmp_path / "s2"
    make_task(set1, "z")
    make_task(set2, "a")
    assert discover([set1, set2, set1 / "z"]) == [set1 / "z", set2 / "a"]


def test_discover_missing_path(tmp_path: Path) -> None:
    with pytest.raises(TaskError) as info:
        discover([tmp_path / "missing"])
    assert info.value.path == tmp_path / "missing"
    assert "does not exist" in str(info.value)
    assert_one_line(info.value)


def test_discover_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(TaskError) as info:
        discover([tmp_path / "empty"])
    assert info.value.message == "no task directories found (a task dir holds task.toml)"


def test_discover_needs_paths() -> None:
    with pytest.raises(ValueError):
        discover([])


def test_check_tasks_reports_bad_paths_and_loads_the_rest(tmp_path: Path) -> None:
    good = make_task(tmp_path / "set", "ok")
    tasks, problems = check_tasks([tmp_path / "missing", tmp_path / "set"])
    assert [t.path for t in tasks] == [good.resolve()]
    assert [p.path for p in problems] == [tmp_path / "missing"]


def test_load_tasks_from_set_and_single_dir_give_same_keys(tmp_path: Path) -> None:
    task_set = tmp_path / "set"
    make_task(task_set, "alpha")
    make_task(task_set, "beta", toml='[task]\nname = "org/beta"\n')
    from_set = load_tasks([task_set])
    assert [t.key for t in from_set] == ["alpha", "org/beta"]
    assert [t.name for t in from_set] == ["alpha", "org/beta"]
    single = load_tasks([task_set / "alpha"])
    assert single == [from_set[0]]
    assert load_task(task_set / "alpha", root=tmp_path).key == "set/alpha"
    assert load_task(task_set / "alpha", root=tmp_path / "unrelated").key == "alpha"


def test_task_is_hashable_and_frozen(tmp_path: Path) -> None:
    task = load_task(make_task(tmp_path))
    assert {task: 1}[task] == 1
    with pytest.raises(AttributeError):
        task.name = "other"  # type: ignore[misc]
    assert isinstance(task, Task)


# --------------------------------------------------------------------------- naming


def test_taskset_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert taskset_name([tmp_path / "examples" / "tasks"]) == "tasks"
    assert taskset_name([tmp_path / "set a", tmp_path / "b!@#c"]) == "set-a+b-c"
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    assert taskset_name([Path(".")]) == "here"
    with pytest.raises(ValueError):
        taskset_name([])
