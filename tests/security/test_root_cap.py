"""Without root on the engine's host, the image root is writable and still capped.

The harness runs as a member of the ``docker`` group against the rootful engine (overlay2 on
ext4 here: the engine refuses ``--storage-opt size``, so the cap is the run's watcher of
layer sizes, ``soft``) and as the rootless engine's own user against it. Through the real
CLI, two trials in one run:

- a TB2-style ``test.sh`` that installs into ``/usr/local`` (as ``apt-get install`` does
  into ``/usr``) succeeds: reward 1;
- an agent that writes past ``storage_mb`` into the workspace (a dir of the image root)
  ends as ``storage_full`` (``agent_error``, attempt 1), while the engine's disk, sampled
  from outside for the whole run, grew by at most about the cap; the other trial is
  unaffected.

The record says which cap held (``sandbox.limits.storage``) and that it was soft.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support.users import (
    ROOTLESS_HOST,
    ROOTLESS_USER,
    docker_group_user,
    rootless_engine,
    run_args,
    user_harness,
)

pytestmark = [pytest.mark.docker, pytest.mark.root]

ROOTFUL_HOST = "unix:///var/run/docker.sock"
CAP_MB = 256
#: What the filler tries to write: far past the cap, so an uncapped root shows at once.
FILL_MB = 3000
#: How far past the cap the engine's disk may grow (other tests' trials run meanwhile).
SLACK_MB = 512
AGENT = ("--agent", "command", "--agent-cmd", "bash {instruction_file}")


def _tasks(root: Path) -> Path:
    usr = root / "tasks" / "usr"
    (usr / "tests").mkdir(parents=True)
    (usr / "task.toml").write_text(
        '[task]\nname = "rootcap/usr"\n[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n'
        f"[environment]\nstorage_mb = {CAP_MB}\nallow_internet = false\n"
    )
    (usr / "instruction.md").write_text("true\n")
    # What a package install does: new files and dirs under /usr, an executable run from there.
    (usr / "tests" / "test.sh").write_text(
        "set -e\nmkdir -p /usr/local/share/rootcap\n"
        "head -c 4194304 /dev/urandom > /usr/local/share/rootcap/blob\n"
        "printf '#!/bin/sh\\necho installed\\n' > /usr/local/bin/rootcap-probe\n"
        "chmod 755 /usr/local/bin/rootcap-probe\n"
        '[ "$(rootcap-probe)" = installed ] && echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
    )
    fill = root / "tasks" / "fill"
    (fill / "tests").mkdir(parents=True)
    (fill / "task.toml").write_text(
        '[task]\nname = "rootcap/fill"\n[agent]\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 30\n'
        f"[environment]\nstorage_mb = {CAP_MB}\nallow_internet = false\n"
    )
    (fill / "instruction.md").write_text(
        f"dd if=/dev/zero of=fill bs=1M count={FILL_MB} status=none; echo wrote > wrote.txt\n"
    )
    (fill / "tests" / "test.sh").write_text('echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n')
    return root / "tasks"


@contextmanager
def _disk_growth(path: Path) -> Iterator[list[int]]:
    """The most ``path``'s disk grew (bytes) while the block ran, sampled from outside."""
    base = shutil.disk_usage(path).used
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], shutil.disk_usage(path).used - base)
            done.wait(0.02)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        done.set()
        thread.join()


def _records(out: Path) -> dict[str, dict[str, Any]]:
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    records = [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]
    return {r["task"]["name"].split("/")[-1]: r for r in records}


def _data_root(host: str) -> Path:
    if host == ROOTLESS_HOST:
        return Path(f"~{ROOTLESS_USER}").expanduser()
    return Path("/var/lib/docker")


@pytest.mark.parametrize("where", ["docker-group", "rootless"])
def test_without_root_the_image_root_is_writable_and_a_filler_is_stopped_at_the_cap(
    where: str,
) -> None:
    if where == "rootless":
        host, user = rootless_engine(), user_harness(ROOTLESS_USER)
    else:
        host, user = ROOTFUL_HOST, user_harness(docker_group_user())
    work = user.workdir()
    tasks = _tasks(work)
    user.give(work)
    with _disk_growth(_data_root(host)) as grew:
        result = user.cli(*run_args(tasks, work / "out", *AGENT, "-j", "2"), docker_host=host)
    assert (work / "out").is_dir(), result.stderr[-3000:]
    records = _records(work / "out")
    usr, fill = records["usr"], records["fill"]
    # The package-like install into the image root worked (no EROFS), its trial unaffected.
    assert usr["status"] == "completed" and usr["reward"] == 1, (usr, result.stderr[-3000:])
    assert usr["attempt"] == 1
    # The filler was stopped at the cap: the agent's storage_full, on its first attempt.
    assert fill["status"] == "agent_error" and fill["attempt"] == 1, (fill, result.stderr[-3000:])
    full = [e for e in fill.get("events", []) if e["type"] == "storage_full"]
    assert full and full[0]["limit_bytes"] == CAP_MB << 20, fill.get("events")
    # From outside: the engine's disk grew by about the cap at most, never by what it wrote.
    assert grew[0] < (CAP_MB + SLACK_MB) << 20, grew[0] >> 20
    for record in (usr, fill):
        limits = record["sandbox"]["limits"]
        assert limits["storage"] == "soft", limits
        assert limits["storage_mb"] == CAP_MB and limits["enforced"]["storage_mb"] == "soft"
    said = [line for line in result.stderr.splitlines() if "capped by storage_mb softly" in line]
    assert len(said) == 1, result.stderr[-3000:]
