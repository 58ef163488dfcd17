"""A separate verifier gets the convention dir and the declared artifacts, nothing else.

``tests/fixtures/harbor-style/separate-verifier-inputs``, in the style of Harbor's
``separate-verifier-environment`` example (issue 34's Done-when): the oracle publishes a
file in ``/logs/artifacts``, hands one over at ``/tmp`` (a declared artifact) and leaves
another in ``/tmp``; the separate verifier (no network) must see the first two and not the
third. ``oracle`` scores 1 and ``nop`` 0, under runc and gVisor.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.docker import docker_client, require_image

TASK = (
    Path(__file__).resolve().parents[1] / "fixtures" / "harbor-style" / "separate-verifier-inputs"
)
ALIAS = "ubuntu:24.04=harness/base:bookworm"

pytestmark = pytest.mark.docker


@pytest.mark.parametrize("runtime", [None, "runsc"], ids=["runc", "runsc"])
@pytest.mark.parametrize(("agent", "reward"), [("oracle", 1.0), ("nop", 0.0)])
def test_the_verifier_sees_what_was_handed_over_and_nothing_else(
    e2e: Any, tmp_path: Path, runtime: str | None, agent: str, reward: float
) -> None:
    require_image(docker_client())
    out = tmp_path / "runs"
    extra = ["--runtime", runtime] if runtime else []
    result = e2e.run(
        "run", TASK, "--sandbox", "docker", "--agent", agent, "--base-alias", ALIAS,
        "-o", out, "--display", "none", *extra, timeout=600,
    )  # fmt: skip
    run = e2e.read_run(e2e.only_run_dir(out))
    (record,) = run.records
    assert record["status"] == "completed", (result, record)
    stdout = run.evidence(record) / "verifier" / "test-stdout.txt"
    assert record["reward"] == reward, stdout.read_text() if stdout.exists() else record
    if agent == "oracle":
        inputs = {
            e["source"]: e["status"] for e in record["events"] if e["type"] == "verifier_input"
        }
        assert inputs == {"/logs/artifacts": "ok", "/tmp/handoff.txt": "ok"}, inputs
