"""Hostile Terminal-Bench 1 task dirs against ``harness tasks migrate`` (the real CLI).

docs/security.md, "Run dirs, tasks and templates"; docs/datasets.md, "Terminal-Bench 1
tasks". The harness converts a TB1 task set on the host, as the user running it (root
here), so every attack plants a *victim* outside the task: a 0600 file holding a canary
(and a dir holding one). Judged from outside, after ``harness tasks migrate`` ran in a
subprocess:

- the victim's bytes (sha256) and mode are unchanged (nothing was written or chmodded
  through a link);
- no regular file of the destination holds the canary, and no symlink there leaves it
  (no host file was copied into the converted task, where its image and agent would see it);
- the command exits 2 naming the link and why, and leaves no task dir at the destination.

The attacks: symlinked ``tests/run-tests.sh``, ``tests/test.sh``, ``run-tests.sh``,
``solution.sh``, ``solution/solve.sh``, ``tests/``, ``task.yaml``, a file a Dockerfile
``COPY``s, a file its ``COPY`` of ``solution.sh`` bakes in; a "billion laughs"
``task.yaml``; a tree deeper than the cap; a FIFO; a destination that exists with symlinks
in it. A symlink that stays inside the task is converted as a copy of its file.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import every_file, files_containing
from support.cli import harness
from support.tb1 import make_tb1

pytestmark = pytest.mark.root

#: A guard only: the old code still ran at 60 s on the billion laughs; never asserted on.
GUARD_S = 120


@dataclass
class Victim:
    """Host files outside every task dir: a 0600 file and a dir, both holding the canary."""

    file: Path
    dir: Path
    token: str

    def state(self) -> list[tuple[str, str, int]]:
        """``(path, sha256, mode)`` of every victim file, judged by the test process."""
        return [
            (str(p), hashlib.sha256(p.read_bytes()).hexdigest(), p.lstat().st_mode)
            for p in sorted([self.file, *self.dir.iterdir()])
        ]


@pytest.fixture
def victim() -> Iterator[Victim]:
    top = Path(tempfile.mkdtemp(prefix="tb1-victim-"))
    token = f"CANARY-{secrets.token_hex(12)}"
    file = top / "secret"
    # Valid YAML with an instruction too: a symlinked task.yaml would convert if followed.
    file.write_text(f"instruction: {token}\n")
    file.chmod(0o600)
    (top / "dir").mkdir()
    (top / "dir" / "run-tests.sh").write_text(f"#!/bin/bash\necho {token}\n")
    (top / "dir" / "test.sh").write_text(f"#!/bin/bash\necho {token}\n")
    (top / "dir" / "data.txt").write_text(token + "\n")
    for path in (top / "dir").iterdir():
        path.chmod(0o600)
    yield Victim(file, top / "dir", token)
    shutil.rmtree(top, ignore_errors=True)


def assert_untouched(victim: Victim, before: list[tuple[str, str, int]], dest: Path) -> None:
    """The victim unchanged, and nothing of it (bytes or a link) under ``dest``."""
    assert victim.state() == before
    if dest.exists():
        assert files_containing(dest, victim.token) == []
        for dirpath, dirs, files in os.walk(dest, followlinks=False):
            for name in dirs + files:
                path = Path(dirpath) / name
                if path.is_symlink():
                    resolved = os.path.realpath(path)
                    assert resolved.startswith(str(dest.resolve()) + "/"), (path, resolved)


def link(path: Path, target: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


def _tests_run_tests(task: Path, v: Victim) -> Path:
    """tests/run-tests.sh: the old code copied run-tests.sh over it, into the victim."""
    link(task / "tests" / "run-tests.sh", v.file)
    return task / "tests" / "run-tests.sh"


def _tests_test_sh(task: Path, v: Victim) -> Path:
    """tests/test.sh: the old code wrote the verifier through it and chmod 755ed it."""
    link(task / "tests" / "test.sh", v.file)
    return task / "tests" / "test.sh"


def _run_tests(task: Path, v: Victim) -> Path:
    """run-tests.sh: the old code copied the victim's bytes into tests/run-tests.sh."""
    link(task / "run-tests.sh", v.file)
    return task / "run-tests.sh"


