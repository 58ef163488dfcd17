"""A trial with earlier attempts, cleanup errors, tampering events and fields of a newer
version (per-step and per-judge rewards), crafted as a run leaves it, in the browser."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from browser_support import Watched, harness

from harness.records import (
    AgentRef,
    AttemptSummary,
    SandboxRef,
    TaskRef,
    TrialError,
    TrialRecord,
    TrialStatus,
    TrialStore,
)

T0 = datetime(2026, 11, 30, 5, 0, tzinfo=UTC)
TRIAL = "retried-abc123.r0"


def transcript(path: Path, text: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    event = {
        "type": "message",
        "role": "assistant",
        "content": text,
        "timestamp": "2026-11-30T05:00:01Z",
    }
    (path / "transcript.jsonl").write_text(json.dumps(event) + "\n")


def crafted_run(root: Path) -> Path:
    run = root / "run"
    task = root / "task"
    (task / "workspace").mkdir(parents=True)
    (task / "task.toml").write_text(
        '[task]\nname = "crafted/retried"\n\n[metadata]\ncategory = "crafted"\n'
    )
    (task / "workspace" / "a.txt").write_text("before\n")
    first = TrialRecord(
        id=TRIAL,
        task=TaskRef(name="crafted/retried", key="crafted/retried", hash="h", path=str(task)),
        agent=AgentRef(name="command"),
        sandbox=SandboxRef(backend="local"),
        status=TrialStatus.ENVIRONMENT_ERROR,
        ok=False,
        errors=[TrialError(type="SandboxError", message="container died", phase="reset")],
        started_at=T0,
        finished_at=T0 + timedelta(seconds=1),
    )
    final = first.model_copy(
        update={
            "attempt": 2,
            "status": TrialStatus.COMPLETED,
            "ok": True,
            "reward": 0.75,
            "rewards": {"reward": 0.75, "tests": 1.0, "style": 0.5},
            "errors": [
                TrialError(
                    type="OSError", message="could not remove the root", phase="cleanup:remove_root"
                )
            ],
            "previous_attempts": [AttemptSummary.of(first, evidence_dir=f"attempts/{TRIAL}/1")],
            "timings": {"prepare": 0.1, "execute": 2.0, "grade": 0.5, "cleanup": 0.2, "total": 2.8},
            "events": [
                {
                    "type": "tampering",
                    "kind": "symlink",
                    "path": "workspace/escape",
                    "target": "/etc/shadow",
                },
                {
                    "type": "network_refused",
                    "phase": "agent",
                    "protocol": "connect",
                    "host": "exfil.example",
                    "port": 443,
                    "reason": "the host is not listed",
                },
                {  # the docker filter's counter: packets one rule dropped, not connections
                    "type": "network_refused",
                    "phase": "agent",
                    "protocol": "ip",
                    "refused": "metadata",
                    "reason": "metadata address",
                    "destination": "169.254.169.254/32",
                    "packets": 2,
                },
                {  # the docker filter's log: the exact destination of a counted refusal
                    "type": "network_refused",
                    "phase": "agent",
                    "protocol": "tcp",
                    "ip": "169.254.169.254",
                    "port": 80,
                    "refused": "metadata",
                    "reason": "metadata address",
                    "destination": "169.254.169.254/32",
                    "packets": 2,
                    "logged": True,
                },
            ],
            "posture": {
                "dropped": True,
                "network": {"mode": "allowlist", "declared": True, "allowed_hosts": ["pypi.org"]},
            },
            "verifier_posture": {"network": {"mode": "public", "declared": False}},
            "evidence_dir": f"trials/{TRIAL}",
            "steps": [
                {
                    "name": "build",
                    "reward": 1.0,
                    "network": {
                        "agent": {
                            "mode": "allowlist",
                            "declared": True,
                            "allowed_hosts": ["pypi.org"],
                        },
                        "verifier": {"mode": "public", "declared": False},
                    },
                },
                {
                    "name": "test",
                    "reward": 0.5,
                    "network": {
                        "agent": {"mode": "no-network", "declared": True},
                        "verifier": {"mode": "no-network", "declared": True},
                    },
                },
            ],
            "judges": [{"judge": "style-critic", "score": 0.5, "rationale": "long lines"}],
            "a_field_from_2030": {"nested": [1, 2, {"x": None}]},
        }
    )
    store = TrialStore(run)
    store.append(first)
    store.append(final)
    (run / "config.toml").write_text('[run]\nagent = "command"\n')
    transcript(run / "attempts" / TRIAL / "1", "first attempt was here")
    transcript(run / "trials" / TRIAL, "second attempt succeeded")
    (run / "trials" / TRIAL / "workspace").mkdir()
    (run / "trials" / TRIAL / "workspace" / "a.txt").write_text("after\n")
    return run


def test_earlier_attempts_cleanup_errors_events_and_newer_fields(
    tmp_path: Path, watched: Callable[..., Watched], artifacts: Path
) -> None:
    run = crafted_run(tmp_path)
    out = tmp_path / "report.html"
    result = harness("report", run, "-o", out)
    assert result.returncode == 0, result.stdout + result.stderr
    w = watched()
    w.goto(out.as_uri() + f"#/run/0/trial/{TRIAL}")
    w.page.wait_for_selector(".trial[data-ready]")
    # No summary.json: the page says its figures are computed.
    rewards = w.text("#rewards")
    assert "tests" in rewards and "style" in rewards
    assert "per step" in rewards and "build" in rewards and "per judge" in rewards
    assert "style-critic" in rewards and "long lines" in rewards
    assert "could not remove the root" in w.text("#trial-errors")
    assert w.page.locator("#trial-errors li.cleanup .badge.cleanup").count() == 1
    assert "container died" in w.text("#trial-errors")  # the earlier attempt's error
    security = w.text("#security")
    assert "/etc/shadow" in security and "4 security event" in security
    assert "169.254.169.254" in security  # listed among the events, not counted twice
    assert "allowlist: pypi.org" in security and "public (not stated by the task)" in security
    # A multi-step trial: each step's phases, by step (steps[].network).
    assert "step build: agent" in security and "step test: verifier" in security
    # Packets and proxy refusals, each counted as what it is (no "connections").
    assert (
        "Refused: 2 packet(s) dropped by the egress filter; 1 request(s) refused by the "
        "egress proxy (HTTP, CONNECT, TLS or DNS)"
    ) in security, security
    assert "a_field_from_2030" in w.text("#other")
    assert "second attempt succeeded" in w.text("#transcript")
    assert "-before" in w.text("#changes") and "+after" in w.text("#changes")
    assert "execute" in w.text("#timings")
    w.page.screenshot(path=artifacts / "report-attempts.png", full_page=True)

    w.page.click("a.attempt-link >> nth=0")
    w.page.wait_for_function("location.hash.endsWith('/attempt/1')")
    w.page.wait_for_selector(".trial[data-ready]")
    assert "attempt 1" in w.text(".trial-head") and "environment_error" in w.text(".trial-head")
    assert "first attempt was here" in w.text("#transcript")
    assert "No workspace was kept" in w.text("#changes")
    w.page.click("text=the final attempt")
    w.page.wait_for_function(f"location.hash.endsWith({json.dumps(TRIAL)})")
    assert w.problems() == []

    w.goto(out.as_uri() + "#/run/0")
    assert "no summary.json" in w.text("main")
    assert w.problems() == []
