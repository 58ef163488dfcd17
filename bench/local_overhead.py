#!/usr/bin/env python3
"""Per-trial overhead of the harness on the local sandbox (a script, not a test).

Runs ``--trials`` trials of ``bench/tasks/trivial`` with the ``nop`` agent through the public
API (``RunConfig`` -> ``prepare_run`` -> ``execute_run``) and, in the same process, a
baseline: the floor cost of the same work with no harness at all (spawn ``true`` for the
agent, then ``bash tests/test.sh`` for the verifier, no isolation).

Overhead of one trial = ``timings["total"] - timings["agent"]``: everything the harness
spends around the agent phase (sandbox root, supervisor start, evidence copy, verifier phase,
grading, cleanup). ``agent`` is the phase duration measured by the in-sandbox supervisor, so
the supervisor's own work inside the agent phase (fork, privilege drop, the end-of-phase
process scans) is *not* counted, while the same work inside the verifier phase is.

Usage::

    .venv/bin/python bench/local_overhead.py                 # 100 trials, 1 at a time
    .venv/bin/python bench/local_overhead.py --trials 300 --concurrency 2
    .venv/bin/python bench/local_overhead.py --profile always   # also profile where time goes

Trials run as uid/gid ``--uid`` (+ slot), not the harness default 65532, so the local
backend's uid sweep cannot hit another harness process running on the same host.

Writes a JSON file (default ``bench/results/local_overhead.json``) and prints a table.
When the median overhead misses the target, a profile is taken automatically.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
if str(REPO) not in sys.path:  # run as a plain script from anywhere
    sys.path.insert(0, str(REPO))

from measure import PHASES, host_info, stats_ms  # noqa: E402

from harness.config import RunConfig  # noqa: E402
from harness.runner import execute_run, prepare_run  # noqa: E402
from sandbox.local.sandbox import spawn_supervisor  # noqa: E402

TASK_DIR = BENCH_DIR / "tasks" / "trivial"
TARGET_MS = 20.0  # issue 17: the local backend below 20 ms median overhead
DEFAULT_UID = 61532


# --- the harness run -------------------------------------------------------------------------


def bench_config(trials: int, concurrency: int, out_dir: Path, uid: int) -> RunConfig:
    """The run config of the benchmark: ``trials`` rollouts of the trivial task with ``nop``."""
    return RunConfig.model_validate(
        {
            "tasks": {"paths": [str(TASK_DIR)]},
            "agent": {"name": "nop"},
            "sandbox": {"backend": "local", "uid": uid, "gid": uid},
            "rollouts": trials,
            "concurrency": concurrency,
            "output_dir": str(out_dir),
        }
    )


def run_harness(trials: int, concurrency: int, out_dir: Path, uid: int) -> dict[str, Any]:
    """Run ``trials`` nop trials of the trivial task through the public API."""
    config = bench_config(trials, concurrency, out_dir, uid)
    prepared = prepare_run(config)
    start = time.perf_counter()
    outcome = execute_run(prepared)
    wall = time.perf_counter() - start
    records = outcome.records
    bad = [r for r in records if not r.ok or r.reward != 1.0]
    return {"records": records, "wall_sec": wall, "bad": bad, "exit_code": outcome.exit_code}


# --- the baseline ----------------------------------------------------------------------------


def run_baseline(trials: int, work: Path) -> dict[str, list[float]]:
    """Floor cost: spawn the agent (``true``) and the verifier (``bash test.sh``), no harness."""
    verifier_dir = work / "verifier"
    workspace = work / "workspace"
    workspace.mkdir(parents=True)
    verifier_dir.mkdir()
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(work),
        "HARNESS_WORKSPACE": str(workspace),
        "HARNESS_VERIFIER_DIR": str(verifier_dir),
    }
    test_sh = str(TASK_DIR / "tests" / "test.sh")
    both, agent, verifier = [], [], []
    for _ in range(trials):
        start = time.perf_counter()
        subprocess.run(["true"], env=env, cwd=workspace, check=True)
        middle = time.perf_counter()
        subprocess.run(["bash", test_sh], env=env, cwd=workspace, check=True)
        end = time.perf_counter()
        both.append(end - start)
        agent.append(middle - start)
        verifier.append(end - middle)
    if (verifier_dir / "reward.txt").read_text().strip() != "1":
        raise SystemExit("baseline: test.sh did not write reward 1")
    return {"total": both, "agent": agent, "verifier": verifier}


# --- profiling -------------------------------------------------------------------------------


def _time_spawns(argv: list[str], n: int, **kwargs: Any) -> dict[str, float]:
    durations = []
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run(argv, check=True, **kwargs)
        durations.append(time.perf_counter() - start)
    return stats_ms(durations)


def profile_pieces(n: int) -> dict[str, Any]:
    """Time the building blocks of a trial in isolation (all in milliseconds)."""
    import psutil

    from sandbox.backend import SUPERVISOR_PATH, SupervisorSession
    from sandbox.environment import FIXED_PATH
    from sandbox.inside import processes

    out: dict[str, Any] = {}
    py = sys.executable
    out["python -I -S -c pass"] = _time_spawns([py, "-I", "-S", "-c", "pass"], n)
    # The supervisor reads EOF at once and exits: interpreter start + imports + exit.
    out["supervisor.py start->exit (EOF)"] = _time_spawns(
        [py, "-I", "-S", str(SUPERVISOR_PATH)],
        n,
        stdin=subprocess.DEVNULL,
        env={"PATH": FIXED_PATH},
    )
    # A script run as __main__ is compiled from source on every start (never cached).
    source = SUPERVISOR_PATH.read_text()
    compiles = []
    for _ in range(n):
        start = time.perf_counter()
        compile(source, str(SUPERVISOR_PATH), "exec")
        compiles.append(time.perf_counter() - start)
    out["compile(supervisor.py)"] = stats_ms(compiles)
    out["true"] = _time_spawns(["true"], n)
    with tempfile.TemporaryDirectory(prefix="bench-vd-") as vd:
        out["bash test.sh"] = _time_spawns(
            ["bash", str(TASK_DIR / "tests" / "test.sh")],
            n,
            env={"PATH": FIXED_PATH, "HARNESS_VERIFIER_DIR": vd},
        )

    with tempfile.TemporaryDirectory(prefix="bench-sup-") as tmp:
        request = {
            "argv": ["true"],
            "env": {"PATH": FIXED_PATH},
            "cwd": tmp,
            "logs": {"stdout": f"{tmp}/o", "stderr": f"{tmp}/e"},
            "timeout_sec": 30,
            "rlimits": {"core": 0, "nofile": 4096},
        }

        def spawn() -> SupervisorSession:
            return SupervisorSession(spawn_supervisor(py, str(SUPERVISOR_PATH)))

        # A fresh supervisor per trial, as LocalSandbox does: boot, one phase, close + reap.
        boots, phases, exits = [], [], []
        for _ in range(n):
            start = time.perf_counter()
            session = spawn()
            res = session.request(request)
            answered = time.perf_counter()
            session.close()  # closes stdin, then Popen.wait(timeout=10) as the harness does
            closed = time.perf_counter()
            inside = float(res.get("duration_sec") or 0.0)
            boots.append(answered - start - inside)
            phases.append(inside)
            exits.append(closed - answered)
        out["supervisor boot (spawn->1st answer - phase)"] = stats_ms(boots)
        out["supervisor phase `true` (duration_sec)"] = stats_ms(phases)
        out["supervisor close+reap (wait timeout=10)"] = stats_ms(exits)

        # The same close, reaped with a blocking wait (no timeout = no sleep polling).
        blocking = []
        for _ in range(n):
            session = spawn()
            session.request(request)
            proc = session._proc
            assert proc is not None and proc.stdin is not None
            start = time.perf_counter()
            proc.stdin.close()
            proc.wait()
            blocking.append(time.perf_counter() - start)
            if proc.stdout:
                proc.stdout.close()
        out["supervisor close+reap (blocking wait)"] = stats_ms(blocking)

        # One warm supervisor: the channel's own cost per request.
        session = spawn()
        trips, inside_all = [], []
        try:
            for _ in range(n):
                start = time.perf_counter()
                res = session.request(request)
                trips.append(time.perf_counter() - start)
                inside_all.append(float(res.get("duration_sec") or 0.0))
        finally:
            session.close()
        out["warm supervisor: round trip - phase"] = stats_ms(
            [t - i for t, i in zip(trips, inside_all, strict=True)]
        )

    # End-of-phase bookkeeping inside the supervisor: one /proc scan (it does >= 2 per phase).
    scans = []
    for _ in range(n):
        start = time.perf_counter()
        processes.descendants(os.getpid(), processes.live_entries())
        scans.append(time.perf_counter() - start)
    out["supervisor /proc scan (x1)"] = stats_ms(scans)
    # LocalSandbox._sweep's scan of every process's uids (once per trial, as root).
    sweeps = []
    for _ in range(n):
        start = time.perf_counter()
        [p for p in psutil.process_iter(["uids"]) if p.info["uids"].real == 65532]
        sweeps.append(time.perf_counter() - start)
    out["host psutil uid sweep (x1)"] = stats_ms(sweeps)
    out["processes on host"] = sum(1 for p in os.listdir("/proc") if p.isdigit())
    return out


def cprofile_trials(n: int, work: Path, uid: int, top: int = 25) -> str:
    """cProfile ``n`` trials run through the public API (profiling the worker thread)."""
    config = bench_config(n, 1, work, uid)
    prepared = prepare_run(config)
    profiler = cProfile.Profile()
    # execute_run runs each trial in a pool thread (one, at concurrency 1): profile that thread.
    original = threading.Thread.run

    def run(self: threading.Thread) -> None:
        profiler.enable()
        try:
            original(self)
        finally:
            profiler.disable()

    threading.Thread.run = run  # type: ignore[method-assign]
    try:
        execute_run(prepared)
    finally:
        threading.Thread.run = original  # type: ignore[method-assign]
    buf = io.StringIO()
    st = pstats.Stats(profiler, stream=buf)
    st.sort_stats("cumulative").print_stats(top)
    buf.write("\n--- by own time ---\n")
    st.sort_stats("tottime").print_stats(top)
    return buf.getvalue()


# --- reporting -------------------------------------------------------------------------------


def _row(name: str, s: dict[str, float], width: int = 28) -> str:
    return (
        f"  {name:<{width}}{s['median']:>9.2f}{s['p90']:>9.2f}{s['mean']:>9.2f}"
        f"{s['min']:>9.2f}{s['max']:>9.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=100, help="number of trials (default 100)")
    parser.add_argument("--concurrency", type=int, default=1, help="trials at once (default 1)")
    parser.add_argument(
        "--out",
        type=Path,
        default=BENCH_DIR / "results" / "local_overhead.json",
        help="JSON output (default bench/results/local_overhead.json)",
    )
    parser.add_argument(
        "--uid",
        type=int,
        default=DEFAULT_UID,
        help=(
            f"base sandbox uid/gid (default {DEFAULT_UID}, not the harness default 65532: the "
            "local backend's end-of-trial sweep kills every process of its uid, so sharing a "
            "uid with another harness process on this host would kill each other's agents)"
        ),
    )
    parser.add_argument(
        "--profile",
        choices=("auto", "always", "never"),
        default="auto",
        help="profile where the time goes: auto = only when the target is missed",
    )
    args = parser.parse_args(argv)
    if args.trials < 1 or args.concurrency < 1:
        parser.error("--trials and --concurrency must be >= 1")

    info = host_info()
    date = datetime.now(UTC).isoformat(timespec="seconds")
    with tempfile.TemporaryDirectory(prefix="bench-local-overhead-") as tmp:
        tmpdir = Path(tmp)
        # Half the baseline before the harness run and half after, so a load change on the
        # host during the run skews both sides alike.
        half = args.trials // 2
        before = run_baseline(half, tmpdir / "baseline-before") if half else None
        run = run_harness(args.trials, args.concurrency, tmpdir / "runs", args.uid)
        after = run_baseline(args.trials - half, tmpdir / "baseline-after")
        baseline = {k: (before[k] if before else []) + v for k, v in after.items()}
        records = run["records"]
        if run["bad"]:
            first = run["bad"][0]
            print(
                f"error: {len(run['bad'])}/{len(records)} trials failed; first: "
                f"status={first.status} reward={first.reward} errors={first.errors}",
                file=sys.stderr,
            )
            return 1

        overhead = [r.timings["total"] - r.timings["agent"] for r in records]
        phases: dict[str, dict[str, float]] = {}
        for name in PHASES:
            phases[name] = stats_ms([r.timings.get(name, 0.0) for r in records])
        derived = {
            "execute - agent": [r.timings["execute"] - r.timings["agent"] for r in records],
            "grade - verifier": [r.timings["grade"] - r.timings["verifier"] for r in records],
            "total - sum(phases)": [
                r.timings["total"]
                - sum(r.timings.get(p, 0.0) for p in ("prepare", "reset", "execute"))
                - sum(r.timings.get(p, 0.0) for p in ("collect", "grade", "cleanup"))
                for r in records
            ],
        }
        for name, values in derived.items():
            phases[name] = stats_ms(values)

        o = stats_ms(overhead)
        b = stats_ms(baseline["total"])
        b_agent = stats_ms(baseline["agent"])
        b_verifier = stats_ms(baseline["verifier"])
        ratio = o["median"] / b["median"] if b["median"] > 0 else float("inf")
        met = o["median"] < TARGET_MS
        result: dict[str, Any] = {
            "date": date,
            "machine": info,
            "params": {
                "trials": args.trials,
                "concurrency": args.concurrency,
                "task": str(TASK_DIR.relative_to(REPO)),
                "agent": "nop",
                "sandbox": "local",
                "sandbox_uid": args.uid,
            },
            "overhead_ms": o,
            "overhead_first_trial_ms": overhead[0] * 1000.0,
            "baseline_ms": b,
            "baseline_agent_true_ms": b_agent,
            "baseline_verifier_bash_test_sh_ms": b_verifier,
            "ratio_overhead_median_to_baseline_median": ratio,
            "target_ms": TARGET_MS,
            "target_met": met,
            "phases_ms": phases,
            "run_wall_sec": run["wall_sec"],
            "run_wall_per_trial_ms": run["wall_sec"] * 1000.0 / len(records),
            "trials_per_sec": len(records) / run["wall_sec"],
        }

        print(
            f"local overhead: {args.trials} trials x nop on bench/trivial, "
            f"concurrency {args.concurrency}  ({info['nproc']} cpus, Python {info['python']}, "
            f"root={info['root']})"
        )
        print(f"  {'ms':<28}{'median':>9}{'p90':>9}{'mean':>9}{'min':>9}{'max':>9}")
        print(_row("overhead (total - agent)", o))
        print(_row("baseline (true + test.sh)", b))
        print(_row("  baseline: true", b_agent))
        print(_row("  baseline: bash test.sh", b_verifier))
        for name, s in phases.items():
            print(_row(f"  {name}", s))
        print(f"  ratio overhead/baseline (median): {ratio:.1f}x")
        print(
            f"  run wall: {run['wall_sec']:.2f}s = {result['run_wall_per_trial_ms']:.1f} ms/trial "
            f"({result['trials_per_sec']:.1f} trials/s)"
        )
        verdict = "MET" if met else "NOT MET"
        print(f"  target median overhead < {TARGET_MS:g} ms: {verdict} ({o['median']:.1f} ms)")

        if args.profile == "always" or (args.profile == "auto" and not met):
            n = min(args.trials, 50)
            print(f"\nprofiling ({n} samples each)...")
            pieces = profile_pieces(n)
            result["profile"] = {"pieces_ms": pieces}
            print(f"  {'ms':<44}{'median':>9}{'p90':>9}{'mean':>9}{'min':>9}{'max':>9}")
            for name, s in pieces.items():
                if isinstance(s, dict):
                    print(_row(name, s, 44))
                else:
                    print(f"  {name}: {s}")
            text = cprofile_trials(min(args.trials, 20), tmpdir / "profile-runs", args.uid)
            result["profile"]["cprofile"] = text
            print("\ncProfile of the harness worker thread (see JSON 'profile.cprofile')")
            print("\n".join(text.splitlines()[:45]))

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
