"""A local task set's ``metric.py`` is pinned: a resumed run, a ``--from-lock`` run and a
regrade compute the script the run started with, or say they cannot.

A run of a task set with a ``metric.py`` records its SHA-256 in ``datasets.lock.json``
(``local_metrics``). Each attack here is a real run (local sandbox as root, docker with
runc, docker with gVisor) and then a run dir or task set changed behind the harness's back,
judged from outside: the resume is refused (exit 2) naming the pin and the fix, the
summary and every record stay as they were, no script the run did not start with runs, and
a host file a forged lock or a link names is never read into the run dir or the cache.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import RUN_LABEL, backend_engine, remove_labelled
from support.cli import harness

#: An honest metric: how many trials were solved.
HONEST = """\
import json, sys
args = sys.argv[1:]
rows = [json.loads(line) for line in open(args[args.index("-i") + 1])]
solved = sum(1 for r in rows if r and r["reward"] >= 1)
json.dump({"solved": solved}, open(args[args.index("-o") + 1], "w"))
"""

#: What a swapped script reports, so that its having run shows in the summary.
SWAPPED = """\
import json, sys
args = sys.argv[1:]
json.dump({"swapped": 1}, open(args[args.index("-o") + 1], "w"))
"""


def _task_set(root: Path, reward: int) -> Path:
    """A task set of two tasks (each with a workspace, so regrade can replay it)."""
    task_set = root / "set"
    for name in ("alpha", "beta"):
        task = task_set / name
        (task / "tests").mkdir(parents=True)
        (task / "workspace").mkdir()
        (task / "workspace" / "f.txt").write_text("hi\n")
        (task / "task.toml").write_text(f'[task]\nname = "m/{name}"\n\n[agent]\ntimeout_sec = 30\n')
        (task / "instruction.md").write_text("Nothing to do.\n")
        _set_reward(task_set, name, reward)
    (task_set / "metric.py").write_text(HONEST)
    return task_set


def _set_reward(task_set: Path, name: str, reward: int) -> None:
    test = task_set / name / "tests" / "test.sh"
    test.write_text(f'#!/bin/bash\necho {reward} > "$HARNESS_VERIFIER_DIR/reward.txt"\n')
    test.chmod(0o755)


class Runs:
    """``harness`` on one backend, with a private cache and output dir."""

    def __init__(self, root: Path, sandbox: str, runtime: str | None) -> None:
        self.root = root
        self.output = root / "runs"
        self.cache = root / "cache"
        self.backend = ["--sandbox", sandbox, *(["--runtime", runtime] if runtime else [])]

    def __call__(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        return harness(*args, env={"HARNESS_CACHE_DIR": str(self.cache)}, timeout=300)

    def run(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        return self("run", *args, "--agent", "nop", *self.backend, "-o", self.output)

    def run_dirs(self) -> list[Path]:
        return sorted(self.output.iterdir()) if self.output.exists() else []


@pytest.fixture
def runs(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> Iterator[Runs]:
    """Runs on the test's backend; teardown removes what they left on the engine."""
    sandbox, runtime, client = backend_engine(request, backend)
    found = Runs(tmp_path, sandbox, runtime)
    yield found
    if client is not None:
        for run_dir in found.run_dirs():
            remove_labelled(client, f"{RUN_LABEL}={run_dir.name}")


@pytest.fixture
def local_runs(tmp_path: Path) -> Runs:
    """Runs on the local sandbox (the attacks refused before any sandbox opens)."""
    return Runs(tmp_path, "local", None)


def _summary(run_dir: Path) -> dict[str, Any]:
    return dict(json.loads((run_dir / "summary.json").read_text()))


def _records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]


def _digest(data: str) -> str:
    return "sha256:" + hashlib.sha256(data.encode()).hexdigest()


def _first_run(runs: Runs, task_set: Path) -> Path:
    done = runs.run(task_set)
    assert done.returncode == 0, done.stdout + done.stderr
    [run_dir] = runs.run_dirs()
    metric = _summary(run_dir)["dataset_metrics"]["uv-script"]
    assert metric["value"] == {"solved": 0.0}, metric
    return run_dir


