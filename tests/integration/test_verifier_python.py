"""The verifier's ``sitecustomize`` (``sandbox/verifier_python.py``), run by real Pythons.

A workspace holds the agent's ``pytest.py`` and ``json.py`` (forgers) and its ``run.py``
(the module a task's ``test.py`` imports by name, as Terminal-Bench's ``cancel-async-tasks``
does). With the verifier's ``PYTHONSAFEPATH=1`` and the harness's site dir on
``PYTHONPATH``, what holds, for a Python started by any name or path: ``test.py`` imports
``run`` from its own dir; ``-m pytest``, ``-c`` and stdin started in the workspace never
import the agent's modules, nor do Pythons a task's script starts there; ``-I`` and ``-P``
keep the script dir off as the author asked; the image's own ``sitecustomize`` still runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.verifier_tools import stage_tools

#: Pythons >= 3.11 (PYTHONSAFEPATH): the one running the tests, and the system's (Debian's,
#: which has a sitecustomize of its own), where there is one.
PYTHONS = [os.path.realpath(sys.executable)] + [
    p for p in ("/usr/bin/python3",) if os.path.exists(p) and os.path.realpath(p) != sys.executable
]


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    tools = stage_tools(tmp_path / "tools", [sys.executable])
    ws = tmp_path / "app"
    ws.mkdir()
    forge = "import sys\nprint('FORGED-' + __name__)\nsys.exit(0)\n"
    (ws / "pytest.py").write_text(forge)
    (ws / "json.py").write_text(forge)
    (ws / "run.py").write_text("def run_tasks():\n    return 'agent-run'\n")
    (ws / "test.py").write_text("from run import run_tasks\nprint('SIBLING', run_tasks())\n")
    (ws / "sitecustomize.py").write_text(forge)  # beside a script: CPython never imports it
    tests = tmp_path / "tests"  # the task's own dir: its script starts Pythons in the workspace
    tests.mkdir()
    (tests / "helper.py").write_text("VALUE = 'task-helper'\n")
    (tests / "check.py").write_text(
        "import subprocess, sys\n"
        "from helper import VALUE\n"
        "print('SIBLING', VALUE)\n"
        "for argv in (['-c', 'import json; print(json.dumps(1))'],\n"
        "             ['-m', 'pytest', '--version'], ['test.py']):\n"
        "    child = subprocess.run([sys.executable, *argv], capture_output=True, text=True)\n"
        "    print('CHILD', child.stdout.strip(), child.stderr.strip())\n"
    )
    return {"site": tools / "site", "ws": ws, "tests": tests}


def _run(
    layout: dict[str, Path], *argv: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONSAFEPATH": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONPATH": str(layout["site"]),
        "HOME": str(layout["ws"].parent),
    }
    return subprocess.run(
        list(argv),
        cwd=layout["ws"],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("python", PYTHONS)
def test_a_script_imports_its_sibling(layout: dict[str, Path], python: str) -> None:
    """``python test.py`` in the workspace imports ``run.py`` beside it (the author's wish)."""
    for script in ("test.py", str(layout["ws"] / "test.py")):
        done = _run(layout, python, "-u", script)
        assert done.returncode == 0, done
        assert "SIBLING agent-run" in done.stdout, done


@pytest.mark.parametrize("python", PYTHONS)
def test_a_task_scripts_children_in_the_workspace_stay_safe(
    layout: dict[str, Path], python: str
) -> None:
    """A script of the task's own dir imports its sibling; the Pythons it starts through
    ``sys.executable`` in the workspace import neither the agent's ``json.py`` nor its
    ``pytest.py`` for ``-c`` and ``-m``, and a script there gets its own dir."""
    done = _run(layout, python, str(layout["tests"] / "check.py"))
    assert done.returncode == 0, done
    assert "SIBLING task-helper" in done.stdout, done
    assert "CHILD 1" in done.stdout, done
    assert "pytest" in done.stdout and "FORGED" not in done.stdout, done
    assert "CHILD SIBLING agent-run" in done.stdout, done


@pytest.mark.parametrize("python", PYTHONS)
def test_m_c_and_stdin_from_the_workspace_never_import_the_agents_modules(
    layout: dict[str, Path], python: str
) -> None:
    done = _run(layout, python, "-m", "pytest", "--version")
    assert "FORGED" not in done.stdout + done.stderr, done
    assert "pytest" in done.stdout + done.stderr, done
    for argv in (
        ("-c", "import json; print(json.dumps(2))"),
        ("-Bc", "import json; print(json.dumps(2))"),
        ("-W", "ignore", "-m", "json.tool", "--help"),
    ):
        done = _run(layout, python, *argv)
        assert done.returncode == 0, (argv, done)
        assert "FORGED" not in done.stdout, (argv, done)
    done = _run(layout, python, "-", stdin="import json\nprint(json.dumps(3))\n")
    assert done.stdout.strip() == "3", done


def test_isolated_and_safe_path_flags_keep_the_script_dir_off(layout: dict[str, Path]) -> None:
    for flag in ("-I", "-P"):
        done = _run(layout, PYTHONS[0], flag, "test.py")
        assert "No module named 'run'" in done.stderr, (flag, done)


def test_the_images_own_sitecustomize_still_runs(layout: dict[str, Path], tmp_path: Path) -> None:
    image_site = tmp_path / "image-site"
    image_site.mkdir()
    (image_site / "sitecustomize.py").write_text("import builtins\nbuiltins.IMAGE_SITE = 1\n")
    env_path = f"{layout['site']}:{image_site}"
    code = (
        "import builtins, sys, sitecustomize\n"
        "print(getattr(builtins, 'IMAGE_SITE', 0), sitecustomize.__file__)\n"
        "print(any(p.endswith('/site') for p in sys.path))\n"
    )
    done = subprocess.run(
        [PYTHONS[0], "-c", code],
        env={"PYTHONSAFEPATH": "1", "PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done
    first, second = done.stdout.splitlines()
    assert first == f"1 {image_site / 'sitecustomize.py'}", done
    assert second == "False", done  # the harness's site dir is off sys.path again
