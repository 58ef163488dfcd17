"""An agent cannot erase its failed trials nor turn them into retries (issue 22, classes 1-2).

Attacks through the real CLI on local, docker (runc) and gVisor. The agent is a coin flip,
right on exactly the trials whose id hashes even (so the honest mean is known before the
run); on the others it answers wrong AND plants what used to break the host side: names that
are not UTF-8 (a symlink, a FIFO, a regular file), names with newlines and ANSI escapes, a
symlink loop, and (the deep variant) a directory 2,100 levels deep. Judged from outside:
``trials.jsonl`` holds exactly one record per planned trial on the first run, none retried;
``summary.json`` counts the plan; the mean is the honest one; and every hostile name that a
record names reads back byte for byte through the documented escape (docs/run-dir.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, Cli, write_task

from harness.runner.plan import trial_id
from harness.tasks import load_task
from sandbox.pathnames import unescape_name

ROLLOUTS = 16
#: The deep variant's rollouts: its claim is the deep tree's, the coin's 16 are proved by the
#: names variant; enough for both sides of the coin (asserted).
DEEP_ROLLOUTS = 6

#: The planted names (bytes), as the agent's script spells them with printf.
HOSTILE = {
    b"l\xff": "symlink",
    b"f\xfe": "fifo",
    b"r\xfd\n\x1b[31mred\x1b[0m": "file",
    b"nl\nname": "file",
    b"back\\xffslash": "symlink",  # an ASCII name that looks like an escape
}

COIN = r"""
cd "$HARNESS_WORKSPACE"
h=$(printf %s "$HARNESS_TRIAL_ID" | sha256sum | cut -c1-8)
if [ $(( 0x$h % 2 )) -eq 0 ]; then
  echo right > answer
  exit 0
fi
echo wrong > answer
ln -s x "$(printf 'l\377')"
mkfifo "$(printf 'f\376')"
printf data > "$(printf 'r\375\n\033[31mred\033[0m')"
printf data > "$(printf 'nl\nname')"
ln -s x 'back\xffslash'
ln -s loop loop
DEEP
exit 0
"""

# 2,100 levels: deeper than a recursive walk goes, and a path longer than PATH_MAX once the
# host prefixes its run dir (ENAMETOOLONG copying it out); made 700 levels at a time.
DEEP = r"""
chunk="$(printf 'd/%.0s' $(seq 700))"
mkdir deep && cd deep && for i in 1 2 3; do mkdir -p "$chunk" && cd "$chunk" || break; done
echo leaf > leaf
cd "$HARNESS_WORKSPACE"
"""

CHECK = (
    'if [ "$(cat "$HARNESS_WORKSPACE/answer" 2>/dev/null)" = right ]; then echo 1; '
    'else echo 0; fi > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
)


def _right(trial: str) -> bool:
    """The coin: what the agent's script computes from its trial id."""
    return int(hashlib.sha256(trial.encode()).hexdigest()[:8], 16) % 2 == 0


def _run_coin(any_cli: Any, tmp_path: Path, name: str, *, deep: bool) -> tuple[Any, list[str]]:
    script = COIN.replace("DEEP", DEEP if deep else "")
    task_dir = write_task(tmp_path / "tasks", name, attack=script, test_sh=CHECK, agent_timeout=60)
    task = load_task(task_dir)
    rollouts = DEEP_ROLLOUTS if deep else ROLLOUTS
    planned = [trial_id(task, r) for r in range(rollouts)]
    run = any_cli.run([task_dir], jobs=2, extra=["-r", str(rollouts)], timeout=800)
    return run, planned


