"""The report's data side: run loading, evidence bounds, changed files, comparisons, escaping."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from harness.records import AgentRef, SandboxRef, TaskRef, TrialRecord, TrialStatus, TrialStore
from harness.report import Limits, ReportError, load_run, write_report
from harness.report.bundle import TRIAL_COLUMNS, build_index
from harness.report.changes import diff_trees
from harness.report.clip import clip_deep, read_text_capped
from harness.report.compare import compare_runs
from harness.report.evidence import trial_detail
from harness.report.page import json_for_script

T0 = datetime(2026, 11, 30, 5, 0, tzinfo=UTC)


def record(trial_id: str, task: str = "t/a", **fields: Any) -> TrialRecord:
    values: dict[str, Any] = {
        "id": trial_id,
        "task": TaskRef(name=task, key=task, hash=fields.pop("hash", "h1"), path="/nonexistent"),
        "agent": AgentRef(name="nop"),
        "sandbox": SandboxRef(backend="local"),
        "status": TrialStatus.COMPLETED,
        "ok": True,
        "reward": 1.0,
        "started_at": T0,
        "finished_at": T0 + timedelta(seconds=2),
    }
    values.update(fields)
    return TrialRecord(**values)


def make_run(path: Path, records: list[TrialRecord]) -> Path:
    store = TrialStore(path)
    for r in records:
        store.append(r)
    (path / "config.toml").write_text('[run]\nagent = "nop"\nthreshold = 1.0\n')
    return path


# -------------------------------------------------------------------------------- escaping


def test_json_for_script_cannot_close_its_element() -> None:
    hostile = {"a": "</script><script>alert(1)</script><!-- & \u2028", "n": float("nan")}
    text = json_for_script(hostile)
    assert "<" not in text and ">" not in text and "&" not in text
    assert text.isascii()
    assert json.loads(text) == {"a": hostile["a"], "n": None}


def test_clip_deep_bounds_every_string() -> None:
    value = {"a": "x" * 100, "b": ["y" * 5, {"c": "z" * 50}]}
    clipped = clip_deep(value, 10)
    assert clipped["a"] == {"$clip": "x" * 10, "total": 100, "unit": "chars"}
    assert clipped["b"][0] == "y" * 5
    assert clipped["b"][1]["c"]["total"] == 50


def test_read_text_capped_refuses_links_and_fifos(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"A" * 1000)
    assert read_text_capped(tmp_path, "big", 100) == {
        "$clip": "A" * 100,
        "total": 1000,
        "unit": "bytes",
    }
    (tmp_path / "link").symlink_to(big)
    assert read_text_capped(tmp_path, "link", 100) is None
    (tmp_path / "dirlink").symlink_to(tmp_path)
    assert read_text_capped(tmp_path, "dirlink/big", 100) is None  # a link on the way
    os.mkfifo(tmp_path / "fifo")
    assert read_text_capped(tmp_path, "fifo", 100) is None  # and it does not hang


# -------------------------------------------------------------------------------- changes


def test_diff_trees_lists_each_kind_of_change(tmp_path: Path) -> None:
    before, after = tmp_path / "before", tmp_path / "after"
    for root in (before, after):
        root.mkdir()
        (root / "same.txt").write_text("same\n")
    (before / "edit.txt").write_text("one\ntwo\n")
    (after / "edit.txt").write_text("one\nthree\n")
    (before / "gone.txt").write_text("bye\n")
    (after / "new.bin").write_bytes(b"\0\1\2")
    (after / "huge.txt").write_text("H" * 5000)
    (after / "link").symlink_to("/etc/passwd")
    changes = {c.path: c for c in diff_trees(before, after, Limits(diff_bytes=1000, string=100))}
    assert set(changes) == {"edit.txt", "gone.txt", "new.bin", "huge.txt", "link"}
    assert "-two\n+three\n" in changes["edit.txt"].diff
    assert changes["gone.txt"].change == "deleted" and "-bye" in changes["gone.txt"].diff
    assert changes["new.bin"].kind == "binary" and changes["new.bin"].after == 3
    assert changes["huge.txt"].kind == "large" and changes["huge.txt"].preview["total"] == 5000
    assert changes["link"].kind == "symlink" and changes["link"].preview == "-> /etc/passwd"


def test_diff_against_a_missing_initial_workspace_adds_everything(tmp_path: Path) -> None:
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "a.txt").write_text("hi")
    (change,) = diff_trees(None, tmp_path / "w", Limits())
    assert change.change == "added"
    assert change.diff.endswith("+hi\n\\ No newline at end of file\n")


# -------------------------------------------------------------------------------- runs


def test_load_run_refuses_what_is_not_a_run_dir(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="not a directory"):
        load_run(tmp_path / "missing")
    with pytest.raises(ReportError, match="not a run dir"):
        load_run(tmp_path)


def test_load_run_computes_a_missing_summary_and_reports_a_torn_tail(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r", [record("a.r0"), record("b.r0", "t/b", reward=0.0)])
    with open(run / "trials.jsonl", "ab") as fh:
        fh.write(b'{"id": "torn')
    data = load_run(run)
    assert data.summary_source == "computed"
    assert data.summary["trials"] == 2 and data.summary["mean_reward"] == 0.5
    assert any("torn" in note for note in data.notes)
    assert any("no summary.json" in note for note in data.notes)


def test_a_version_1_summary_is_computed_again_over_its_plan(tmp_path: Path) -> None:
    """Version 1's headline counted graded trials only: the report does not show it."""
    broken = record("b.r0", reward=None, status=TrialStatus.VERIFIER_ERROR, ok=False)
    run = make_run(tmp_path / "r", [record("a.r0"), broken])
    old = {"run": "r", "interrupted": False, "planned": 3, "trials": 2, "graded": 1}
    old |= {"mean_reward": 1.0, "success_rate": 1.0, "pass_at_k": {"1": 1.0}}
    (run / "summary.json").write_text(json.dumps(old))
    data = load_run(run)
    assert data.summary_source == "computed"
    assert any("version 1" in note for note in data.notes)
    # Over its plan of 3: one success, one ungraded, one without a record.
    assert data.summary["mean_reward"] == pytest.approx(1 / 3)
    assert data.summary["graded_only"]["mean_reward"] == 1.0
    assert data.summary["ungraded"]["by_status"] == {"verifier_error": 1, "unrecorded": 1}
    assert data.summary["run"] == "r" and data.summary["interrupted"] is False

    current = {**data.summary, "mean_reward": 0.25}  # as written by this version: shown as is
    (run / "summary.json").write_text(json.dumps(current))
    again = load_run(run)
    assert again.summary_source == "summary.json" and again.summary["mean_reward"] == 0.25


