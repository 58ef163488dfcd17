"""The tampering classifier and what a phase's root changes become in the record and evidence."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import pytest

from harness.records import TrialStatus
from harness.records.layout import ROOT_CHANGES_FILENAME
from harness.records.metrics import summarize
from harness.records.model import AgentRef, SandboxRef, TaskRef, TrialRecord
from harness.trial.tampering import (
    MAX_TAMPERING_EVENTS,
    RootChangeLog,
    fresh_changes,
    image_path_dirs,
    summary,
    tampering_events,
    tampering_reason,
    write_changes,
)
from sandbox.backend import Sandbox
from sandbox.root_changes import RootChange, RootChanges

#: path -> whether a verifier in the same container would execute or import it.
CASES = [
    ("/usr/bin/python3", True),
    ("/usr/bin/python3.11", True),
    ("/bin/sh", True),
    ("/bin/bash", True),
    ("/usr/local/bin/pytest", True),
    ("/usr/local/bin/uv", True),
    ("/usr/bin/curl", True),
    ("/sbin/ldconfig", True),
    ("/usr/sbin/useradd", True),
    ("/usr/lib/python3.11/json/__init__.py", True),
    ("/usr/local/lib/python3.12/site-packages/pytest/__init__.py", True),
    ("/usr/lib/python3/dist-packages/yaml/__init__.py", True),
    ("/opt/venv/lib/python3.12/site-packages/evil.pth", True),
    ("/srv/app/.venv/lib/python3.12/site-packages/x.py", True),
    ("/srv/anything/sitecustomize.py", True),
    ("/srv/conftest.py", True),
    ("/etc/ld.so.preload", True),
    ("/etc/ld.so.conf", True),
    ("/etc/ld.so.conf.d/evil.conf", True),
    ("/etc/profile", True),
    ("/etc/profile.d/zz.sh", True),
    ("/etc/bash.bashrc", True),
    ("/etc/environment", True),
    ("/root/.bashrc", True),
    ("/root/.profile", True),
    ("/root/.local/bin/pytest", True),
    ("/lib/x86_64-linux-gnu/libc.so.6", True),
    ("/lib64/ld-linux-x86-64.so.2", True),
    ("/usr/bin/../bin/python3", True),
    ("/etc/hostname", False),
    ("/etc/passwd", False),
    ("/var/log/apt/history.log", False),
    ("/var/lib/dpkg/status", False),
    ("/srv/data/input.csv", False),
    ("/home/user/notes.txt", False),
    ("/root/projects/readme.md", False),
    ("/opt/tool/README", False),
]


@pytest.mark.parametrize(("path", "tampering"), CASES)
def test_classifier(path: str, tampering: bool) -> None:
    assert (tampering_reason(path) is not None) is tampering, tampering_reason(path)


def test_the_images_own_path_counts() -> None:
    dirs = image_path_dirs(["FOO=1", "PATH=/opt/tool/bin:/usr/bin:relative"])
    assert dirs == ("/opt/tool/bin", "/usr/bin")
    assert tampering_reason("/opt/tool/bin/mytool", dirs) == "an executable on the image's PATH"
    assert tampering_reason("/opt/tool/bin/mytool") is None
    assert tampering_reason("/opt/tool/share/doc", dirs) is None


def _changes(paths: list[str], *, truncated: bool = False) -> RootChanges:
    return RootChanges(
        changes=tuple(RootChange(path=p, kind="modified", mode=0o755, size=3) for p in paths),
        truncated=truncated,
        total=len(paths) + (5 if truncated else 0),
    )


def test_events_summary_and_evidence(tmp_path: Path) -> None:
    changes = _changes(["/etc/hostname", "/usr/bin/python3", "/usr/local/bin/pytest"])
    events = tampering_events(changes, step="one")
    assert [e["path"] for e in events] == ["/usr/bin/python3", "/usr/local/bin/pytest"]
    assert all(e["type"] == "tampering" and e["step"] == "one" for e in events)
    entry = summary(changes, 2)
    assert entry["total"] == 3 and entry["modified"] == 3 and entry["tampering"] == 2
    write_changes(tmp_path, changes, "one")
    write_changes(tmp_path, _changes(["/bin/sh"], truncated=True), "two")
    lines = [json.loads(x) for x in (tmp_path / ROOT_CHANGES_FILENAME).read_text().splitlines()]
    assert [x.get("path") for x in lines] == [
        "/etc/hostname",
        "/usr/bin/python3",
        "/usr/local/bin/pytest",
        "/bin/sh",
        None,
    ]
    assert lines[-1] == {"truncated": True, "total": 6}
    assert lines[0]["mode"] == "0o755" and lines[0]["step"] == "one"


def test_events_are_bounded() -> None:
    paths = [f"/usr/bin/tool{i}" for i in range(MAX_TAMPERING_EVENTS + 7)]
    events = tampering_events(_changes(paths))
    assert len(events) == MAX_TAMPERING_EVENTS + 1
    assert "7 more" in events[-1]["detail"] and "path" not in events[-1]


def test_the_summary_counts_tampered_trials() -> None:
    def record(index: int, events: list[dict[str, object]]) -> TrialRecord:
        now = datetime.now(UTC)
        return TrialRecord(
            id=f"t{index}",
            task=TaskRef(name="t", key="t", hash="h", path="/t"),
            agent=AgentRef(name="command"),
            sandbox=SandboxRef(backend="docker"),
            status=TrialStatus.COMPLETED,
            ok=True,
            reward=1.0,
            started_at=now,
            finished_at=now,
            events=events,
        )

    hit = {"type": "tampering", "path": "/usr/bin/python3", "kind": "modified"}
    clean = summarize([record(0, [])], planned=1)
    assert "tampering" not in clean.model_dump()
    found = summarize([record(0, [hit, hit]), record(1, [])], planned=2).model_dump()
    assert found["tampering"] == {"trials": 1, "events": 2} and found["planned"] == 2


def test_each_phase_records_only_its_own_share(tmp_path: Path) -> None:
    """A sandbox lists every phase's changes so far: a phase's share is what is new."""

    class Listing:
        """What the trial asks of a sandbox here: its listing so far, its PATH."""

        listing = RootChanges()

        def root_changes(self) -> RootChanges | None:
            return self.listing

        def environment_env(self) -> dict[str, str]:
            return {"PATH": "/opt/tool/bin:/usr/bin"}

    events: list[dict[str, object]] = []
    log = RootChangeLog(tmp_path, events)
    sandbox = cast(Sandbox, Listing())
    python = RootChange("/usr/bin/python3", "modified", mode=0o755, size=3)
    tool = RootChange("/opt/tool/bin/t", "added", mode=0o755, size=1)
    Listing.listing = RootChanges((python,), total=1)
    log.after_agent(sandbox, "one")
    Listing.listing = RootChanges((RootChange("/var/lib/apt/x", "added"), python), total=2)
    log.after_grader(sandbox)  # the verifier's install
    Listing.listing = RootChanges((RootChange("/var/lib/apt/x", "added"), python, tool), total=3)
    log.after_agent(sandbox, "two")
    assert [s["paths"] for s in log.summaries] == [["/usr/bin/python3"], ["/opt/tool/bin/t"]]
    assert [(e["path"], e["step"]) for e in events] == [
        ("/usr/bin/python3", "one"),
        ("/opt/tool/bin/t", "two"),
    ]
    assert fresh_changes(Listing.listing, {}).total == 3
