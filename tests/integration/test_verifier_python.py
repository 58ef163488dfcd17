"""The verifier's ``python``/``python3`` wrappers, run for real (``/bin/sh``, a real Python).

A workspace holds the agent's ``pytest.py`` and ``json.py`` (forgers) and its ``run.py``
(the module a task's ``test.py`` imports by name, as Terminal-Bench's ``cancel-async-tasks``
does). What holds: ``python3 test.py`` imports ``run`` from the script's dir;
``python3 -m pytest`` and ``python3 -c`` started in the workspace never import the agent's
modules, nor does a Python the script itself starts with ``-m``; ``-I`` and ``-P`` keep the
script dir off as the author asked.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.verifier_tools import stage_tools

#: A Python >= 3.11 (PYTHONSAFEPATH), the one that runs the tests.
PYTHON = os.path.realpath(sys.executable)


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    tools = stage_tools(tmp_path / "tools", [PYTHON])
    pybin = tmp_path / "pybin"  # the image's python3, as a PATH entry after the wrappers
    pybin.mkdir()
    for name in ("python", "python3"):
        (pybin / name).symlink_to(PYTHON)
    ws = tmp_path / "app"
    ws.mkdir()
    forge = "import sys\nprint('FORGED-' + __name__)\nsys.exit(0)\n"
    (ws / "pytest.py").write_text(forge)
    (ws / "json.py").write_text(forge)
    (ws / "run.py").write_text("def run_tasks():\n    return 'agent-run'\n")
    (ws / "test.py").write_text("from run import run_tasks\nprint('SIBLING', run_tasks())\n")
    tests = tmp_path / "tests"  # the task's own dir: its script starts Pythons in the workspace
    tests.mkdir()
    (tests / "helper.py").write_text("VALUE = 'task-helper'\n")
    (tests / "check.py").write_text(
        "import subprocess, sys\n"
        "from helper import VALUE\n"
        "print('SIBLING', VALUE)\n"
        "for argv in (['-c', 'import json; print(json.dumps(1))'],\n"
        "             ['-m', 'pytest', '--version']):\n"
        "    child = subprocess.run([sys.executable, *argv], capture_output=True, text=True)\n"
        "    print('CHILD', child.stdout.strip(), child.stderr.strip())\n"
    )
    return {"tools": tools, "pybin": pybin, "ws": ws, "tests": tests}


def _run(layout: dict[str, Path], *argv: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": f"{layout['tools'] / 'bin'}:{layout['pybin']}:/usr/bin:/bin",
        "PYTHONSAFEPATH": "1",
        "PYTHONNOUSERSITE": "1",
        "HOME": str(layout["ws"].parent),
    }
    return subprocess.run(
        list(argv), cwd=layout["ws"], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("name", ["python", "python3"])
def test_a_script_imports_its_sibling(layout: dict[str, Path], name: str) -> None:
    """``python test.py`` in the workspace imports ``run.py`` beside it (the author's wish)."""
    for script in ("test.py", str(layout["ws"] / "test.py")):
        done = _run(layout, name, "-u", script)
        assert done.returncode == 0, done
        assert "SIBLING agent-run" in done.stdout, done


def test_a_task_scripts_children_in_the_workspace_stay_safe(layout: dict[str, Path]) -> None:
    """A script of the task's own dir imports its sibling; Pythons it starts with ``-c`` or
    ``-m`` in the workspace import neither the agent's ``json.py`` nor its ``pytest.py``."""
    done = _run(layout, "python3", str(layout["tests"] / "check.py"))
    assert done.returncode == 0, done
    assert "SIBLING task-helper" in done.stdout, done
    assert "CHILD 1" in done.stdout, done
    assert "pytest" in done.stdout and "FORGED" not in done.stdout, done


def test_m_and_c_from_the_workspace_never_import_the_agents_modules(
    layout: dict[str, Path],
) -> None:
    done = _run(layout, "python3", "-m", "pytest", "--version")
    assert "FORGED" not in done.stdout + done.stderr, done
    assert "pytest" in done.stdout + done.stderr, done
    for argv in (
        ("python3", "-c", "import json; print(json.dumps(2))"),
        ("python3", "-Bc", "import json; print(json.dumps(2))"),
        ("python3", "-W", "ignore", "-c", "import json; print(json.dumps(2))"),
        ("python3", "-Xdev", "-m", "json.tool", "--help"),
    ):
        done = _run(layout, *argv)
        assert done.returncode == 0, (argv, done)
        assert "FORGED" not in done.stdout, (argv, done)
    stdin = subprocess.run(
        ["python3", "-"],
        input="import json\nprint(json.dumps(3))\n",
        cwd=layout["ws"],
        env={"PATH": f"{layout['tools'] / 'bin'}:{layout['pybin']}", "PYTHONSAFEPATH": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert stdin.stdout.strip() == "3", stdin


def test_isolated_and_safe_path_flags_keep_the_script_dir_off(layout: dict[str, Path]) -> None:
    for flag in ("-I", "-P"):
        done = _run(layout, "python3", flag, "test.py")
        assert "No module named 'run'" in done.stderr, (flag, done)


def test_the_wrapper_runs_the_next_python_on_path(layout: dict[str, Path]) -> None:
    done = _run(layout, "python3", "-c", "import sys; print(sys.executable)")
    assert done.stdout.strip() == str(layout["pybin"] / "python3"), done
    lonely = subprocess.run(
        ["python3", "-c", "pass"],
        env={"PATH": str(layout["tools"] / "bin")},
        capture_output=True,
        text=True,
        timeout=60,
        executable=shutil.which("python3", path=str(layout["tools"] / "bin")),
    )
    assert lonely.returncode == 127 and "not found on PATH" in lonely.stderr, lonely
