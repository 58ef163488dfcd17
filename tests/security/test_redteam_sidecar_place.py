"""Red team: the agent's artifacts take a sidecar artifact's parent path.

A sidecar's artifacts are placed into the trial's ``artifacts/`` after the agent's own
(``/logs/artifacts``, the agent's to fill). An agent that leaves a *file* where a sidecar
artifact's destination needs a *dir* (``x`` for ``x/y``) made the placement raise: the
whole manifest (the agent's entries and every sidecar's) was lost, an
``evidence_incomplete`` event instead.

Judged from outside: the manifest is written, the sidecar entry says why it is not there,
and the trial is graded on attempt 1.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import BASE_IMAGE, unique, write_task

AGENT = 'echo agent > "$HARNESS_ARTIFACTS_DIR/x"\n'
TREE = "mkdir -p /out && echo sidecar > /out/s.txt && exec sleep infinity"


@pytest.mark.docker
def test_an_agent_file_on_a_sidecar_artifacts_path_keeps_the_manifest(
    cli: Any, tmp_path: Path
) -> None:
    name = unique("rt-sidecar-place")
    task = write_task(
        tmp_path / "tasks",
        name,
        attack=AGENT,
        dockerfile=f"FROM {BASE_IMAGE}\nWORKDIR /app\n",
        verifier_timeout=60,
    )
    compose = textwrap.dedent(
        f"""\
        services:
          main:
            build:
              context: .
          side:
            image: {BASE_IMAGE}
            command: ["sh", "-c", "{TREE}"]
        """
    )
    (task / "environment" / "docker-compose.yaml").write_text(compose)
    toml = task / "task.toml"
    entries = (
        'artifacts = [{ source = "/out", service = "side", destination = "x/y" },'
        ' { source = "/out", service = "side", destination = "z" }]\n'
    )
    hook = (
        '\n[[verifier.collect]]\nservice = "side"\n'
        'command = "until [ -s /out/s.txt ]; do sleep 0.2; done"\n'
    )
    toml.write_text(entries + toml.read_text() + hook)
    run = cli.run([task], timeout=400)
    record = run.by_task(name)
    assert record["status"] == "completed" and record["attempt"] == 1, record
    incomplete = [e for e in record["events"] if e.get("type") == "evidence_incomplete"]
    assert incomplete == [], incomplete
    artifacts = run.evidence(record) / "artifacts"
    assert (artifacts / "x").read_text() == "agent\n"
    assert (artifacts / "z" / "s.txt").read_text() == "sidecar\n"
    manifest = json.loads((artifacts / "manifest.json").read_text())
    by_dest = {entry["destination"]: entry for entry in manifest}
    assert by_dest["x/y"]["status"] == "failed", manifest
    assert by_dest["z"]["status"] == "ok", manifest


MAIN_AGENT = 'echo agent > "$HARNESS_ARTIFACTS_DIR/x"; echo mine > /app/out.txt\n'


@pytest.mark.docker
def test_an_agent_file_on_a_main_artifacts_path_keeps_the_manifest(
    cli: Any, tmp_path: Path
) -> None:
    """The same with a task artifact of the agent's container (no sidecar)."""
    name = unique("rt-main-place")
    task = write_task(
        tmp_path / "tasks",
        name,
        attack=MAIN_AGENT,
        dockerfile=f"FROM {BASE_IMAGE}\nWORKDIR /app\n",
        verifier_timeout=60,
    )
    toml = task / "task.toml"
    toml.write_text(
        'artifacts = [{ source = "/app/out.txt", destination = "x/y" }]\n' + toml.read_text()
    )
    run = cli.run([task], timeout=400)
    record = run.by_task(name)
    assert record["status"] == "completed" and record["attempt"] == 1, record
    artifacts = run.evidence(record) / "artifacts"
    assert (artifacts / "x").read_text() == "agent\n"
    manifest = json.loads((artifacts / "manifest.json").read_text())
    by_dest = {entry["destination"]: entry for entry in manifest}
    assert by_dest["x/y"]["status"] == "failed", manifest
