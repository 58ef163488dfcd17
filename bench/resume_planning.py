#!/usr/bin/env python3
"""Resume planning and summary over a synthetic run of 10,000 trials (a script, not a test).

Builds a run dir whose ``trials.jsonl`` holds one record for each of ``--tasks`` x
``--rollouts`` planned trials (default 2,000 x 5 = 10,000), realistic in size and content
(timings, versions, posture, events; errors on the failed ones), plus superseded records
of retried trials (about 3 %) and a line torn by a crash at the end. Then it times what
``harness run --resume RUN_DIR`` does before and after running anything, with the same
functions:

* ``read``:    ``harness.runner.resume.read_for_resume`` — read the file once, validate every
               record, sort the planned trials into kept / rerun / missing;
* ``compact``: ``TrialStore.compact(snapshot)`` — repair the torn line and keep one line
               per trial, atomically, from the snapshot (no second read);
* ``summary``: ``harness.records.metrics.summarize`` over the latest records (pass@k, per-task
               variance, bootstrap intervals over the 2,000 tasks).

Baseline, measured in the same run: ``json.loads`` of every line of the same file (the
floor of reading it at all, no validation). Each pass starts from a fresh copy of the file;
the median of ``--repeat`` passes is reported. Peak memory is measured in fresh
interpreters doing one pass each, as it happens in ``harness run --resume``: the process's
peak RSS (``VmHWM``, the whole process: interpreter, imports, plan, pass) and, in a
second one, the peak of Python allocations (``tracemalloc``).

Usage::

    .venv/bin/python bench/resume_planning.py
    .venv/bin/python bench/resume_planning.py --tasks 500 --rollouts 20 --repeat 5

Target (issue 5): read + compact + summary under 2 s and under 200 MB peak RSS.
Writes ``bench/results/resume_planning.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
if str(REPO) not in sys.path:  # run as a plain script from anywhere
    sys.path.insert(0, str(REPO))

from measure import host_info  # noqa: E402

from harness.records import (  # noqa: E402
    AgentRef,
    AttemptSummary,
    SandboxRef,
    TaskRef,
    TrialError,
    TrialRecord,
    TrialStatus,
    TrialStore,
    Usage,
)
from harness.records.metrics import summarize  # noqa: E402
from harness.runner.plan import plan_trials  # noqa: E402
from harness.runner.resume import read_for_resume  # noqa: E402
from harness.tasks import Task  # noqa: E402
from harness.tasks.model import TaskConfig  # noqa: E402
from harness.trial import TrialPlan  # noqa: E402

TARGET_SEC = 2.0
TARGET_MB = 200.0
STATUS_MIX = (
    [TrialStatus.COMPLETED] * 90
    + [TrialStatus.AGENT_TIMEOUT] * 3
    + [TrialStatus.AGENT_ERROR] * 3
    + [TrialStatus.ENVIRONMENT_ERROR] * 2
    + [TrialStatus.VERIFIER_ERROR]
    + [TrialStatus.CANCELLED]
)
PHASES = ("prepare", "reset", "execute", "agent", "agent_phase", "collect", "grade")
PHASES += ("verifier", "verifier_phase", "cleanup", "total")


def make_tasks(count: int) -> list[Task]:
    """Task objects as the loader makes them (no files needed for planning)."""
    config = TaskConfig()
    tasks = []
    for i in range(count):
        key = f"bench-set/task-{i:05d}"
        digest = hashlib.sha256(key.encode()).hexdigest()
        tasks.append(
            Task(
                name=key,
                key=key,
                hash=digest,
                path=Path(f"/srv/tasks/task-{i:05d}"),
                config=config,
                instruction="",
            )
        )
    return tasks


def make_record(plan: TrialPlan, rng: random.Random, *, attempt: int = 1) -> TrialRecord:
    """A realistic record (about 1.3 kB of JSON) for one planned trial."""
    status = rng.choice(STATUS_MIX)
    started = datetime(2026, 11, 30, tzinfo=UTC) + timedelta(seconds=rng.uniform(0, 86400))
    graded = status in (TrialStatus.COMPLETED, TrialStatus.AGENT_TIMEOUT)
    reward = float(rng.random() < 0.6) if graded else None
    errors = []
    if status is not TrialStatus.COMPLETED:
        errors.append(
            TrialError(
                type={"agent_timeout": "TimeoutError", "environment_error": "SupervisorError"}.get(
                    str(status), "RuntimeError"
                ),
                message=f"{status}: " + "details of what went wrong " * 4,
                phase="execute",
            )
        )
    return TrialRecord(
        id=plan.id,
        task=TaskRef(
            name=plan.task.name, key=plan.task.key, hash=plan.task.hash, path=str(plan.task.path)
        ),
        agent=AgentRef(name="command", model="some-model-2026"),
        sandbox=SandboxRef(backend="docker", image="harness-task/x:0123456789ab", network="none"),
        rollout=plan.rollout,
        attempt=attempt,
        status=status,
        ok=status is TrialStatus.COMPLETED,
        reward=reward,
        rewards={} if reward is None else {"reward": reward},
        errors=errors,
        timings={name: round(rng.uniform(0.01, 30.0), 6) for name in PHASES},
        usage=Usage(input_tokens=rng.randint(1000, 90000), output_tokens=rng.randint(10, 9000)),
        versions={
            "harness": "0.1.0",
            "python": "3.11.7",
            "sandbox": "docker",
            "platform": "Linux-6.1.0-x86_64-with-glibc2.36",
        },
        started_at=started,
        finished_at=started + timedelta(seconds=rng.uniform(1, 600)),
        evidence_dir=f"trials/{plan.id}",
        events=[{"type": "evidence", "kind": "missing", "path": "session/session.jsonl"}],
        posture={
            "uid": 1000,
            "gid": 1000,
            "groups": [],
            "no_new_privs": 1,
            "cap_eff": "0000000000000000",
            "cap_bnd": "0000000000000000",
            "setuid0_fails": True,
        },
    )


def build_run(run_dir: Path, plans: list[TrialPlan], seed: int) -> dict[str, int]:
    """Write the synthetic ``trials.jsonl``; return its line counts."""
    rng = random.Random(seed)
    lines: list[bytes] = []
    superseded = 0
    for plan in plans:
        if rng.random() < 0.03:  # a retried trial: its first attempt's record came first
            first = make_record(plan, rng)
            first = first.model_copy(update={"status": TrialStatus.ENVIRONMENT_ERROR, "ok": False})
            lines.append(first.model_dump_json().encode())
            final = make_record(plan, rng, attempt=2)
            final = final.model_copy(update={"previous_attempts": [AttemptSummary.of(first)]})
            lines.append(final.model_dump_json().encode())
            superseded += 1
        else:
            lines.append(make_record(plan, rng).model_dump_json().encode())
    rng.shuffle(lines)  # trials finish in any order
    torn = make_record(plans[0], rng, attempt=9).model_dump_json().encode()[:700]
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "trials.jsonl").write_bytes(b"".join(line + b"\n" for line in lines) + torn)
    return {"lines": len(lines), "superseded": superseded, "torn_bytes": len(torn)}


def one_pass(run_dir: Path, plans: list[TrialPlan]) -> dict[str, float]:
    """Read + plan, compact, summarize; seconds of each step."""
    t0 = time.perf_counter()
    resume, snapshot = read_for_resume(run_dir, plans)
    t1 = time.perf_counter()
    compact = TrialStore(run_dir).compact(snapshot)
    t2 = time.perf_counter()
    summary = summarize(compact.records)
    t3 = time.perf_counter()
    assert snapshot.report.torn_tail and compact.rewritten
    assert len(compact.records) == len(plans) == len(resume.kept) + resume.to_run
    assert summary.trials == len(plans)
    return {"read": t1 - t0, "compact": t2 - t1, "summary": t3 - t2, "total": t3 - t0}


def baseline_pass(path: Path) -> float:
    """json.loads of every line: the floor of reading the file at all."""
    t0 = time.perf_counter()
    data = path.read_bytes()
    parsed = []
    for line in data.split(b"\n"):
        try:
            parsed.append(json.loads(line))
        except ValueError:
            continue  # the torn line
    return time.perf_counter() - t0


def child_memory(run_dir: Path, args: argparse.Namespace, mode: str) -> dict[str, int]:
    """One pass in a fresh interpreter; its peak RSS (or tracemalloc peak)."""
    argv = [sys.executable, __file__, "--tasks", str(args.tasks), "--rollouts"]
    argv += [str(args.rollouts), "--child", str(run_dir), "--child-mode", mode]
    output = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return dict(json.loads(output.strip().splitlines()[-1]))


def peak_rss_kb() -> int:
    """This process's peak resident set (``VmHWM``; ``ru_maxrss`` where /proc is missing).

    ``ru_maxrss`` is not used on Linux: a child started by fork + exec can report the
    parent's peak at fork time, while ``VmHWM`` starts over with the new program.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def child(run_dir: Path, args: argparse.Namespace) -> int:
    """``--child``: plan (as a resume does), then one pass; print what it cost."""
    plans = plan_trials(make_tasks(args.tasks), rollouts=args.rollouts)
    before = peak_rss_kb()
    if args.child_mode == "tracemalloc":
        tracemalloc.start()
    one_pass(run_dir, plans)
    result = {"ru_maxrss_before_kb": before, "ru_maxrss_kb": peak_rss_kb()}
    if args.child_mode == "tracemalloc":
        result["tracemalloc_peak_bytes"] = tracemalloc.get_traced_memory()[1]
    print(json.dumps(result))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--rollouts", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "resume_planning.json")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child-mode", default="rss", help=argparse.SUPPRESS)
    args = parser.parse_args()
    # The torn line is reported by a warning on every pass: expected here, not news.
    logging.getLogger("harness.records").setLevel(logging.ERROR)
    if args.child is not None:
        return child(args.child, args)

    plans = plan_trials(make_tasks(args.tasks), rollouts=args.rollouts)
    work = Path(tempfile.mkdtemp(prefix="harness-bench-resume-"))
    try:
        source = work / "source"
        counts = build_run(source, plans, args.seed)
        size = (source / "trials.jsonl").stat().st_size
        run_dir = work / "run"

        def fresh() -> None:
            shutil.rmtree(run_dir, ignore_errors=True)
            run_dir.mkdir()
            shutil.copyfile(source / "trials.jsonl", run_dir / "trials.jsonl")

        passes, baselines = [], []
        for _ in range(args.repeat):
            fresh()
            baselines.append(baseline_pass(run_dir / "trials.jsonl"))
            fresh()
            passes.append(one_pass(run_dir, plans))

        memory = {}
        for mode in ("rss", "tracemalloc"):
            fresh()
            memory[mode] = child_memory(run_dir, args, mode)
        peak = memory["tracemalloc"]["tracemalloc_peak_bytes"]
        maxrss_mb = memory["rss"]["ru_maxrss_kb"] / 1024
        idle_mb = memory["rss"]["ru_maxrss_before_kb"] / 1024
    finally:
        shutil.rmtree(work, ignore_errors=True)

    median = {key: statistics.median(p[key] for p in passes) for key in passes[0]}
    base = statistics.median(baselines)
    peak_mb = peak / 1e6
    result: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(),
        "host": host_info(),
        "planned_trials": len(plans),
        "tasks": args.tasks,
        "rollouts": args.rollouts,
        "file_bytes": size,
        **counts,
        "repeat": args.repeat,
        "seconds_median": median,
        "seconds_all": passes,
        "baseline_json_loads_sec": base,
        "ratio_to_baseline": median["total"] / base,
        "tracemalloc_peak_mb": peak_mb,
        "peak_rss_mb": maxrss_mb,
        "peak_rss_before_pass_mb": idle_mb,
        "target": {"seconds": TARGET_SEC, "peak_mb": TARGET_MB},
        "met": median["total"] < TARGET_SEC and maxrss_mb < TARGET_MB,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")

    print(f"synthetic run: {len(plans)} planned trials ({args.tasks} tasks x {args.rollouts}),")
    print(
        f"  {counts['lines']} records + 1 torn line, {size / 1e6:.1f} MB, "
        f"{counts['superseded']} superseded"
    )
    print(f"median of {args.repeat} passes:")
    for key in ("read", "compact", "summary", "total"):
        print(f"  {key:<8} {median[key] * 1000:8.1f} ms")
    print(f"  baseline (json.loads of every line) {base * 1000:.1f} ms")
    print(f"  ratio total / baseline              {median['total'] / base:.2f}x")
    print(
        f"peak memory of a pass in a fresh process: peak RSS {maxrss_mb:.1f} MB "
        f"({idle_mb:.1f} MB before the pass), Python allocations (tracemalloc) {peak_mb:.1f} MB"
    )
    verdict = "met" if result["met"] else "MISSED"
    print(f"target < {TARGET_SEC:g} s and < {TARGET_MB:g} MB: {verdict}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
