#!/usr/bin/env python3
"""The adapted Terminal-Bench 2 sample end to end, against plain ``docker run`` (a script).

Times ``tests/fixtures/tb2/`` (real TB2 tasks, adapted only to build offline: see its README)
with the ``oracle`` agent, one trial at a time, twice: with a cold image cache (the
sample's task images removed first) and a warm one (the images of the cold pass reused).

(a) the harness: ``harness run --sandbox docker --force-build --agent-root allow`` (runc;
    ``--runtime``/``--agent-root`` change it) through the CLI, as a user runs it. Per trial,
    the record's ``timings`` split into build (``timings.build``, when the harness records
    it, else inside ``reset``), start (``reset`` minus the build), agent, verifier, cleanup
    and the rest; each as a share of the summed trial totals; and the run's wall time;
(b) the floor: per task, ``docker build`` of the same Dockerfile (its ``FROM``
    rewritten to the alias target) and one ``docker run --rm`` of the built image that runs
    ``solution/solve.sh`` then ``tests/test.sh`` as root: what any harness must pay for these
    tasks. The cold pass first removes both sides' task images and the engine's build
    cache (``docker builder prune``), runs the harness, then builds the floor with
    ``--no-cache`` (the engine's layer cache is shared: the second side would reuse the
    first's layers); the warm pass reuses what the cold one built;
(c) harness wall time / floor wall time, cold and warm.

The alias targets (``tests/fixtures/tb2/base/bases.py``: ``harness/base:bookworm`` and a
Debian 13 rootfs made by debootstrap, each with pip, venv and this machine's CA) are built
first when missing; they carry ``org.harness.managed=1``, so ``harness images prune``
removes them. The cold pass removes only the task images, never the bases.

Usage::

    .venv/bin/python bench/tb2_sample.py
    .venv/bin/python bench/tb2_sample.py --runtime runsc --agent-root isolated

Writes ``bench/results/tb2_sample.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
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

from measure import host_info  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "tb2"
TASKS = (
    "build-pmars",
    "distribution-search",
    "log-summary-date-ranges",
    "multi-source-data-merger",
    "regex-log",
    "sparql-university",
)
FLOOR_TAG = "harness-test/tb2-floor"
#: The phases reported, in lifecycle order ("other" is what the record's total leaves).
PHASES = ("build", "start", "agent", "verifier", "cleanup", "other")
FROM_LINE = re.compile(r"^FROM\s+(\S+)\s*$", re.MULTILINE)


def docker(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    """``docker ARGS`` (the CLI's own builder, as the harness's build uses where it has
    no BuildKit); a failure stops the benchmark with its stderr."""
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"docker {' '.join(args[:3])} failed:\n{done.stderr[-3000:]}")
    return done


def load_bases() -> Any:
    """``tests/fixtures/tb2/base/bases.py``, loaded by path (the alias targets' builder)."""
    spec = importlib.util.spec_from_file_location("tb2_bases", FIXTURES / "base" / "bases.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def alias_map(aliases: list[str]) -> dict[str, str]:
    """``{FROM: IMAGE}`` of ``--base-alias FROM=IMAGE`` arguments."""
    return dict(arg.split("=", 1) for arg in aliases if arg != "--base-alias")


def forget_images(*, floor: bool) -> None:
    """Remove the sample's task images (the harness's, and with ``floor`` the floor's) and
    the build cache, keeping the bases: the next build of each starts cold."""
    listed = docker("images", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}").stdout
    for line in listed.splitlines():
        reference, image_id = line.split()
        if (floor and reference.startswith(FLOOR_TAG)) or (
            reference.startswith("harness-task/") and any(t in reference for t in TASKS)
        ):
            subprocess.run(["docker", "rmi", "-f", image_id], capture_output=True)
    subprocess.run(["docker", "builder", "prune", "-f"], capture_output=True)


def floor_pass(work: Path, aliases: dict[str, str], *, cold: bool) -> dict[str, Any]:
    """Per task: ``docker build`` + one ``docker run`` of solve.sh then test.sh."""
    tasks: dict[str, Any] = {}
    for name in TASKS:
        context = work / "floor" / name
        shutil.rmtree(context, ignore_errors=True)
        shutil.copytree(FIXTURES / name / "environment", context)
        dockerfile = context / "Dockerfile"
        dockerfile.write_text(
            FROM_LINE.sub(
                lambda m: f"FROM {aliases.get(m.group(1), m.group(1))}",
                dockerfile.read_text(),
            )
        )
        tag = f"{FLOOR_TAG}:{name}"
        start = time.perf_counter()
        cache = ["--no-cache"] if cold else []
        docker("build", "--quiet", *cache, "--label", "org.harness.managed=1", "-t", tag,
               str(context))  # fmt: skip
        built = time.perf_counter()
        ran = docker(
            "run", "--rm",
            "-v", f"{FIXTURES / name / 'solution'}:/solution:ro",
            "-v", f"{FIXTURES / name / 'tests'}:/tests:ro",
            tag, "bash", "-c",
            "mkdir -p /logs/verifier; bash /solution/solve.sh >/dev/null 2>&1;"
            " bash /tests/test.sh >/dev/null 2>&1; cat /logs/verifier/reward.txt",
        )  # fmt: skip
        end = time.perf_counter()
        tasks[name] = {
            "build_s": built - start,
            "run_s": end - built,
            "total_s": end - start,
            "reward": float(ran.stdout.strip() or "nan"),
        }
    return {"tasks": tasks, "wall_s": sum(t["total_s"] for t in tasks.values())}


def harness_pass(work: Path, label: str, aliases: list[str], options: list[str]) -> dict[str, Any]:
    """One ``harness run`` of the sample (``-j 1``), its wall time and each record's phases."""
    tasks_dir = work / "tasks"
    if not tasks_dir.exists():
        for name in TASKS:
            shutil.copytree(FIXTURES / name, tasks_dir / name)
    out = work / f"runs-{label}"
    command = [
        sys.executable, "-m", "harness", "run", str(tasks_dir), "--agent", "oracle",
        "--sandbox", "docker", "--force-build", *aliases, *options, "-j", "1",
        "-o", str(out), "--display", "none",
    ]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600, cwd=REPO)
    wall = time.perf_counter() - start
    runs = [p for p in out.iterdir() if p.is_dir()] if out.exists() else []
    if len(runs) != 1:
        raise SystemExit(f"harness run made no run dir:\n{done.stdout}\n{done.stderr}")
    records = [json.loads(line) for line in (runs[0] / "trials.jsonl").read_text().splitlines()]
    tasks: dict[str, Any] = {}
    for record in records:
        timings = {k: float(v or 0.0) for k, v in (record.get("timings") or {}).items()}
        build = timings.get("build", 0.0)
        phases = {
            "build": build,
            # With timings.build the reset is the container's start alone; without it
            # the build sits inside the reset (and is reported as start).
            "start": timings.get("reset", 0.0),
            "agent": timings.get("agent", 0.0),
            "verifier": timings.get("verifier", 0.0),
            "cleanup": timings.get("cleanup", 0.0),
        }
        total = timings.get("total", sum(phases.values()))
        phases["other"] = max(total - sum(phases.values()), 0.0)
        name = str(record["task"]["key"]).rsplit("/", 1)[-1]
        tasks[name] = {
            "status": record.get("status"),
            "reward": record.get("reward"),
            "total_s": total,
            "phases_s": phases,
            "build_recorded": "build" in timings,
        }
    summed = sum(t["total_s"] for t in tasks.values()) or float("nan")
    shares = {phase: sum(t["phases_s"][phase] for t in tasks.values()) / summed for phase in PHASES}
    return {"exit": done.returncode, "wall_s": wall, "tasks": tasks, "shares": shares}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runtime", default=None, help="e.g. runsc (default: the engine's)")
    parser.add_argument("--agent-root", default="allow", help="never, isolated or allow")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "tb2_sample.json")
    args = parser.parse_args(argv)
    options = ["--agent-root", args.agent_root]
    if args.runtime:
        options += ["--runtime", args.runtime]
    aliases = load_bases().alias_args()
    results: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": host_info(),
        "params": {"tasks": list(TASKS), "options": options, "aliases": aliases},
    }
    with tempfile.TemporaryDirectory(prefix="tb2-bench-") as tmp:
        work = Path(tmp)
        for cache in ("cold", "warm"):
            # The harness first: the engine's layer cache is shared, so the side built
            # second would reuse the first's layers; the cold floor builds --no-cache.
            if cache == "cold":
                forget_images(floor=True)
            harness = harness_pass(work, cache, aliases, options)
            floor = floor_pass(work, alias_map(aliases), cold=cache == "cold")
            results[cache] = {
                "floor": floor,
                "harness": harness,
                "ratio": harness["wall_s"] / floor["wall_s"],
            }
    results["machine"]["loadavg_at_end"] = list(os.getloadavg())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, default=str) + "\n")

    print(f"TB2 sample ({len(TASKS)} tasks, oracle, {' '.join(options)}), -j 1")
    for cache in ("cold", "warm"):
        cell = results[cache]
        harness, floor = cell["harness"], cell["floor"]
        print(
            f"\n{cache} image cache: harness {harness['wall_s']:.1f} s (exit {harness['exit']}),"
            f" floor {floor['wall_s']:.1f} s, ratio {cell['ratio']:.2f}x"
        )
        print("  share of the summed trial totals: " + ", ".join(
            f"{phase} {share * 100:.0f} %" for phase, share in harness["shares"].items()
        ))  # fmt: skip
        for name in TASKS:
            trial = harness["tasks"].get(name, {})
            bare = floor["tasks"][name]
            print(
                f"  {name:26s} harness {trial.get('total_s', float('nan')):6.1f} s"
                f" reward {trial.get('reward')}  floor build {bare['build_s']:5.1f} s"
                f" run {bare['run_s']:5.1f} s reward {bare['reward']}"
            )
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
