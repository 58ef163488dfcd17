"""``--cpus`` and ``--memory`` policies on the real engine, judged from inside and outside.

The oracle reads its own cgroup (the engine's cgroup v1 files, or v2's) into
``/logs/artifacts``; the record's ``sandbox.limits.policy`` and ``enforced`` must say
what those files show: a cap (``memory.limit_in_bytes``, ``cpu.cfs_quota_us``), a
reservation (``memory.soft_limit_in_bytes``, ``cpu.shares``), or neither.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.docker import docker_client, require_image

pytestmark = pytest.mark.docker

#: Each cgroup value the oracle reads, v1 path first, then v2's.
READ_CGROUP = r"""#!/bin/bash
mkdir -p /logs/artifacts
show() { for f in "$@"; do [ -r "$f" ] && { echo "$(cat "$f")"; return; }; done; echo none; }
{
  echo "mem_limit=$(show /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/memory.max)"
  echo "mem_soft=$(show /sys/fs/cgroup/memory/memory.soft_limit_in_bytes /sys/fs/cgroup/memory.low)"
  echo "cpu_quota=$(show /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu.max)"
  echo "cpu_shares=$(show /sys/fs/cgroup/cpu/cpu.shares /sys/fs/cgroup/cpu.weight)"
} > /logs/artifacts/cgroup.txt
"""
TOML = (
    '[task]\nname = "e2e/policies"\n\n[agent]\ntimeout_sec = 60\n\n'
    "[environment]\ncpus = 1.5\nmemory_mb = 640\n"
)
UNLIMITED = 1 << 62  # cgroup v1's "no limit" is near 2^63, page-rounded


def _run(e2e: Any, tmp_path: Path, cpus: str, memory: str) -> tuple[dict[str, Any], dict[str, str]]:
    require_image(docker_client())
    task = e2e.make_task(tmp_path / "tasks", "policies", toml=TOML, solve_sh=READ_CGROUP)
    out = tmp_path / "runs"
    result = e2e.run(
        "run", task, "--sandbox", "docker", "--agent", "oracle", "--cpus", cpus,
        "--memory", memory, "-o", out, "--display", "none", timeout=300,
    )  # fmt: skip
    run = e2e.read_run(e2e.only_run_dir(out))
    (record,) = run.records
    assert record["status"] == "completed", (result, record)
    text = (run.evidence(record) / "artifacts" / "cgroup.txt").read_text()
    seen = dict(line.split("=", 1) for line in text.splitlines())
    return record["sandbox"]["limits"], seen


def _number(value: str) -> int:
    return UNLIMITED if value.strip() in ("max", "none") else int(value.split()[0])


def test_request_cpus_and_guarantee_memory(e2e: Any, tmp_path: Path) -> None:
    limits, seen = _run(e2e, tmp_path, "request", "guarantee")
    assert limits["policy"] == {"cpus": "request", "memory_mb": "guarantee"}
    assert limits["enforced"]["cpus"] == "request"
    assert limits["enforced"]["memory_mb"] is True
    # From inside: no CPU cap, 1.5 CPUs of shares; memory capped and reserved at 640 MB.
    assert seen["cpu_quota"].split()[0] in ("-1", "max"), seen
    assert seen["cpu_shares"] in ("1536", "150"), seen  # v1 shares, v2 weight
    assert _number(seen["mem_limit"]) == 640 << 20, seen
    assert _number(seen["mem_soft"]) == 640 << 20, seen


def test_ignore_memory_leaves_it_uncapped_and_says_so(e2e: Any, tmp_path: Path) -> None:
    limits, seen = _run(e2e, tmp_path, "limit", "ignore")
    assert limits["enforced"]["memory_mb"] is False
    assert limits["enforced"]["cpus"] is True
    assert _number(seen["mem_limit"]) >= UNLIMITED, seen
    assert _number(seen["cpu_quota"]) == 150_000, seen
