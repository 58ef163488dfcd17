"""The architecture as tests: who may import whom in ``harness/`` and ``sandbox/``.

Read from the source with ``ast`` (nothing is imported), so a rule holds for every line,
including code that never runs here. The words these tests use:

- **module**: a ``.py`` file under ``harness/`` or ``sandbox/``, named by its dotted path; a
  package is its ``__init__.py`` (``harness/trial/__init__.py`` is ``harness.trial``).
- **import**: every ``import`` and ``from ... import`` statement anywhere in a module: at the
  top, under ``if TYPE_CHECKING:``, in a ``try``/``except ImportError``, inside a function.
  Relative imports are resolved against the module's package. ``from P import name`` imports
  the module ``P.name`` when there is one, else the module ``P``. An import counts for the
  deepest module of ours it names; the parent packages Python runs on the way are not counted
  (if they were, every module would be in a cycle with ``harness/__init__.py``, which imports
  the whole public API).
- **package**: a module's top-level subpackage, the first two parts of its dotted name.
  ``harness.trial.lifecycle`` and ``harness.trial`` belong to the package ``harness.trial``;
  ``harness.episodes.trials`` to ``harness.episodes``, a different package. A module that
  sits directly in a root (``harness/api.py``) is a package of its own (``harness.api``), and
  so is each root (``harness``, ``sandbox``: their ``__init__.py``).
- **private name**: a name with one leading underscore (``_TrialRun``, ``_version``; dunders
  such as ``__version__`` are public). A private name belongs to the module that defines it
  and may be imported (or reached as ``module._name`` through an imported module) only
  from inside that module's package. A private module directly in a
  root (``harness/_version.py``) belongs to the root, so any module of that root may import
  it. Only names of ours are checked: tests may reach into private names to test them, and
  third-party privates are the third party's business.

The rules: ``sandbox/`` never imports ``harness/``; ``sandbox/inside/`` (the code shipped into
every sandbox, run there on Python 3.9) imports only the standard library and itself; no
import cycle between modules; no module imports another package's private name; and the
packages form a layered graph, no package-level cycle, where only the public facade
``harness/__init__.py`` may import anything; no re-export shim: a module that only
re-exports (a docstring, imports and ``__all__``) is a package's ``__init__.py`` or one of
the ``PUBLIC_FACES``, and no module installs a module under another name in
``sys.modules``; no module of ours imports a public face, which serves callers outside
``harness/`` and ``sandbox/``, nor the facade itself; and ``harness/``'s root holds at most
``MAX_HARNESS_ROOT_MODULES`` modules, the rest living in the packages.
``tests/unit/test_architecture.py`` is the one place these rules are written down;
docs/architecture.md explains them.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("harness", "sandbox")
#: The public facade: it re-exports the API, so it may import from any package.
FACADE = "harness"
#: The in-sandbox code: stdlib-only, shipped as files into every sandbox.
INSIDE = "sandbox.inside"
#: The Sandbox contract kit: pytest checks a backend's tests run; the product never imports it.
TESTING = "sandbox.testing"
#: Modules, other than a package's ``__init__.py``, that only re-export, each with its
#: reason: a documented public face. Any other such module is a shim, and there are none.
PUBLIC_FACES: dict[str, str] = {
    "harness.plugins": "the registries' public face, for plug-in authors (docs/plugins.md)",
}
#: The most modules (``.py`` files, ``__init__``, ``__main__`` and ``_version`` included)
#: directly in ``harness/``: the root is the public API; everything else is in a package.
MAX_HARNESS_ROOT_MODULES = 7
#: Standard modules newer than Python 3.9, which the in-sandbox code must still run on.
NOT_ON_PY39 = frozenset({"tomllib"})


@dataclass(frozen=True)
class Import:
    """One import statement's view of one imported name."""

    importer: str
    #: The absolute dotted name the statement reaches (``P.name`` for ``from P import name``).
    name: str
    #: The deepest module of ours it names, or None (stdlib, third party, a sibling file).
    target: str | None
    path: Path
    line: int
    text: str
    #: ``importlib.import_module("x")`` / ``__import__("x")`` with a constant string.
    dynamic: bool = False

    def where(self) -> str:
        """``path:line: text`` for a failure message."""
        return f"{self.path.relative_to(REPO)}:{self.line}: {self.text}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    """Every module of ours, by dotted name."""
    found = {}
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            found[_module_name(path)] = path
    return found


def _deepest_module(name: str) -> str | None:
    mods = modules()
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _is_private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def package_of(module: str) -> str:
    """The top-level subpackage a module belongs to (see the module docstring)."""
    return ".".join(module.split(".")[:2])


def _from_base(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if path.name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports_of(module: str, path: Path) -> Iterator[Import]:
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    mods = modules()
    for node in ast.walk(ast.parse(source, filename=str(path))):
        text = lines[node.lineno - 1].strip() if hasattr(node, "lineno") else ""
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _deepest_module(alias.name)
                yield Import(module, alias.name, target, path, node.lineno, text)
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(module, path, node)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                target = full if full in mods else _deepest_module(base)
                yield Import(module, full, target, path, node.lineno, text)
        elif (
            isinstance(node, ast.Call)
            and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                or (isinstance(node.func, ast.Name) and node.func.id == "__import__")
            )
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            name = node.args[0].value
            yield Import(module, name, _deepest_module(name), path, node.lineno, text, True)


def _module_aliases(module: str, path: Path, tree: ast.AST) -> dict[str, str]:
    """Local names bound to modules of ours by imports anywhere in the module (any scope)."""
    mods = modules()
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    if alias.name in mods:
                        aliases[alias.asname] = alias.name
                elif alias.name.split(".")[0] in ROOTS:
                    top = alias.name.split(".")[0]
                    aliases[top] = top
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(module, path, node)
            for alias in node.names:
                if f"{base}.{alias.name}" in mods:
                    aliases[alias.asname or alias.name] = f"{base}.{alias.name}"
    return aliases


def _attribute_uses(module: str, path: Path) -> Iterator[Import]:
    """``alias.name.name`` where ``alias`` is a module of ours: the names it reaches.

    So that ``import harness.trial.lifecycle as lc; lc._TrialRun`` is seen as what it is.
    """
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    tree = ast.parse(source, filename=str(path))
    aliases = _module_aliases(module, path, tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        attrs: list[str] = []
        base: ast.expr = node
        while isinstance(base, ast.Attribute):
            attrs.insert(0, base.attr)
            base = base.value
        if isinstance(base, ast.Name) and base.id in aliases:
            name = ".".join([aliases[base.id], *attrs])
            text = lines[node.lineno - 1].strip()
            yield Import(module, name, _deepest_module(name), path, node.lineno, text)


@cache
def all_imports() -> tuple[Import, ...]:
    """Every import of every module of ours."""
    return tuple(imp for m, p in modules().items() for imp in _imports_of(m, p))


def module_graph() -> dict[str, dict[str, list[Import]]]:
    """Module -> imported module -> the statements (static imports only, no self-edges)."""
    graph: dict[str, dict[str, list[Import]]] = {m: {} for m in modules()}
    for imp in all_imports():
        if imp.target is not None and imp.target != imp.importer and not imp.dynamic:
            graph[imp.importer].setdefault(imp.target, []).append(imp)
    return graph


def package_graph() -> dict[str, dict[str, list[Import]]]:
    """Package -> imported package -> the statements; the facade's own imports left out."""
    graph: dict[str, dict[str, list[Import]]] = {}
    for importer, targets in module_graph().items():
        if importer == FACADE:
            continue
        for target, imps in targets.items():
            a, b = package_of(importer), package_of(target)
            graph.setdefault(a, {})
            graph.setdefault(b, {})
            if a != b:
                graph[a].setdefault(b, []).extend(imps)
    return graph


