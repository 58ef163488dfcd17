"""``harness report`` on the examples run, opened from file:// in headless chromium."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from browser_support import Watched, harness


@pytest.fixture(scope="module")
def report(example_runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "report.html"
    result = harness("report", example_runs["builtin"], example_runs["nop"], "-o", out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"wrote {out}" in result.stdout
    return out


def summary_of(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text())


def metric(w: Watched, key: str) -> Any:
    return json.loads(
        w.page.locator(f'[data-metric="{key}"]').first.get_attribute("data-value") or ""
    )


def test_report_is_one_file_with_no_outside_reference(report: Path) -> None:
    html = report.read_text()
    # Nothing is loaded from anywhere: no src attribute, no stylesheet or script link.
    assert not re.search(r"<(script|img|iframe|link)[^>]*\s(src|href)=\"(?!data:)", html)
    assert "Content-Security-Policy" in html and "default-src 'none'" in html


def test_overview_headline_equals_summary(
    report: Path, example_runs: dict[str, Path], watched: Callable[..., Watched], artifacts: Path
) -> None:
    w = watched()
    w.goto(report.as_uri() + "#/run/0")
    summary = summary_of(example_runs["builtin"])
    for key in ("mean_reward", "success_rate", "trials", "tasks"):
        assert metric(w, key) == summary[key], key
    assert metric(w, "mean_reward_ci") == summary["ci"]["mean_reward"]
    assert metric(w, "pass_at_1") == summary["pass_at_k"]["1"]
    assert metric(w, "tokens") == summary["usage"]["total_tokens"]["total"]
    assert metric(w, "calls") == summary["usage"]["calls"]["total"]
    assert w.text('[data-metric="mean_reward"] .value') == f"{summary['mean_reward']:.3f}"
    assert w.text('[data-metric="trials"] .value') == str(summary["trials"])
    # The plan is the denominator: how many planned trials lack a record; the mean over
    # graded trials only is secondary, beside the headline.
    assert metric(w, "mean_reward") == summary["mean_reward_planned"]
    assert metric(w, "graded_mean_reward") == summary["graded_only"]["mean_reward"]
    assert "0 ungraded" in w.text('[data-metric="graded_mean_reward"] .sub')
    assert f"of {summary['planned']} planned" in w.text('[data-metric="trials"] .sub')
    assert f"{summary['unrecorded']} without a record" in w.text('[data-metric="trials"] .sub')
    # Charts and tables are drawn: the pass@k curve, the histogram, the per-task table.
    assert w.page.locator("#passk svg circle").count() == len(summary["pass_at_k"]) * 2
    assert w.page.locator("#histogram svg rect").count() == 10
    assert w.page.locator("#tasks tbody tr").count() == summary["tasks"]
    assert "faux/demo" in w.text("#config")
    w.page.screenshot(path=artifacts / "report-overview.png", full_page=True)

    # The nop run: every trial graded 0, so its own headline says 0.
    w.goto(report.as_uri() + "#/run/1")
    nop = summary_of(example_runs["nop"])
    assert metric(w, "mean_reward") == nop["mean_reward"] == 0.0
    assert w.problems() == []
    assert all(url.startswith("file://") for url in w.requests), w.requests


def test_trials_table_sorts_and_filters(
    report: Path, example_runs: dict[str, Path], watched: Callable[..., Watched], artifacts: Path
) -> None:
    w = watched()
    w.goto(report.as_uri() + "#/run/0")
    w.page.click("header nav a.sub >> nth=0")  # the first run's trials
    table = w.page.locator('[data-table="trials-0"]')
    assert table.get_attribute("data-shown") == "4"
    w.page.fill('[data-table="trials-0"] input.filter-text', "sales")
    assert table.get_attribute("data-shown") == "1"
    assert "sales-report" in w.text('[data-table="trials-0"] tbody')
    assert "q=sales" in w.page.url  # the filter is in the address: a link shows the same rows
    w.page.fill('[data-table="trials-0"] input.filter-text', "")
    w.page.select_option('[data-table="trials-0"] select[data-filter="category"]', "debugging")
    assert table.get_attribute("data-shown") == "1"
    w.page.select_option('[data-table="trials-0"] select[data-filter="category"]', "")
    w.page.select_option('[data-table="trials-0"] select[data-filter="status"]', "completed")
    assert table.get_attribute("data-shown") == "4"
    w.page.click('[data-table="trials-0"] button.sort[data-col="duration"]')
    w.page.screenshot(path=artifacts / "report-trials.png", full_page=True)
    durations = [
        r["timings"]["total"]
        for r in map(
            json.loads, (example_runs["builtin"] / "trials.jsonl").read_text().splitlines()
        )
    ]
    slowest = max(durations)
    first_row = w.text('[data-table="trials-0"] tbody tr')
    assert f"{slowest:.2f} s" in first_row or f"{slowest * 1000:.0f} ms" in first_row
    assert w.problems() == []


def test_trial_page_shows_transcript_and_diff(
    report: Path, watched: Callable[..., Watched], artifacts: Path
) -> None:
    w = watched()
    w.goto(report.as_uri() + "#/run/0/trials?q=fix-bug")
    w.page.click("a.trial-link")
    w.page.wait_for_selector(".trial[data-ready]")
    transcript = w.text("#transcript")
    # faux/demo's script for fix-bug: ls, read calc.py, then an edit with this message.
    assert "median sorts its argument in place" in transcript
    assert "tool call read" in transcript and "tool result read" in transcript
    assert "model call #1" in transcript
    assert w.page.locator("#model-calls details.call").count() >= 3
    changes = w.text("#changes")
    assert "calc.py" in changes and "modified" in changes
    assert w.page.locator("#changes pre.diff span.add").count() > 0
    assert w.page.locator("#changes pre.diff span.del").count() > 0
    assert "PASS" in w.text("#verifier")  # hidden_tests' output
    assert "No tampering" in w.text("#security")
    w.page.screenshot(path=artifacts / "report-trial.png", full_page=True)
    assert w.problems() == []


def test_hello_file_diff_adds_the_file(report: Path, watched: Callable[..., Watched]) -> None:
    w = watched()
    w.goto(report.as_uri() + "#/run/0/trials?q=hello-file")
    w.page.click("a.trial-link")
    w.page.wait_for_selector(".trial[data-ready]")
    assert "added" in w.text("#changes") and "+Hello, world!" in w.text("#changes pre.diff")
    assert "I'll create the file." in w.text("#transcript")
    assert w.problems() == []


def test_comparison_page(
    report: Path, example_runs: dict[str, Path], watched: Callable[..., Watched], artifacts: Path
) -> None:
    w = watched()
    w.goto(report.as_uri() + "#/run/0")
    w.page.click("header nav >> text=Compare")
    w.page.wait_for_selector("#compare-tasks")
    # nop against builtin: every example task drops from 1 to 0.
    assert "4 / 0 / 0" not in w.text("#compare-summary")
    assert "0 / 4 / 0" in w.text("#compare-summary")  # improved / regressed / unchanged
    rows = w.page.locator("#compare-tasks tbody tr")
    assert rows.count() == 4
    assert all("-1.000" in rows.nth(i).inner_text().replace("\u2212", "-") for i in range(4))
    w.page.screenshot(path=artifacts / "report-compare.png", full_page=True)
    assert w.problems() == []
