"""A record never claims a limit the engine did not apply.

Rootless Docker on this cgroup v1 host has no cgroup driver: it accepts ``--memory`` and
applies nothing. A memory hog there must find its record saying memory was not enforced,
and the run must say so; ``sandbox.require_limits = true`` refuses such a run. On the
rootful engine, which applies every limit, the record says each one held and nothing is
said. Judged from outside: what the agent managed to allocate, the record, the run's lines.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.docker import docker_client, require_image
from support.users import ROOTLESS_USER, rootless_engine, run_args, user_harness

pytestmark = pytest.mark.docker

#: Far above the task's memory_mb: only an engine that applies no limit lets it through.
HOG_MB = 1024
LIMIT_MB = 256


def _hog_task(root: Path) -> Path:
    task = root / "tasks" / "hog"
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text(
        '[task]\nname = "limits/hog"\n[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 30\n'
        f"[environment]\nmemory_mb = {LIMIT_MB}\ncpus = 1\nallow_internet = false\n"
    )
    # The agent touches every page of HOG_MB, then says so: under an enforced limit the
    # kernel kills it first and the file never appears.
    (task / "instruction.md").write_text(
        'python3 -c "b = bytearray('
        f"{HOG_MB} << 20); b[::4096] = b'x' * len(b[::4096]); "
        "open('allocated.txt', 'w').write(str(len(b) >> 20))\"\n"
    )
    (task / "tests" / "test.sh").write_text(
        'if [ -f "$HARNESS_WORKSPACE/allocated.txt" ] || [ -f allocated.txt ]; then r=1; '
        'else r=0; fi; echo $r > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
    )
    return root / "tasks"


def _record(out: Path) -> dict[str, Any]:
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    (line,) = (run_dir / "trials.jsonl").read_text().splitlines()
    record: dict[str, Any] = json.loads(line)
    return record


AGENT = ("--agent", "command", "--agent-cmd", "bash {instruction_file}")


def test_a_memory_hog_on_a_rootless_engine_is_recorded_unenforced_and_said() -> None:
    host = rootless_engine()
    user = user_harness(ROOTLESS_USER)
    work = user.workdir()
    tasks = _hog_task(work)
    user.give(work)
    result = user.cli(*run_args(tasks, work / "out", *AGENT), docker_host=host)
    assert result.returncode == 0, result.stderr
    record = _record(work / "out")
    # From outside: the agent really got far more memory than memory_mb.
    assert record["reward"] == 1, record
    limits = record["sandbox"]["limits"]
    assert limits["memory_mb"] == LIMIT_MB
    assert limits["enforced"] == {
        "memory_mb": False,
        "cpus": False,
        "pids": False,
        "storage_mb": "soft",  # the run's watcher of layer sizes (rootcap.py), no kernel cap
    }, limits
    said = [line for line in result.stderr.splitlines() if "does not enforce" in line]
    assert len(said) == 1, result.stderr
    assert "memory_mb, cpus, pids" in said[0] and "CgroupDriver: none" in said[0]

    refused = user.cli(
        *run_args(tasks, work / "refused", *AGENT, "--set", "sandbox.require_limits=true"),
        docker_host=host,
    )
    assert refused.returncode == 2, refused.stderr
    assert "sandbox.require_limits = true refuses the run" in refused.stderr
    assert not (work / "refused").exists() or not any((work / "refused").iterdir())


def test_on_an_engine_that_applies_them_every_limit_is_recorded_held(tmp_path: Path) -> None:
    require_image(docker_client())
    tasks = _hog_task(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "harness", *run_args(tasks, tmp_path / "out", *AGENT)],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    # The limit held: the hog was killed (an agent error) before it could say so.
    assert result.returncode == 1, result.stderr
    record = _record(tmp_path / "out")
    assert record["status"] == "agent_error" and record["attempt"] == 1, record
    assert "137" in result.stderr
    enforced = record["sandbox"]["limits"]["enforced"]
    assert enforced["memory_mb"] and enforced["cpus"] and enforced["pids"], enforced
    assert "does not enforce" not in result.stderr
