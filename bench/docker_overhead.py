#!/usr/bin/env python3
"""Per-trial cost of the harness on the docker sandbox vs a bare container (a script, not a test).

Measures, in one run and against the same image (``harness/base:bookworm``):

(a) the floor: Docker SDK ``containers.create(image, ["true"], network_mode="none")`` + start +
    wait + remove, ``--trials`` times: what *any* container-per-trial design pays;
(b) ``--trials`` no-op trials of ``bench/tasks/trivial`` (``nop`` agent, ``--sandbox docker``)
    through the public API (``RunConfig`` -> ``prepare_run`` -> ``execute_run``), one at a
    time: ``timings["total"]`` per trial, and overhead = ``total - agent``;
(c) the ratio median(trial total) / median(floor), target <= 1.5x (PASS/MISS);
(d) throughput: 4*k trials (k = ceil(trials/4) unless ``--k``) at concurrency 1 and at
    concurrency 4, trials/s of each and the speedup (target >= 2x); then as many bare
    containers at each concurrency: the engine's own ceiling on this machine, and the share
    of it the harness reaches;
(e) ``--trials`` trials of a 1 s agent (``sleep 1``), one at a time: the trial's overhead
    (``total - agent``) against the floor, target <= 0.25x (the warm pool starts the next
    trial's container while the agent runs).

(f) issue 35's item 8, "back to the floor, with every feature on", with the default
    ``public`` policy and the writable root on (the trivial task's defaults): a no-op
    trial <= 1.3x the floor, and ``-j 4`` throughput >= 90% of the bare containers' at
    ``-j 4`` (PASS/MISS each), with who ran it (root, a docker-group user), the engine
    (rootful, rootless) and the posture the records say held (``sandbox.egress``: the host
    filter or the trial's own namespace; the writable root's cap; warm containers).

``--as-user NAME`` runs the whole measurement as that user (``runuser``, from its venv of
``tests/support/users.py``, against this checkout's code), ``--docker-host URL`` against
that engine: a docker-group user's run and a rootless engine's are the same script.

When the ratio misses the target (or with ``--profile always``) it also profiles where the
time goes: every Docker API call and supervisor op of a few real trials, tagged by trial phase
(prepare/reset/execute/collect/grade/cleanup), and a replay of the trial container's own create
arguments with one hardening knob dropped at a time.

Usage::

    .venv/bin/python bench/docker_overhead.py                  # 30 trials
    .venv/bin/python bench/docker_overhead.py --trials 60 --profile always
    .venv/bin/python bench/docker_overhead.py --as-user harness-docker
    .venv/bin/python bench/docker_overhead.py --as-user harness-rootless \
        --docker-host unix:///run/harness-rootless/docker.sock

Writes a JSON file (default ``bench/results/docker_overhead.json``) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pwd
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
if str(REPO) not in sys.path:  # run as a plain script from anywhere
    sys.path.insert(0, str(REPO))

import docker.errors  # noqa: E402
from docker.api.client import APIClient  # noqa: E402
from docker.models.containers import ContainerCollection  # noqa: E402
from measure import PHASES, host_info, stats_ms  # noqa: E402

import docker  # noqa: E402
from harness.config import RunConfig  # noqa: E402
from harness.runner import RunEvents, execute_run, prepare_run  # noqa: E402
from sandbox.docker.backend import DockerSandbox  # noqa: E402
from sandbox.docker.egress import NETWORK as EGRESS_NETWORK  # noqa: E402
from sandbox.docker.engine import connect, engine_facts  # noqa: E402

TASK_DIR = BENCH_DIR / "tasks" / "trivial"
IMAGE = "harness/base:bookworm"  # the image the trivial task resolves to (no docker_image)
TARGET_RATIO = 1.5
#: -j 4 against -j 1 on no-op trials.
TARGET_SPEEDUP = 2.0
#: The agent of (e), and its trial's overhead against the floor with the warm pool.
SLOW_AGENT_SEC = 1.0
SLOW_TARGET_RATIO = 0.25
THROUGHPUT_CONCURRENCY = 4
#: Issue 35 item 8: a no-op trial against the floor, and -j 4 against bare containers at -j 4.
ITEM8_RATIO = 1.3
ITEM8_THROUGHPUT_SHARE = 0.90
BENCH_LABEL = "org.harness.bench"


# --- machine ---------------------------------------------------------------------------------


def machine_info(client: docker.DockerClient) -> dict[str, Any]:
    info: dict[str, Any] = {**host_info(), "docker_sdk": docker.__version__}
    try:
        info["engine"] = engine_facts(client)
        image = client.images.get(IMAGE)
        info["image"] = {"ref": IMAGE, "id": image.id, "size": image.attrs.get("Size")}
        # Other containers running on the engine compete with the benchmark.
        info["containers_running_at_start"] = len(client.containers.list())
    except docker.errors.DockerException as exc:
        info["engine_error"] = str(exc)
    return info


# --- (a) the floor ---------------------------------------------------------------------------


def run_floor(client: docker.DockerClient, n: int, warmup: int) -> dict[str, list[float]]:
    """create(IMAGE, ["true"], network_mode="none") + start + wait + remove, ``n`` times."""
    steps: dict[str, list[float]] = {
        "total": [],
        "create": [],
        "start": [],
        "wait": [],
        "remove": [],
    }
    for i in range(warmup + n):
        container = None
        try:
            t0 = time.perf_counter()
            container = client.containers.create(IMAGE, ["true"], network_mode="none")
            t1 = time.perf_counter()
            container.start()
            t2 = time.perf_counter()
            status = container.wait()
            t3 = time.perf_counter()
            container.remove()
            t4 = time.perf_counter()
            container = None
        finally:
            if container is not None:
                container.remove(force=True)
        if status.get("StatusCode") != 0:
            raise SystemExit(f"floor: `true` exited with {status}")
        if i < warmup:
            continue
        for name, value in (
            ("total", t4 - t0),
            ("create", t1 - t0),
            ("start", t2 - t1),
            ("wait", t3 - t2),
            ("remove", t4 - t3),
        ):
            steps[name].append(value)
    return steps


def run_bare_throughput(client: docker.DockerClient, n: int, concurrency: int) -> float:
    """Bare containers per second, ``concurrency`` at a time (create + start + wait + remove).

    The engine's own ceiling for any container-per-trial design on this machine.
    """

    def one(_: int) -> None:
        container = client.containers.create(IMAGE, ["true"], network_mode="none")
        try:
            container.start()
            container.wait()
        finally:
            container.remove(force=True)

    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(n)))
    return n / (time.perf_counter() - start)


# --- (b, d) the harness ----------------------------------------------------------------------


def bench_config(trials: int, concurrency: int, out_dir: Path, agent_sec: float = 0.0) -> RunConfig:
    """``trials`` rollouts of the trivial task with ``nop`` (or a ``sleep``) on docker."""
    agent: dict[str, Any] = {"name": "nop"}
    if agent_sec:
        agent = {"name": "command", "cmd": f"sleep {agent_sec:g}"}
    return RunConfig.model_validate(
        {
            "tasks": {"paths": [str(TASK_DIR)]},
            "agent": agent,
            "sandbox": {"backend": "docker"},
            "rollouts": trials,
            "concurrency": concurrency,
            "output_dir": str(out_dir),
        }
    )


class _Phases(RunEvents):
    """Hands every phase change to a callback."""

    def __init__(self, on_phase: Callable[[str, str], None] | None) -> None:
        self.on_phase = on_phase

    def phase(self, trial_id: str, phase: str) -> None:
        if self.on_phase is not None:
            self.on_phase(trial_id, phase)


def run_harness(
    trials: int,
    concurrency: int,
    out_dir: Path,
    on_phase: Callable[[str, str], None] | None = None,
    agent_sec: float = 0.0,
) -> dict[str, Any]:
    """Run ``trials`` nop trials through the public API; wall time of ``execute_run``."""
    prepared = prepare_run(bench_config(trials, concurrency, out_dir, agent_sec))
    start = time.perf_counter()
    outcome = execute_run(prepared, events=_Phases(on_phase))
    wall = time.perf_counter() - start
    records = outcome.records
    bad = [r for r in records if not r.ok or r.reward != 1.0]
    if bad:
        first = bad[0]
        raise SystemExit(
            f"error: {len(bad)}/{len(records)} docker trials failed; first: "
            f"status={first.status} reward={first.reward} errors={first.errors}"
        )
    return {"records": records, "wall_sec": wall, "exit_code": outcome.exit_code}


def phase_stats(records: list[Any]) -> dict[str, dict[str, float]]:
    phases = {name: stats_ms([r.timings.get(name, 0.0) for r in records]) for name in PHASES}
    derived = {
        "overhead (total - agent)": [r.timings["total"] - r.timings["agent"] for r in records],
        "execute - agent": [r.timings["execute"] - r.timings["agent"] for r in records],
        "grade - verifier": [r.timings["grade"] - r.timings["verifier"] for r in records],
    }
    for name, values in derived.items():
        phases[name] = stats_ms(values)
    return phases


# --- profiling: every Docker API call and supervisor op, by trial phase ---------------------

_API_PATH = [
    (re.compile(r"^/v[\d.]+"), ""),
    (re.compile(r"^/images/.+/json$"), "/images/{ref}/json"),
    (re.compile(r"^/(containers|exec|volumes)/[^/]+"), r"/\1/{id}"),
]


def _api_name(method: str, url: str) -> str:
    path = re.sub(r"^[a-z+]+://[^/]+", "", url).split("?", 1)[0]
    for pattern, repl in _API_PATH:
        path = pattern.sub(repl, path)
    return f"{method} {path}"


#: DockerSandbox methods timed as a whole (steps of reset and collect).
TRACED_STEPS = ("_storage_mounts", "_setup", "_start_workload", "copy_out", "read_file")


class Tracer:
    """Times Docker HTTP calls and supervisor ops, tagging each with the trial's phase."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.lock = threading.Lock()
        # (trial, phase, kind, name, seconds)
        self.events: list[tuple[str, str, str, str, float]] = []

    def where(self) -> tuple[str, str]:
        return getattr(self.local, "trial", "-"), getattr(self.local, "phase", "run")

    def on_phase(self, trial: str, phase: str) -> None:
        self.local.trial, self.local.phase = trial, phase

    def add(self, kind: str, name: str, seconds: float) -> None:
        trial, phase = self.where()
        with self.lock:
            self.events.append((trial, phase, kind, name, seconds))

    @contextmanager
    def installed(self) -> Iterator[Tracer]:
        tracer = self
        orig_request = APIClient.request
        orig_call = DockerSandbox._call
        orig_steps = {name: getattr(DockerSandbox, name) for name in TRACED_STEPS}
        orig_stop = DockerSandbox.stop

        def request(self: APIClient, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return orig_request(self, method, url, *args, **kwargs)
            finally:
                tracer.add("docker", _api_name(method, url), time.perf_counter() - start)

        def call(self: DockerSandbox, payload: dict[str, Any]) -> dict[str, Any]:
            first = not getattr(self, "_bench_called", False)
            self._bench_called = True  # type: ignore[attr-defined]
            start = time.perf_counter()
            try:
                return orig_call(self, payload)
            finally:
                op = str(payload.get("op", "run"))
                if op == "run":
                    op = f"run ({payload.get('argv', ['?'])[0]})"
                else:
                    op += f" {payload.get('path') or payload.get('dest') or ''}".rstrip()
                if first:
                    op += " [1st: waits for the supervisor's boot]"
                tracer.add("supervisor", op, time.perf_counter() - start)

        def step(name: str, orig: Callable[..., Any]) -> Callable[..., Any]:
            def traced(self: DockerSandbox, *args: Any, **kwargs: Any) -> Any:
                start = time.perf_counter()
                try:
                    return orig(self, *args, **kwargs)
                finally:
                    tracer.add("step", f"DockerSandbox.{name}", time.perf_counter() - start)

            return traced

        def stop(self: DockerSandbox) -> None:
            tracer.local.phase = "cleanup"
            start = time.perf_counter()
            try:
                orig_stop(self)
            finally:
                tracer.add("step", "DockerSandbox.stop", time.perf_counter() - start)

        APIClient.request = request  # type: ignore[method-assign,assignment]
        DockerSandbox._call = call  # type: ignore[method-assign]
        for name, orig in orig_steps.items():
            setattr(DockerSandbox, name, step(name, orig))
        DockerSandbox.stop = stop  # type: ignore[method-assign]
        try:
            yield self
        finally:
            APIClient.request = orig_request  # type: ignore[method-assign]
            DockerSandbox._call = orig_call  # type: ignore[method-assign]
            for name, orig in orig_steps.items():
                setattr(DockerSandbox, name, orig)
            DockerSandbox.stop = orig_stop  # type: ignore[method-assign]

    def summary(self, records: list[Any]) -> dict[str, Any]:
        """Per phase: each call's count per trial, median ms per call, median ms per trial."""
        trials = {r.id for r in records}
        per: dict[tuple[str, str, str], dict[str, list[float]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for trial, phase, kind, name, seconds in self.events:
            if trial in trials:
                per[(phase, kind, name)][trial].append(seconds)
        out: dict[str, Any] = {}
        order = {
            p: i
            for i, p in enumerate(("prepare", "reset", "execute", "collect", "grade", "cleanup"))
        }
        for (phase, kind, name), by_trial in sorted(
            per.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0][1], kv[0][2])
        ):
            calls = [s for values in by_trial.values() for s in values]
            sums = [sum(by_trial.get(t, [])) for t in trials]
            out.setdefault(phase, {})[f"{kind}: {name}"] = {
                "calls_per_trial": len(calls) / len(trials),
                "median_ms_per_call": statistics.median(calls) * 1000.0,
                "median_ms_per_trial": statistics.median(sums) * 1000.0,
            }
        return out


def profile_trials(n: int, work: Path) -> dict[str, Any]:
    """Trace ``n`` real trials (concurrency 1) and break their phases into calls."""
    tracer = Tracer()
    captured: dict[str, Any] = {}
    orig_create = ContainerCollection.create

    def create(self: Any, image: str, command: Any = None, **kwargs: Any) -> Any:
        if kwargs.get("name", "").startswith("harness-"):
            captured.update(kwargs, image=image, command=command)
        return orig_create(self, image, command, **kwargs)

    ContainerCollection.create = create  # type: ignore[method-assign,assignment]
    try:
        with tracer.installed():
            run = run_harness(n, 1, work, on_phase=tracer.on_phase)
    finally:
        ContainerCollection.create = orig_create  # type: ignore[method-assign]
    records = run["records"]
    calls = tracer.summary(records)
    phases = phase_stats(records)
    # What the traced calls do not explain: Python, JSON/base64, thread handoffs.
    unexplained = {}
    for phase, items in calls.items():
        traced = sum(
            v["median_ms_per_trial"]
            for k, v in items.items()
            if k.startswith(("docker:", "supervisor:"))
        )
        if phase in phases:
            unexplained[phase] = phases[phase]["median"] - traced
    return {
        "trials": n,
        "phases_ms": phases,
        "calls": calls,
        "untraced_ms_per_phase": unexplained,
        "create_kwargs": captured,
    }


# --- profiling: replay the trial container's create() with one knob dropped at a time -------


def _variant_kwargs(
    base: dict[str, Any], variant: str, volume: str | None, bind_dir: str
) -> dict[str, Any]:
    from docker.types import Mount

    kwargs = dict(base)
    kwargs["name"] = f"bench-knob-{secrets.token_hex(4)}"
    kwargs["labels"] = {BENCH_LABEL: "docker_overhead"}
    workdir = kwargs.get("working_dir") or "/app"
    mounts = []
    for m in kwargs.get("mounts", []):
        if m.get("Target") == workdir:
            continue
        if m.get("Type") == "bind":  # the run's staged supervisor dir is gone by now
            m = Mount(m["Target"], bind_dir, type="bind", read_only=bool(m.get("ReadOnly")))
        mounts.append(m)
    if volume is not None:
        mounts.append(Mount(workdir, volume, type="volume"))
    named = variant == "as DockerSandbox (named volume)"
    bare = variant in ("no bind/volume mounts at all", "minimal (image + sleep, network none)")
    if not named and not bare:
        # Everything else starts from the anonymous-volume variant and changes one knob.
        mounts.append(Mount(workdir, None, type="volume"))
    kwargs["mounts"] = mounts
    if variant == "no tmpfs mounts":
        kwargs.pop("tmpfs", None)
    elif variant == "no resource limits/ulimits":
        for key in ("pids_limit", "mem_limit", "memswap_limit", "nano_cpus", "ulimits"):
            kwargs.pop(key, None)
    elif variant == "no cap_drop/cap_add/no-new-privileges/read_only":
        for key in ("cap_drop", "cap_add", "security_opt", "read_only"):
            kwargs.pop(key, None)
    elif variant == "no bind/volume mounts at all":
        kwargs["mounts"] = []
    elif variant == "minimal (image + sleep, network none)":
        kwargs = {
            "name": kwargs["name"],
            "labels": kwargs["labels"],
            "network_mode": "none",
            "entrypoint": [],
        }
    return kwargs


KNOB_VARIANTS = (
    "as DockerSandbox (named volume)",
    "anonymous workspace volume (no volume API calls)",
    "no tmpfs mounts",
    "no resource limits/ulimits",
    "no cap_drop/cap_add/no-new-privileges/read_only",
    "no bind/volume mounts at all",
    "minimal (image + sleep, network none)",
)


def profile_knobs(client: docker.DockerClient, captured: dict[str, Any], n: int) -> dict[str, Any]:
    """Create/start/remove the trial container ``n`` times per variant (no supervisor: its
    command is a sleep, so the variants without the runtime's mount start too)."""
    base = dict(captured)
    image, _ = base.pop("image"), base.pop("command")
    # The trial's filtered network went with the run that made it: the default bridge
    # stands in (the filter's own cost is the trial's, measured in the phases above).
    for key in ("network", "network_mode"):
        if base.get(key) == EGRESS_NETWORK:
            base[key] = "bridge"
    command = ["sleep", "infinity"]
    base["stdin_open"] = False
    out: dict[str, Any] = {}
    bind_dir = tempfile.mkdtemp(prefix="bench-knob-bind-")
    os.chmod(bind_dir, 0o700)
    steps: dict[str, dict[str, list[float]]] = {v: defaultdict(list) for v in KNOB_VARIANTS}
    # Round-robin over the variants, so drift in the host's load hits them all alike.
    for _ in range(n):
        for variant in KNOB_VARIANTS:
            named = variant == "as DockerSandbox (named volume)"
            volume = container = None
            try:
                t0 = time.perf_counter()
                if named:
                    volume = client.volumes.create(
                        f"bench-knob-{secrets.token_hex(4)}-ws",
                        labels={BENCH_LABEL: "docker_overhead"},
                    )
                t1 = time.perf_counter()
                kwargs = _variant_kwargs(base, variant, volume.name if volume else None, bind_dir)
                container = client.containers.create(image, command, **kwargs)
                t2 = time.perf_counter()
                container.start()
                t3 = time.perf_counter()
                container.remove(force=True, v=True)
                container = None
                t4 = time.perf_counter()
                if volume is not None:
                    volume.remove(force=True)
                    volume = None
                t5 = time.perf_counter()
            finally:
                if container is not None:
                    container.remove(force=True, v=True)
                if volume is not None:
                    volume.remove(force=True)
            for name, value in (
                ("volume create", t1 - t0),
                ("container create", t2 - t1),
                ("container start", t3 - t2),
                ("container remove(force,v)", t4 - t3),
                ("volume remove", t5 - t4),
                ("total", t5 - t0),
            ):
                steps[variant][name].append(value)
    for variant in KNOB_VARIANTS:
        out[variant] = {k: stats_ms(v)["median"] for k, v in steps[variant].items()}
    os.rmdir(bind_dir)
    return out


# --- reporting -------------------------------------------------------------------------------


def _row(name: str, s: dict[str, float], width: int = 30) -> str:
    return (
        f"  {name:<{width}}{s['median']:>9.1f}{s['p90']:>9.1f}{s['mean']:>9.1f}"
        f"{s['min']:>9.1f}{s['max']:>9.1f}"
    )


def _header(width: int = 30) -> str:
    return f"  {'ms':<{width}}{'median':>9}{'p90':>9}{'mean':>9}{'min':>9}{'max':>9}"


def print_profile(profile: dict[str, Any]) -> None:
    trace = profile["trace"]
    print(f"\nwhere a trial's time goes ({trace['trials']} traced trials, medians, ms):")
    for phase, items in trace["calls"].items():
        phase_ms = trace["phases_ms"].get(phase, {}).get("median")
        head = f"{phase_ms:.1f} ms" if phase_ms is not None else ""
        print(f"  [{phase}] {head}")
        for name, v in items.items():
            print(
                f"    {name:<62}{v['calls_per_trial']:>5.1f}x {v['median_ms_per_call']:>7.1f}"
                f"  = {v['median_ms_per_trial']:>7.1f}/trial"
            )
        if phase in trace["untraced_ms_per_phase"]:
            rest = trace["untraced_ms_per_phase"][phase]
            print(f"    {'(untraced: python, json, base64)':<62}{'':>16}  ~ {rest:>6.1f}")
    print("\n  trial container replayed with one knob changed (medians, ms):")
    cols = (
        "volume create",
        "container create",
        "container start",
        "container remove(force,v)",
        "volume remove",
        "total",
    )
    print(f"    {'variant':<50}" + "".join(f"{c.split()[-1][:10]:>11}" for c in cols))
    print(f"    {'':<50}" + "".join(f"{c.split()[0][:10]:>11}" for c in cols))
    for variant, v in profile["knobs"].items():
        print(f"    {variant:<50}" + "".join(f"{v[c]:>11.1f}" for c in cols))


def posture(records: list[Any]) -> dict[str, dict[str, int]]:
    """What the records say held, counted over trials: egress filter, root cap, warm."""
    counts: dict[str, dict[str, int]] = {"egress": {}, "storage": {}, "warm": {}}
    for record in records:
        sandbox = record.sandbox.model_dump()
        for key, value in (
            ("egress", sandbox.get("egress", "none")),
            ("storage", (sandbox.get("limits") or {}).get("storage") or "read-only"),
            ("warm", str(bool(sandbox.get("warm"))).lower()),
        ):
            counts[key][str(value)] = counts[key].get(str(value), 0) + 1
    return counts


def who(client: docker.DockerClient) -> dict[str, Any]:
    """Who runs the bench, against which engine (rootful or rootless)."""
    uid = os.geteuid()
    groups = set(os.getgroups())
    try:
        import grp

        docker_gid = grp.getgrnam("docker").gr_gid
    except KeyError:
        docker_gid = None
    options = " ".join(client.info().get("SecurityOptions") or [])
    return {
        "user": pwd.getpwuid(uid).pw_name,
        "uid": uid,
        "docker_group": docker_gid in groups,
        "docker_host": os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"),
        "engine_rootless": "rootless" in options,
    }


def as_user(user: str, argv: list[str], out: Path) -> int:
    """Run this script as ``user``, with its JSON copied to ``out``.

    From the user's venv of tests/support/users.py (made if missing), for its dependencies:
    the script imports this checkout's harness ahead of the venv's own.
    """
    home = Path(pwd.getpwnam(user).pw_dir)
    venv = home / "venv"
    if not (venv / "bin" / "python").exists():
        sys.path.insert(0, str(REPO / "tests"))
        from support.users import user_harness  # type: ignore[import-not-found]

        venv = user_harness(user).venv
    tmp = home / "tmp"
    tmp.mkdir(exist_ok=True)
    shutil.chown(tmp, user, user)
    theirs = tmp / f"docker_overhead-{secrets.token_hex(4)}.json"
    env = {
        "HOME": str(home),
        "PATH": f"{venv}/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "TMPDIR": str(tmp),
        "LANG": "C.UTF-8",
        "DOCKER_HOST": os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"),
    }
    done = subprocess.run(
        ["runuser", "-u", user, "--", "env", "-i", *(f"{k}={v}" for k, v in env.items())]
        + [f"{venv}/bin/python", str(Path(__file__).resolve()), *argv]
        + ["--out", str(theirs)],
        cwd=str(home),
        check=False,
    )
    if done.returncode == 0:
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(theirs, out)
        print(f"copied to {out}")
    theirs.unlink(missing_ok=True)
    return done.returncode


def main(argv: list[str] | None = None) -> int:  # noqa: C901
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--trials", type=int, default=30, help="trials per measurement (default 30)"
    )
    parser.add_argument(
        "--k",
        type=int,
        default=None,
        help="throughput runs use 4*k trials at each concurrency (default ceil(trials/4))",
    )
    parser.add_argument(
        "--warmup", type=int, default=1, help="unmeasured warm-up iterations (default 1)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=BENCH_DIR / "results" / "docker_overhead.json",
        help="JSON output (default bench/results/docker_overhead.json)",
    )
    parser.add_argument(
        "--profile",
        choices=("auto", "always", "never"),
        default="auto",
        help="profile where the time goes: auto = only when the ratio misses the target",
    )
    parser.add_argument(
        "--profile-trials",
        type=int,
        default=10,
        help="traced trials / knob iterations (default 10)",
    )
    parser.add_argument(
        "--as-user",
        default=None,
        help="run as this user (e.g. harness-docker, harness-rootless), from its own venv",
    )
    parser.add_argument(
        "--docker-host",
        default=None,
        help="the engine's DOCKER_HOST (e.g. unix:///run/harness-rootless/docker.sock)",
    )
    args = parser.parse_args(argv)
    if args.docker_host:
        os.environ["DOCKER_HOST"] = args.docker_host
    if args.as_user:
        raw = list(sys.argv[1:] if argv is None else argv)
        forwarded: list[str] = []
        skip = False
        for arg in raw:  # everything but --as-user and --out (the user writes its own)
            if skip:
                skip = False
            elif arg in ("--as-user", "--out"):
                skip = True
            elif not arg.startswith(("--as-user=", "--out=")):
                forwarded.append(arg)
        return as_user(args.as_user, forwarded, args.out)
    if args.trials < 1 or args.warmup < 0 or (args.k is not None and args.k < 1):
        parser.error("--trials and --k must be >= 1, --warmup >= 0")
    k = args.k or math.ceil(args.trials / THROUGHPUT_CONCURRENCY)
    n_tp = THROUGHPUT_CONCURRENCY * k

    client = connect()
    info = machine_info(client)
    info["who"] = who(client)
    date = datetime.now(UTC).isoformat(timespec="seconds")
    with tempfile.TemporaryDirectory(prefix="bench-docker-overhead-") as tmp:
        tmpdir = Path(tmp)
        # (a) the floor, half before and half after (b): brackets drift in the host's load
        first = (args.trials + 1) // 2
        floor = run_floor(client, first, args.warmup)
        # (b) no-op docker trials, one at a time (after a warm-up run: runtime volume, caches)
        if args.warmup:
            run_harness(args.warmup, 1, tmpdir / "warmup")
        run = run_harness(args.trials, 1, tmpdir / "runs")
        if args.trials > first:
            later = run_floor(client, args.trials - first, args.warmup)
            floor_halves = {"before": stats_ms(floor["total"]), "after": stats_ms(later["total"])}
            for name, values in later.items():
                floor[name].extend(values)
        else:
            floor_halves = {"before": stats_ms(floor["total"])}
        records = run["records"]
        phases = phase_stats(records)
        # (d) throughput: the same 4*k trials at concurrency 1 and 4
        tp: dict[int, dict[str, Any]] = {}
        for conc in (1, THROUGHPUT_CONCURRENCY):
            r = run_harness(n_tp, conc, tmpdir / f"throughput-c{conc}")
            tp[conc] = {
                "concurrency": conc,
                "trials": n_tp,
                "wall_sec": r["wall_sec"],
                "trials_per_sec": n_tp / r["wall_sec"],
                "trial_total_ms": stats_ms([x.timings["total"] for x in r["records"]]),
                "phases_ms": phase_stats(r["records"]),
            }
        # (d') the engine's own scaling: the same number of bare containers at each concurrency
        bare = {conc: run_bare_throughput(client, n_tp, conc) for conc in tp}
        # (e) a 1 s agent: the warm pool has the next container ready by the time it ends
        slow = run_harness(args.trials, 1, tmpdir / "agent-1s", agent_sec=SLOW_AGENT_SEC)
        slow_phases = phase_stats(slow["records"])
        info["loadavg_at_end"] = list(os.getloadavg())
        info["containers_running_at_end"] = len(client.containers.list())

        floor_ms = stats_ms(floor["total"])
        total_ms = phases["total"]
        overhead_ms = phases["overhead (total - agent)"]
        ratio = total_ms["median"] / floor_ms["median"]
        passed = ratio <= TARGET_RATIO
        speedup = tp[THROUGHPUT_CONCURRENCY]["trials_per_sec"] / tp[1]["trials_per_sec"]
        share = tp[THROUGHPUT_CONCURRENCY]["trials_per_sec"] / bare[THROUGHPUT_CONCURRENCY]
        held = posture(records + r["records"])
        result: dict[str, Any] = {
            "date": date,
            "machine": info,
            "params": {
                "trials": args.trials,
                "warmup": args.warmup,
                "throughput_k": k,
                "throughput_trials": n_tp,
                "task": str(TASK_DIR.relative_to(REPO)),
                "image": IMAGE,
                "agent": "nop",
                "sandbox": "docker",
            },
            "floor_ms": floor_ms,
            "floor_halves_ms (before/after b)": floor_halves,
            "floor_steps_ms": {name: stats_ms(v) for name, v in floor.items() if name != "total"},
            "trial_total_ms": total_ms,
            "trial_overhead_ms": overhead_ms,
            "trial_first_total_ms": records[0].timings["total"] * 1000.0,
            "phases_ms": phases,
            "ratio_trial_median_to_floor_median": ratio,
            "target_ratio": TARGET_RATIO,
            "target_met": passed,
            "run_wall_sec": run["wall_sec"],
            "run_wall_per_trial_ms": run["wall_sec"] * 1000.0 / len(records),
            "slow_agent": {
                "agent_sec": SLOW_AGENT_SEC,
                "phases_ms": slow_phases,
                "ratio_overhead_to_floor": slow_phases["overhead (total - agent)"]["median"]
                / floor_ms["median"],
                "target_ratio": SLOW_TARGET_RATIO,
            },
            "item8": {
                "who": info["who"],
                "posture": held,
                "ratio_trial_to_floor": ratio,
                "target_ratio": ITEM8_RATIO,
                "ratio_met": ratio <= ITEM8_RATIO,
                "throughput_share_of_bare_at_c4": share,
                "target_share": ITEM8_THROUGHPUT_SHARE,
                "share_met": share >= ITEM8_THROUGHPUT_SHARE,
                "loadavg": [info["loadavg"], info["loadavg_at_end"]]
                if "loadavg" in info
                else [info["loadavg_at_end"]],
            },
            "throughput": {
                "concurrency_1": tp[1],
                f"concurrency_{THROUGHPUT_CONCURRENCY}": tp[THROUGHPUT_CONCURRENCY],
                "speedup": speedup,
                "bare_containers_per_sec": {str(c): v for c, v in bare.items()},
                "bare_speedup": bare[THROUGHPUT_CONCURRENCY] / bare[1],
            },
        }

        engine = info.get("engine", {})
        print(
            f"docker overhead: {args.trials} trials x nop on bench/trivial vs bare containers of "
            f"{IMAGE}  ({info['nproc']} cpus, engine {engine.get('server_version')}, "
            f"{engine.get('storage_driver')}, cgroup v{engine.get('cgroup_version')})"
        )
        print(_header())
        print(_row("(a) floor: create+start+wait+rm", floor_ms))
        for name in ("create", "start", "wait", "remove"):
            print(_row(f"      {name}", result["floor_steps_ms"][name]))
        for name, s in floor_halves.items():
            print(_row(f"      [{name} (b)]", s))
        print(_row("(b) trial total", total_ms))
        print(_row("    overhead (total - agent)", overhead_ms))
        for name, s in phases.items():
            if name not in ("total", "overhead (total - agent)"):
                print(_row(f"      {name}", s))
        verdict = "PASS" if passed else "MISS"
        print(
            f"(c) ratio trial/floor (medians): {ratio:.2f}x  "
            f"[target <= {TARGET_RATIO:g}x: {verdict}]"
        )
        c1, c4 = tp[1], tp[THROUGHPUT_CONCURRENCY]
        print(f"(d) throughput, {n_tp} trials each:")
        for c in (c1, c4):
            print(
                f"      concurrency {c['concurrency']}: {c['wall_sec']:6.2f} s  "
                f"{c['trials_per_sec']:5.2f} trials/s  (trial total median "
                f"{c['trial_total_ms']['median']:.0f} ms)"
            )
        verdict = "PASS" if speedup >= TARGET_SPEEDUP else "MISS"
        print(
            f"      speedup c{THROUGHPUT_CONCURRENCY}/c1: {speedup:.2f}x  "
            f"[target >= {TARGET_SPEEDUP:g}x: {verdict}]"
        )
        b1, b4 = bare[1], bare[THROUGHPUT_CONCURRENCY]
        print(
            f"      engine ceiling, bare containers: {b1:5.2f}/s at c1, {b4:5.2f}/s at "
            f"c{THROUGHPUT_CONCURRENCY} ({b4 / b1:.2f}x); the harness reaches "
            f"{c1['trials_per_sec'] / b1:.0%} and {c4['trials_per_sec'] / b4:.0%} of them"
        )
        slow_ratio = result["slow_agent"]["ratio_overhead_to_floor"]
        print(f"(e) {args.trials} trials of a {SLOW_AGENT_SEC:g} s agent (`sleep`), one at a time:")
        print(_row("    overhead (total - agent)", slow_phases["overhead (total - agent)"]))
        for name in ("reset", "collect", "grade", "cleanup"):
            print(_row(f"      {name}", slow_phases[name]))
        verdict = "PASS" if slow_ratio <= SLOW_TARGET_RATIO else "MISS"
        print(
            f"    ratio overhead/floor (medians): {slow_ratio:.2f}x  "
            f"[target <= {SLOW_TARGET_RATIO:g}x: {verdict}]"
        )

        me = info["who"]
        runner = "root" if me["uid"] == 0 else f"{me['user']} (uid {me['uid']}"
        if me["uid"] != 0:
            runner += ", docker group)" if me["docker_group"] else ")"
        engine_kind = "rootless" if me["engine_rootless"] else "rootful"
        print(
            f"(f) issue 35 item 8, as {runner} on the {engine_kind} engine at "
            f"{me['docker_host']} (load {' '.join(f'{x:.1f}' for x in info['loadavg_at_end'])}):"
        )
        print(
            "      posture held: "
            + "; ".join(
                f"{key} " + ", ".join(f"{v}={n}" for v, n in sorted(vals.items()))
                for key, vals in held.items()
            )
        )
        verdict = "PASS" if ratio <= ITEM8_RATIO else "MISS"
        print(
            f"      no-op trial / floor (medians): {ratio:.2f}x  "
            f"[target <= {ITEM8_RATIO:g}x: {verdict}]"
        )
        verdict = "PASS" if share >= ITEM8_THROUGHPUT_SHARE else "MISS"
        print(
            f"      -j {THROUGHPUT_CONCURRENCY} throughput / bare containers' at "
            f"-j {THROUGHPUT_CONCURRENCY}: {share:.0%}  "
            f"[target >= {ITEM8_THROUGHPUT_SHARE:.0%}: {verdict}]"
        )

        if args.profile == "always" or (args.profile == "auto" and not passed):
            n = args.profile_trials
            print(f"\nprofiling ({n} traced trials, {n} replays per knob)...")
            trace = profile_trials(n, tmpdir / "profile")
            captured = trace.pop("create_kwargs")
            profile = {
                "trace": trace,
                "supervisor_command": captured.get("command"),
                "knobs": profile_knobs(client, captured, n),
            }
            result["profile"] = profile
            print_profile(profile)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
