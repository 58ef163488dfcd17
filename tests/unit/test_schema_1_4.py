"""Schema 1.4's keys: ``[task].version``, ``[[verifier.collect]]``, artifacts' ``service``.

The model accepts Harbor's spellings and refuses hostile values; a task that does not use
the keys keeps its hash; the engine-archive reader keeps regular files and dirs only.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
from pydantic import ValidationError

from harness.tasks.model import MAX_COLLECT_TIMEOUT_SEC, TaskConfig
from harness.tasks.services import service_problems
from sandbox.docker.sidecar_access import unpack


def test_version_collect_and_service_artifacts_are_known_keys() -> None:
    config = TaskConfig.model_validate(
        {
            "task": {"name": "org/x", "version": "1.0.0"},
            "artifacts": [{"source": "/tmp/db.sql", "service": "database"}],
            "verifier": {
                "collect": [
                    {"service": "database", "command": "pg_dump > /tmp/db.sql", "user": 999},
                    {"command": "cp /logs/agent/result.json /app/"},
                ]
            },
        }
    )
    assert config.unknown_keys() == [] and config.unsupported_keys() == []
    assert config.task.version == "1.0.0"
    assert config.artifacts[0].sidecar == "database"
    assert config.verifier.collect[1].service == "main"
    assert config.verifier.collect[1].timeout_sec == 60.0
    assert MAX_COLLECT_TIMEOUT_SEC <= 600


@pytest.mark.parametrize(
    "hook",
    [
        {"command": "x", "user": "--privileged"},
        {"command": "x", "user": "a b"},
        {"command": "x", "user": -1},
        {"command": "x", "user": True},
        {"command": "x", "service": "-p"},
        {"command": "x", "service": "a/b"},
        {"command": ""},
        {"command": "a\0b"},
        {"command": "x", "timeout_sec": 0},
        {"command": "x" * 70000},
    ],
)
def test_hostile_hook_fields_are_refused(hook: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        TaskConfig.model_validate({"verifier": {"collect": [hook]}})


def test_more_hooks_than_the_cap_are_refused() -> None:
    with pytest.raises(ValidationError):
        TaskConfig.model_validate({"verifier": {"collect": [{"command": "x"}] * 33}})


def test_a_task_without_the_new_keys_keeps_its_hash() -> None:
    plain = TaskConfig.model_validate({"task": {"name": "a/b"}, "artifacts": ["/x"]})
    assert "version" not in plain.hash_dump()["task"]
    assert "service" not in plain.hash_dump()["artifacts"][0]
    assert "collect" not in plain.hash_dump()["verifier"]


def test_services_are_checked_against_the_compose_file(tmp_path: Path) -> None:
    config = TaskConfig.model_validate(
        {
            "verifier": {"collect": [{"service": "db", "command": "x"}]},
            "steps": [
                {"name": "one", "verifier": {"collect": [{"service": "cache", "command": "x"}]}}
            ],
        }
    )
    (tmp_path / "environment").mkdir()
    (tmp_path / "environment" / "docker-compose.yaml").write_text(
        "services:\n  main: {}\n  db: {image: x}\n"
    )
    problems = service_problems(tmp_path, config)
    assert [field for field, _ in problems] == ["steps[0].verifier.collect[0].service"]


def _archive(members: list[tuple[tarfile.TarInfo, bytes]]) -> io.BytesIO:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for info, content in members:
            info.size = len(content) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(content) if info.isfile() else None)
    data.seek(0)
    return data


def _info(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    return info


def test_an_archive_gives_files_and_dirs_only_and_never_leaves_dest(tmp_path: Path) -> None:
    dest = tmp_path / "out" / "copy"
    dest.parent.mkdir()
    stream = _archive(
        [
            (_info("copy", tarfile.DIRTYPE), b""),
            (_info("copy/ok.txt"), b"ok"),
            (_info("copy/link", tarfile.SYMTYPE, "/etc/shadow"), b""),
            (_info("copy/hard", tarfile.LNKTYPE, "copy/ok.txt"), b""),
            (_info("copy/../../escape.txt"), b"x"),
            (_info("/abs.txt"), b"x"),
            (_info("copy/dev", tarfile.CHRTYPE), b""),
            (_info("copy/big"), b"y" * 100),
        ]
    )
    events = unpack(stream, "/copy", dest, max_file_bytes=50, max_total_bytes=1000, max_entries=100)
    assert sorted(p.name for p in dest.iterdir()) == ["ok.txt"]
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "out" / "escape.txt").exists()
    kinds = sorted(event.kind for event in events)
    assert kinds == ["error", "error", "not_regular", "symlink", "symlink", "too_large"], events


def test_an_archive_past_the_entry_cap_stops(tmp_path: Path) -> None:
    members = [(_info("d", tarfile.DIRTYPE), b"")]
    members += [(_info(f"d/f{i}"), b"") for i in range(50)]
    events = unpack(
        _archive(members), "/d", tmp_path / "d", max_file_bytes=10, max_total_bytes=10,
        max_entries=10,
    )  # fmt: skip
    assert any(event.cap == "entries" for event in events)
    assert len(list((tmp_path / "d").iterdir())) < 10
