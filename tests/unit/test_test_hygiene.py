"""The test suite's own rules, read from its source with ``ast`` (nothing is imported).

A test that cannot run skips only through ``support.docker.prerequisite_missing`` (or a helper
built on it, such as ``requires_docker`` or the ``root`` marker), which names what is missing
and fails instead of skipping under ``HARNESS_REQUIRE_DOCKER=1`` (CI), so a missing
prerequisite can never turn CI green. Hence no test module calls ``pytest.skip``,
``pytest.importorskip`` or ``pytest.xfail``, marks a test ``skip``, ``skipif`` or ``xfail``,
or uses ``unittest``'s skips; ``tests/support/docker.py``, which holds the one sanctioned
``pytest.skip``, is the exception. Task fixtures (``tests/fixtures/``) are data run inside a
sandbox, not tests of this repository, and are not read.

One rule is checked by running pytest itself: one command may name test files of every test
dir together, and each module's ``from conftest import`` still finds its own dir's conftest.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
#: The one module that may skip: it holds ``prerequisite_missing``.
SANCTIONED = TESTS / "support" / "docker.py"
#: Attribute names that skip or expect failure, on ``pytest``, ``pytest.mark`` or ``unittest``.
BARE = frozenset({"skip", "skipif", "importorskip", "xfail", "skipTest", "skipIf", "skipUnless"})


def _modules() -> list[Path]:
    return sorted(
        path
        for path in TESTS.rglob("*.py")
        if "fixtures" not in path.relative_to(TESTS).parts and path != SANCTIONED
    )


def bare_skips(source: str) -> list[tuple[int, str]]:
    """Each (line, spelling) in ``source`` that skips or xfails without ``prerequisite_missing``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in BARE:
            found.append((node.lineno, f"{ast.unparse(node.value)}.{node.attr}"))
        elif isinstance(node, ast.ImportFrom) and node.module in ("pytest", "unittest"):
            found += [(node.lineno, f"from {node.module} import {alias.name}")
                      for alias in node.names if alias.name in BARE]  # fmt: skip
    return found


def test_every_skip_goes_through_prerequisite_missing() -> None:
    offenders = [
        f"{path.relative_to(TESTS.parent)}:{line}: {spelling}"
        for path in _modules()
        for line, spelling in bare_skips(path.read_text())
    ]
    assert not offenders, (
        "bare skips (call support.docker.prerequisite_missing(reason) instead, or mark the "
        "test @pytest.mark.root for root):\n" + "\n".join(offenders)
    )


def test_the_rule_sees_each_spelling_of_a_skip() -> None:
    source = """
import pytest, unittest
from pytest import skip
pytestmark = pytest.mark.skipif(True, reason="x")
@pytest.mark.skip(reason="x")
def test_a():
    pytest.skip("x")
@pytest.mark.xfail
def test_b():
    pytest.importorskip("x")
    pytest.xfail("x")
class T(unittest.TestCase):
    @unittest.skipIf(True, "x")
    def test_c(self):
        self.skipTest("x")
"""
    spellings = sorted({spelling for _line, spelling in bare_skips(source)})
    assert spellings == [
        "from pytest import skip",
        "pytest.importorskip",
        "pytest.mark.skip",
        "pytest.mark.skipif",
        "pytest.mark.xfail",
        "pytest.skip",
        "pytest.xfail",
        "self.skipTest",
        "unittest.skipIf",
    ]
    assert bare_skips("prerequisite_missing('iptables')\nskipped = 1\nx.skips\n") == []


def test_every_test_module_has_a_basename_of_its_own() -> None:
    """The test dirs are not packages: two ``test_x.py`` in two dirs cannot both be collected.

    pytest imports each by its basename ("import file mismatch"), so the second one's
    tests never run in a run that collects both (CI's serial part stopped at collection).
    """
    seen: dict[str, Path] = {}
    clashes = []
    for path in _modules():
        if not path.name.startswith("test_"):
            continue
        if path.name in seen:
            clashes.append(f"{seen[path.name].relative_to(TESTS)} and {path.relative_to(TESTS)}")
        seen.setdefault(path.name, path)
    assert clashes == [], "rename one of each: " + "; ".join(clashes)


def _imports_a_conftest(path: Path) -> bool:
    return any(
        isinstance(node, ast.ImportFrom) and node.module == "conftest" and not node.level
        for node in ast.walk(ast.parse(path.read_text()))
    )


def test_one_command_collects_test_files_of_every_dir_together() -> None:
    """``pytest tests/security/x.py tests/e2e/y.py`` collects both, without an import error.

    Every ``conftest.py`` is the one module ``conftest`` (the dirs are not packages), and
    pytest loads the conftests of all named paths first, so a module's ``from conftest
    import`` would find the last dir's conftest, not its own (the root conftest's
    ``pytest_collectstart`` points it at the module's own). Named here: from each test dir,
    its first module and every module that imports from a conftest, the dirs in reverse so
    that no dir's conftest is the last one loaded by chance of order.
    """
    named: list[Path] = []
    for directory in sorted((d for d in TESTS.iterdir() if d.is_dir()), reverse=True):
        tests = sorted(directory.glob("test_*.py"))
        if directory.name == "fixtures" or not tests:
            continue
        named += [path for path in tests if path == tests[0] or _imports_a_conftest(path)]
    dirs = {path.parent.name for path in named}
    assert {"e2e", "security", "unit"} <= dirs, dirs
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         *(str(path.relative_to(TESTS.parent)) for path in named)],
        cwd=TESTS.parent, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    collected = {line.split("::", 1)[0] for line in done.stdout.splitlines() if "::" in line}
    missing = {str(path.relative_to(TESTS.parent)) for path in named} - collected
    assert not missing, f"named but nothing collected: {sorted(missing)}"


def conftest_imports_at_run_time(source: str) -> list[int]:
    """Lines of ``source`` that import from ``conftest`` inside a function or method."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found += [
                inner.lineno
                for inner in ast.walk(node)
                if isinstance(inner, ast.ImportFrom) and inner.module == "conftest"
            ]
    return found


def test_no_test_imports_from_a_conftest_at_run_time() -> None:
    """``from conftest import`` at module level only: ``conftest`` means the module's own
    dir's only while the module is collected; when a test runs it is whichever conftest
    the collection of the worker's other modules left (two compose tests failed in CI so)."""
    found = [
        f"{path.relative_to(TESTS)}:{line}"
        for path in _modules()
        for line in conftest_imports_at_run_time(path.read_text())
    ]
    assert found == [], "move these imports to the module's top: " + ", ".join(found)


def test_the_rule_sees_an_import_from_a_conftest_in_a_function() -> None:
    source = "from conftest import A\n\ndef test_x():\n    from conftest import B\n"
    assert conftest_imports_at_run_time(source) == [4]
