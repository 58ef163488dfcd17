#!/usr/bin/env python3
"""What the per-trial filesystem and the root views cost (a script, not a test).

Measured in one run, as ratios against baselines taken in the same process:

1. **storage**: create + destroy one trial filesystem (sparse image, ``mkfs.ext4``, loop
   mount, unmount, delete; ``sandbox.storage.TrialStorage``) against ``mkdtemp`` +
   ``rmtree`` of a plain dir;
2. **trials**: the local sandbox's per-trial overhead (``total - agent``, ``nop`` agent on
   ``bench/tasks/trivial``) with its own filesystem against the same trials with
   ``storage_mb`` not enforced (plain dirs; the root views stay);
3. **views**: one supervised phase of ``true`` as the agent user in a root view with its
   own namespaces against the same phase without namespaces (the docker shape).

Usage::

    .venv/bin/python bench/isolation_cost.py [--trials 40] [--iterations 30]

Needs root (loop devices, namespaces). Writes ``bench/results/isolation_cost.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
if str(REPO) not in sys.path:  # run as a plain script from anywhere
    sys.path.insert(0, str(REPO))

from measure import host_info, stats_ms  # noqa: E402

import sandbox.local.sandbox  # noqa: E402
from harness.config import RunConfig  # noqa: E402
from harness.runner import execute_run, prepare_run  # noqa: E402
from sandbox.backend import PhaseRequest, SandboxSpec  # noqa: E402
from sandbox.environment import FIXED_PATH  # noqa: E402
from sandbox.local.sandbox import IdentityPool, LocalSandbox  # noqa: E402
from sandbox.storage import TrialStorage  # noqa: E402

TASK_DIR = BENCH_DIR / "tasks" / "trivial"
UID = 61832


def bench_storage(iterations: int, work: Path) -> dict[str, Any]:
    """Create+destroy a trial filesystem vs mkdtemp+rmtree, ``iterations`` times each."""
    fs, plain = [], []
    for _ in range(iterations):
        root = Path(tempfile.mkdtemp(dir=work))
        start = time.perf_counter()
        storage = TrialStorage(root, 1024)
        storage.create()
        storage.destroy()
        fs.append(time.perf_counter() - start)
        shutil.rmtree(root)
        start = time.perf_counter()
        shutil.rmtree(tempfile.mkdtemp(dir=work))
        plain.append(time.perf_counter() - start)
    return {"filesystem": stats_ms(fs), "plain dir": stats_ms(plain)}


def bench_trials(trials: int, work: Path, *, storage: bool) -> dict[str, Any]:
    """Per-trial overhead of ``trials`` nop trials, with or without trial filesystems."""
    original = sandbox.local.sandbox.storage_supported
    if not storage:
        sandbox.local.sandbox.storage_supported = lambda: False  # type: ignore[assignment]
    try:
        config = RunConfig.model_validate(
            {
                "tasks": {"paths": [str(TASK_DIR)]},
                "agent": {"name": "nop"},
                "sandbox": {"uid": UID, "gid": UID},
                "rollouts": trials,
                "output_dir": str(work / ("with" if storage else "without")),
            }
        )
        outcome = execute_run(prepare_run(config))
    finally:
        sandbox.local.sandbox.storage_supported = original
    overhead = [r.timings["total"] - r.timings.get("agent", 0.0) for r in outcome.records]
    return stats_ms(overhead)


def bench_views(iterations: int, work: Path) -> dict[str, Any]:
    """One ``true`` phase as the agent in a root view, against one without namespaces."""
    pool = IdentityPool(UID + 100, UID + 100)
    box = LocalSandbox(SandboxSpec(trial_id="bench-views"), identities=pool, tmp_dir=work)
    box.start()
    try:
        request = PhaseRequest(role="agent", argv=["true"], env={"PATH": FIXED_PATH})
        in_view = [box.run_phase(request).duration_sec for _ in range(iterations)]
        # The same phase without namespaces: what a container's supervisor does.
        session = box._supervisor()  # a bench looks inside
        payload = {
            "op": "run",
            "argv": ["true"],
            "env": {"PATH": FIXED_PATH},
            "cwd": "/",
            "user": {"uid": UID + 100, "gid": UID + 100},
            "timeout_sec": 10,
        }
        bare = [float(session.request(payload)["duration_sec"]) for _ in range(iterations)]
    finally:
        box.stop()
    return {"root view": stats_ms(in_view), "no namespaces": stats_ms(bare)}


def main() -> int:
    """Run the three measurements and print the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "isolation_cost.json")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root (loop devices, namespaces)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-isolation-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o711)
        result = {
            "host": host_info(),
            "storage": bench_storage(args.iterations, work),
            "trials": {
                "with filesystem": bench_trials(args.trials, work, storage=True),
                "plain dirs": bench_trials(args.trials, work, storage=False),
            },
            "views": bench_views(args.iterations, work),
        }
    ratios = {
        "storage create+destroy / plain dir": result["storage"]["filesystem"]["median"]
        / result["storage"]["plain dir"]["median"],
        "trial overhead with / without filesystem": result["trials"]["with filesystem"]["median"]
        / result["trials"]["plain dirs"]["median"],
        "phase in a root view / without namespaces": result["views"]["root view"]["median"]
        / result["views"]["no namespaces"]["median"],
    }
    result["ratios"] = ratios
    for section in ("storage", "trials", "views"):
        for name, stats in result[section].items():
            print(f"  {section:8} {name:24} median {stats['median']:8.2f} ms")
    for name, ratio in ratios.items():
        print(f"  ratio {name}: {ratio:.2f}x")
    trials = result["trials"]
    added = trials["with filesystem"]["median"] - trials["plain dirs"]["median"]
    print(f"  added per trial by the filesystem (median): {added:.1f} ms")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
