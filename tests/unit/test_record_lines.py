"""Every record is written, whatever its strings hold, and reads back exactly (issue 22).

The escape of :mod:`sandbox.pathnames` is total and lossless; :mod:`harness.records.lines`
applies it to every string of a record, so a record full of lone surrogates (names that are
not UTF-8), backslashes, newlines and ANSI escapes is written and read back unchanged.
"""

from __future__ import annotations

import json
import os
import random
from datetime import UTC, datetime
from pathlib import Path

import pytest

from harness.records import (
    AttemptSummary,
    TaskRef,
    TrialError,
    TrialRecord,
    TrialStatus,
    TrialStore,
    parse_record,
    record_line,
)
from harness.records.model import AgentRef, SandboxRef
from sandbox.pathnames import escape, escape_name, unescape, unescape_all, unescape_name

HOSTILE = [
    "l\udcff",  # the byte 0xff of a name
    "\udc80\udcfe/x",
    "\ud800 lone high",
    "\udfff lone low",
    "back\\slash \\xff \\udcff \\\\",
    "new\nline \x1b[31mred\x1b[0m \r\t",
    "\x00nul",
    "é ü 日本",
]


def _hostile_record() -> TrialRecord:
    """A record with hostile strings in every place a string can go."""
    now = datetime.now(UTC)
    bad = "".join(HOSTILE)
    error = TrialError.model_validate(
        {"type": bad, "message": bad, "phase": bad, "detail": bad, "nested": {bad: [bad]}}
    )
    return TrialRecord.model_validate(
        {
            "id": "t-1",
            "task": TaskRef(name=bad, key=bad, hash="h", path=bad),
            "agent": AgentRef(name=bad, model=bad),
            "sandbox": SandboxRef(backend=bad, image=bad),
            "status": TrialStatus.COMPLETED,
            "ok": True,
            "reward": 0.5,
            "rewards": {bad: 0.5},
            "errors": [error],
            "previous_attempts": [
                AttemptSummary(
                    attempt=1,
                    status=TrialStatus.ENVIRONMENT_ERROR,
                    errors=[error],
                    evidence_dir=bad,
                )
            ],
            "timings": {bad: 1.0},
            "versions": {bad: bad},
            "started_at": now,
            "finished_at": now,
            "evidence_dir": bad,
            "events": [{"type": "symlink", "path": s, s: [s, {s: s}]} for s in HOSTILE],
            "posture": {bad: bad},
            "steps": [{"name": bad, "errors": [{"message": bad}]}],
        }
    )


def test_the_escape_is_lossless_and_always_encodes() -> None:
    rng = random.Random(22)
    alphabet = ["\\", "x", "u", "d", "c", "f", "8", "0", "\udcff", "\udc80", "\ud800"]
    alphabet += ["\udfff", "\udc7f", "\n", "\x1b", "é"]
    for text in HOSTILE + ["", "plain"]:
        assert unescape(escape(text)) == text
    for _ in range(5000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 16)))
        escaped = escape(text)
        escaped.encode("utf-8")  # never raises
        assert unescape(escaped) == text
    assert escape("plain name") == "plain name"  # clean text is its own escaped form
    assert escape("l\udcff") == "l\\xff"


def test_a_name_of_any_bytes_round_trips() -> None:
    for raw in (b"l\xff", b"\x80\xfe", b"a\\xffb", b"\xc3\xa9", b"new\nline\x1b[0m", b"\\"):
        assert unescape_name(escape_name(raw)) == raw
        assert os.fsencode(unescape(escape_name(raw))) == raw


def test_a_record_with_lone_surrogates_everywhere_is_written_and_read_back(
    tmp_path: Path,
) -> None:
    record = _hostile_record()
    with pytest.raises(Exception, match="surrogates not allowed"):
        record.model_dump_json()  # what erased the trial before
    line = record_line(record)
    line.decode("utf-8")  # valid UTF-8, strict
    assert b"\n" not in line
    back = parse_record(line)
    assert back.model_dump(mode="python") == record.model_dump(mode="python")
    # From outside: plain JSON, and the documented escape gives the names back.
    raw = json.loads(line)
    assert unescape_all(raw["events"][0]["path"]) == "l\udcff"
    assert unescape_name(raw["events"][0]["path"]) == b"l\xff"

    store = TrialStore(tmp_path)
    store.append(record)
    store.append(record.model_copy(update={"id": "t-2"}))
    loaded = store.load()
    assert [r.id for r in loaded] == ["t-1", "t-2"]
    assert loaded[0].events == record.events
    store.rewrite(loaded)  # a rewrite of what was read never escapes twice
    assert store.load()[0].model_dump(mode="python") == record.model_dump(mode="python")
    store.compact()
    assert store.load()[1].errors[0].message == record.errors[0].message


def test_values_json_has_no_form_for_are_still_written() -> None:
    now = datetime.now(UTC)
    record = TrialRecord.model_validate(
        {
            "id": "t",
            "task": {"name": "n", "key": "k", "hash": "h", "path": "p"},
            "agent": {"name": "a"},
            "sandbox": {"backend": "local"},
            "status": "completed",
            "ok": True,
            "started_at": now,
            "finished_at": now,
            "events": [{"raw": b"l\xff", "nan": float("nan"), "obj": object(), "set": {1}}],
        }
    )
    back = parse_record(record_line(record))
    event = back.events[0]
    assert unescape_name(event["raw"]) == b"l\xff"
    assert event["nan"] is None and event["set"] == [1]
    assert event["obj"].startswith("<object object")


def test_a_clean_record_is_written_by_pydantic_unchanged() -> None:
    now = datetime.now(UTC)
    record = TrialRecord(
        id="t",
        task=TaskRef(name="n", key="k", hash="h", path="/tasks/n"),
        agent=AgentRef(name="a"),
        sandbox=SandboxRef(backend="local"),
        status=TrialStatus.COMPLETED,
        ok=True,
        started_at=now,
        finished_at=now,
    )
    assert record_line(record) == record.model_dump_json().encode()
