"""The report's experiment comparison: notes, the withheld headline, blocked pairs."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from browser_support import REPO, Watched, harness

CRASHY = {
    "responses": [{"text": "done"}],
    "tasks": {"harness-examples/hello-file": [{"error": {"status": 500, "message": "crash"}}]},
}


def test_a_blocked_experiment_shows_its_reasons_and_no_lift(
    tmp_path: Path, watched: Callable[..., Watched], artifacts: Path
) -> None:
    (tmp_path / "crashy.json").write_text(json.dumps(CRASHY))
    (tmp_path / "models.toml").write_text('[models."faux/crashy"]\nscript = "crashy.json"\n')
    experiment = tmp_path / "crash.toml"
    experiment.write_text(
        f'[experiment]\nname = "crash"\n\n[run]\ntasks.paths = ["{REPO / "examples" / "tasks"}"]\n'
        'tasks.names = ["harness-examples/hello-file", "harness-examples/fix-bug"]\n'
        'agent.name = "builtin"\nmodels = ["models.toml"]\n\n'
        '[variants.control]\nmodel = "faux/demo"\n\n[variants.crashing]\nmodel = "faux/crashy"\n'
    )
    ran = harness("experiment", "-c", experiment, "--out-dir", tmp_path / "e", "--display", "none")
    assert ran.returncode == 1, ran.stdout + ran.stderr
    report = tmp_path / "report.html"
    made = harness("report", tmp_path / "e", "-o", report)
    assert made.returncode == 0, made.stdout + made.stderr
    w = watched()
    w.goto(report.as_uri() + "#/")
    w.page.click("text=experiment crash: crashing vs control")
    w.page.wait_for_selector("#compare-notes")
    notes = w.text("#compare-notes")
    assert "withheld because pairs are blocked" in notes
    assert "One repetition cannot establish stability." in notes
    assert "crashing: errored (agent_error: Model call failed: HTTP 500" in notes
    assert "pass rate" in w.text("#compare-headline")
    rows = w.page.locator("#compare-tasks tbody tr")
    assert rows.count() == 2
    hello = [rows.nth(i).inner_text() for i in range(2) if "hello-file" in rows.nth(i).inner_text()]
    assert hello and "run 1: crashing: errored" in hello[0]
    w.page.screenshot(path=artifacts / "report-experiment.png", full_page=True)
    assert w.problems() == []
