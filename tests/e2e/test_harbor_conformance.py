"""Harbor conformance: tests/conformance/harbor, one task per Harbor feature, written from
Harbor's documented task format, through the CLI. The oracle passes every task under
``--sandbox docker`` (and under ``--runtime runsc`` where the feature allows), ``nop``
passes none, and ``harness tasks check`` finds no problem.

Each run happens once per session (module-scoped fixtures); images are content-addressed,
so they are built once and reused by every run after.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.docker import docker_client, require_image

from sandbox.docker.runtime import network_runtime_of

CONFORMANCE = Path(__file__).resolve().parents[1] / "conformance" / "harbor"
TASKS = sorted(p.name for p in CONFORMANCE.iterdir() if (p / "task.toml").is_file())
#: Features that cannot work under runsc on an engine that gives gVisor no network
#: (neither ``runsc`` nor its ``runsc-net`` sibling registered with one).
NEEDS_NETWORK = {"compose-mcp"}

pytestmark = pytest.mark.docker


def run_conformance(e2e: Any, tmp: Path, *args: str) -> Any:
    require_image(docker_client())
    out = tmp / "runs"
    result = e2e.run(
        "run",
        CONFORMANCE,
        "--sandbox",
        "docker",
        "-j",
        "2",
        "-o",
        out,
        "--display",
        "none",
        *args,
        timeout=900,
    )
    run = e2e.read_run(e2e.only_run_dir(out))
    return result, {r["task"]["path"].rsplit("/", 1)[-1]: r for r in run.records}, run


@pytest.fixture(scope="module")
def oracle_docker(e2e: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return run_conformance(e2e, tmp_path_factory.mktemp("oracle"), "--agent", "oracle")


@pytest.fixture(scope="module")
def nop_docker(e2e: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return run_conformance(e2e, tmp_path_factory.mktemp("nop"), "--agent", "nop")


def test_the_folder_has_a_task_per_feature() -> None:
    assert TASKS == [
        "artifacts",
        "compose-mcp",
        "image-service",
        "multi-step",
        "separate-verifier",
        "task-keys",
        "terminal-bench-legacy",
    ]


def test_tasks_check_reports_no_problem(e2e: Any) -> None:
    result = e2e.run("tasks", "check", CONFORMANCE)
    assert result.code == 0, result
    assert f"{len(TASKS)} task(s) OK" in result.stdout
    assert result.error_lines() == [], result


def test_oracle_passes_every_task_in_docker(oracle_docker: Any) -> None:
    result, records, _ = oracle_docker
    assert result.code == 0, result
    assert sorted(records) == TASKS
    for name, record in records.items():
        assert record["status"] == "completed" and record["reward"] == 1.0, (name, record)


def test_nop_passes_no_task(nop_docker: Any) -> None:
    _result, records, _ = nop_docker
    assert sorted(records) == TASKS
    for name, record in records.items():
        assert record["status"] == "completed" and record["reward"] == 0.0, (name, record)


def test_oracle_passes_under_runsc_where_the_feature_allows(
    e2e: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    runtimes = docker_client().info().get("Runtimes") or {}
    assert "runsc" in runtimes, "gVisor (runsc) must be registered (docker/start-engine.sh)"
    _result, records, _run = run_conformance(
        e2e, tmp_path_factory.mktemp("runsc"), "--agent", "oracle", "--runtime", "runsc"
    )
    networked = network_runtime_of("runsc", runtimes) is not None
    for name, record in records.items():
        if name in NEEDS_NETWORK and not networked:
            assert record["status"] == "environment_error", record
            error = record["errors"][0]
            assert "gives containers no network" in error["message"]
            assert error["retryable"] is False and record["attempt"] == 1
        else:
            assert record["status"] == "completed" and record["reward"] == 1.0, (name, record)


def test_multi_step_record_and_evidence(oracle_docker: Any) -> None:
    _result, records, run = oracle_docker
    record = records["multi-step"]
    assert [(s["name"], s["reward"]) for s in record["steps"]] == [("create", 1.0), ("extend", 1.0)]
    evidence = run.evidence(record)
    for step in ("create", "extend"):
        assert (evidence / "steps" / step / "verifier" / "reward.txt").read_text().strip() == "1"
    manifest = json.loads((evidence / "steps/create/artifacts/manifest.json").read_text())
    assert manifest == [
        {"source": "/app/notes.txt", "destination": "notes.txt", "type": "file", "status": "ok"}
    ]
    assert (evidence / "workspace" / "extra.txt").is_file()  # the state after the last step


def test_artifacts_are_in_the_evidence(oracle_docker: Any) -> None:
    _result, records, run = oracle_docker
    artifacts = run.evidence(records["artifacts"]) / "artifacts"
    assert (artifacts / "out" / "notes.md").read_text() == "counted with wc\n"
    assert (artifacts / "results" / "final.txt").read_text() == "3\n"
    assert (artifacts / "run-log.txt").read_text() == "solve.sh ran\n"  # /logs/artifacts
    sources = [entry["source"] for entry in json.loads((artifacts / "manifest.json").read_text())]
    assert sources == ["/logs/artifacts", "/app/out", "/app/result.txt"]


def test_compose_sidecars_are_recorded_and_main_stays_hardened(oracle_docker: Any) -> None:
    _result, records, _ = oracle_docker
    sandbox = records["compose-mcp"]["sandbox"]
    compose = sandbox["compose"]
    assert compose["sidecars"] == ["kv", "mcp-server"]
    assert compose["internal"] is True and sandbox["network"] == compose["network"]
    assert compose["main_overridden"] == ["privileged"]
    posture = records["compose-mcp"]["posture"]
    assert posture["dropped"] is True and posture["no_new_privs"] in (1, True, "1")


def test_the_image_workload_is_recorded(oracle_docker: Any) -> None:
    _result, records, _ = oracle_docker
    workload = records["image-service"]["sandbox"]["workload"]
    assert workload["argv"] == ["/usr/local/bin/start-service.sh", "sh", "-c", "sleep infinity"]
    assert records["image-service"]["timings"]["healthcheck"] > 0


def test_a_separate_verifier_container_is_removed(oracle_docker: Any) -> None:
    _result, records, _ = oracle_docker
    record = records["separate-verifier"]
    inputs = [e for e in record["events"] if e["type"] == "verifier_input"]
    assert [(e["source"], e["status"]) for e in inputs] == [
        ("/logs/artifacts", "missing"),
        ("/app/answer.txt", "ok"),
        ("/app/report", "ok"),
    ]
    left = docker_client().containers.list(
        all=True, filters={"label": f"org.harness.trial={record['id']}"}
    )
    assert left == []
