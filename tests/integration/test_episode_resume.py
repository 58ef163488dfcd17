"""``--resume`` of a run of episodes killed mid-run, through the CLI as a process: complete
episodes are kept as they are, an incomplete one (an agent crashed) and one that never got a
record (the harness was killed while it ran) are run again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.episodes import EXAMPLES, UID_BASE
from support.faults import Cli, assert_no_traceback, records, status, wait_until

#: r0 runs clean; r1's second attempt crashes (an incomplete episode); r2 is slow (killed).
SCRIPT = (
    'case "$HARNESS_TRIAL_ID" in *.r1-agent-2) kill -9 $$;; *.r2-*) sleep 4;; esac; '
    'printf "Hello, world!\\n" > hello.txt'
)


def _latest(run_dir: Path) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for record in records(run_dir):
        found[record["id"].rsplit(".", 1)[1]] = record
    return found


@pytest.mark.root
def test_resume_keeps_complete_episodes_and_reruns_the_others(tmp_path: Path) -> None:
    cli = Cli(tmp_path, {})
    out, name = tmp_path / "runs", "resume"
    run_dir = out / name
    try:
        first = cli.start(
            "run", EXAMPLES / "hello-file", "--agent", "command", "--agent-cmd",
            f"bash -c '{SCRIPT}'", "--env", "best-of-n", "--set", "env.n=2", "-r", "3",
            "-j", "1", "--set", "retry.max_retries=0", "--set", f"sandbox.uid={UID_BASE}",
            "--set", f"sandbox.gid={UID_BASE}", "-o", out, "--run-name", name,
            "--display", "plain",
        )  # fmt: skip

        def r2_running() -> bool:
            running = status(run_dir).get("running", [])
            return len(records(run_dir)) == 2 and any(".r2" in t["id"] for t in running)

        wait_until(r2_running, "r0 and r1 recorded, r2 running")
        first.kill9()  # a crash: r2 has no record
        before = _latest(run_dir)
        assert sorted(before) == ["r0", "r1"]
        assert before["r0"]["episode"]["complete"] and not before["r1"]["episode"]["complete"]
        resumed = cli.run("run", "--resume", run_dir, "--display", "plain")
    finally:
        cli.close()
    assert_no_traceback(resumed)
    after = _latest(run_dir)
    assert sorted(after) == ["r0", "r1", "r2"], resumed
    # Kept: the complete episode is the same record (not run again).
    assert after["r0"] == before["r0"]
    # Rerun: the incomplete one (its next attempt, the earlier one in its history) ...
    assert after["r1"]["attempt"] == 2 and len(after["r1"]["previous_attempts"]) == 1
    assert not after["r1"]["episode"]["complete"]  # its agent-2 crashes again: data
    # ... and the one the crash cut off, now complete.
    r2 = after["r2"]["episode"]
    assert r2["complete"] and after["r2"]["reward"] == 1.0
    assert [t["name"] for t in r2["traces"]] == ["agent-1", "agent-2"]
