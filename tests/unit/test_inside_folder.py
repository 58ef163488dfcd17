"""sandbox/inside/ is the in-sandbox boundary: what is shipped, on which Python, importing what.

Every module of the folder is shipped flat beside the supervisor (one glob); each must parse
as Python 3.9 (the oldest interpreter a task image may bring) and import only the standard
library and its siblings; copied flat into a dir of their own, with no ``sandbox`` package
in reach, they import each other as siblings.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.backend import INSIDE_DIR, SUPERVISOR_PATH, SUPERVISOR_SIBLINGS, inside_modules

MODULES = sorted(p for p in INSIDE_DIR.glob("*.py") if p.name != "__init__.py")
NAMES = {p.stem for p in MODULES}


def test_the_shipped_set_is_the_folder() -> None:
    assert list(inside_modules()) == MODULES
    assert SUPERVISOR_PATH in MODULES
    assert set(SUPERVISOR_SIBLINGS) == NAMES - {"supervisor"}
    for name in ("agent_loop", "confine", "evidence", "launch", "processes", "run_as_agent"):
        assert name in NAMES


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_runs_on_python_3_9_and_imports_only_the_stdlib_and_siblings(path: Path) -> None:
    tree = ast.parse(path.read_text(), feature_version=(3, 9))
    foreign = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots = [node.module]
        else:
            continue
        for name in roots:
            top = name.split(".")[0]
            inside = name == "sandbox.inside" or name.startswith("sandbox.inside.")
            if not (top in sys.stdlib_module_names or top in NAMES or inside):
                foreign.append(name)
    assert foreign == []


def test_a_flat_copy_imports_its_siblings_with_no_sandbox_package(tmp_path: Path) -> None:
    shipped = tmp_path / "opt-harness"
    shipped.mkdir()
    for source in inside_modules():
        shutil.copyfile(source, shipped / source.name)
    names = ", ".join(sorted(NAMES))
    probe = (
        "import sys\n"
        f"sys.path.insert(0, {str(shipped)!r})\n"
        f"import {names}\n"
        "assert 'sandbox' not in sys.modules, sorted(sys.modules)\n"
        "assert launch.confine is confine and supervisor.launch is launch\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