def _lines(run_dir: Path) -> list[dict[str, Any]]:
    """Every line of trials.jsonl as JSON: strict UTF-8, one object per line."""
    raw = (run_dir / "trials.jsonl").read_bytes()
    text = raw.decode("utf-8")  # strict: the file is valid UTF-8
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _assert_every_trial_recorded_once(run: Any, planned: list[str]) -> list[dict[str, Any]]:
    assert run.run_dir is not None, str(run)
    lines = _lines(run.run_dir)
    ids = [line["id"] for line in lines]
    assert sorted(ids) == sorted(planned), f"records are not one per planned trial\n{run}"
    for line in lines:
        assert line["attempt"] == 1 and line["previous_attempts"] == [], (
            f"trial {line['id']} was retried: {line['previous_attempts']}"
        )
        assert line["status"] != "environment_error", line["errors"]
    assert "internal error" not in run.stdout + run.stderr, str(run)
    # Nothing left to resume: the eval.log of the run says no trial lacks a record.
    return lines


def _assert_honest_summary(run: Any, planned: list[str]) -> None:
    summary = json.loads((run.run_dir / "summary.json").read_text())
    honest = sum(_right(t) for t in planned) / len(planned)
    assert 0 < honest < 1
    assert summary["planned"] == len(planned) and summary["recorded"] == len(planned)
    assert summary["unrecorded"] == 0 and summary["pending"] == 0
    assert summary["mean_reward_planned"] == pytest.approx(honest)
    assert summary["mean_reward"] == pytest.approx(honest), (
        f"mean {summary['mean_reward']} is not the honest {honest}"
    )
    assert "planned" in run.stdout and "recorded" in run.stdout


def _named(line: dict[str, Any]) -> set[bytes]:
    """The last path component (bytes) of every evidence event of a record."""
    names = set()
    for event in line["events"]:
        path = event.get("path")
        if isinstance(path, str):
            names.add(os.path.basename(unescape_name(path)))
    return names


@pytest.mark.parametrize("deep", [False, True], ids=["names", "names+deep"])
def test_a_coin_flip_agent_planting_hostile_names_scores_its_honest_mean(
    backend: str, any_cli: Any, tmp_path: Path, deep: bool
) -> None:
    run, planned = _run_coin(any_cli, tmp_path, f"coin-{backend}", deep=deep)
    lines = _assert_every_trial_recorded_once(run, planned)
    _assert_honest_summary(run, planned)
    for line in lines:
        reward = 1.0 if _right(line["id"]) else 0.0
        assert line["reward"] == reward, (line["id"], line["status"], line["errors"])
        if _right(line["id"]):
            continue
        # The hostile names the record names read back byte for byte. A walk that the
        # deep tree broke keeps what it copied and says so: then the names may be missing.
        named = _named(line)
        incomplete = [e for e in line["events"] if e["type"] == "evidence_incomplete"]
        if deep and incomplete:
            assert all(e["cause"] in ("agent", "unexpected") for e in incomplete), incomplete
            continue
        assert b"l\xff" in named and b"f\xfe" in named, (backend, sorted(named))
        assert b"back\\xffslash" in named, sorted(named)
    if deep:
        return
    # The hostile regular files reached the host under their real names (or were refused
    # by an event): never a name mangled into another name.
    wrong = next(line for line in lines if not _right(line["id"]))
    evidence = run.run_dir / wrong["evidence_dir"]
    kept = {os.path.basename(p) for p, _d, f in os.walk(os.fsencode(evidence)) for p in f}
    for name, kind in HOSTILE.items():
        if kind == "file":
            assert name in kept or name in _named(wrong), (name, sorted(kept))


