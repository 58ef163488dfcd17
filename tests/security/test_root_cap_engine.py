"""Where the engine caps a container's layer itself, the image root's cap is the engine's.

A private engine (:mod:`support.private_engine`) on a btrfs data root, the one filesystem of
this host's kernel whose Docker driver takes ``--storage-opt size=`` (the kernel has no XFS
quota support: ``CONFIG_XFS_QUOTA`` unset, so overlay2 on XFS with ``pquota`` cannot be
mounted here). The harness runs as a docker-group user against it, so no trial filesystem
can hold the layer: the engine is asked (a probe container) and caps it. An agent writing
far past ``storage_mb`` into the workspace (a dir of the image root) is refused by the
kernel (``EDQUOT``) at the cap; judged from outside: what the verifier finds on disk, the
btrfs filesystem's own use, the record (``hard-engine``, enforced).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.docker import prerequisite_missing
from support.private_engine import PrivateEngine, started_engine
from support.users import docker_group_user, run_args, user_harness

pytestmark = [pytest.mark.docker, pytest.mark.root, pytest.mark.serial]

CAP_MB = 256
FILL_MB = 3000
AGENT = ("--agent", "command", "--agent-cmd", "bash {instruction_file}")


@pytest.fixture
def btrfs_engine() -> Iterator[PrivateEngine]:
    """A private engine whose data root is a fresh 4 GB btrfs (loop-mounted)."""
    if os.geteuid() != 0 or shutil.which("dockerd") is None:
        prerequisite_missing("root and dockerd, for a private engine")
    if shutil.which("mkfs.btrfs") is None:
        prerequisite_missing("mkfs.btrfs (btrfs-progs; scripts/test installs it)")
    root = Path(tempfile.mkdtemp(prefix="hb-", dir="/tmp"))
    image, point = root / "btrfs.img", root / "data"
    point.mkdir()
    subprocess.run(["truncate", "-s", "4G", str(image)], check=True)
    subprocess.run(["mkfs.btrfs", "-q", "-f", str(image)], check=True, capture_output=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(point)], check=True)
    engine: PrivateEngine | None = None
    try:
        engine = started_engine(root / "e", data_root=point / "docker")
        # The docker group may use it, as it uses the shared engine.
        os.chmod(root, 0o711)
        os.chmod(root / "e", 0o711)
        shutil.chown(engine.sock, group="docker")
        os.chmod(engine.sock, 0o660)
        yield engine
    finally:
        if engine is not None:
            engine.close()
        subprocess.run(["umount", "-l", str(point)], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def _tasks(root: Path) -> Path:
    fill = root / "tasks" / "fill"
    (fill / "tests").mkdir(parents=True)
    (fill / "task.toml").write_text(
        '[task]\nname = "rootcap/fill"\n[agent]\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 60\n'
        f"[environment]\nstorage_mb = {CAP_MB}\nallow_internet = false\n"
    )
    (fill / "instruction.md").write_text(
        f"dd if=/dev/zero of=fill bs=1M count={FILL_MB} 2>&1 | tail -c 300 > /logs/artifacts/dd\n"
    )
    # The verifier reports what the agent managed to write (the workspace is its cwd).
    (fill / "tests" / "test.sh").write_text(
        'echo "{\\"reward\\": 1, \\"fill_bytes\\": $(stat -c %s fill)}" '
        '> "$HARNESS_VERIFIER_DIR/reward.json"\n'
    )
    return root / "tasks"


def _btrfs_used(point: Path) -> int:
    return shutil.disk_usage(point).used


def test_an_engine_that_caps_layers_holds_the_root_at_storage_mb(
    btrfs_engine: PrivateEngine,
) -> None:
    user = user_harness(docker_group_user())
    work = user.workdir()
    tasks = _tasks(work)
    user.give(work)
    point = btrfs_engine.data_root.parent
    before = _btrfs_used(point)
    result = user.cli(*run_args(tasks, work / "out", *AGENT), docker_host=btrfs_engine.host)
    assert (work / "out").is_dir(), result.stderr[-3000:]
    (run_dir,) = [p for p in (work / "out").iterdir() if p.is_dir()]
    (line,) = (run_dir / "trials.jsonl").read_text().splitlines()
    record: dict[str, Any] = json.loads(line)
    limits = record["sandbox"]["limits"]
    assert limits["storage"] == "hard-engine", (limits, result.stderr[-3000:])
    assert limits["storage_mb"] == CAP_MB and limits["enforced"]["storage_mb"] is True
    # The kernel stopped the writer at the cap: the file holds about storage_mb, no more.
    assert record["attempt"] == 1 and record["status"] == "agent_error", record
    assert [e for e in record.get("events", []) if e["type"] == "storage_full"], record
    fill = record.get("reward_details", record).get("fill_bytes") or _find(record, "fill_bytes")
    assert (CAP_MB - 64) << 20 <= fill <= CAP_MB << 20, fill
    # From outside: the engine's filesystem grew by less than the cap (the trial is gone).
    assert _btrfs_used(point) - before < CAP_MB << 20
    assert "softly" not in result.stderr


def _find(record: Any, key: str) -> Any:
    """The first value of ``key`` anywhere in the record."""
    if isinstance(record, dict):
        if key in record:
            return record[key]
        values = list(record.values())
    elif isinstance(record, list):
        values = record
    else:
        return None
    for value in values:
        found = _find(value, key)
        if found is not None:
            return found
    return None
