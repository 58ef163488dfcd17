"""A verdict taken after tampering, crafted as a run leaves it, in the browser."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from browser_support import Watched, harness

from harness.records import AgentRef, SandboxRef, TaskRef, TrialRecord, TrialStatus, TrialStore
from harness.records.atomic import write_json_atomic
from harness.records.metrics import summarize

T0 = datetime(2026, 12, 7, 5, 0, tzinfo=UTC)
FORGED, CLEAN = "forged-abc123.r0", "clean-abc123.r0"
HOOK = "/etc/apt/apt.conf.d/99x"


def record(trial: str, *, forged: bool) -> TrialRecord:
    extra = {"tampered_verdict": True} if forged else {}
    return TrialRecord(
        id=trial,
        task=TaskRef(name=trial, key=trial, hash="h", path="/nonexistent"),
        agent=AgentRef(name="command"),
        sandbox=SandboxRef(backend="docker"),
        status=TrialStatus.COMPLETED,
        ok=True,
        reward=1.0,
        started_at=T0,
        finished_at=T0 + timedelta(seconds=1),
        evidence_dir=f"trials/{trial}",
        events=[
            {
                "type": "tampering",
                "phase": "agent",
                "path": HOOK,
                "kind": "added",
                "detail": "the agent added apt's config: a verifier in this container reads it",
            }
        ]
        if forged
        else [],
        **extra,
    )


def test_a_verdict_after_tampering_is_marked_on_the_trial_and_the_run(
    tmp_path: Path, watched: Callable[..., Watched]
) -> None:
    run = tmp_path / "run"
    store = TrialStore(run)
    records = [record(FORGED, forged=True), record(CLEAN, forged=False)]
    for item in records:
        store.append(item)
    (run / "config.toml").write_text('[run]\nagent = "command"\n')
    write_json_atomic(run / "summary.json", summarize(records, planned=2))
    out = tmp_path / "report.html"
    result = harness("report", run, "-o", out)
    assert result.returncode == 0, result.stdout + result.stderr
    w = watched()
    w.goto(out.as_uri() + "#/run/0")
    metric = w.page.locator('[data-metric="tampered_verdicts"]')
    assert metric.get_attribute("data-value") == "1"
    assert "1 trial(s) with 1 tampering change(s)" in metric.inner_text()

    w.goto(out.as_uri() + f"#/run/0/trial/{FORGED}")
    w.page.wait_for_selector(".trial[data-ready]")
    assert "taken after tampering" in w.text('.trial-head [data-field="tampered-verdict"]')
    security = w.text("#security")
    assert "verdict taken after tampering" in security and HOOK in security

    w.goto(out.as_uri() + f"#/run/0/trial/{CLEAN}")
    w.page.wait_for_selector(".trial[data-ready]")
    assert w.page.locator('[data-field="tampered-verdict"]').count() == 0
    assert w.problems() == []