def strongly_connected(graph: dict[str, dict[str, list[Import]]]) -> list[list[str]]:
    """The cycles of a graph: its strongly connected components of two or more nodes."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for node in sorted(graph):
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    return found


def shortest_cycle(graph: dict[str, dict[str, list[Import]]], component: list[str]) -> list[str]:
    """One shortest cycle through the component's first node: ``[a, b, ..., a]``."""
    start, members = component[0], set(component)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(graph[v]):
            if w not in members:
                continue
            if w == start:
                back = [v]  # v, its predecessor, ..., start
                while back[-1] != start:
                    back.append(came_from[back[-1]])
                return [*reversed(back), start]
            if w not in came_from:
                came_from[w] = v
                queue.append(w)
    raise AssertionError(f"no cycle through {start} in {component}")


def describe_cycles(graph: dict[str, dict[str, list[Import]]], kind: str) -> str:
    """Every cycle of the graph: its members and one concrete loop, statement by statement."""
    out = []
    for component in strongly_connected(graph):
        loop = shortest_cycle(graph, component)
        out.append(f"{kind} cycle of {len(component)}: {', '.join(component)}")
        out.append("  one loop in it:")
        for a, b in zip(loop, loop[1:], strict=False):
            out.append(f"    {a} -> {b}")
            statements = dict.fromkeys(imp.where() for imp in graph[a][b])  # one per line
            out.extend(f"        {where}" for where in list(statements)[:3])
    return "\n".join(out)


