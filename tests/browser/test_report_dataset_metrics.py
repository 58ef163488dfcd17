"""A run's dataset metrics (summary.json's ``dataset_metrics``) in the report's headline."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from browser_support import Watched, harness

from harness.records import AgentRef, SandboxRef, TaskRef, TrialRecord, TrialStatus, TrialStore
from harness.records.atomic import write_json_atomic
from harness.records.metrics import summarize

T0 = datetime(2026, 12, 7, 5, 0, tzinfo=UTC)


def record(trial: str, reward: float) -> TrialRecord:
    return TrialRecord(
        id=trial,
        task=TaskRef(name=trial, key=trial, hash="h", path="/nonexistent"),
        agent=AgentRef(name="command"),
        sandbox=SandboxRef(backend="docker"),
        status=TrialStatus.COMPLETED,
        ok=True,
        reward=reward,
        started_at=T0,
        finished_at=T0 + timedelta(seconds=1),
        evidence_dir=f"trials/{trial}",
    )


def test_each_dataset_metric_shows_its_value_its_trials_and_its_error(
    tmp_path: Path, watched: Callable[..., Watched]
) -> None:
    run = tmp_path / "run"
    store = TrialStore(run)
    records = [record("a.r0", 1.0), record("b.r0", 0.0)]
    for item in records:
        store.append(item)
    (run / "config.toml").write_text('[run]\nagent = "command"\n')
    summary = summarize(records, planned=3).model_dump(mode="json")
    common = {"dataset": "d@1", "trials_counted": 3, "graded": 2, "ungraded": 1}
    summary["dataset_metrics"] = {
        "mean": {**common, "type": "mean", "source": "builtin", "value": 1 / 3, "error": None},
        "acc": {**common, "type": "uv-script", "source": "script", "value": {"acc": 0.5},
                "error": None},
        "bad": {**common, "type": "uv-script", "source": "script", "value": None,
                "error": "metric.json: a is not a finite number <img src=x onerror=alert(1)>"},
    }  # fmt: skip
    write_json_atomic(run / "summary.json", summary)
    out = tmp_path / "report.html"
    result = harness("report", run, "-o", out)
    assert result.returncode == 0, result.stdout + result.stderr
    w = watched()
    w.goto(out.as_uri() + "#/run/0")
    mean = w.page.locator('[data-metric="dataset_metric:mean"]')
    assert mean.get_attribute("data-value") == str(1 / 3)
    assert "0.333" in mean.inner_text() and "builtin over 3 trials, 2 graded" in mean.inner_text()
    assert "acc 0.500" in w.text('[data-metric="dataset_metric:acc"] .value')
    bad = w.page.locator('[data-metric="dataset_metric:bad"]')
    assert "error: metric.json: a is not a finite number" in bad.inner_text()
    assert w.page.locator("img").count() == 0
    assert w.problems() == []
