"""Red team: a dataset metric's name from a run dir never reaches the terminal as control bytes.

``harness aggregate`` (and ``harness trials``) read each run's ``summary.json``
``dataset_metrics`` (:func:`harness.experiments.runs.dataset_metric_values`); a run dir is
anyone's (a CI artifact, a colleague's share), so its summary is hostile input. A metric
name or value key holding an escape sequence (an OSC title, a screen clear) must not reach
the terminal the text table is printed to: judged from outside, the CLI's output holds no
control byte but the line breaks, and the forged names are not in the written summary.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.cli import harness

#: An OSC window title, a screen clear and a colour, as a metric name and as a value key.
HOSTILE = "\x1b]0;PWNED\x07\x1b[2Jevil\x1b[31m"


def _forged_run(parent: Path) -> Path:
    """A run dir (config.toml, trials.jsonl) whose summary.json was written by anyone."""
    run = parent / "run"
    run.mkdir()
    (run / "config.toml").write_text(
        '[run]\nrollouts = 1\npaths = ["/nonexistent"]\n\n[run.agent]\nname = "nop"\n'
    )
    (run / "trials.jsonl").write_text("")
    metrics = {
        HOSTILE: {"value": 0.5},
        "acc": {"value": {"k" + HOSTILE: 1.0, "fine": 0.25}},
        "mean": {"value": 0.75},
    }
    (run / "summary.json").write_text(json.dumps({"dataset_metrics": metrics}))
    return run


@pytest.mark.root  # host code only: the marker the security suite asks of it
def test_a_forged_metric_name_in_a_run_dir_prints_no_control_bytes(tmp_path: Path) -> None:
    run = _forged_run(tmp_path)
    out = tmp_path / "trials_summary.json"
    done = harness("aggregate", run, "--summary-out", out, timeout=120)
    shown = done.stdout + done.stderr
    assert "dataset metric" in shown, shown  # the table is printed: the honest names in it
    assert re.search(r"^mean\s+1\s", done.stdout, re.M), done.stdout
    assert re.search(r"^acc\.fine\s+1\s", done.stdout, re.M), done.stdout
    assert re.findall(r"[\x00-\x08\x0b-\x1f\x7f]", shown) == [], repr(shown)
    written = json.loads(out.read_text())
    assert sorted(written["dataset_metrics"]) == ["acc.fine", "mean"], written["dataset_metrics"]