def test_a_record_that_cannot_be_written_is_recorded_and_resume_retries_it(
    any_cli: Any, tmp_path: Path, backend: str
) -> None:
    task_dir = write_task(
        tmp_path / "tasks",
        f"unwritable-{backend}",
        attack='echo right > "$HARNESS_WORKSPACE/answer"\n',
        test_sh=CHECK,
    )
    task = load_task(task_dir)
    planned = [trial_id(task, r) for r in range(2)]
    run = any_cli.run([task_dir], extra=["-r", "2"], env={"HARNESS_FAIL_AT": "record"})
    assert run.run_dir is not None, str(run)
    lines = _lines(run.run_dir)
    assert sorted(line["id"] for line in lines) == sorted(planned), str(run)
    for line in lines:
        assert line["status"] == "internal_error" and line["attempt"] == 1
        (error,) = line["errors"]
        assert error["type"] == "RecordNotWritten" and error["retryable"] is False
        assert "status completed, reward 1.0" in error["message"]
    summary = json.loads((run.run_dir / "summary.json").read_text())
    assert summary["planned"] == 2 and summary["recorded"] == 2
    assert summary["errors_by_status"] == {"internal_error": 2}
    assert summary["mean_reward_planned"] == 0.0
    assert run.code == 1

    resumed = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--resume", str(run.run_dir)],
        env=any_cli.env(),
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    lines = _lines(run.run_dir)
    assert sorted(line["id"] for line in lines) == sorted(planned)
    for line in lines:
        assert line["status"] == "completed" and line["attempt"] == 2 and line["reward"] == 1.0
        (earlier,) = line["previous_attempts"]
        assert earlier["status"] == "internal_error"
        assert earlier["errors"][0]["type"] == "RecordNotWritten"
    summary = json.loads((run.run_dir / "summary.json").read_text())
    assert summary["recorded"] == 2 and summary["mean_reward_planned"] == 1.0


# Every inode of the trial's own filesystem used (local: an ext4 image of storage_mb).
FILL_INODES = r"""
cd "$HARNESS_WORKSPACE"
h=$(printf %s "$HARNESS_TRIAL_ID" | sha256sum | cut -c1-8)
if [ $(( 0x$h % 2 )) -eq 0 ]; then
  echo right > answer
  exit 0
fi
echo wrong > answer
mkdir junk && cd junk && python3 - <<'PY'
import os
n = 0
try:
    while True:
        if n % 5000 == 0:
            os.mkdir("d%d" % (n // 5000))
        open("d%d/%d" % (n // 5000, n), "w").close()
        n += 1
except OSError as exc:
    print("inodes used up after", n, "files:", exc)
PY
exit 0
"""


@pytest.mark.root
def test_an_agent_using_every_inode_is_graded_as_its_own_failure_never_retried(
    tmp_path: Path,
) -> None:
    """Local only: the trial filesystem has a fixed inode count that the agent can use up.

    Grading then cannot copy the tests in (ENOSPC on the trial's own storage): that is the
    agent's doing, so the trial is the agent's error on its first attempt, and the coin
    flip's mean stays the honest one.
    """
    task_dir = write_task(tmp_path / "tasks", "inodes", attack=FILL_INODES, test_sh=CHECK)
    toml = task_dir / "task.toml"
    toml.write_text(toml.read_text() + "storage_mb = 256\n")
    task = load_task(task_dir)
    rollouts = 6
    planned = [trial_id(task, r) for r in range(rollouts)]
    assert 0 < sum(map(_right, planned)) < rollouts, "the coin must land both ways"
    run = Cli(tmp_path, sandbox="local", runtime=None).run(
        [task_dir], extra=["-r", str(rollouts)], timeout=600
    )
    lines = _assert_every_trial_recorded_once(run, planned)
    for line in lines:
        if _right(line["id"]):
            assert (line["status"], line["reward"]) == ("completed", 1.0), line["errors"]
            continue
        assert line["reward"] == 0.0 and line["status"] in ("completed", "agent_error")
        for error in line["errors"]:
            assert error.get("retryable") is False and error.get("cause") == "agent", error
    summary = json.loads((run.run_dir / "summary.json").read_text())
    honest = sum(map(_right, planned)) / rollouts
    assert summary["planned"] == rollouts and summary["recorded"] == rollouts
    # Breaking the grader scores like a wrong answer: the graded mean is the honest one.
    assert summary["graded"] == rollouts, summary
    assert summary["mean_reward"] == pytest.approx(honest)
    assert summary["mean_reward_planned"] == pytest.approx(honest)