def test_unknown_fields_and_forged_evidence_dirs_do_not_break_a_trial(tmp_path: Path) -> None:
    newer = record(
        "a.r0",
        evidence_dir="../../etc",
        steps=[{"name": "build", "reward": 1.0}, {"name": "test", "reward": 0.5}],
        judges={"style": {"score": 0.7}},
    )
    run = make_run(tmp_path / "r", [newer])
    detail = trial_detail(run, load_run(run).records[0], Limits())
    assert detail["record"]["steps"][1] == {"name": "test", "reward": 0.5}
    assert detail["record"]["judges"] == {"style": {"score": 0.7}}
    assert detail["evidence"] == {"dir": "../../etc", "exists": False, "safe": False}


def test_a_write_while_a_run_is_read_moves_the_fingerprint_past_what_was_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live page reloads when the index it holds is older than the run dir.

    The page keeps the index's fingerprint and reloads when ``/api/version``'s differs. A
    fingerprint taken after the data was read would name a write the data lacks (the
    run's last ``status.json``, say), and the page would show the older state for good.
    Here the run writes its final status right after its files were read.
    """
    import harness.report.rundata as rundata
    from harness.records.run import run_fingerprint

    run_dir = make_run(tmp_path / "live", [record("a.r0")])
    status = run_dir / "status.json"
    status.write_text(json.dumps({"state": "running"}))
    real_read = rundata.read_run

    def read_then_the_run_writes(path: Path) -> Any:
        read = real_read(path)
        status.write_text(json.dumps({"state": "finished", "pad": "the last write"}))
        return read

    monkeypatch.setattr(rundata, "read_run", read_then_the_run_writes)
    run = load_run(run_dir)
    assert run.running  # what was read: the status before the write
    (entry,) = build_index([run], live=True)["runs"]
    assert entry["fingerprint"] != run_fingerprint(run_dir)  # so the page reloads


def test_index_rows_follow_the_columns(tmp_path: Path) -> None:
    failed = record(
        "b.r0",
        status=TrialStatus.AGENT_ERROR,
        ok=False,
        reward=None,
        errors=[{"type": "AgentError", "message": "boom", "phase": "execute"}],
    )
    run = make_run(tmp_path / "r", [record("a.r0"), failed])
    index = build_index([load_run(run)], live=False)
    rows = [dict(zip(TRIAL_COLUMNS, row, strict=True)) for row in index["runs"][0]["trials"]]
    assert rows[1]["status"] == "agent_error" and rows[1]["error"] == "AgentError: boom"
    assert rows[0]["duration"] == 2.0 and rows[0]["reward"] == 1.0


# -------------------------------------------------------------------------------- comparisons


def test_compare_runs_pairs_tasks_and_blocks_what_cannot_pair(tmp_path: Path) -> None:
    a = make_run(
        tmp_path / "a",
        [
            record("x.r0", "t/x", reward=0.0),
            record("x.r1", "t/x", reward=1.0),
            record("y.r0", "t/y"),
            record("z.r0", "t/z"),
            record("w.r0", "t/w", hash="old"),
        ],
    )
    b = make_run(
        tmp_path / "b",
        [
            record("x.r0", "t/x"),
            record("x.r1", "t/x"),
            record("y.r0", "t/y", reward=None, status=TrialStatus.AGENT_ERROR, ok=False),
            record("v.r0", "t/v"),
            record("w.r0", "t/w", hash="new"),
        ],
    )
    comparison = compare_runs(load_run(a), load_run(b))
    rows = {row.key: row for row in comparison.rows}
    assert rows["t/x"].delta == 0.5 and not rows["t/x"].blocked
    assert rows["t/x"].sides[0] is not None and rows["t/x"].sides[0].spread == pytest.approx(
        0.7071, 1e-3
    )
    # Nothing graded is a failure, as in the headline: b's ungraded trial counts 0.
    assert not rows["t/y"].blocked and "nothing graded in b" in rows["t/y"].flags
    assert rows["t/y"].delta == -1.0
    y_b = rows["t/y"].sides[1]
    assert y_b is not None and (y_b.mean, y_b.graded_mean) == (0.0, None)
    assert rows["t/z"].blocked and "only in a" in rows["t/z"].flags
    assert rows["t/v"].blocked and "only in b" in rows["t/v"].flags
    assert rows["t/w"].blocked and "task changed" in rows["t/w"].flags
    assert comparison.summary["paired"] == 2 and comparison.summary["blocked"] == 3
    assert comparison.summary["improved"] == 1 and comparison.summary["regressed"] == 1


# -------------------------------------------------------------------------------- CLI


def test_report_cli_writes_one_file_and_refuses_a_non_run_dir(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r", [record("a.r0")])
    out = tmp_path / "out" / "report.html"
    assert write_report([run], out) == out.stat().st_size
    assert out.read_text().startswith("<!doctype html>")
    result = subprocess.run(
        [sys.executable, "-m", "harness", "report", str(tmp_path / "nope"), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "is not a directory" in result.stderr
