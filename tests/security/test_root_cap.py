"""Without root on the engine's host, the image root is writable and still capped.

The harness runs as a member of the ``docker`` group against the rootful engine (overlay2 on
ext4 here: the engine refuses ``--storage-opt size``, so the cap is the run's watcher of
layer sizes, ``soft``) and as the rootless engine's own user against it. Through the real
CLI, two trials in one run:

- a TB2-style ``test.sh`` that installs into ``/usr/local`` (as ``apt-get install`` does
  into ``/usr``) succeeds: reward 1;
- an agent that writes far past ``storage_mb`` into the workspace (a dir of the image root)
  ends as ``storage_full`` (``agent_error``, attempt 1), while its container's layer,
  summed from outside on the engine's disk (its upper dir) for the whole run, held at most
  about the cap; the other trial is unaffected.

Under runc, on the rootful and the rootless engine.

The record says which cap held (``sandbox.limits.storage``) and that it was soft.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support.users import (
    ROOTLESS_USER,
    docker_group_user,
    rootless_engine,
    run_args,
    user_harness,
)

import docker
from sandbox.docker.labels import TASK

pytestmark = [pytest.mark.docker, pytest.mark.root]

ROOTFUL_HOST = "unix:///var/run/docker.sock"
CAP_MB = 256
#: What the filler tries to write: far past the cap, so an uncapped root shows at once.
FILL_MB = 3000
#: The most the layer may hold: the writer was stopped well short of what it tried to
#: write. A soft cap lets a writer past the cap by what it adds between two polls, and a
#: loaded machine (a CI run) stretches the polls: 40 to 225 MB past it alone here, up to
#: 864 MB past it in a full parallel suite.
STOPPED_BELOW_MB = FILL_MB * 2 // 3
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


def _tree_bytes(top: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(top):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


@contextmanager
def _layer_peak(host: str, task: str) -> Iterator[list[int]]:
    """The most the task's container's writable layer held (bytes) while the block ran.

    Read from outside the harness: the engine names the layer's upper dir on this host
    (``GraphDriver.Data.UpperDir``), and the test, root here, sums its files every 50 ms.
    """
    client = docker.DockerClient(base_url=host)
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            with contextlib.suppress(Exception):
                for container in client.containers.list(filters={"label": f"{TASK}={task}"}):
                    upper = container.attrs["GraphDriver"]["Data"]["UpperDir"]
                    peak[0] = max(peak[0], _tree_bytes(upper))
            done.wait(0.05)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        done.set()
        thread.join()
        client.close()


def _records(out: Path) -> dict[str, dict[str, Any]]:
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    records = [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]
    return {r["task"]["name"].split("/")[-1]: r for r in records}


@pytest.mark.parametrize(("where", "runtime"), [("docker-group", "runc"), ("rootless", "runc")])
def test_without_root_the_image_root_is_writable_and_a_filler_is_stopped_at_the_cap(
    where: str, runtime: str
) -> None:
    if where == "rootless":
        host, user = rootless_engine(), user_harness(ROOTLESS_USER)
    else:
        host, user = ROOTFUL_HOST, user_harness(docker_group_user())
    work = user.workdir()
    tasks = _tasks(work)
    user.give(work)
    with _layer_peak(host, "rootcap/fill") as grew:
        options = (*AGENT, "-j", "2", "--runtime", runtime)
        result = user.cli(*run_args(tasks, work / "out", *options), docker_host=host)
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
    # From outside: the layer on the engine's disk never held what the agent tried to write.
    assert 0 < grew[0] < STOPPED_BELOW_MB << 20, grew[0] >> 20
    for record in (usr, fill):
        limits = record["sandbox"]["limits"]
        assert limits["storage"] == "soft", limits
        assert limits["storage_mb"] == CAP_MB and limits["enforced"]["storage_mb"] == "soft"
    said = [line for line in result.stderr.splitlines() if "capped by storage_mb softly" in line]
    assert len(said) == 1, result.stderr[-3000:]
