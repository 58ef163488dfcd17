from __future__ import annotations

import json
import multiprocessing
import os
import stat
import threading
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from harness.records import (
    AgentRef,
    AttemptSummary,
    CorruptRecordError,
    SandboxRef,
    TaskRef,
    TrialError,
    TrialRecord,
    TrialStatus,
    TrialStore,
    Usage,
    latest_by_id,
    write_json_atomic,
)

T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def make_record(trial_id: str = "t1", **overrides: Any) -> TrialRecord:
    fields: dict[str, Any] = {
        "id": trial_id,
        "task": TaskRef(name="hello", key="hello", hash="abc123", path="tasks/hello"),
        "agent": AgentRef(name="oracle"),
        "sandbox": SandboxRef(backend="local"),
        "status": TrialStatus.COMPLETED,
        "ok": True,
        "reward": 1.0,
        "rewards": {"reward": 1.0},
        "timings": {"total": 2.5},
        "usage": Usage(),
        "versions": {"harness": "0.1.0"},
        "started_at": T0,
        "finished_at": T0 + timedelta(seconds=3),
    }
    fields.update(overrides)
    return TrialRecord(**fields)


# ---------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------


def test_record_json_round_trip() -> None:
    record = make_record(
        errors=[TrialError(type="Boom", message="bad", phase="execute")],
        usage=Usage(input_tokens=10, cost_usd=0.25),
        evidence_dir="trials/t1",
        events=[{"kind": "tamper", "path": "/tests"}],
        posture={"uid": 1000},
    )
    again = TrialRecord.model_validate_json(record.model_dump_json())
    assert again == record
    assert again.status is TrialStatus.COMPLETED


def test_status_serialises_as_plain_string() -> None:
    data = json.loads(make_record(status=TrialStatus.AGENT_TIMEOUT).model_dump_json())
    assert data["status"] == "agent_timeout"
    assert {s.value for s in TrialStatus} == {
        "completed",
        "agent_timeout",
        "agent_error",
        "environment_error",
        "verifier_error",
        "cancelled",
        "internal_error",
    }


def test_unknown_fields_round_trip_at_every_level() -> None:
    data = json.loads(make_record().model_dump_json())
    data["future_field"] = {"x": [1, 2]}
    data["task"]["difficulty"] = "hard"
    data["agent"]["temperature"] = 0.7
    data["sandbox"]["runtime"] = "runsc"
    data["usage"]["cache_tokens"] = 42
    record = TrialRecord.model_validate_json(json.dumps(data))
    assert json.loads(record.model_dump_json()) == data


def test_older_minimal_record_loads_with_defaults() -> None:
    minimal = {
        "id": "old",
        "task": {"name": "n", "key": "k", "hash": "h", "path": "p"},
        "agent": {"name": "a"},
        "sandbox": {"backend": "docker"},
        "status": "agent_error",
        "ok": False,
        "started_at": "2024-05-01T00:00:00Z",
        "finished_at": "2024-05-01T00:00:09Z",
    }
    record = TrialRecord.model_validate(minimal)
    assert record.reward is None
    assert record.rollout == 0 and record.attempt == 1
    assert record.usage == Usage()
    assert record.rewards == {} and record.errors == [] and record.events == []


def test_timestamps_are_normalised_to_aware_utc() -> None:
    plus2 = timezone(timedelta(hours=2))
    record = make_record(
        started_at=datetime(2025, 1, 1, 12, 0, tzinfo=plus2),
        finished_at=datetime(2025, 1, 1, 12, 0),  # noqa: DTZ001 - naive on purpose
    )
    assert record.started_at == datetime(2025, 1, 1, 10, 0, tzinfo=UTC)
    assert record.started_at.utcoffset() == timedelta(0)
    assert record.finished_at.tzinfo is not None
    assert record.finished_at == datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


def test_latest_by_id_last_wins_first_order_kept() -> None:
    a1 = make_record("a", attempt=1, reward=0.0)
    b1 = make_record("b")
    a2 = make_record("a", attempt=2, reward=1.0)
    latest = latest_by_id([a1, b1, a2])
    assert list(latest) == ["a", "b"]
    assert latest["a"].attempt == 2


# ---------------------------------------------------------------------------------------------
# Store
# ---------------------------------------------------------------------------------------------


def test_append_and_load(tmp_path: Path) -> None:
    store = TrialStore(tmp_path / "run")
    assert store.load() == []
    records = [make_record(f"t{i}") for i in range(3)]
    for r in records:
        store.append(r)
    assert store.load() == records
    assert store.torn_tail is False
    text = store.path.read_text()
    assert text.endswith("\n") and text.count("\n") == 3
    assert store.lock_path.name == "trials.jsonl.lock"


def _write_three_and_a_torn_fourth(store: TrialStore) -> list[TrialRecord]:
    records = [make_record(f"t{i}") for i in range(3)]
    for r in records:
        store.append(r)
    partial = make_record("t3").model_dump_json()[:37]
    with open(store.path, "a") as fh:
        fh.write(partial)
    return records


