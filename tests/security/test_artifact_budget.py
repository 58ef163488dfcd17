"""A task never multiplies the evidence cap by listing one of its container's paths often.

Each ``artifacts`` entry was copied with the whole evidence cap (64 MB) of its own, so a
task naming one 56 MB dir under twelve destinations put 672 MB of one trial on the host
(bounded per copy by ``storage_mb``, not in number). The collection now shares one total
cap among the convention dir and every entry; an entry past it is a ``failed`` manifest
entry with a ``limit`` event.

Judged from outside: the trial's artifacts stay within the cap, the trial is graded on
attempt 1, and the manifest names what was left out.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import BASE_IMAGE, unique, write_task

CAP = 64 << 20
COPIES = 12
#: 7 files of 8 MB: under the 16 MB file cap, together under the 64 MB total cap.
TREE = (
    "mkdir -p /app/out && for i in 1 2 3 4 5 6 7; do\n"
    "  head -c 8388608 /dev/urandom > /app/out/f$i\ndone\n"
)


def _size(top: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(top):
        for name in files:
            total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


@pytest.mark.docker
def test_many_artifacts_of_one_path_never_multiply_the_evidence_cap(
    cli: Any, tmp_path: Path
) -> None:
    name = unique("artifact-budget")
    task = write_task(
        tmp_path / "tasks",
        name,
        attack=TREE,
        dockerfile=f"FROM {BASE_IMAGE}\nWORKDIR /app\n",
        verifier_timeout=60,
    )
    entries = ", ".join(f'{{ source = "/app/out", destination = "c{i}" }}' for i in range(COPIES))
    toml = task / "task.toml"
    toml.write_text(f"artifacts = [{entries}]\n" + toml.read_text())
    run = cli.run([task], timeout=600)
    record = run.by_task(name)
    assert record["status"] == "completed" and record["attempt"] == 1, record
    artifacts = run.evidence(record) / "artifacts"
    copied = _size(artifacts)
    assert copied >= 7 * (8 << 20), "the first copy should be whole"
    assert copied <= CAP + (1 << 20), f"{copied >> 20} MB of one trial's artifacts on the host"
    manifest = json.loads((artifacts / "manifest.json").read_text())
    left_out = [e for e in manifest if e.get("status") == "failed"]
    assert left_out and all("spent" in e["detail"] for e in left_out), manifest
