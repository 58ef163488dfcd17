"""Schema 1.4 on docker: a ``[[verifier.collect]]`` hook's output reaches a separate verifier.

``tests/fixtures/harbor-style/sidecar-collect`` is written in the style of Harbor 0.22's
``sidecar-artifacts`` example: a sidecar keeps its state in memory, a collect hook
snapshots it into a file (as the hook's ``user``), and an artifact with that ``service``
carries the file to the separate verifier at its source path. Run through the CLI with
``oracle`` (reward 1) and ``nop`` (reward 0), under runc and gVisor, with the fixture's
``ubuntu:24.04`` aliased to the local base image. The record carries ``[task].version``,
the hook's event, the main container frozen while the sidecar was asked, and the
artifact in ``artifacts/manifest.json`` with its ``service``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.docker import docker_client, prerequisite_missing, require_image

from sandbox.docker.runtime import network_runtime_of

TASK = Path(__file__).resolve().parents[1] / "fixtures" / "harbor-style" / "sidecar-collect"
ALIAS = "ubuntu:24.04=harness/base:bookworm"

pytestmark = pytest.mark.docker


def _run(e2e: Any, tmp: Path, agent: str, runtime: str | None) -> dict[str, Any]:
    require_image(docker_client())
    out = tmp / f"runs-{agent}"
    extra = ["--runtime", runtime] if runtime else []
    result = e2e.run(
        "run", TASK, "--sandbox", "docker", "--agent", agent, "--base-alias", ALIAS,
        "-o", out, "--display", "none", *extra, timeout=600,
    )  # fmt: skip
    run = e2e.read_run(e2e.only_run_dir(out))
    assert len(run.records) == 1, result
    record = run.records[0]
    record["_evidence"] = str(run.evidence(record))
    return record


@pytest.fixture(params=["runc", "runsc"])
def runtime(request: pytest.FixtureRequest) -> str | None:
    if request.param == "runc":
        return None
    runtimes = docker_client().info().get("Runtimes") or {}
    if network_runtime_of("runsc", runtimes) is None:
        prerequisite_missing("a networked gVisor runtime (docker/start-engine.sh registers one)")
    return "runsc"


def _events(record: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [e for e in record.get("events", []) if e.get("type") == kind]


def test_the_oracle_scores_1_from_the_sidecars_snapshot(
    e2e: Any, tmp_path: Path, runtime: str | None
) -> None:
    record = _run(e2e, tmp_path, "oracle", runtime)
    assert record["status"] == "completed", record
    assert record["reward"] == 1.0, record
    assert record["task"]["version"] == "1.2.0"
    (hook,) = _events(record, "collect_hook")
    assert hook["service"] == "ledger" and hook["status"] == "ok", hook
    assert hook["user"] == "nobody"
    (frozen,) = _events(record, "main_frozen")
    if runtime is None:
        assert frozen["frozen"] is True, frozen
    inputs = [e for e in _events(record, "verifier_input") if e.get("service") == "ledger"]
    assert [e["status"] for e in inputs] == ["ok"], inputs
    artifacts = Path(record["_evidence"]) / "artifacts"
    manifest = json.loads((artifacts / "manifest.json").read_text())
    assert {"service": "ledger", "status": "ok", "type": "file"}.items() <= manifest[0].items()
    snapshot = json.loads((artifacts / "ledger-snapshot.json").read_text())
    assert snapshot == {"entries": ["harbor-1.4"]}


def test_nop_scores_0(e2e: Any, tmp_path: Path, runtime: str | None) -> None:
    record = _run(e2e, tmp_path, "nop", runtime)
    assert record["status"] == "completed", record
    assert record["reward"] == 0.0, record
    (hook,) = _events(record, "collect_hook")
    assert hook["status"] == "ok", hook


def test_tasks_check_accepts_the_task(e2e: Any) -> None:
    result = e2e.run("tasks", "check", TASK)
    assert result.code == 0, result
    assert result.error_lines() == [], result