def test_torn_last_line_is_tolerated_and_repaired(tmp_path: Path) -> None:
    store = TrialStore(tmp_path)
    records = _write_three_and_a_torn_fourth(store)

    report = store.load_report()
    assert report.records == records
    assert report.torn_tail and store.torn_tail
    assert report.torn_line_number == 4
    assert report.torn_bytes == 37
    assert store.load() == records

    good_prefix = b"".join((r.model_dump_json() + "\n").encode() for r in records)
    assert store.repair() is True
    assert store.path.read_bytes() == good_prefix
    clean = store.load_report()
    assert clean.records == records and not clean.torn_tail
    assert store.repair() is False  # already clean
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


def test_unparseable_last_line_with_newline_is_torn(tmp_path: Path) -> None:
    store = TrialStore(tmp_path)
    store.append(make_record("a"))
    with open(store.path, "a") as fh:
        fh.write('{"id": "garbage"}\n')
    assert [r.id for r in store.load()] == ["a"]
    assert store.torn_tail
    assert store.repair() is True
    assert [r.id for r in store.load()] == ["a"] and not store.torn_tail


def test_unterminated_but_complete_last_line_is_kept(tmp_path: Path) -> None:
    store = TrialStore(tmp_path)
    store.append(make_record("a"))
    with open(store.path, "a") as fh:
        fh.write(make_record("b").model_dump_json())  # the newline never made it
    assert [r.id for r in store.load()] == ["a", "b"]
    assert store.torn_tail
    assert store.repair() is True
    assert store.path.read_text().endswith("}\n")
    assert [r.id for r in store.load()] == ["a", "b"] and not store.torn_tail


def test_append_after_crash_does_not_fuse_with_fragment(tmp_path: Path) -> None:
    store = TrialStore(tmp_path)
    records = _write_three_and_a_torn_fourth(store)
    late = make_record("late")
    store.append(late)
    assert store.load() == [*records, late]
    assert store.torn_tail is False


def test_corrupt_middle_line_raises(tmp_path: Path) -> None:
    store = TrialStore(tmp_path)
    store.append(make_record("a"))
    with open(store.path, "a") as fh:
        fh.write("this is not json\n")
    store.append(make_record("b"))
    with pytest.raises(CorruptRecordError) as info:
        store.load()
    assert info.value.line_number == 2
    assert info.value.path == store.path
    assert "trials.jsonl:2" in str(info.value)
    with pytest.raises(CorruptRecordError):
        store.repair()


def test_schema_invalid_middle_line_raises(tmp_path: Path) -> None:
    store = TrialStore(tmp_path)
    bad = json.loads(make_record("a").model_dump_json())
    bad["status"] = "exploded"
    store.path.write_text(json.dumps(bad) + "\n" + make_record("b").model_dump_json() + "\n")
    with pytest.raises(CorruptRecordError) as info:
        store.load()
    assert info.value.line_number == 1
    assert "status" in info.value.reason


def test_blank_lines_are_skipped(tmp_path: Path) -> None:
    store = TrialStore(tmp_path)
    a, b = make_record("a"), make_record("b")
    store.path.write_text(f"{a.model_dump_json()}\n\n{b.model_dump_json()}\n\n")
    assert store.load() == [a, b]
    assert not store.torn_tail


def test_rewrite_replaces_atomically_and_keeps_unknown_fields(tmp_path: Path) -> None:
    store = TrialStore(tmp_path)
    data = json.loads(make_record("a").model_dump_json())
    data["from_the_future"] = True
    store.path.write_text(json.dumps(data) + "\n" + make_record("b").model_dump_json() + "\n")
    loaded = store.load()
    store.rewrite(loaded[:1])
    lines = store.path.read_text().splitlines()
    assert len(lines) == 1
    assert json.loads(lines[0])["from_the_future"] is True
    store.rewrite([])
    assert store.path.read_bytes() == b""
    assert store.load() == []


def _append_many(run_dir: str, worker: int, count: int, go: Any = None) -> None:
    store = TrialStore(Path(run_dir))
    if go is not None:
        go.wait(30)  # start together so the appends really overlap
    for i in range(count):
        # A long line makes interleaving likely if appends were not atomic.
        store.append(make_record(f"w{worker}-{i}", events=[{"pad": "x" * 5000}]))


def test_concurrent_appends_from_processes_land_as_whole_lines(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    go = ctx.Event()
    procs = [ctx.Process(target=_append_many, args=(str(tmp_path), w, 50, go)) for w in range(4)]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    store = TrialStore(tmp_path)
    records = store.load()
    assert not store.torn_tail
    assert len(records) == 200
    assert {r.id for r in records} == {f"w{w}-{i}" for w in range(4) for i in range(50)}
    for w in range(4):  # each writer's own records stay in order
        mine = [int(r.id.split("-")[1]) for r in records if r.id.startswith(f"w{w}-")]
        assert mine == list(range(50))


def test_concurrent_appends_from_threads(tmp_path: Path) -> None:
    store = TrialStore(tmp_path)

    def work(worker: int) -> None:
        for i in range(25):
            store.append(make_record(f"th{worker}-{i}"))

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store.load()) == 100