def test_the_rules_see_the_tree() -> None:
    # Not vacuous: the walk finds the packages and their imports.
    mods = modules()
    assert {"harness", "sandbox", "harness.api", "sandbox.backend"} <= set(mods)
    assert sum(1 for imp in all_imports() if imp.target is not None) > 500


def test_sandbox_never_imports_harness() -> None:
    bad = [
        imp.where()
        for imp in all_imports()
        if imp.importer.split(".")[0] == "sandbox" and imp.name.split(".")[0] == "harness"
    ]
    assert not bad, (
        "sandbox/ must never import harness/ (the isolation runtime is the lower layer; "
        "harness builds on it). Offending imports:\n  "
        + "\n  ".join(bad)
        + "\nFix: move what sandbox needs into sandbox/ (harness may re-export it), or pass "
        "it in from harness as an argument."
    )


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_nothing_but_tests_imports_the_contract_kit() -> None:
    # sandbox/testing/ imports pytest and runs checks over a backend: it serves test
    # modules (ours in tests/conformance/, a plug-in's own), never harness/ or sandbox/.
    kit = [imp for imp in all_imports() if _within(imp.importer, TESTING)]
    assert kit, f"{TESTING} imports nothing: the check below would be vacuous"
    bad = [
        imp.where()
        for imp in all_imports()
        if imp.target is not None
        and _within(imp.target, TESTING)
        and not _within(imp.importer, TESTING)
    ]
    assert not bad, (
        f"{TESTING} (the contract kit, which needs pytest) is imported by the product:\n  "
        + "\n  ".join(bad)
        + "\nFix: import what the code needs from the module the kit takes it from "
        "(sandbox.backend, sandbox.errors, ...); only tests subclass the kit."
    )


def _inside_siblings() -> set[str]:
    inside = REPO / Path(*INSIDE.split("."))
    return {p.stem for p in inside.glob("*.py")} | {p.name for p in inside.iterdir() if p.is_dir()}


def test_sandbox_inside_imports_only_the_stdlib_and_itself() -> None:
    inside = REPO / Path(*INSIDE.split("."))
    if not inside.exists():
        return  # the folder does not exist yet: nothing is shipped from it
    files = sorted(inside.rglob("*.py"))
    assert [f for f in files if f.name != "__init__.py"], f"{inside} exists but holds no module"
    siblings = _inside_siblings()
    checked, bad = 0, []
    for imp in all_imports():
        if not (imp.importer == INSIDE or imp.importer.startswith(INSIDE + ".")):
            continue
        checked += 1
        top = imp.name.split(".")[0]
        own = imp.name == INSIDE or imp.name.startswith(INSIDE + ".") or top in siblings
        stdlib = top in sys.stdlib_module_names and top not in NOT_ON_PY39
        if not (own or stdlib):
            bad.append(imp.where())
    assert checked, f"no import found in {inside}: the check would be vacuous"
    assert not bad, (
        "sandbox/inside/ is shipped as plain files into every sandbox and runs there on "
        "Python 3.9 with nothing installed: it may import only the standard library (3.9's) "
        "and its own modules. Offending imports:\n  "
        + "\n  ".join(bad)
        + "\nFix: do it with the stdlib, or move the code that needs the dependency out of "
        "sandbox/inside/ (the host side calls it)."
    )


