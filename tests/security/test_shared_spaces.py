"""Spaces the agent can fill never hold what grading must write (docs/security.md, "Storage").

Each attack is an agent that knows it is wrong and tries to make its failure ungraded or
retried by filling a space the harness writes after it:

- an unprivileged agent fills its artifacts dir (docker: ``/logs/artifacts``, beside
  ``/logs/verifier``; local: on the trial's storage): ``test.sh`` still writes its
  reward, the trial is graded with its honest reward on attempt 1, and in docker a
  ``limit`` event names the full artifacts dir;
- a root agent (``--agent-root allow`` on runc, ``isolated`` on gVisor) fills ``/trial``,
  ``/logs``, ``/logs/verifier`` and ``/run`` (its own captures and the instruction file
  included), then floods its stdout: no supervisor step fails, the trial is graded
  honestly on attempt 1, never an ``environment_error`` retried;
- a root agent appends 200 MB to each of ``/etc/hosts``, ``/etc/hostname`` and
  ``/etc/resolv.conf`` (files the engine keeps under its data root) with ``storage_mb =
  256``: the engine's data root never grows (each file, watched from the host through
  ``docker inspect``'s paths, is small or on the trial's own filesystem), and what was
  written counts against the trial's storage (``storage_full``).

Judged from outside the trial: the record, and the host's view of the engine's files.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

WRONG_ANSWER_TEST = r"""
if [ "$(cat /app/answer.txt 2>/dev/null)" = right ]; then r=1; else r=0; fi
echo $r > "$HARNESS_VERIFIER_DIR/reward.txt"
"""

FILL_ARTIFACTS = r"""
A="$HARNESS_ARTIFACTS_DIR"
echo wrong > answer.txt
dd if=/dev/zero of="$A/fill" bs=1M count=300 2>/dev/null; echo "dd=$?" > loot.txt
for i in $(seq 1 64); do head -c 4096 /dev/zero > "$A/tail$i" 2>/dev/null; done
echo done > done.txt
"""

WRONG_ANSWER_HERE = r"""
if [ "$(cat answer.txt 2>/dev/null)" = right ]; then r=1; else r=0; fi
echo $r > "$HARNESS_VERIFIER_DIR/reward.txt"
"""


def _graded_honestly(record: dict[str, Any]) -> None:
    """Completed with its honest reward (0: the answer is wrong), on the first attempt."""
    assert record["status"] == "completed", record
    assert record["reward"] == 0.0, record
    assert record["attempt"] == 1 and not record.get("previous_attempts"), record
    assert not record["errors"], record["errors"]


def test_an_agent_filling_the_artifacts_dir_is_still_graded(
    backend: str, any_cli: Any, sec: Any, tmp_path: Path
) -> None:
    """Docker: the artifacts' own tmpfs is full (a limit event); local: the trial's storage."""
    name = sec.unique("fill-artifacts")
    task = sec.write_task(
        tmp_path / "tasks", name, attack=FILL_ARTIFACTS, test_sh=WRONG_ANSWER_HERE
    )
    run = any_cli.run([task], timeout=240)
    record = run.by_task(name)
    ws = run.evidence(record) / "workspace"
    assert (ws / "done.txt").is_file(), f"the attack did not finish: {run}"
    _graded_honestly(record)
    limits = [
        e
        for e in record["events"]
        if e["type"] == "evidence"
        and e.get("kind") == "limit"
        and e.get("cap") == "artifacts_bytes"
    ]
    if backend == "local":  # on the trial's storage (10 GB by default): nothing was full
        assert limits == [], record["events"]
        return
    assert len(limits) == 1 and limits[0]["path"] == "/logs/artifacts", record["events"]


FILL_AS_ROOT = r"""
echo wrong > /app/answer.txt
for d in /trial /trial/logs /trial/grader /logs /logs/verifier /logs/artifacts /run /tests; do
  mkdir -p "$d"; dd if=/dev/zero of="$d/fill" bs=1M count=300 2>/dev/null
  for i in $(seq 1 16); do head -c 4096 /dev/zero > "$d/tail$i" 2>/dev/null; done
  echo "fill_$d=$?" >> /app/loot.txt
