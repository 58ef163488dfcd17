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


#: A task.toml using every key of Harbor 0.22's task schema (schema_version 1.4) that a
#: Linux engine without a GPU can run: what `tasks check` must accept without a word.
EVERY_KEY = """\
schema_version = "1.4"
source = "harbor-0.22"
multi_step_reward_strategy = "mean"
artifacts = [
  "/app/out.txt",
  { source = "/srv/state.json", destination = "state.json", exclude = ["*.tmp"], service = "db" },
]

[task]
name = "org/every-key"
version = "2.0.1"
description = "Every schema 1.4 key."
authors = [{ name = "A", email = "a@example.invalid" }]
keywords = ["k"]

[metadata]
difficulty = "easy"

[agent]
timeout_sec = 60.0
user = "agent"
network_mode = "no-network"

[verifier]
timeout_sec = 60.0
env = { MODE = "strict" }
user = 0
environment_mode = "separate"
network_mode = "no-network"

[[verifier.collect]]
command = "cp /app/out.txt /logs/artifacts/"
timeout_sec = 10

[[verifier.collect]]
service = "db"
command = "dump > /srv/state.json"
user = "postgres"

[verifier.environment]
docker_image = "python:3.13-slim"
cpus = 1
memory_mb = 1024
network_mode = "no-network"

[solution]
env = { HINT = "x" }

[environment]
build_timeout_sec = 300.0
os = "linux"
cpus = 2
memory_mb = 2048
storage_mb = 4096
gpus = 0
workdir = "/app"
env = { A = "b" }
skills_dir = "/skills"
network_mode = "allowlist"
allowed_hosts = ["example.com"]

[environment.healthcheck]
command = "true"
interval_sec = 1
timeout_sec = 5
start_period_sec = 0
start_interval_sec = 1
retries = 3

[[environment.mcp_servers]]
name = "db"
transport = "streamable-http"
url = "http://db:8000/mcp"
"""


def test_every_key_of_harbors_0_22_schema_checks_without_a_word(tmp_path: Path) -> None:
    from harness.tasks import check_tasks

    task = tmp_path / "every-key"
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "task.toml").write_text(EVERY_KEY)
    (task / "instruction.md").write_text("Do it.\n")
    (task / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\n")
    (task / "environment" / "docker-compose.yaml").write_text(
        "services:\n  main:\n    build:\n      context: .\n  db:\n    image: postgres:16\n"
    )
    (task / "tests" / "Dockerfile").write_text("FROM ubuntu:24.04\nCOPY test.sh /tests/\n")
    (task / "tests" / "test.sh").write_text("#!/bin/bash\n")
    tasks, problems = check_tasks([task])
    assert problems == [], problems
    assert tasks[0].config.unknown_keys() == []
    assert tasks[0].config.task.version == "2.0.1"


def test_a_tpu_is_refused_saying_why() -> None:
    config = TaskConfig.model_validate({"environment": {"tpu": {"type": "v5e", "topology": "2x2"}}})
    ((key, reason),) = config.unsupported_keys()
    assert key == "environment.tpu" and "TPU" in reason


def test_the_hooks_share_a_total_time_and_each_is_capped() -> None:
    from harness.trial.collect import MAX_COLLECT_TOTAL_SEC, Budget

    budget = Budget()
    assert budget.allot(1e9) == MAX_COLLECT_TIMEOUT_SEC
    budget.spend(MAX_COLLECT_TOTAL_SEC - 5)
    assert budget.allot(60) == 5
    budget.spend(5)
    assert budget.allot(1) is None