def test_no_import_cycles_between_modules() -> None:
    graph = module_graph()
    cycles = describe_cycles(graph, "import")
    assert not cycles, (
        "Import cycles (TYPE_CHECKING and function-level imports count: they are the same "
        "dependency, only deferred):\n"
        + cycles
        + "\nFix: break one arrow of each loop. Move the shared name down into a module "
        "both can import (the lower layer), import it from the module that defines it rather "
        "than through a package that re-exports it, or pass a callable/protocol in instead "
        "of importing the upper layer."
    )


def test_no_module_imports_another_packages_private_name() -> None:
    uses = [*all_imports(), *(u for m, p in modules().items() for u in _attribute_uses(m, p))]
    bad: dict[str, None] = {}  # ordered, and one entry per statement and name
    for imp in uses:
        if imp.target is None or imp.dynamic:
            continue  # not ours
        parts = imp.name.split(".")
        for i, part in enumerate(parts):
            if not _is_private(part):
                continue
            owner = parts[:i]
            scope = owner[0] if len(owner) == 1 else package_of(".".join(owner))
            if imp.importer != scope and not imp.importer.startswith(scope + "."):
                bad[f"{imp.where()}  ({part} belongs to {'.'.join(owner)}, package {scope})"] = None
            break
    assert not bad, (
        "A private name (one leading underscore) is imported, or reached through a module "
        "imported, from another package:\n  "
        + "\n  ".join(bad)
        + "\nFix: make it public where it is defined (drop the underscore, document it, add it "
        "to __all__), or move the code that needs it into the owner's package."
    )


def test_packages_form_layers_without_cycles() -> None:
    graph = package_graph()
    cycles = describe_cycles(graph, "package")
    assert not cycles, (
        "The top-level subpackages must form layers (a graph without cycles); only the "
        f"facade {FACADE}/__init__.py may import from every package. Package cycles:\n"
        + cycles
        + "\nFix: the arrow that runs up is the wrong one: move the shared code into the "
        "lower package, or invert the dependency (the upper package passes a callable in)."
    )


def _is_reexport_only(path: Path) -> bool:
    """A module whose body is a docstring, imports and ``__all__``: it re-exports, nothing more."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for i, node in enumerate(tree.body):
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.Assign) and [
            t.id for t in node.targets if isinstance(t, ast.Name)
        ] == ["__all__"]:
            continue
        return False
    return True


def reexport_only() -> dict[str, Path]:
    """The modules, other than packages' ``__init__.py``, whose body only re-exports."""
    return {
        name: path
        for name, path in modules().items()
        if path.name != "__init__.py" and _is_reexport_only(path)
    }


def test_no_module_is_a_reexport_shim() -> None:
    # A module that moved is imported from its new home, everywhere; its old path is deleted,
    # not kept as a re-export (nor as a module that says it moved and grew code of its own).
    found = reexport_only()
    assert set(PUBLIC_FACES) <= set(found), (
        f"PUBLIC_FACES names modules that are not pure re-exports (or gone): "
        f"{sorted(set(PUBLIC_FACES) - set(found))}"
    )
    shims = sorted(name for name in found if name not in PUBLIC_FACES)
    said_moved = sorted(
        name
        for name, path in modules().items()
        if (doc := ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))))
        and re.search(r"[Mm]oved to :mod:|re-exported here|re-exports its|this path stays", doc)
    )
    assert not shims and not said_moved, (
        f"re-export shims (a docstring, imports and __all__ only): {shims}; modules whose "
        f"docstring says they moved: {said_moved}\nFix: delete the old path and import the "
        "names from their home everywhere (harness/, sandbox/, tests/, bench/, docs/); a "
        "documented public face goes in PUBLIC_FACES."
    )