def _solution(task: Path, v: Victim) -> Path:
    """solution.sh: the old code copied the victim's bytes into solution/solve.sh."""
    link(task / "solution.sh", v.file)
    return task / "solution.sh"


def _solution_dir(task: Path, v: Victim) -> Path:
    """solution/solve.sh (a Harbor-style dir in a TB1 task): the old code kept the link."""
    link(task / "solution" / "solve.sh", v.file)
    return task / "solution" / "solve.sh"


def _tests_dir(task: Path, v: Victim) -> Path:
    """tests/: the old code copied the victim dir's files into the converted tests/."""
    link(task / "tests", v.dir)
    return task / "tests"


def _task_yaml(task: Path, v: Victim) -> Path:
    """task.yaml: the old code read the victim as the task's instruction."""
    link(task / "task.yaml", v.file)
    return task / "task.yaml"


def _copied_data(task: Path, v: Victim) -> Path:
    """A file the Dockerfile COPYs (data/): the old code kept it as a link to the host."""
    link(task / "data" / "secret.txt", v.file)
    return task / "data" / "secret.txt"


def _baked_solution(task: Path, v: Victim) -> Path:
    """A Dockerfile COPYing solution.sh: the old code followed it into environment/."""
    (task / "Dockerfile").write_text("FROM harness/base:bookworm\nCOPY solution.sh /app/\n")
    link(task / "solution.sh", v.file)
    return task / "solution.sh"