done
head -c 70M /dev/zero >> /trial/logs/agent.stdout 2>/dev/null
head -c 70M /dev/zero >> /trial/instruction.md 2>/dev/null
echo done > /app/done.txt
seq 1 200000
seq 1 200000 >&2
"""


@pytest.mark.docker
def test_a_root_agent_filling_the_graders_spaces_is_graded_on_attempt_1(
    cli: Any, sec: Any, tmp_path: Path, docker_runtime: str | None
) -> None:
    rule = "isolated" if docker_runtime == "runsc" else "allow"
    name = sec.unique("fill-root")
    task = sec.write_task(
        tmp_path / "tasks", name, attack=FILL_AS_ROOT, test_sh=WRONG_ANSWER_TEST, agent_timeout=60
    )
    run = cli.run([task], timeout=300, extra=["--agent-root", rule])
    record = run.by_task(name)
    ws = run.evidence(record) / "workspace"
    assert (ws / "done.txt").is_file(), f"the attack did not finish: {run}"
    assert record["posture"]["root_agent"] is True, record["posture"]
    _graded_honestly(record)
    assert run.code == 0, run


FILL_ETC = r"""
for f in /etc/hosts /etc/hostname /etc/resolv.conf; do
  head -c 200M /dev/zero >> "$f" 2>/dev/null; echo "$f=$?" >> /app/loot.txt
done
echo done > /app/done.txt
n=0; while [ ! -e /app/seen ] && [ $n -lt 400 ]; do sleep 0.1; n=$((n+1)); done
"""


@pytest.mark.docker
def test_a_root_agent_cannot_grow_the_engines_data_root_through_etc(
    client: Any, cli: Any, sec: Any, tmp_path: Path, docker_runtime: str | None
) -> None:
    rule = "isolated" if docker_runtime == "runsc" else "allow"
    name = sec.unique("fill-etc")
    task = sec.write_task(tmp_path / "tasks", name, attack=FILL_ETC, agent_timeout=90)
    toml = task / "task.toml"
    toml.write_text(
        toml.read_text().replace("memory_mb = 512\n", "memory_mb = 512\nstorage_mb = 256\n")
    )
    data_root = os.stat(str(client.info()["DockerRootDir"])).st_dev
    grown: dict[str, int] = {}

    def sample(cid: str) -> None:
        info = client.api.inspect_container(cid)
        for key in ("HostsPath", "HostnamePath", "ResolvConfPath"):
            path = info.get(key)
            if not path:
                continue
            try:
                st = os.stat(path)
            except OSError:
                continue
            if st.st_dev == data_root:  # a file of the engine's own disk
                grown[key] = max(grown.get(key, 0), st.st_size)
        done = client.api.exec_create(cid, ["test", "-e", "/app/done.txt"], user="0:0")
        client.api.exec_start(done["Id"])
        if client.api.exec_inspect(done["Id"])["ExitCode"] == 0:
            # Sampled once more after the agent's writes: now let it end.
            if grown.get("_after_done"):
                touch = client.api.exec_create(cid, ["touch", "/app/seen"], user="0:0")
                client.api.exec_start(touch["Id"])
            grown["_after_done"] = 1

    with sec.Watcher(client, f"{sec.TASK_LABEL}={name}", sample, interval=0.2) as watcher:
        run = cli.run([task], timeout=300, extra=["--agent-root", rule])
    record = run.by_task(name)
    loot = (run.evidence(record) / "workspace" / "loot.txt").read_text()
    assert grown.get("_after_done"), f"never sampled after the writes: {watcher.errors}\n{run}"
    on_engine = {k: v for k, v in grown.items() if k != "_after_done"}
    assert all(size < 1 << 20 for size in on_engine.values()), (on_engine, loot)
    # Whatever was written counts against storage_mb: the trial filled its storage.
    written = [line for line in loot.splitlines() if line.endswith("=0")]
    if written:
        assert any(e["type"] == "storage_full" for e in record["events"]), (loot, record)
    assert record["attempt"] == 1 and record["status"] in ("completed", "agent_error"), record
