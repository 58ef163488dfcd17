#!/usr/bin/env python3
"""Trials with realistic workspaces: docker against local against a ``tar | docker cp`` floor.

For each workspace size (``--sizes``, default 100, 1,000, 5,000 and 20,000 files of
``--file-bytes`` each, 100 files per dir), in one run:

(a) the floor: streaming the same tree into a running container of the base image with
    ``tar -c | docker cp -`` and out again with ``docker cp ... - | cat``;
(b) ``--trials`` trials of a copy of ``bench/tasks/trivial`` carrying that workspace, ``nop``
    agent, on the local sandbox and on the docker sandbox (default ``--evidence diff``):
    overhead = ``total - agent`` per trial, and its phases (reset = seeding, collect =
    evidence, cleanup);
(c) the ratios: docker overhead / local overhead (target <= 2x) and docker / floor;
(d) the evidence a trial leaves, in bytes, in each ``--evidence`` mode (local sandbox,
    ``--trials`` trials): per trial (the trial dirs, hard links counted once) and once
    per run (the content store).

Usage::

    .venv/bin/python bench/workspace_scale.py                       # all sizes, 3 trials
    .venv/bin/python bench/workspace_scale.py --sizes 5000 --trials 5

Writes ``bench/results/workspace_scale.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
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
from sandbox.docker.engine import connect, engine_facts  # noqa: E402

TASK_DIR = BENCH_DIR / "tasks" / "trivial"
IMAGE = "harness/base:bookworm"
BENCH_LABEL = "org.harness.bench"
TARGET_RATIO = 2.0
FILES_PER_DIR = 100


def make_task(root: Path, files: int, file_bytes: int) -> Path:
    """The trivial task with a workspace of ``files`` files (random bytes, 100 per dir)."""
    task = root / f"ws-{files}"
    shutil.copytree(TASK_DIR, task)
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace('"bench/trivial"', f'"bench/ws-{files}"'))
    workspace = task / "workspace"
    for i in range(files):
        target = workspace / f"d{i // FILES_PER_DIR:03d}" / f"f{i:05d}.txt"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(os.urandom(file_bytes // 2).hex().encode()[:file_bytes])
    return task


def run_floor(workspace: Path, n: int) -> dict[str, list[float]]:
    """``tar | docker cp`` in and ``docker cp`` out of a running container, ``n`` times."""
    name = f"bench-ws-floor-{os.getpid()}"
    subprocess.run(
        ["docker", "run", "-d", "--rm", "--name", name, "--network", "none",
         "--label", f"{BENCH_LABEL}=workspace_scale", IMAGE, "sleep", "infinity"],
        check=True, capture_output=True,
    )  # fmt: skip
    steps: dict[str, list[float]] = {"in": [], "out": [], "total": []}
    try:
        for i in range(n):
            dest = f"/tmp/ws{i}"
            subprocess.run(["docker", "exec", name, "mkdir", dest], check=True)
            t0 = time.perf_counter()
            subprocess.run(
                f"tar -C {workspace} -cf - . | docker cp - {name}:{dest}",
                shell=True, check=True,
            )  # fmt: skip
            t1 = time.perf_counter()
            subprocess.run(f"docker cp {name}:{dest} - | cat > /dev/null", shell=True, check=True)
            t2 = time.perf_counter()
            steps["in"].append(t1 - t0)
            steps["out"].append(t2 - t1)
            steps["total"].append(t2 - t0)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    return steps


def run_trials(task: Path, out: Path, trials: int, backend: str, evidence: str) -> Any:
    config = RunConfig.model_validate(
        {
            "tasks": {"paths": [str(task)]},
            "agent": {"name": "nop"},
            "sandbox": {"backend": backend},
            "rollouts": trials,
            "output_dir": str(out),
            "evidence": evidence,
        }
    )
    outcome = execute_run(prepare_run(config))
    bad = [r for r in outcome.records if not r.ok or r.reward != 1.0]
    if bad:
        raise SystemExit(f"error: {backend} trial failed: {bad[0].status} {bad[0].errors}")
    return outcome


def trial_stats(records: list[Any]) -> dict[str, Any]:
    phases = {
        name: stats_ms([r.timings.get(name, 0.0) for r in records])["median"]
        for name in ("prepare", "reset", "execute", "collect", "grade", "cleanup", "total")
    }
    overhead = stats_ms([r.timings["total"] - r.timings["agent"] for r in records])
    return {"overhead_ms": overhead, "phases_median_ms": phases}


def _bytes(paths: list[Path]) -> int:
    """Bytes of the regular files under ``paths``, each inode counted once."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for top in paths:
        for path in top.rglob("*") if top.is_dir() else []:
            info = path.lstat()
            key = (info.st_dev, info.st_ino)
            if path.is_file() and not path.is_symlink() and key not in seen:
                seen.add(key)
                total += info.st_size
    return total


