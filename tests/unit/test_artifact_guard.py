"""``artifacts`` can never replace the trial's evidence (``["/app/x/.."]`` once deleted it).

The task model refuses such entries at load (tests/security/test_hostile_inputs.py); the
collector refuses them again, for an ``Artifact`` that skipped validation.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from harness.tasks.model import Artifact
from harness.trial.artifacts import Caps, collect_artifacts
from sandbox.backend import SandboxSpec
from sandbox.fake import FakeSandbox


@pytest.mark.parametrize(
    "entry",
    [
        "/app/x/..",
        "/app/./x",
        "/..",
        {"source": "/app", "destination": ".."},
        {"source": "/app", "destination": "."},
        {"source": "/app", "destination": "a/../.."},
        {"source": "/app", "destination": "/abs"},
    ],
)
def test_the_model_refuses_an_escaping_artifact(entry: object) -> None:
    with pytest.raises(ValidationError):
        Artifact.model_validate(entry)


@pytest.mark.parametrize(
    "fields",
    [{"source": "/app/x/.."}, {"source": "/app", "destination": ".."}, {"source": "/app",
     "destination": "."}],
)  # fmt: skip
def test_collection_never_replaces_the_evidence(tmp_path: Path, fields: dict[str, str]) -> None:
    trial = tmp_path / "trials" / "t1"
    (trial / "verifier").mkdir(parents=True)
    (trial / "verifier" / "reward.txt").write_text("1\n")
    (trial / "agent.log").write_text("log\n")
    earlier = tmp_path / "attempts" / "t1" / "1"
    earlier.mkdir(parents=True)
    (earlier / "agent.log").write_text("attempt 1\n")
    sandbox = FakeSandbox(SandboxSpec(trial_id="t1"))
    sandbox.files = {"/app/f.txt": b"data", "/app/x/g.txt": b"more"}
    forged = Artifact.model_construct(**{"exclude": [], "destination": None, **fields})
    collect_artifacts(sandbox, [forged], trial / "artifacts", Caps(1 << 20, 1 << 20))
    assert (trial / "verifier" / "reward.txt").read_text() == "1\n"
    assert (trial / "agent.log").read_text() == "log\n"
    assert (earlier / "agent.log").read_text() == "attempt 1\n"
    manifest = (trial / "artifacts" / "manifest.json").read_text()
    assert '"failed"' in manifest and "escapes artifacts/" in manifest
