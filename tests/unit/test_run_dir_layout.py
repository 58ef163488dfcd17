"""Run-dir names are spelled once, in harness/records/layout.py (docs/run-dir.md).

Read with ``ast``: a module of ``harness/`` that writes a run-dir file name as a string
(``"model_calls.jsonl"``), builds a trial's evidence path by hand (``f"trials/{id}"``,
``run_dir / "trials" / id``) fails here, naming the line and the layout name to use.
Docstrings and comments may say the names; only code is checked.
"""

from __future__ import annotations

import ast
from pathlib import Path

from harness.records import layout

REPO = Path(__file__).resolve().parents[2]
LAYOUT = REPO / "harness" / "records" / "layout.py"

#: Layout names whose values are unambiguous file names (a dot in them): spelled nowhere else.
FILE_NAMES = {
    value: name
    for name, value in vars(layout).items()
    if name.isupper() and isinstance(value, str) and "." in value
}
#: The run dir's own top-level dirs: never joined by hand onto a path, nor put in a string.
TOP_DIRS = {
    layout.TRIALS_DIRNAME: "TRIALS_DIRNAME / trial_evidence_dir()",
    layout.ATTEMPTS_DIRNAME: "ATTEMPTS_DIRNAME / attempt_evidence_dir()",
    layout.OBJECTS_DIRNAME: "OBJECTS_DIRNAME",
}

#: (module, string) that look like a run-dir name and are not one, each with its reason.
NOT_RUN_DIR_NAMES: dict[tuple[str, str], str] = {
    ("harness/agents/installed/mini_swe_agent.py", "trajectory.json"): (
        "the CLI's own output file (its -o), kept as is under agent-logs/"
    ),
}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _spelled_by_hand(path: Path) -> list[str]:
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, filename=str(path))
    skip = _docstrings(tree)
    where = path.relative_to(REPO)
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            if node.value in FILE_NAMES and (str(where), node.value) not in NOT_RUN_DIR_NAMES:
                bad.append(
                    f"{where}:{node.lineno}: {node.value!r} (layout.{FILE_NAMES[node.value]})"
                )
        elif isinstance(node, ast.JoinedStr) and node.values:
            first = node.values[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                head = first.value.split("/")[0]
                if "/" in first.value and head in TOP_DIRS:
                    bad.append(f'{where}:{node.lineno}: f"{first.value}..." ({TOP_DIRS[head]})')
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            right = node.right
            if isinstance(right, ast.Constant) and right.value in TOP_DIRS:
                bad.append(f"{where}:{node.lineno}: / {right.value!r} ({TOP_DIRS[right.value]})")
    return bad


def test_the_check_sees_the_names() -> None:
    assert {"model_calls.jsonl", "session.jsonl", "trials.jsonl", "run.lock"} <= set(FILE_NAMES)
    planted = REPO / "harness" / "records" / "layout.py"
    assert _spelled_by_hand(planted), "layout.py itself spells them: the check must see that"


def test_no_module_spells_a_run_dir_name_by_hand() -> None:
    bad = [
        line
        for path in sorted((REPO / "harness").rglob("*.py"))
        if path != LAYOUT
        for line in _spelled_by_hand(path)
    ]
    assert not bad, (
        "Run-dir names are defined once, in harness/records/layout.py; these spell one by "
        "hand:\n  " + "\n  ".join(bad) + "\nFix: import the name (or the helper) from "
        "harness.records.layout."
    )


def test_the_old_public_lock_names_are_the_layouts() -> None:
    # Two modules once defined a LOCK_FILENAME each (different files); the names stay
    # importable for old callers, as layout's values, and nothing of ours uses them.
    from harness.records import LOCK_FILENAME as records_lock
    from harness.records.store import LOCK_FILENAME as store_lock
    from harness.runner.rundir import LOCK_FILENAME as run_lock

    assert records_lock == store_lock == layout.TRIALS_LOCK_FILENAME
    assert run_lock == layout.RUN_LOCK_FILENAME