# ---------------------------------------------------------------------------------------------
# write_json_atomic
# ---------------------------------------------------------------------------------------------


def test_write_json_atomic(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "summary.json"
    write_json_atomic(target, {"a": 1, "b": [1.5, None], "é": "ü"})
    assert json.loads(target.read_text(encoding="utf-8")) == {"a": 1, "b": [1.5, None], "é": "ü"}
    assert stat.S_IMODE(target.stat().st_mode) == 0o644

    os.chmod(target, 0o600)
    write_json_atomic(target, make_record("m"))  # pydantic models are dumped in JSON mode
    assert json.loads(target.read_text())["id"] == "m"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in target.parent.iterdir()) == ["summary.json"]


def test_write_json_atomic_failure_leaves_old_file(tmp_path: Path) -> None:
    target = tmp_path / "status.json"
    write_json_atomic(target, {"v": 1})
    with pytest.raises(ValueError):
        write_json_atomic(target, {"v": float("nan")})
    with pytest.raises(TypeError):
        write_json_atomic(target, {"v": object()})
    assert json.loads(target.read_text()) == {"v": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]


# ---------------------------------------------------------------------------------------------
# Compaction (resume and the end of every invocation) and previous attempts
# ---------------------------------------------------------------------------------------------


def test_compact_keeps_each_ids_latest_line_in_first_appearance_order(tmp_path: Path) -> None:
    store = TrialStore(tmp_path)
    a1 = make_record("a", attempt=1, status=TrialStatus.ENVIRONMENT_ERROR, ok=False)
    b1 = make_record("b")
    a2 = make_record("a", attempt=2)
    for record in (a1, b1, a2):
        store.append(record)
    # A line from a newer version, with a field this one does not know: kept byte for byte.
    future = json.loads(make_record("c").model_dump_json())
    future["from_the_future"] = {"x": 1}
    future_line = json.dumps(future, separators=(",", ":"))
    with open(store.path, "a") as fh:
        fh.write(future_line + "\n")
        fh.write(make_record("b", attempt=9).model_dump_json()[:50])  # torn by a crash

    report = store.compact()
    assert report.rewritten and report.superseded == 1 and report.load.torn_tail
    assert [(r.id, r.attempt) for r in report.records] == [("a", 2), ("b", 1), ("c", 1)]
    lines = store.path.read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["a", "b", "c"]
    assert lines[2] == future_line
    assert lines[0] == a2.model_dump_json()
    assert [r.id for r in store.load()] == ["a", "b", "c"] and not store.torn_tail

    before = store.path.stat().st_mtime_ns, store.path.stat().st_ino
    again = store.compact()
    assert not again.rewritten and again.superseded == 0
    assert (store.path.stat().st_mtime_ns, store.path.stat().st_ino) == before
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_compact_reuses_a_snapshot_only_while_the_file_is_unchanged(tmp_path: Path) -> None:
    store = TrialStore(tmp_path)
    store.append(make_record("a"))
    store.append(make_record("a", attempt=2))
    snapshot = store.snapshot()
    assert [r.attempt for r in snapshot.report.records] == [1, 2]
    assert snapshot.identity is not None
    store.append(make_record("late"))  # the file changed after the snapshot
    report = store.compact(snapshot)
    assert [r.id for r in report.records] == ["a", "late"]  # reread, nothing lost

    store.append(make_record("late", attempt=2))
    fresh = store.snapshot()
    report = store.compact(fresh)
    assert report.load is fresh.report  # used as is: no second read
    assert [(r.id, r.attempt) for r in report.records] == [("a", 2), ("late", 2)]


def test_compact_of_a_missing_file_is_empty(tmp_path: Path) -> None:
    report = TrialStore(tmp_path / "run").compact()
    assert report.records == [] and not report.rewritten
    assert not (tmp_path / "run" / "trials.jsonl").exists()


def test_previous_attempts_round_trip() -> None:
    first = make_record(
        "a",
        attempt=1,
        status=TrialStatus.ENVIRONMENT_ERROR,
        ok=False,
        reward=None,
        errors=[TrialError(type="SupervisorError", message="boom", phase="reset")],
    )
    final = make_record(
        "a", attempt=2, previous_attempts=[AttemptSummary.of(first, evidence_dir="attempts/a/1")]
    )
    again = TrialRecord.model_validate_json(final.model_dump_json())
    assert again == final
    (earlier,) = again.previous_attempts
    assert earlier.attempt == 1 and earlier.status is TrialStatus.ENVIRONMENT_ERROR
    assert earlier.errors[0].message == "boom" and earlier.evidence_dir == "attempts/a/1"
    assert earlier.started_at == first.started_at
    # Records without the field (older versions) load with no previous attempts.
    data = json.loads(first.model_dump_json())
    del data["previous_attempts"]
    assert TrialRecord.model_validate(data).previous_attempts == []
