"""What the agent leaves in memory-backed space never turns its failure into a retry.

Attack (docs/security.md, "What the agent can fill, and what grading writes (docker)"):
an unprivileged agent that knows it is wrong writes 60 MB into ``/logs/artifacts`` (a
tmpfs) and then creates empty files there until the container's memory is within 60 MB
of ``memory_mb``. Those files stay charged to the container's memory after the agent
exits: the verifier's test and the harness's copy of the artifacts then ran out of
memory, the supervisor died ("supervisor exited without a result"), and the trial was
an ``environment_error`` retried until an attempt was lucky. A coin-flip agent (right
half the time, the attack otherwise) scored 0.625 over 8 rollouts instead of its
honest mean.

Judged from outside the trial: every trial recorded on attempt 1, none an
``environment_error``, the attacking one scored 0, and ``summary.json``'s mean is the
honest one (the share of trials whose agent answered right).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Cli, unique, write_task

#: The red team's attack, made to read cgroup v1 or v2 (or, where neither is visible, as
#: under gVisor, to stop after a fixed count of files).
PIN_MEMORY = r"""
head -c 60000000 /dev/zero > "$HARNESS_ARTIFACTS_DIR/big" 2>/dev/null
python3 - <<'PY'
import os, time
d = os.environ["HARNESS_ARTIFACTS_DIR"]
def usage():
    for used, limit in (("memory/memory.usage_in_bytes", "memory/memory.limit_in_bytes"),
                        ("memory.current", "memory.max")):
        try:
            u = int(open("/sys/fs/cgroup/" + used).read())
            return u, int(open("/sys/fs/cgroup/" + limit).read())
        except (OSError, ValueError):
            pass
    return None
t, n = time.time(), 0
try:
    while time.time() - t < 60:
        if n % 2000 == 0:
            seen = usage()
            if seen is None and n >= 175000:
                break
            if seen is not None and seen[0] > seen[1] - 60 * 2**20:
                break
        sub = f"{d}/d{n // 5000}"
        if n % 5000 == 0:
            os.makedirs(sub, exist_ok=True)
        os.close(os.open(f"{sub}/{'x' * 200}{n}", os.O_CREAT | os.O_WRONLY))
        n += 1
except OSError as e:
    print("stopped", n, e)
print("created", n)
PY
exit 0
"""

WRONG = "echo wrong > answer.txt\n" + PIN_MEMORY
#: Right half the time; the attack otherwise. The flip is left in the workspace.
COIN = (
    "if [ $((RANDOM % 2)) -eq 1 ]; then echo right > answer.txt; exit 0; fi\n"
    "echo wrong > answer.txt\n" + PIN_MEMORY
)
#: The red team's verifier: it needs 100 MB of its own, then grades the answer.
TEST_SH = r"""
python3 -c 'x = bytearray(100 * 1024 * 1024); print("alloc ok")'
if grep -qx right "$HARNESS_WORKSPACE/answer.txt"; then r=1; else r=0; fi
echo $r > "$HARNESS_VERIFIER_DIR/reward.txt"
"""


def _task(parent: Path, prefix: str, attack: str) -> Path:
    return write_task(
        parent,
        unique(prefix),
        attack=attack,
        test_sh=TEST_SH,
        agent_timeout=120,
        verifier_timeout=120,
    )


def _never_retried(records: list[dict[str, object]]) -> None:
    for record in records:
        assert record["attempt"] == 1, record
        assert record["status"] != "environment_error", record
        assert not record.get("previous_attempts"), record


@pytest.mark.docker
def test_files_an_agent_pins_in_memory_never_make_its_failure_a_retry(
    cli: Cli, tmp_path: Path
) -> None:
    """The red team's single run: attempt 1, not retried, reward 0."""
    task = _task(tmp_path / "tasks", "pin-mem", WRONG)
    result = cli.run([task], timeout=600)
    assert result.run_dir is not None, str(result)
    assert len(result.records) == 1, str(result)
    _never_retried(result.records)
    record = result.records[0]
    assert record["reward"] in (0.0, None), record  # None: ungraded, counted as 0
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["mean_reward"] == 0.0, summary


@pytest.mark.docker
def test_a_coin_flip_agent_that_pins_memory_when_wrong_gets_its_honest_mean(
    cli: Cli, tmp_path: Path
) -> None:
    """The coin-flip variant, 8 rollouts: the summary's mean is the share of right answers."""
    task = _task(tmp_path / "tasks", "pin-coin", COIN)
    result = cli.run([task], jobs=2, timeout=1500, extra=("-r", "8"))
    assert result.run_dir is not None, str(result)
    assert len(result.records) == 8, str(result)
    _never_retried(result.records)
    right = 0
    for record in result.records:
        answer = (result.evidence(record) / "workspace" / "answer.txt").read_text().strip()
        assert answer in ("right", "wrong"), record
        right += answer == "right"
        assert record["reward"] == (1.0 if answer == "right" else pytest.approx(0.0)) or (
            answer == "wrong" and record["reward"] is None
        ), record
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["mean_reward"] == pytest.approx(right / 8), summary


#: A right answer, then 300 MB of a System V shared memory segment left behind (of 512).
PIN_SHM = r"""
echo right > answer.txt
python3 - <<'PY'
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
size = 300 << 20
sid = libc.shmget(0, ctypes.c_size_t(size), 0o1600)
addr = libc.shmat(sid, None, 0)
print("segment", sid, ctypes.get_errno())
if addr not in (None, ctypes.c_void_p(-1).value):
    ctypes.memset(addr, 1, size)
PY
exit 0
"""
#: A verifier that needs 300 MB of its own before it grades.
NEEDS_MEMORY = r"""
python3 -c 'x = bytearray(300 << 20); x[::4096] = b"\1" * len(x[::4096])' || exit 1
if grep -qx right "$HARNESS_WORKSPACE/answer.txt"; then r=1; else r=0; fi
echo $r > "$HARNESS_VERIFIER_DIR/reward.txt"
"""


@pytest.mark.docker
def test_a_shared_memory_segment_the_agent_leaves_never_takes_the_verifiers_memory(
    cli: Cli, tmp_path: Path
) -> None:
    """System V shared memory outlived the agent, charged to the container (runc).

    ``kernel.shm_rmid_forced`` destroys it with its last process: the verifier gets its
    memory and the right answer is graded 1 on attempt 1. gVisor keeps the segment (its
    sandbox then stops: a ``verifier_error`` counted as 0, never retried).
    """
    task = write_task(
        tmp_path / "tasks",
        unique("pin-shm"),
        attack=PIN_SHM,
        test_sh=NEEDS_MEMORY,
        agent_timeout=60,
        verifier_timeout=60,
    )
    result = cli.run([task], timeout=300)
    assert result.run_dir is not None, str(result)
    _never_retried(result.records)
    record = result.records[0]
    if cli.runtime is None:  # runc
        assert record["status"] == "completed" and record["reward"] == 1.0, record
