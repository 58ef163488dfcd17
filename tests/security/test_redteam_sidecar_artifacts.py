"""Red team: a task multiplies the evidence cap by listing one sidecar dir many times.

Each ``artifacts`` entry with a ``service`` is copied with the whole evidence cap
(``max_evidence_total_bytes``, 64 MB) of its own, and a task may list any number of them
(or name the same dir under many destinations). A sidecar's disk is not the trial's
``storage_mb``, so the bytes are the task's to choose: N entries put N times the cap on
the harness's host (its temp dir first, then the run dir).

Judged from outside: the trial's evidence stays within a small multiple of the cap.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import BASE_IMAGE, unique, write_task

CAP = 64 << 20
COPIES = 12
#: 7 files of 8 MB (each under the 16 MB file cap, together under the 64 MB total cap).
TREE = (
    "mkdir -p /out && for i in 1 2 3 4 5 6 7; do head -c 8388608 /dev/urandom > /out/f$$i; done"
    " && exec sleep infinity"
)


def _size(top: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(top):
        for name in files:
            total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


@pytest.mark.docker
def test_many_sidecar_artifacts_never_multiply_the_evidence_cap(cli: Any, tmp_path: Path) -> None:
    name = unique("rt-sidecar-many")
    task = write_task(
        tmp_path / "tasks",
        name,
        attack="true\n",
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
    entries = ", ".join(
        f'{{ source = "/out", service = "side", destination = "c{i}" }}' for i in range(COPIES)
    )
    toml = task / "task.toml"
    # Wait for the tree before collecting (a hook of the sidecar).
    hook = (
        '\n[[verifier.collect]]\nservice = "side"\n'
        'command = "until [ -s /out/f7 ]; do sleep 0.2; done"\n'
    )
    toml.write_text(f"artifacts = [{entries}]\n" + toml.read_text() + hook)
    run = cli.run([task], agent="nop", timeout=600)
    assert run.code == 0, run
    record = run.by_task(name)
    assert record["status"] == "completed" and record["attempt"] == 1, record
    artifacts = run.evidence(record) / "artifacts"
    copied = _size(artifacts)
    assert copied > 0, "nothing came out of the sidecar"
    assert copied <= 2 * CAP, f"{copied >> 20} MB of one trial's sidecar artifacts on the host"
