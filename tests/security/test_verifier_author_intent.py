"""The verifier's defences keep what task authors wrote (Harbor passes these; so must we).

Each test is a small task that reproduces a Terminal-Bench 2 or Harbor pattern, run through
the real CLI on local, docker (runc) and gVisor, judged from outside (the record's reward):
a right answer scores 1 and a missing one 0.

- ``cancel-async-tasks``: ``python3 test.py`` in the workspace (and ``sys.executable``
  running it) imports the agent's ``run.py`` beside it, while ``PYTHONSAFEPATH`` still
  keeps ``-m pytest`` from the agent's ``pytest.py`` (``test_verifier_env.py`` checks that
  attack);
- Harbor's ``separate-verifier-multi-step``: each step's ``/tmp`` artifact reaches its
  own separate verifier;
- ``git-leak-recovery`` and ``merge-diff-arc-agi-task``: the verifier's git (2.39 here, as
  old as Ubuntu 24.04's 2.43 for this purpose: no ``<dir>/*`` glob) accepts a repository
  the agent's uid owns below the workspace;
- Harbor's ``separate-verifier-environment``: an artifact declared at ``/tmp/...`` reaches
  a separate verifier there (docker and gVisor).
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest
from support.docker import prerequisite_missing


def _reward(run: Any, name: str) -> float:
    record = run.by_task(name)
    assert record["status"] == "completed", record
    return float(record["reward"])


def _stdout(run: Any, name: str) -> str:
    path = run.evidence(run.by_task(name)) / "verifier" / "test-stdout.txt"
    return path.read_text() if path.exists() else ""


# ============================================================== sibling imports (11)

SIBLING_TEST = textwrap.dedent(
    """\
    from run import run_tasks

    assert run_tasks() == 42
    print("SIBLING-IMPORTED")
    """
)

#: The task's environment ships ``test.py`` in the workspace; the agent writes ``run.py``.
SIBLING_SH = textwrap.dedent(
    """\
    cd "$HARNESS_WORKSPACE"
    # As the author wrote it, and as a test's subprocess runs it (by sys.executable).
    if python3 test.py && python3 -c 'import subprocess, sys
    sys.exit(subprocess.call([sys.executable, "test.py"]))'; then
      echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"
    else echo 0 > "$HARNESS_VERIFIER_DIR/reward.txt"; fi
    """
)


def test_a_script_in_the_workspace_imports_its_sibling(
    backend: str, any_cli: Any, sec: Any, tmp_path: Path
) -> None:
    """``python3 test.py`` started in the workspace imports ``run.py`` next to it."""
    solved, nop = sec.unique("sibling-solved"), sec.unique("sibling-nop")
    tasks = tmp_path / "tasks"
    paths = [
        sec.write_task(
            tasks,
            solved,
            attack='printf "def run_tasks():\\n    return 42\\n" > "$HARNESS_WORKSPACE/run.py"\n',
            test_sh=SIBLING_SH,
            workspace={"test.py": SIBLING_TEST},
        ),
        sec.write_task(
            tasks, nop, attack="true\n", test_sh=SIBLING_SH, workspace={"test.py": SIBLING_TEST}
        ),
    ]
    run = any_cli.run(paths, timeout=240)
    assert run.code == 0, run
    assert _reward(run, solved) == 1.0, _stdout(run, solved)
    assert "SIBLING-IMPORTED" in _stdout(run, solved)
    assert _reward(run, nop) == 0.0


# ============================================================== git < 2.46 (14)

AGENT_REPO = textwrap.dedent(
    """\
    set -e
    mkdir -p "$HARNESS_WORKSPACE/project/repo"
    cd "$HARNESS_WORKSPACE/project/repo"
    git init -q
    git -c user.name=agent -c user.email=agent@example.invalid \\
        commit -q --allow-empty -m agent-commit
    """
)

GIT_SH = textwrap.dedent(
    """\
    cd "$HARNESS_WORKSPACE/project/repo" 2>/dev/null || cd "$HARNESS_WORKSPACE"
    if git log --format=%s 2>&1 | tee /dev/stderr | grep -q agent-commit; then
      echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"
    else echo 0 > "$HARNESS_VERIFIER_DIR/reward.txt"; fi
    git status 2>&1 | head -5
    """
)


def test_the_verifiers_git_accepts_the_agents_nested_repository(
    backend: str, any_cli: Any, sec: Any, tmp_path: Path
) -> None:
    """The agent's uid owns ``project/repo`` under the workspace; root's git reads it."""
    git = shutil.which("git")
    if git is None:
        prerequisite_missing("git on the host (copied into the task's image)")
    tasks = tmp_path / "tasks"
    solved, nop = sec.unique("git-solved"), sec.unique("git-nop")
    dockerfile = f"FROM {sec.BASE_IMAGE}\nCOPY git /usr/local/bin/git\nWORKDIR /app\n"
    paths = [
        sec.write_task(tasks, solved, attack=AGENT_REPO, test_sh=GIT_SH, dockerfile=dockerfile),
        sec.write_task(tasks, nop, attack="true\n", test_sh=GIT_SH, dockerfile=dockerfile),
    ]
    for path in paths:  # the host's git (Debian 12's 2.39, the base image's release)
        shutil.copy2(git, path / "environment" / "git")
    run = any_cli.run(paths, timeout=300)
    assert run.code == 0, run
    stdout = _stdout(run, solved)
    assert _reward(run, solved) == 1.0, stdout
    assert "dubious ownership" not in stdout, stdout
    assert _reward(run, nop) == 0.0


# ============================================================== separate verifier /tmp (12)

STAGED_SH = textwrap.dedent(
    """\
    if [ "$(cat /tmp/configured-artifact.txt 2>/dev/null)" = configured-ok ]; then
      echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"
    else
      echo "missing configured artifact at /tmp/configured-artifact.txt"
      echo 0 > "$HARNESS_VERIFIER_DIR/reward.txt"
    fi
    """
)


def _separate_task(root: Path, name: str, agent: str, base: str) -> Path:
    task = root / name
    (task / "tests").mkdir(parents=True)
    (task / "environment").mkdir()
    (task / "task.toml").write_text(
        f'artifacts = ["/tmp/configured-artifact.txt"]\n\n[task]\nname = "{name}"\n\n'
        "[agent]\ntimeout_sec = 30\n\n"
        '[verifier]\ntimeout_sec = 30\nenvironment_mode = "separate"\n\n'
        "[environment]\ncpus = 1\nmemory_mb = 512\n"
    )
    (task / "instruction.md").write_text("#!/bin/bash\n" + agent)
    (task / "environment" / "Dockerfile").write_text(f"FROM {base}\nWORKDIR /app\n")
    (task / "tests" / "Dockerfile").write_text(
        f"FROM {base}\nWORKDIR /app\nCOPY test.sh /tests/test.sh\nRUN chmod 755 /tests/test.sh\n"
    )
    (task / "tests" / "test.sh").write_text("#!/bin/bash\n" + STAGED_SH)
    (task / "tests" / "test.sh").chmod(0o755)
    return task


@pytest.mark.docker
def test_an_artifact_staged_in_tmp_reaches_a_separate_verifier(
    cli: Any, sec: Any, tmp_path: Path
) -> None:
    """Harbor's ``separate-verifier-environment``: the artifact at ``/tmp`` is there.

    Docker only: the local sandbox copies no artifact out of ``/tmp`` (its phases' scratch
    dirs are not paths of the trial it can name).
    """
    solved, nop = sec.unique("staged-solved"), sec.unique("staged-nop")
    tasks = tmp_path / "tasks"
    paths = [
        _separate_task(
            tasks, solved, "echo configured-ok > /tmp/configured-artifact.txt\n", sec.BASE_IMAGE
        ),
        _separate_task(tasks, nop, "true\n", sec.BASE_IMAGE),
    ]
    run = cli.run(paths, timeout=300)
    assert run.code == 0, run
    assert _reward(run, solved) == 1.0, _stdout(run, solved)
    assert _reward(run, nop) == 0.0


def _two_step_separate_task(root: Path, name: str, solve: bool, base: str) -> Path:
    """Harbor's ``separate-verifier-multi-step``: each step's own verifier, /tmp artifact."""
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "task.toml").write_text(
        f'artifacts = ["/tmp/configured-artifact.txt"]\n\n[task]\nname = "{name}"\n\n'
        "[agent]\ntimeout_sec = 30\n\n"
        '[verifier]\ntimeout_sec = 30\nenvironment_mode = "separate"\n\n'
        "[environment]\ncpus = 1\nmemory_mb = 512\n\n"
        '[[steps]]\nname = "one"\n\n[[steps]]\nname = "two"\n'
    )
    (task / "instruction.md").write_text("Two steps.\n")
    (task / "environment" / "Dockerfile").write_text(f"FROM {base}\nWORKDIR /app\n")
    for step in ("one", "two"):
        tests = task / "steps" / step / "tests"
        tests.mkdir(parents=True)
        write = f"echo configured-{step} > /tmp/configured-artifact.txt\n" if solve else "true\n"
        (task / "steps" / step / "instruction.md").write_text("#!/bin/bash\n" + write)
        (tests / "Dockerfile").write_text(
            f"FROM {base}\nWORKDIR /app\nCOPY test.sh /tests/test.sh\n"
            "RUN chmod 755 /tests/test.sh\n"
        )
        (tests / "test.sh").write_text(
            "#!/bin/bash\n" + STAGED_SH.replace("= configured-ok", f"= configured-{step}")
        )
        (tests / "test.sh").chmod(0o755)
    return task


@pytest.mark.docker
def test_each_steps_tmp_artifact_reaches_its_separate_verifier(
    cli: Any, sec: Any, tmp_path: Path
) -> None:
    """Harbor's ``separate-verifier-multi-step``: step two's verifier sees step two's file."""
    solved, nop = sec.unique("staged-steps-solved"), sec.unique("staged-steps-nop")
    tasks = tmp_path / "tasks"
    paths = [
        _two_step_separate_task(tasks, solved, True, sec.BASE_IMAGE),
        _two_step_separate_task(tasks, nop, False, sec.BASE_IMAGE),
    ]
    run = cli.run(paths, timeout=400)
    assert run.code == 0, run
    record = run.by_task(solved)
    assert _reward(run, solved) == 1.0, record
    assert _reward(run, nop) == 0.0
