"""Attacks on the host-side evidence walks (issue 22, classes 2 and 6), on every backend.

An agent that fails its task leaves a tree the harness's evidence code cannot copy the
naive way: 1,200 levels deep (``RecursionError``), a 30,000-deep path (``ENAMETOOLONG``),
more dirs than the harness may open fds (``EMFILE``) or 3,000 tiny files (run-dir disk).
Before, each turned the agent's failure into a retried
``environment_error`` — graded as a success often enough to lift a 50% agent's mean.

Every test runs the real CLI and judges from outside: the record (status ``completed``,
attempt 1, the honest reward, a ``limit`` event naming the cap), the harness process's fd
count sampled from ``/proc/<pid>/fd`` (or its completing under a low ``ulimit -n``), the
run dir's disk use, and the host's mount table (no trial filesystem left mounted).
"""

from __future__ import annotations

import hashlib
import os
import resource
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]

#: The verifier: reward 1 for the right answer, 0 otherwise (the honest reward).
CHECK = (
    'if [ "$(cat "$HARNESS_WORKSPACE/answer.txt" 2>/dev/null)" = 42 ]; then r=1; else r=0; fi\n'
    'echo $r > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
)

#: Trees the agent leaves, each written by python3 with relative mkdir/chdir (no long path
#: is ever passed to a syscall, so any depth can be built).
TREES = {
    "deep": "import os\nos.mkdir('deep'); os.chdir('deep')\n"
    "for _ in range(1200):\n    os.mkdir('a'); os.chdir('a')\nopen('leaf', 'w').write('x')\n",
    "long": "import os\nos.mkdir('long'); os.chdir('long')\n"
    "for _ in range(DEPTH):\n    os.mkdir('d'); os.chdir('d')\nopen('leaf', 'w').write('x')\n",
    "wide": "import os\nos.mkdir('wide')\nfor i in range(WIDTH):\n"
    "    os.mkdir('wide/w%05d' % i); open('wide/w%05d/f' % i, 'w').close()\n",
    "tiny": "import os\nos.mkdir('tiny')\nfor i in range(3000):\n"
    "    open('tiny/t%05d' % i, 'w').write(str(i))\n",
}


def agent_script(tree: str, *, answer: str, width: int = 1500, depth: int = 30_000) -> str:
    """An agent that writes ``answer`` and leaves the tree ``tree`` in its workspace."""
    body = TREES[tree].replace("WIDTH", str(width)).replace("DEPTH", str(depth))
    return (
        'cd "$HARNESS_WORKSPACE"\n'
        f"echo {answer} > answer.txt\n"
        f"python3 - <<'PY'\n{body}PY\n"
        "echo tree left\n"
    )


def coin_flip_script(tree: str, width: int) -> str:
    """Right when the first hex digit of sha256(trial id) is below 8; else the tree."""
    body = TREES[tree].replace("WIDTH", str(width))
    return (
        'cd "$HARNESS_WORKSPACE"\n'
        'digit=$(printf %s "$HARNESS_TRIAL_ID" | sha256sum | cut -c1)\n'
        'case "$digit" in [0-7]) echo 42 > answer.txt; exit 0 ;; esac\n'
        "echo 41 > answer.txt\n"
        f"python3 - <<'PY'\n{body}PY\n"
    )


def honest(trial_id: str) -> float:
    """The reward the coin-flip agent earns in trial ``trial_id``."""
    return 1.0 if hashlib.sha256(trial_id.encode()).hexdigest()[0] in "01234567" else 0.0