def _pin(task_set: Path) -> dict[str, Any]:
    """What a run of ``task_set`` pins (the honest ``metric.py``)."""
    return {"task_set": str(task_set), "script_path": "metric.py", "script_digest": _digest(HONEST)}


def _holding(root: Path, token: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and token in p.read_bytes()]


@pytest.mark.parametrize("swap", ["changed", "removed"])
def test_a_resume_refuses_a_metric_py_changed_since_the_run_started(
    runs: Runs, tmp_path: Path, swap: str
) -> None:
    task_set = _task_set(tmp_path, reward=0)
    run_dir = _first_run(runs, task_set)
    summary, records = (run_dir / "summary.json").read_bytes(), _records(run_dir)
    if swap == "changed":
        (task_set / "metric.py").write_text(SWAPPED)
    else:
        (task_set / "metric.py").unlink()
    done = runs("run", "--resume", run_dir)
    assert done.returncode == 2, done.stdout + done.stderr
    assert _digest(HONEST) in done.stderr and "put that metric.py back" in done.stderr
    assert (run_dir / "summary.json").read_bytes() == summary  # no script ran, nothing rewritten
    assert _records(run_dir) == records and all(r["attempt"] == 1 for r in records)
    lock = json.loads((run_dir / "datasets.lock.json").read_text())
    assert lock["local_metrics"] == [_pin(task_set)]
    (task_set / "metric.py").write_text(HONEST)  # the script the run started with: it resumes
    done = runs("run", "--resume", run_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _summary(run_dir)["dataset_metrics"]["uv-script"]["value"] == {"solved": 0.0}


@pytest.mark.root
@pytest.mark.parametrize(
    "forgery",
    [
        "script-path-dotdot",
        "script-path-absolute",
        "task-set-dotdot",
        "digest-not-hex",
        "lock-is-a-link",
        "metric-py-is-a-link",
    ],
)
def test_a_run_dir_whose_metric_pin_was_forged_is_refused_and_reads_no_host_file(
    local_runs: Runs, tmp_path: Path, forgery: str
) -> None:
    task_set = _task_set(tmp_path, reward=0)
    run_dir = _first_run(local_runs, task_set)
    token = "HOST-SECRET-" + secrets.token_hex(8)
    outside = tmp_path / "outside.py"
    canary = tmp_path / "ran-on-host"
    outside.write_text(f"# {token}\nopen({str(canary)!r}, 'w')\n" + HONEST)
    lock_file = run_dir / "datasets.lock.json"
    pin = _pin(task_set)  # the run's own pin, then forged: the run dir is anyone's
    lock: dict[str, Any] = {"lock_version": 1, "local_metrics": [pin]}
    if forgery == "script-path-dotdot":
        pin["script_path"] = "../outside.py"
    elif forgery == "script-path-absolute":
        pin["script_path"] = str(outside)
    elif forgery == "task-set-dotdot":
        pin["task_set"] = f"{task_set}/../outside.py"
    elif forgery == "digest-not-hex":
        pin["script_digest"] = "sha256:" + "Z" * 64
    if forgery == "lock-is-a-link":
        host_lock = tmp_path / "host-lock.json"
        pin["script_digest"] = _digest(outside.read_text())
        host_lock.write_text(json.dumps(lock))
        lock_file.unlink(missing_ok=True)
        lock_file.symlink_to(host_lock)
    elif forgery == "metric-py-is-a-link":
        outside.write_text(HONEST + f"# {token}\n")  # what the pin holds, plus the secret
        pin["script_digest"] = _digest(outside.read_text())
        lock_file.write_text(json.dumps(lock))
        (task_set / "metric.py").unlink()
        (task_set / "metric.py").symlink_to(outside)
    else:
        lock_file.write_text(json.dumps(lock))
    summary, records = (run_dir / "summary.json").read_bytes(), _records(run_dir)
    done = local_runs("run", "--resume", run_dir)
    assert done.returncode == 2, done.stdout + done.stderr
    expected = "link" if forgery.endswith("link") else "local_metrics[0]"
    assert expected in done.stderr, done.stderr
    assert (run_dir / "summary.json").read_bytes() == summary
    assert _records(run_dir) == records
    assert not canary.exists()
    assert _holding(run_dir, token.encode()) == []
    assert _holding(local_runs.cache, token.encode()) == []


@pytest.mark.root
def test_from_lock_holds_a_task_sets_metric_py_to_the_locks_pin(
    local_runs: Runs, tmp_path: Path
) -> None:
    task_set = _task_set(tmp_path, reward=0)
    source = _first_run(local_runs, task_set)
    (task_set / "metric.py").write_text(SWAPPED)
    done = local_runs.run("--from-lock", source, task_set)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "pinned" in done.stderr and "--from-lock" in done.stderr
    assert local_runs.run_dirs() == [source]  # nothing written
    (task_set / "metric.py").write_text(HONEST)
    done = local_runs.run("--from-lock", source, task_set)
    assert done.returncode == 0, done.stdout + done.stderr
    [new] = [d for d in local_runs.run_dirs() if d != source]
    assert _summary(new)["dataset_metrics"]["uv-script"]["value"] == {"solved": 0.0}
    pins = json.loads((new / "datasets.lock.json").read_text())["local_metrics"]
    assert [p["script_digest"] for p in pins] == [_digest(HONEST)]


def test_a_regrade_computes_its_dataset_metric_over_the_new_rewards_and_pins_its_script(
    runs: Runs, tmp_path: Path
) -> None:
    task_set = _task_set(tmp_path, reward=0)
    source = _first_run(runs, task_set)
    before = (source / "summary.json").read_bytes()
    for name in ("alpha", "beta"):
        _set_reward(task_set, name, 1)  # the fixed tests
    done = runs("regrade", source, *runs.backend)
    assert done.returncode == 0, done.stdout + done.stderr
    [regraded] = [d for d in runs.run_dirs() if d != source]
    summary = _summary(regraded)
    assert summary["mean_reward"] == 1.0
    assert summary["dataset_metrics"]["uv-script"] == {
        "type": "uv-script",
        "source": "script",
        "dataset": "set@local",
        "value": {"solved": 2.0},
        "trials_counted": 2,
        "graded": 2,
        "ungraded": 0,
        "error": None,
    }
    assert (source / "summary.json").read_bytes() == before  # the source keeps its record
    regrade = json.loads((regraded / "regrade.json").read_text())
    assert regrade["dataset_metrics"] == [
        {"metric": "uv-script.solved", "before": 0.0, "after": 2.0, "reason": None}
    ]
    assert "dataset metric uv-script.solved: 0 -> 2" in done.stdout
    pins = json.loads((regraded / "datasets.lock.json").read_text())["local_metrics"]
    assert [p["script_digest"] for p in pins] == [_digest(HONEST)]
    (task_set / "metric.py").write_text(SWAPPED)
    done = runs("run", "--resume", regraded)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "pinned" in done.stderr
    assert "swapped" not in (regraded / "summary.json").read_text()


@pytest.mark.root
def test_a_regrade_whose_dataset_lost_its_metric_py_keeps_no_number_and_says_why(
    local_runs: Runs, tmp_path: Path
) -> None:
    task_set = _task_set(tmp_path, reward=0)
    source = _first_run(local_runs, task_set)
    for name in ("alpha", "beta"):
        _set_reward(task_set, name, 1)
    (task_set / "metric.py").unlink()
    done = local_runs("regrade", source, *local_runs.backend)
    assert done.returncode == 0, done.stdout + done.stderr
    [regraded] = [d for d in local_runs.run_dirs() if d != source]
    assert _summary(regraded)["mean_reward"] == 1.0
    assert "dataset_metrics" not in _summary(regraded)  # no number over the old rewards
    [change] = json.loads((regraded / "regrade.json").read_text())["dataset_metrics"]
    assert change["metric"] == "uv-script.solved"
    assert (change["before"], change["after"]) == (0.0, None)
    assert "declares no such metric now" in change["reason"]