def evidence_bytes(outcome: Any, trials: int) -> dict[str, float]:
    run_dir = outcome.run_dir
    objects = run_dir / "objects"
    trial_dirs = [run_dir / "trials" / r.id for r in outcome.records]
    total = _bytes([*trial_dirs, objects])
    store = _bytes([objects])
    return {
        # what each trial adds: its own files (hard links into the store counted there)
        "per_trial_bytes": (total - store) / trials,
        "store_bytes_per_run": store,
        "total_bytes": total,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000,5000,20000", help="files per workspace")
    parser.add_argument("--file-bytes", type=int, default=11_800, help="bytes per file")
    parser.add_argument("--trials", type=int, default=3, help="trials per measurement")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "workspace_scale.json")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    client = connect()
    info = {**host_info(), "engine": engine_facts(client)}
    results: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": info,
        "params": {"trials": args.trials, "file_bytes": args.file_bytes, "image": IMAGE},
        "sizes": {},
    }
    print(
        f"workspace scale: {args.trials} trials per cell, nop agent, {args.file_bytes} B/file "
        f"({info['nproc']} cpus, load {info['loadavg'][0]:.1f})"
    )
    print(
        f"  {'files':>6} {'MB':>6} {'floor':>8} {'local':>8} {'docker':>8} "
        f"{'dk/local':>9} {'dk/floor':>9}   docker reset/collect/cleanup (ms)"
    )
    with tempfile.TemporaryDirectory(prefix="bench-workspace-scale-") as tmp:
        root = Path(tmp)
        for files in sizes:
            task = make_task(root / "tasks", files, args.file_bytes)
            floor = run_floor(task / "workspace", args.trials)
            cell: dict[str, Any] = {
                "megabytes": files * args.file_bytes / 1e6,
                "floor_ms": {k: stats_ms(v) for k, v in floor.items()},
            }
            for backend in ("local", "docker"):
                outcome = run_trials(
                    task, root / f"{backend}-{files}", args.trials, backend, "diff"
                )
                cell[backend] = trial_stats(outcome.records)
                shutil.rmtree(outcome.run_dir)
            cell["evidence"] = {}
            for mode in ("full", "diff", "none"):
                outcome = run_trials(task, root / f"ev-{mode}-{files}", args.trials, "local", mode)
                cell["evidence"][mode] = evidence_bytes(outcome, args.trials)
                shutil.rmtree(outcome.run_dir)
            local = cell["local"]["overhead_ms"]["median"]
            docker_ms = cell["docker"]["overhead_ms"]["median"]
            floor_ms = cell["floor_ms"]["total"]["median"]
            cell["ratio_docker_to_local"] = docker_ms / local
            cell["ratio_docker_to_floor"] = docker_ms / floor_ms
            cell["target_met"] = cell["ratio_docker_to_local"] <= TARGET_RATIO
            results["sizes"][str(files)] = cell
            shutil.rmtree(task)
            ph = cell["docker"]["phases_median_ms"]
            print(
                f"  {files:>6} {cell['megabytes']:>6.1f} {floor_ms:>8.0f} {local:>8.0f} "
                f"{docker_ms:>8.0f} {cell['ratio_docker_to_local']:>8.2f}x "
                f"{cell['ratio_docker_to_floor']:>8.2f}x   "
                f"{ph['reset']:.0f}/{ph['collect']:.0f}/{ph['cleanup']:.0f}"
            )
    print(f"\n  evidence per trial (bytes; target docker/local <= {TARGET_RATIO:g}x above):")
    print(f"  {'files':>6} {'full':>14} {'diff':>14} {'none':>14}   store once per run (diff)")
    for files, cell in results["sizes"].items():
        ev = cell["evidence"]
        print(
            f"  {files:>6} {ev['full']['per_trial_bytes']:>14,.0f} "
            f"{ev['diff']['per_trial_bytes']:>14,.0f} {ev['none']['per_trial_bytes']:>14,.0f}"
            f"   {ev['diff']['store_bytes_per_run']:,}"
        )
    results["machine"]["loadavg_at_end"] = list(os.getloadavg())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"\nwrote {args.out}")
    return 0 if all(c["target_met"] for c in results["sizes"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
