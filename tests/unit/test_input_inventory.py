"""The inventory of untrusted inputs in docs/security.md is complete and true.

``docs/security.md`` ("Inventory of untrusted inputs") has two tables:

- the inputs: each way untrusted data (an agent, a task, a dataset, a lock, a run dir...)
  reaches host code or grading, with the tests that attack it;
- the modules: every module of ``harness/`` and ``sandbox/`` that runs a command or writes
  files, with the inputs it handles (or ``harness-made``: nothing untrusted chooses a path,
  an option or a command there).

These tests fail when a module that starts processes or writes files is added without a
row, when a row names a module or an input that does not exist, and when an input's attack
test is gone.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "security.md"
SECTION = "## Inventory of untrusted inputs"
HARNESS_MADE = "harness-made"

# Calls that start a process, by name (an attribute or a bare name).
_SPAWN_CALLS = {
    "create_subprocess_exec",
    "create_subprocess_shell",
    "run_tool",
    "posix_spawn",
    "posix_spawnp",
}
_OS_SPAWN_PREFIXES = ("exec", "spawn")
_OS_SPAWN = {"system", "popen", "fork", "forkpty"}
# Calls that write the filesystem whatever object they are called on.
_WRITE_METHODS = {
    "write_text",
    "write_bytes",
    "mkdir",
    "touch",
    "symlink_to",
    "hardlink_to",
    "unlink",
    "rmdir",
    "copyfile",
    "copytree",
    "rmtree",
    "mkstemp",
    "mkdtemp",
    "NamedTemporaryFile",
    "TemporaryDirectory",
    # The project's own writers: a module that calls one writes files too.
    "replacing",
    "write_bytes_atomic",
    "write_json_atomic",
    "remove_tree",
    "copy_file_beneath",
    "write_fixture",
    "seed_workspace",
    "chown_tree",
    "copy_tree_nofollow",
}
# os.<name> calls that write.
_OS_WRITES = {
    "rename",
    "replace",
    "remove",
    "unlink",
    "link",
    "symlink",
    "mkdir",
    "makedirs",
    "chmod",
    "chown",
    "lchown",
    "fchmod",
    "fchown",
    "truncate",
    "ftruncate",
    "rmdir",
    "removedirs",
    "mkfifo",
    "mknod",
    "utime",
}
_SHUTIL_WRITES = {"copy", "copy2", "copyfile", "copytree", "move", "rmtree", "chown", "copymode"}
_WRITE_MODE = re.compile(r"""['"][rb]*[wax+]|O_WRONLY|O_RDWR|O_CREAT|O_TRUNC|O_APPEND""")


def _call_name(node: ast.Call) -> tuple[str, str]:
    """The called name and the name it is an attribute of (``""`` when none)."""
    func = node.func
    if isinstance(func, ast.Attribute):
        base = func.value.id if isinstance(func.value, ast.Name) else ""
        return func.attr, base
    if isinstance(func, ast.Name):
        return func.id, ""
    return "", ""


def _spawns(node: ast.AST) -> bool:
    if isinstance(node, ast.Import | ast.ImportFrom):
        module = getattr(node, "module", None) or ""
        return module == "subprocess" or any(a.name == "subprocess" for a in node.names)
    if not isinstance(node, ast.Call):
        return False
    name, base = _call_name(node)
    if name in _SPAWN_CALLS:
        return True
    return base == "os" and (name.startswith(_OS_SPAWN_PREFIXES) or name in _OS_SPAWN)


def _writes(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    name, base = _call_name(node)
    if name in _WRITE_METHODS:
        return True
    if base == "os" and name in _OS_WRITES:
        return True
    if base == "shutil" and name in _SHUTIL_WRITES:
        return True
    if name == "open" or (base == "os" and name == "open"):
        modes = node.args[1:2] + [k.value for k in node.keywords if k.arg in ("mode", "flags")]
        return any(_WRITE_MODE.search(ast.unparse(m)) for m in modes)
    return False


def acting_modules() -> dict[str, set[str]]:
    """Every module of harness/ and sandbox/ that starts processes or writes files."""
    found: dict[str, set[str]] = {}
    for package in ("harness", "sandbox"):
        for path in sorted((REPO / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            kinds = set()
            for node in ast.walk(tree):
                if _spawns(node):
                    kinds.add("runs commands")
                if _writes(node):
                    kinds.add("writes files")
            if kinds:
                found[path.relative_to(REPO).as_posix()] = kinds
    return found


def _section() -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return text[start : end if end != -1 else len(text)]


def _table(section: str, first_header: str) -> list[list[str]]:
    """The rows of the table whose header's first cell is *first_header*."""
    lines = section.splitlines()
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0].lower() == first_header:
            rows = []
            for row in lines[i + 2 :]:
                if not row.startswith("|"):
                    break
                rows.append([c.strip() for c in row.strip().strip("|").split("|")])
            return rows
    raise AssertionError(f"docs/security.md: no table headed {first_header!r} in {SECTION!r}")


def _ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def inputs() -> dict[str, list[str]]:
    """Each input's key and the test node ids named for it."""
    table = _table(_section(), "input")
    return {_ticked(row[0])[0]: _ticked(row[-1]) for row in table}


def modules() -> dict[str, list[str]]:
    """Each listed module and the input keys it handles."""
    table = _table(_section(), "module")
    listed: dict[str, list[str]] = {}
    for row in table:
        for module in _ticked(row[0]):
            listed[module] = _ticked(row[1])
    return listed


def test_every_module_that_runs_commands_or_writes_files_is_in_the_inventory() -> None:
    missing = {m: sorted(k) for m, k in acting_modules().items() if m not in modules()}
    assert not missing, (
        "these modules run commands or write files but have no row in docs/security.md's "
        f"{SECTION!r} (module table): {missing}. Add one naming the untrusted inputs the "
        f"module handles (keys of the input table), or `{HARNESS_MADE}` when nothing "
        "untrusted chooses a path, an option or a command there; and an attack test for a "
        "new input."
    )


def test_every_listed_module_exists_and_names_known_inputs() -> None:
    known = set(inputs()) | {HARNESS_MADE}
    for module, keys in modules().items():
        assert (REPO / module).is_file(), f"docs/security.md lists {module}, which is gone"
        assert keys, f"docs/security.md: {module} names no input (or `{HARNESS_MADE}`)"
        unknown = set(keys) - known
        assert not unknown, f"docs/security.md: {module} names unknown inputs {unknown}"


def test_every_input_names_attack_tests_that_exist() -> None:
    for key, tests in inputs().items():
        assert tests, f"docs/security.md: input `{key}` names no test"
        for node in tests:
            file, _, name = node.partition("::")
            path = REPO / file
            assert path.is_file(), f"input `{key}`: no test file {file}"
            name = name.split("[", 1)[0]
            defined = {
                n.name
                for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
            }
            assert name in defined, f"input `{key}`: {file} has no test {name}"


def test_every_input_is_handled_by_a_listed_module() -> None:
    used = {key for keys in modules().values() for key in keys}
    unused = set(inputs()) - used
    assert not unused, f"docs/security.md: inputs no module handles: {sorted(unused)}"


def test_the_scanner_sees_commands_and_writes() -> None:
    """The scanner itself: a module that spawns or writes is found, a reader is not."""
    samples = {
        "import subprocess\n": True,
        "import os\nos.execv('/bin/true', ['true'])\n": True,
        "from pathlib import Path\nPath('x').write_text('y')\n": True,
        "open('x', 'wb')\n": True,
        "import os\nos.open('x', os.O_WRONLY | os.O_CREAT)\n": True,
        "import shutil\nshutil.copytree('a', 'b')\n": True,
        "open('x')\nopen('x', 'rb')\n": False,
        "'a'.replace('a', 'b')\n[1].remove(1)\n": False,
    }
    for source, acts in samples.items():
        tree = ast.parse(source)
        found = any(_spawns(n) or _writes(n) for n in ast.walk(tree))
        assert found is acts, source