def _installs_modules(path: Path) -> Iterator[int]:
    """The lines of ``path`` writing ``sys.modules[...]`` / ``sys.modules.setdefault(...)``.

    A key that is a constant naming no module of ours (``"sitecustomize"``) is left out.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))

    def ours(key: ast.expr) -> bool:
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            return key.value.split(".")[0] in ROOTS
        return True  # computed: f"{__name__}.run", a variable

    def is_sys_modules(node: ast.expr) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "modules"

    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if (
                    isinstance(target, ast.Subscript)
                    and is_sys_modules(target.value)
                    and ours(target.slice)
                ):
                    yield node.lineno
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("setdefault", "update", "__setitem__")
            and is_sys_modules(node.func.value)
            and (not node.args or ours(node.args[0]))
        ):
            yield node.lineno


def test_no_module_installs_a_module_under_another_name() -> None:
    # sys.modules["harness.run"] = legacy was how an old path outlived its file; a module's
    # name is its file's.
    bad = [
        f"{path.relative_to(REPO)}:{line}"
        for path in modules().values()
        for line in _installs_modules(path)
    ]
    assert not bad, (
        "modules write sys.modules (an old import path kept alive under another name): "
        + ", ".join(bad)
        + "\nFix: delete the alias; callers import the module by its own name."
    )


def test_the_harness_root_holds_few_modules() -> None:
    # The root is the public API (the facade, api, errors, plugins) and the ground floor
    # that every package needs; a concept's code lives in its package.
    root = sorted(path.name for path in (REPO / "harness").glob("*.py"))
    assert len(root) <= MAX_HARNESS_ROOT_MODULES, (
        f"harness/ holds {len(root)} modules at its root, more than "
        f"{MAX_HARNESS_ROOT_MODULES}: {root}\nFix: move the module into the package of its "
        "concept (and its row in docs/architecture.md's module map), with no shim left behind."
    )


def test_no_module_of_ours_imports_a_public_face() -> None:
    # A public face (harness.plugins) imports every concept's registry; our own code imports
    # the registry it needs, so a face never closes a cycle.
    uses = [*all_imports(), *(u for m, p in modules().items() for u in _attribute_uses(m, p))]
    bad = dict.fromkeys(
        f"{imp.where()}  ({imp.target} only re-exports)"
        for imp in uses
        if imp.target in PUBLIC_FACES and imp.target != imp.importer
    )
    assert not bad, (
        "A module of ours imports a public face that only re-exports (it serves callers "
        "outside harness/ and sandbox/):\n  "
        + "\n  ".join(bad)
        + "\nFix: import the name from the module the face re-exports it from."
    )


def test_no_module_of_ours_imports_the_facade() -> None:
    # The facade re-exports from every package; a module that imports it for one name
    # (__version__, run) depends on the whole API. __version__ is harness._version's, the
    # API harness.api's.
    uses = [*all_imports(), *(u for m, p in modules().items() for u in _attribute_uses(m, p))]
    bad = dict.fromkeys(
        imp.where() for imp in uses if imp.target == FACADE and imp.importer != FACADE
    )
    assert not bad, (
        f"A module of ours imports the facade {FACADE}/__init__.py:\n  "
        + "\n  ".join(bad)
        + "\nFix: import from the module that defines the name: harness._version for "
        "__version__, harness.api for run/resume/load_run/check, else the name's package."
    )


def _map_rows() -> list[set[str]]:
    """docs/architecture.md's module map: the modules (dotted) each row names, in order."""
    doc = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    start = doc.index("| module | what it holds |")
    rows = []
    for line in doc[start : doc.index("\n\n", start)].splitlines()[2:]:
        names = re.findall(r"`([^`]+)`", line.split(" | ")[0])
        # The first name is a path; the others in the cell sit in its folder.
        folder = Path(names[0]) if names[0].endswith("/") else Path(names[0]).parent
        row = set()
        for name in names:
            path = Path(name) if name.startswith(("harness/", "sandbox/")) else folder / name
            assert (REPO / path).exists(), f"the module map names {name}, which does not exist"
            row.add(".".join(path.with_suffix("").parts).removesuffix(".__init__"))
        rows.append(row)
    return rows


def test_the_module_map_names_real_modules_from_the_ground_floor_up() -> None:
    # docs/architecture.md says its map goes from the ground floor up: nothing in a row
    # imports a later row. The public faces and the facade stand apart.
    rows = _map_rows()
    assert len(rows) > 20

    def row_of(module: str) -> int | None:
        while module:
            for index, row in enumerate(rows):
                if module in row:
                    return index
            module = module.rpartition(".")[0]
        return None

    later = [
        f"{importer} (row {row_of(importer)}) imports {target} (row {row_of(target)})"
        for importer, targets in module_graph().items()
        if importer not in PUBLIC_FACES and importer != FACADE
        for target in targets
        if (a := row_of(importer)) is not None and (b := row_of(target)) is not None and b > a
    ]
    assert not later, "docs/architecture.md's module map is not in layer order:\n  " + "\n  ".join(
        later
    )
