"""Multi-step tasks and artifacts on the local sandbox (per-step workdir, setup.sh, tests
and solutions; artifacts in the trial's view and $HARNESS_ARTIFACTS_DIR), and, on every
backend, a later step's agent hunting for an earlier step's tests, solution and reward."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.docker import docker_client, require_image

FILES = {
    "task.toml": (
        'artifacts = ["/trial/workspace/out"]\n'
        "[agent]\ntimeout_sec = 30\n[verifier]\ntimeout_sec = 30\n"
        '[[steps]]\nname = "first"\nmin_reward = 1.0\n[[steps]]\nname = "second"\n'
    ),
    "tests/common.sh": (
        'cd "$HARNESS_WORKSPACE"\n'
        'ok() { echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"; }\n'
        'no() { echo 0 > "$HARNESS_VERIFIER_DIR/reward.txt"; }\n'
    ),
    "tests/test.sh": '#!/bin/bash\nsource "$(dirname "$0")/common.sh"\n'
    '[ "$(cat count.txt 2>/dev/null)" = 2 ] && ok || no\n',
    "steps/first/instruction.md": "Copy seed.txt to out/copy.txt.\n",
    "steps/first/workdir/seed.txt": "seeded\n",
    "steps/first/workdir/setup.sh": "echo 1 > count.txt\n",
    "steps/first/solution/solve.sh": (
        '#!/bin/bash\ncd "$HARNESS_WORKSPACE"\nmkdir -p out\ncp seed.txt out/copy.txt\n'
        'echo "first step" > "$HARNESS_ARTIFACTS_DIR/log.txt"\n'
    ),
    "steps/first/tests/test.sh": '#!/bin/bash\nsource "$(dirname "$0")/common.sh"\n'
    '[ -f setup.sh ] && [ "$(cat out/copy.txt 2>/dev/null)" = seeded ] && ok || no\n',
    "steps/second/instruction.md": "Add one to the number in count.txt.\n",
    "steps/second/solution/solve.sh": (
        '#!/bin/bash\ncd "$HARNESS_WORKSPACE"\necho $(( $(cat count.txt) + 1 )) > count.txt\n'
    ),
}


def make(root: Path) -> Path:
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_multi_step_and_artifacts_on_the_local_sandbox(e2e: Any, tmp_path: Path) -> None:
    task = make(tmp_path / "steps-local")
    out = tmp_path / "oracle"
    result = e2e.run("run", task, "--agent", "oracle", "-o", out, "--display", "none")
    run = e2e.read_run(e2e.only_run_dir(out))
    (record,) = run.records
    assert result.code == 0 and record["reward"] == 1.0, (result, record)
    assert [(s["name"], s["reward"]) for s in record["steps"]] == [("first", 1.0), ("second", 1.0)]
    evidence = run.evidence(record)
    artifacts = evidence / "steps" / "first" / "artifacts"
    assert (artifacts / "out" / "copy.txt").read_text() == "seeded\n"
    assert (artifacts / "log.txt").read_text() == "first step\n"
    manifest = json.loads((artifacts / "manifest.json").read_text())
    assert [(m["source"].rsplit("/", 1)[-1], m["status"]) for m in manifest] == [
        ("artifacts", "ok"),
        ("out", "ok"),
    ]

    # Only the last step's workspace is kept: a multi-step trial is not regraded.
    regraded = e2e.run("regrade", e2e.only_run_dir(out), "--display", "none")
    assert regraded.code == 2 and "a multi-step trial" in regraded.stderr, regraded

    out = tmp_path / "nop"
    e2e.run("run", task, "--agent", "nop", "-o", out, "--display", "none")
    (record,) = e2e.read_run(e2e.only_run_dir(out)).records
    assert record["reward"] == 0.0
    (only,) = record["steps"]  # min_reward 1 not met: the second step never ran
    assert only["name"] == "first" and only["stopped"] == "reward = 0, below min_reward 1"


SNOOP = {
    "task.toml": (
        "[agent]\ntimeout_sec = 30\n[verifier]\ntimeout_sec = 30\n"
        '[[steps]]\nname = "plant"\n[[steps]]\nname = "snoop"\n'
    ),
    "steps/plant/instruction.md": "Nothing to do.\n",
    "steps/plant/solution/solve.sh": "#!/bin/bash\n# CANARY-SOLUTION-ONE\ntrue\n",
    "steps/plant/tests/test.sh": (
        '#!/bin/bash\n# CANARY-TESTS-ONE\necho 0.123 > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
    ),
    "steps/snoop/instruction.md": "Look for the first step's tests, solution and reward.\n",
    "steps/snoop/solution/solve.sh": (
        "#!/bin/bash\n"
        # The patterns are split so this script (the oracle's own /solution) holds none.
        'found=$(grep -rl -e CANARY-SOLU""TION-ONE -e CANARY-TE""STS-ONE -e 0.1""23 '
        "/tests /solution /logs/verifier /trial/tests /trial/solution /trial/verifier "
        "2>/dev/null)\n"
        'echo "$found" > "$HARNESS_WORKSPACE/found.txt"\n'
    ),
    "steps/snoop/tests/test.sh": (
        '#!/bin/bash\nif [ -z "$(tr -d "[:space:]" < "$HARNESS_WORKSPACE/found.txt")" ]; '
        'then echo 1; else echo 0; fi > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
    ),
}


@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_the_agent_of_a_later_step_sees_no_earlier_tests_solution_or_reward(
    e2e: Any, tmp_path: Path, backend: str
) -> None:
    if backend == "docker":
        require_image(docker_client())
    task = tmp_path / "snoop"
    for rel, text in SNOOP.items():
        (task / rel).parent.mkdir(parents=True, exist_ok=True)
        (task / rel).write_text(text)
    out = tmp_path / "runs"
    result = e2e.run(
        "run",
        task,
        "--agent",
        "oracle",
        "--sandbox",
        backend,
        "-o",
        out,
        "--display",
        "none",
        timeout=300,
    )
    (record,) = e2e.read_run(e2e.only_run_dir(out)).records
    assert [s["reward"] for s in record["steps"]] == [0.123, 1.0], (result, record)
