#!/usr/bin/env python3
"""Throughput of the Ray executor against the local one, and Ray's per-trial dispatch cost.

Runs ``--trials`` no-op trials (``bench/tasks/trivial``, agent ``nop``, local sandbox)
through the public runner four times in one process, on this machine:

- ``local -j 1`` and ``ray -j 1``: trials one after another. Each attempt is timed where the
  run waits for it (the executor's ``run_attempt``, in the driver) and on its own (the
  record's ``timings["total"]``, measured where the trial ran); the difference is the
  dispatch cost of an attempt. What Ray adds per trial is the median dispatch cost on Ray
  minus the local one: submitting the task, placing it, a worker unpacking the task and
  setting up, shipping the record and the evidence back, the bridge's control channel.
  Measured per attempt, it does not drift with the machine's load between runs;
- ``local -j J`` and ``ray -j J`` (``--concurrency``, default 2): the throughput ratio
  ``ray trials/s ÷ local trials/s``.

The Ray runs use a private one-node cluster (``--executor ray`` without an address), so the
cluster's start is not part of a run's wall time (it happens while the run is prepared) and
is reported on its own. Nothing here asserts; every number goes to
``bench/results/ray_dispatch.json``.

Usage::

    .venv/bin/python bench/ray_dispatch.py                   # 200 trials per run
    .venv/bin/python bench/ray_dispatch.py --trials 50 --concurrency 2
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
if str(REPO) not in sys.path:  # run as a plain script from anywhere
    sys.path.insert(0, str(REPO))

from measure import host_info, stats_ms  # noqa: E402

from harness.config import RunConfig  # noqa: E402
from harness.runner import execute_run, prepare_run  # noqa: E402

TASK_DIR = BENCH_DIR / "tasks" / "trivial"
DEFAULT_UID = 61532


def run(executor: str, trials: int, concurrency: int, out_dir: Path, uid: int) -> dict[str, Any]:
    """One run of ``trials`` nop trials; its wall time (execution only) and per-trial totals."""
    config = RunConfig.model_validate(
        {
            "tasks": {"paths": [str(TASK_DIR)]},
            "agent": {"name": "nop"},
            "sandbox": {"backend": "local", "uid": uid, "gid": uid},
            "executor": {"name": executor},
            "rollouts": trials,
            "concurrency": concurrency,
            "output_dir": str(out_dir),
        }
    )
    start = time.perf_counter()
    prepared = prepare_run(config)
    opened = time.perf_counter()
    waited: dict[str, float] = {}
    attempt = prepared.executor.run_attempt

    def timed(plan: Any, settings: Any, number: int) -> Any:
        began = time.perf_counter()
        record = attempt(plan, settings, number)
        waited[record.id] = time.perf_counter() - began
        return record

    prepared.executor.run_attempt = timed  # type: ignore[method-assign]
    outcome = execute_run(prepared)
    wall = time.perf_counter() - opened
    bad = [r.id for r in outcome.records if not r.ok or r.reward != 1.0]
    if bad or len(outcome.records) != trials:
        raise SystemExit(f"{executor}: {len(bad)} trial(s) failed: {bad[:5]}")
    totals = [r.timings.get("total", 0.0) for r in outcome.records]
    dispatch = [waited[r.id] - r.timings.get("total", 0.0) for r in outcome.records]
    return {
        "executor": executor,
        "concurrency": concurrency,
        "trials": trials,
        "prepare_sec": opened - start,
        "wall_sec": wall,
        "trials_per_sec": trials / wall,
        "trial_total_ms": stats_ms(totals),
        "dispatch_ms": stats_ms(dispatch),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--uid", type=int, default=DEFAULT_UID)
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "ray_dispatch.json")
    args = parser.parse_args()
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        for executor, concurrency in (
            ("local", 1),
            ("ray", 1),
            ("local", args.concurrency),
            ("ray", args.concurrency),
        ):
            key = f"{executor} -j {concurrency}"
            runs[key] = run(executor, args.trials, concurrency, Path(tmp) / key, args.uid)
            print(
                f"{key:>10}: {runs[key]['wall_sec']:7.2f} s wall, "
                f"{runs[key]['trials_per_sec']:6.2f} trials/s "
                f"(prepare {runs[key]['prepare_sec']:.2f} s)",
                flush=True,
            )
    j = args.concurrency
    serial_local, serial_ray = runs["local -j 1"], runs["ray -j 1"]
    dispatch_ms = serial_ray["dispatch_ms"]["median"] - serial_local["dispatch_ms"]["median"]
    ratio = runs[f"ray -j {j}"]["trials_per_sec"] / runs[f"local -j {j}"]["trials_per_sec"]
    serial_ratio = serial_ray["trials_per_sec"] / serial_local["trials_per_sec"]
    result = {
        "date": datetime.now(UTC).isoformat(),
        "host": host_info(),
        "runs": runs,
        "ray_dispatch_ms_per_trial": dispatch_ms,
        "throughput_ratio_ray_over_local": ratio,
        "throughput_ratio_ray_over_local_j1": serial_ratio,
        "ray_cluster_start_sec": serial_ray["prepare_sec"],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(
        f"\nRay adds {dispatch_ms:.1f} ms per trial (median dispatch at -j 1: ray "
        f"{serial_ray['dispatch_ms']['median']:.1f} ms, p90 {serial_ray['dispatch_ms']['p90']:.1f};"
        f" local {serial_local['dispatch_ms']['median']:.1f} ms; a trial itself: "
        f"{serial_local['trial_total_ms']['median']:.1f} ms)\n"
        f"throughput ray/local at -j {j}: {ratio:.2f}x (at -j 1: {serial_ratio:.2f}x)\n"
        f"a private Ray cluster starts in {serial_ray['prepare_sec']:.1f} s\n"
        f"written to {args.out}"
    )


if __name__ == "__main__":
    main()