ATTACKS: dict[str, Callable[[Path, Victim], Path]] = {
    "tests/run-tests.sh": _tests_run_tests,
    "tests/test.sh": _tests_test_sh,
    "run-tests.sh": _run_tests,
    "solution.sh": _solution,
    "solution/solve.sh": _solution_dir,
    "tests/": _tests_dir,
    "task.yaml": _task_yaml,
    "dockerfile-copy-source": _copied_data,
    "dockerfile-baked-solution": _baked_solution,
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_symlink_leaving_the_task_is_refused_and_nothing_is_written_through_it(
    attack: str, victim: Victim, tmp_path: Path
) -> None:
    task = make_tb1(tmp_path / "src", "hostile")
    planted = ATTACKS[attack](task, victim)
    before = victim.state()
    dest = tmp_path / "out"

    done = harness("tasks", "migrate", task, "-o", dest, timeout=GUARD_S)

    assert done.returncode == 2, done
    assert str(planted) in done.stderr and "leaves the task dir" in done.stderr, done.stderr
    assert not (dest / "hostile").exists() and not (dest / "hostile").is_symlink()
    assert_untouched(victim, before, dest)


def test_a_symlink_inside_the_task_is_converted_as_a_copy_of_its_file(tmp_path: Path) -> None:
    """A link that stays inside is no escape: its file's bytes are copied, never the link."""
    task = make_tb1(tmp_path / "src", "inner")
    (task / "data" / "alias.txt").symlink_to("seed.txt")
    (task / "tests" / "helper.py").symlink_to("test_outputs.py")
    dest = tmp_path / "out"

    done = harness("tasks", "migrate", task, "-o", dest, timeout=GUARD_S)

    assert done.returncode == 0, done
    alias = dest / "inner" / "environment" / "data" / "alias.txt"
    helper = dest / "inner" / "tests" / "helper.py"
    assert not alias.is_symlink() and alias.read_text() == "seed\n"
    assert not helper.is_symlink() and "def test_ok" in helper.read_text()
    assert [p for p in every_file(dest) if p.is_symlink()] == []
    checked = harness("tasks", "check", dest / "inner", "--sandbox", "none")
    assert checked.returncode == 0, checked


def test_a_billion_laughs_task_yaml_fails_fast_with_exit_2(tmp_path: Path) -> None:
    """452 bytes of aliases expanding to 10^9 strings: the old code was still running at 60 s."""
    task = make_tb1(tmp_path / "src", "laughs")
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [{','.join([f'*{prev}'] * 9)}]")
    lines.append("instruction: hi")
    lines.append("tags: *i")
    (task / "task.yaml").write_text("\n".join(lines) + "\n")
    dest = tmp_path / "out"

    done = harness("tasks", "migrate", task, "-o", dest, timeout=GUARD_S)

    assert done.returncode == 2, done
    assert "task.yaml expands to more than" in done.stderr, done.stderr
    assert not (dest / "laughs").exists()


def test_a_tree_deeper_than_the_cap_is_refused(tmp_path: Path) -> None:
    task = make_tb1(tmp_path / "src", "deep")
    deep = task / "data" / "/".join(["d"] * 80)
    deep.mkdir(parents=True)
    (deep / "f").write_text("x\n")
    dest = tmp_path / "out"

    done = harness("tasks", "migrate", task, "-o", dest, timeout=GUARD_S)

    assert done.returncode == 2, done
    assert "levels deep" in done.stderr, done.stderr
    assert not (dest / "deep").exists()


def test_a_fifo_in_the_task_is_refused_without_blocking(tmp_path: Path) -> None:
    task = make_tb1(tmp_path / "src", "fifo")
    os.mkfifo(task / "data" / "pipe")
    dest = tmp_path / "out"

    done = harness("tasks", "migrate", task, "-o", dest, timeout=GUARD_S)

    assert done.returncode == 2, done
    assert str(task / "data" / "pipe") in done.stderr and "FIFO" in done.stderr, done.stderr
    assert not (dest / "fifo").exists()


def test_an_existing_destination_with_symlinks_is_refused_and_left_as_it_is(
    victim: Victim, tmp_path: Path
) -> None:
    """The old code refused it too, then deleted the user's dir (rmtree of the target)."""
    task = make_tb1(tmp_path / "src", "taken")
    dest = tmp_path / "out"
    existing = dest / "taken"
    (existing / "solution").mkdir(parents=True)
    (existing / "solution" / "solve.sh").symlink_to(victim.file)
    (existing / "tests").symlink_to(victim.dir)
    (existing / "environment").symlink_to(victim.dir)
    (existing / "task.toml").symlink_to(victim.file)
    before = victim.state()

    done = harness("tasks", "migrate", task, "-o", dest, timeout=GUARD_S)

    assert done.returncode == 2, done
    assert "exists already" in done.stderr, done.stderr
    assert victim.state() == before
    assert os.readlink(existing / "solution" / "solve.sh") == str(victim.file)
    assert os.readlink(existing / "tests") == str(victim.dir)
    assert sorted(p.name for p in existing.iterdir()) == [
        "environment",
        "solution",
        "task.toml",
        "tests",
    ]
    assert [p.name for p in dest.iterdir()] == ["taken"]  # no staging dir left behind


def test_a_converted_task_given_a_symlink_leaving_it_is_refused_by_tasks_check(
    victim: Victim, tmp_path: Path
) -> None:
    """After migration, a link planted in the converted task is ``tasks check``'s to refuse."""
    task = make_tb1(tmp_path / "src", "later")
    dest = tmp_path / "out"
    assert harness("tasks", "migrate", task, "-o", dest, timeout=GUARD_S).returncode == 0
    planted = dest / "later" / "environment" / "data" / "leak.txt"
    planted.symlink_to(victim.file)

    checked = harness("tasks", "check", dest / "later", "--sandbox", "none")

    assert checked.returncode == 2, checked
    assert str(planted) in checked.stderr and "leaves the task dir" in checked.stderr