class FdSampler:
    """Samples the open fds of a process (``/proc/<pid>/fd``) from a thread."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> FdSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(0.02):
            try:
                self.peak = max(self.peak, len(os.listdir(f"/proc/{self.pid}/fd")))
            except OSError:
                return


def run_limited(
    cli: Any, paths: list[Path], *, nofile: int | None, jobs: int = 1, extra: Any = ()
) -> Any:
    """``harness run`` under ``ulimit -n nofile`` (None: as is), its fds sampled."""
    argv = cli.argv(paths, jobs=jobs, extra=["--set", "retry.backoff_sec=0", *extra])

    def limit() -> None:
        os.setsid()
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    before = set(cli.output.iterdir()) if cli.output.exists() else set()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli.env(),
        cwd=str(REPO),
        preexec_fn=limit,
        text=True,
    )
    cli._before = before  # what finish() compares with to find the run dir
    with FdSampler(proc.pid) as sampler:
        run = cli.finish(proc, timeout=900)
    run.fd_peak = sampler.peak
    return run


def trial_mounts(cli: Any) -> list[str]:
    """Mounts of this test's trial filesystems still in the host's mount table."""
    mine = str(cli.tmpdir)
    with open("/proc/self/mountinfo") as fh:
        return [line for line in fh if mine in line]


def disk_use(top: Path) -> int:
    """Allocated bytes under ``top`` (``du``'s measure: blocks, not sizes)."""
    out = subprocess.run(["du", "-s", "-B1", str(top)], capture_output=True, text=True)
    return int(out.stdout.split()[0])


def assert_first_try(run: Any, reward: float) -> dict[str, Any]:
    """One record: completed, attempt 1, never retried, graded ``reward``."""
    assert len(run.records) == 1, run
    record: dict[str, Any] = run.records[0]
    assert record["status"] == "completed", (record.get("errors"), str(run))
    assert record["attempt"] == 1 and not record.get("previous_attempts"), record
    assert record["reward"] == reward, record
    assert "Traceback" not in run.stderr, run.stderr
    return record


def limit_events(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        e["cap"]: e for e in record["events"] if e["type"] == "evidence" and e["kind"] == "limit"
    }


@pytest.mark.parametrize(
    ("tree", "cap"), [("deep", "depth"), ("long", "depth"), ("tiny", "files")], ids=str
)
def test_a_failing_agent_s_tree_is_a_limit_event_not_a_retried_error(
    backend: str, any_cli: Any, sec: Any, tmp_path: Path, tree: str, cap: str
) -> None:
    """Attack: fail the task and leave a tree that used to crash the evidence copy.

    The trial must be ``completed`` with reward 0 on the first attempt, its record naming
    the cap the tree hit and its manifest saying what was not kept; the run dir stays
    small (3,000 tiny files past a 200-file cap cost no 12 MB of blocks).
    """
    name = sec.unique(f"ev-{tree}")
    # Under gVisor every dentry of a chain pins one of the sentry's host fds: near 20,000
    # levels (its nofile) the whole sandbox gets EMFILE, its supervisor included (see
    # docs/security.md, "Evidence walks"). 15,000 levels is still a 30 KB path.
    depth = 15_000 if backend == "runsc" else 30_000
    attack = agent_script(tree, answer="41", depth=depth)
    task = sec.write_task(tmp_path, name, attack=attack, test_sh=CHECK, agent_timeout=240)
    run = run_limited(any_cli, [task], nofile=None, extra=["--set", "evidence_caps.files=200"])
    record = assert_first_try(run, 0.0)
    caps = limit_events(record)
    assert cap in caps, record["events"]
    manifest = (run.evidence(record) / "workspace.manifest.json").read_text()
    assert f'"cap":"{cap}"' in manifest
    if tree == "tiny":
        assert disk_use(run.run_dir) < 4 << 20, disk_use(run.run_dir)
    assert not trial_mounts(any_cli)


def test_a_tree_wider_than_the_harness_fd_limit(
    backend: str, any_cli: Any, sec: Any, tmp_path: Path
) -> None:
    """Attack: 1,500 dirs under ``ulimit -n 256`` (the walk used to hold an fd per dir).

    The run completes under the limit with a record and the honest reward; a second run,
    unlimited, shows the harness's fd peak stays far below the tree's width.
    """
    name = sec.unique("ev-wide")
    task = sec.write_task(
        tmp_path, name, attack=agent_script("wide", answer="41"), test_sh=CHECK, agent_timeout=240
    )
    run = run_limited(any_cli, [task], nofile=256)
    assert run.code in (0, 1), run  # 1: the mean reward is below fail_under? never a crash
    record = assert_first_try(run, 0.0)
    assert not any(e["kind"] == "error" for e in record["events"] if e["type"] == "evidence")
    wide = run.evidence(record) / "workspace" / "wide"
    assert not wide.exists() or len(list(wide.iterdir())) <= 1500
    assert not trial_mounts(any_cli)
    again = run_limited(any_cli, [task], nofile=None)
    assert_first_try(again, 0.0)
    assert again.fd_peak < 400, again.fd_peak


def test_a_coin_flip_agent_s_mean_is_the_honest_mean(
    backend: str, any_cli: Any, sec: Any, tmp_path: Path
) -> None:
    """Attack: right half the time, a deep and wide tree when wrong (the 0.94 for 0.56 case).

    Over 16 trials on local (4 on docker and runsc), the mean reward equals the honest
    mean and every trial is recorded, completed, on its first attempt.
    """
    rollouts = 16 if backend == "local" else 4
    name = sec.unique("ev-coin")
    script = (
        coin_flip_script("deep", 0)
        + "python3 - <<'PY'\n"
        + TREES["wide"].replace("WIDTH", "400")
        + "PY\n"
    )
    task = sec.write_task(tmp_path, name, attack=script, test_sh=CHECK, agent_timeout=240)
    run = run_limited(any_cli, [task], nofile=None, jobs=2, extra=["-r", str(rollouts)])
    assert len(run.records) == rollouts, run
    for record in run.records:
        assert record["status"] == "completed", (record["id"], record.get("errors"))
        assert record["attempt"] == 1 and not record.get("previous_attempts")
        assert record["reward"] == honest(record["id"]), record["id"]
        if record["reward"] == 0.0:
            assert "depth" in limit_events(record), record["events"]
    mean = sum(r["reward"] for r in run.records) / rollouts
    assert mean == sum(honest(r["id"]) for r in run.records) / rollouts
    assert not trial_mounts(any_cli)
