"""End-to-end run management on the local sandbox, through the real ``harness`` CLI.

``kill -9`` halfway then ``--resume`` (every planned trial exactly once, nothing leaked),
Ctrl-C (exit 130, running trials cancelled and cleaned up, rerun by ``--resume``), a torn
last line repaired, a differing config refused naming the keys, ``-c``/``--set``, selection,
``status.json`` and per-invocation logs.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.workers import uid_base

HARNESS = Path(sys.executable).with_name("harness")  # the venv's console script
REPO = Path(__file__).resolve().parents[2]
#: A uid range of its own, so nothing here can collide with other tests' sandboxes.
UID_BASE = uid_base(62100)


@dataclass
class Started:
    """A ``harness`` process started in its own session, output going to files."""

    proc: subprocess.Popen[bytes]
    out: Path
    err: Path

    def wait(self, timeout: float = 120) -> tuple[int, str, str]:
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            pytest.fail(f"harness did not finish within {timeout:g}s\n{self.err.read_text()}")
        return code, self.out.read_text(), self.err.read_text()


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A private TMPDIR (traversable by sandbox users, like /tmp) for the harness."""
    tmpdir = Path(tempfile.mkdtemp(prefix="harness-e2e-resume-"))
    tmpdir.chmod(0o755)
    environ = dict(os.environ)
    environ.update({"TMPDIR": str(tmpdir), "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"})
    yield environ
    shutil.rmtree(tmpdir, ignore_errors=True)


def start(env: dict[str, str], workdir: Path, *args: str | Path) -> Started:
    workdir.mkdir(parents=True, exist_ok=True)
    tag = secrets.token_hex(3)
    out, err = workdir / f"stdout-{tag}.txt", workdir / f"stderr-{tag}.txt"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen(
            [str(HARNESS), *map(str, args)],
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            env={**env, "PYTHONFAULTHANDLER": "1"},  # stacks on a hang: see _stacks
            cwd=str(REPO),
            start_new_session=True,
        )
    return Started(proc, out, err)


def harness(env: dict[str, str], workdir: Path, *args: str | Path) -> tuple[int, str, str]:
    return start(env, workdir, *args).wait()


def wait_for(condition: Callable[[], bool], what: str, proc: Started, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.proc.poll() is not None:
            pytest.fail(f"harness exited ({proc.proc.returncode}) before {what}:\n"
                        f"{proc.err.read_text()}")  # fmt: skip
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}:\n{_stacks(proc)}")
        time.sleep(0.05)


def _stacks(proc: Started) -> str:
    """The harness's stderr with every thread's stack (faulthandler, on SIGABRT), and its log.

    A harness that stops answering is diagnosed from what each of its threads was doing.
    """
    if proc.proc.poll() is None:
        os.kill(proc.proc.pid, signal.SIGABRT)  # PYTHONFAULTHANDLER=1: dumps, then dies
        try:
            proc.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.proc.pid, signal.SIGKILL)
            proc.proc.wait()
    logs = sorted(proc.err.parent.glob("runs/*/eval.log"))
    tail = "\n".join(logs[-1].read_text(errors="replace").splitlines()[-40:]) if logs else ""
    return f"{proc.err.read_text(errors='replace')}\n--- eval.log (tail) ---\n{tail}"


def records(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "trials.jsonl"
    if not path.exists():
        return []
    lines = path.read_bytes().split(b"\n")
    return [json.loads(line) for line in lines if line.strip() and line.endswith(b"}")]


def status(run_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((run_dir / "status.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    assert isinstance(data, dict)
    return data


def procs_with(token: str) -> list[str]:
    """Live processes whose command line holds ``token`` (sandboxed agents included)."""
    hits = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if token in text and state != "Z":
            hits.append(f"{entry.name}: {text}")
    return hits


def no_procs_with(token: str, timeout: float = 15) -> list[str]:
    deadline = time.monotonic() + timeout
    while (left := procs_with(token)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def trial_cgroups(run: str) -> list[Path]:
    """The local sandbox's trial cgroups of run ``run`` on this host (every hierarchy)."""
    found = []
    for dirpath, dirnames, _files in os.walk("/sys/fs/cgroup"):
        for name in list(dirnames):
            if name.startswith(f"harness-trial@{run}@"):
                found.append(Path(dirpath) / name)
                dirnames.remove(name)
    return found


def make_tasks(parent: Path, count: int, *, prefix: str = "t") -> Path:
    root = parent / "tasks"
    for i in range(count):
        task = root / f"{prefix}{i}"
        (task / "tests").mkdir(parents=True)
        (task / "task.toml").write_text(
            f'[task]\nname = "resume/{prefix}{i}"\n\n[metadata]\n'
            f'category = "{"even" if i % 2 == 0 else "odd"}"\n\n'
            "[agent]\ntimeout_sec = 60\n\n[verifier]\ntimeout_sec = 30\n"
        )
        (task / "instruction.md").write_text("Wait a little.\n")
        (task / "tests" / "test.sh").write_text(
            '#!/bin/bash\necho 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
        )
    return root


def numeric_tag() -> str:
    """Digits only: the tag is the fraction of a ``sleep`` argument."""
    return str(secrets.randbelow(10**6)).zfill(6)


def sleeper(seconds: str, tag: str, flag: Path | None = None) -> str:
    """An agent command that sleeps (``sleep <seconds>.<tag>``, findable in /proc).

    With ``flag``, it sleeps only while that file exists, so a resume can be fast.
    """
    sleep = f"sleep {seconds}.{tag}"
    if flag is None:
        return f"bash -c 'exec {sleep}'"
    return f"bash -c 'if [ -e {flag} ]; then exec {sleep}; fi'"


@pytest.fixture
def flag_dir() -> Iterator[Path]:
    """A world-readable dir outside every trial root, for a file the agents look at."""
    path = Path(tempfile.mkdtemp(prefix="harness-e2e-flag-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def local_options(tag: str) -> list[str]:
    return ["--set", f"sandbox.uid={UID_BASE}", "--set", f"sandbox.gid={UID_BASE}",
            "--display", "plain", "--run-name", f"resume-{tag}"]  # fmt: skip


def run_tmp(env: dict[str, str], run_dir: Path) -> Path:
    return Path(env["TMPDIR"]) / f"harness-run-{run_dir.name}"


# --------------------------------------------------------------------------- kill -9 + resume


def test_kill_9_halfway_then_resume_runs_every_trial_exactly_once(
    tmp_path: Path, env: dict[str, str]
) -> None:
    tag = numeric_tag()
    tasks = make_tasks(tmp_path, 6)
    out = tmp_path / "runs"
    run_dir = out / f"resume-{tag}"
    first = start(
        env, tmp_path, "run", tasks, "--agent", "command", "--agent-cmd",
        sleeper("2", tag), "-r", "2", "-j", "3", "-o", out, *local_options(tag),
    )  # fmt: skip

    def halfway() -> bool:
        running = [t for t in status(run_dir).get("running", []) if t["phase"] == "execute"]
        return len(records(run_dir)) >= 3 and bool(running) and bool(procs_with(tag))

    wait_for(halfway, "3 finished trials and agents running", first)
    watched = status(run_dir)
    assert watched["state"] == "running" and watched["pid"] == first.proc.pid
    assert watched["counts"]["planned"] == 12
    os.kill(first.proc.pid, signal.SIGKILL)  # the harness alone, as the OOM killer would
    first.proc.wait()
    before = {r["id"]: r for r in records(run_dir)}
    assert 3 <= len(before) < 12
    assert all(r["status"] == "completed" for r in before.values())
    # What the crash left: the status says running, the run's temp dir holds trial roots.
    assert status(run_dir)["state"] == "running"
    leaked_roots = list(run_tmp(env, run_dir).glob("harness-trial-*"))
    assert leaked_roots, "the killed run left no trial root to clean up (test did not bite)"
    # The supervisors notice that the harness is gone and kill their agents.
    assert not no_procs_with(tag), "agents outlived the killed harness"

    # And their trials' cgroups (one per trial, a dir in each hierarchy on cgroup v1).
    leaked_cgroups = {path.name for path in trial_cgroups(run_dir.name)}

    code, stdout, stderr = harness(env, tmp_path, "run", "--resume", run_dir, "-j", "4",
                                   "--display", "plain")  # fmt: skip
    assert code == 0, stderr
    leaked = len(leaked_roots) + len(leaked_cgroups)
    assert f"removed {leaked} leaked sandbox object(s) of the run" in stderr
    assert trial_cgroups(run_dir.name) == []
    assert f"{len(before)} kept" in stderr

    final = records(run_dir)
    ids = [r["id"] for r in final]
    assert len(ids) == 12 and len(set(ids)) == 12, "a trial is missing or counted twice"
    assert all(r["status"] == "completed" and r["ok"] for r in final)
    for record in final:  # the trials finished before the crash were kept, not rerun
        if record["id"] in before:
            assert record == before[record["id"]]
        else:
            assert record["attempt"] == 1 and record["previous_attempts"] == []
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["trials"] == 12 and summary["pending"] == 0 and not summary["interrupted"]
    assert summary["invocation"] == 2
    assert status(run_dir)["state"] == "finished"
    assert status(run_dir)["counts"]["kept"] == len(before)
    # One log per invocation; eval.log follows the latest.
    assert sorted(p.name for p in (run_dir / "logs").iterdir()) == [
        "invocation_1",
        "invocation_2",
        "latest",
    ]
    assert os.readlink(run_dir / "logs" / "latest") == "invocation_2"
    assert "invocation 2" in (run_dir / "eval.log").read_text()
    assert "invocation 1" in (run_dir / "logs" / "invocation_1" / "eval.log").read_text()
    # Nothing leaked: no trial root, no run temp dir, no agent process.
    assert not run_tmp(env, run_dir).exists()
    assert not list(Path(env["TMPDIR"]).glob("harness-trial-*"))
    assert not no_procs_with(tag)

    code, _out, stderr = harness(env, tmp_path, "run", "--resume", run_dir, "--display", "none")
    assert code == 0, stderr
    assert "nothing to resume: all 12 trial(s)" in stderr
    assert len(records(run_dir)) == 12


# --------------------------------------------------------------------------- Ctrl-C


def test_ctrl_c_cancels_running_trials_exits_130_and_resume_reruns_them(
    tmp_path: Path, env: dict[str, str], flag_dir: Path
) -> None:
    tag = numeric_tag()
    flag = flag_dir / "slow"
    flag.touch()
    tasks = make_tasks(tmp_path, 4)
    out = tmp_path / "runs"
    run_dir = out / f"resume-{tag}"
    started = start(
        env, tmp_path, "run", tasks, "--agent", "command", "--agent-cmd",
        sleeper("50", tag, flag), "-j", "2", "-o", out, *local_options(tag),
        "--set", f'expose=["{flag_dir}"]',
    )  # fmt: skip

    def two_agents_running() -> bool:
        running = [t for t in status(run_dir).get("running", []) if t["phase"] == "execute"]
        return len(running) == 2 and len(procs_with(f"sleep 50.{tag}")) >= 2

    wait_for(two_agents_running, "two agents running", started)
    os.killpg(started.proc.pid, signal.SIGINT)  # what Ctrl-C does: the whole process group
    code, _stdout, stderr = started.wait(timeout=60)
    assert code == 130, stderr
    assert "interrupted" in stderr and f"--resume {run_dir}" in stderr
    cancelled = records(run_dir)
    assert sorted(r["status"] for r in cancelled) == ["cancelled", "cancelled"]
    assert all(not r["ok"] and r["reward"] is None for r in cancelled)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["pending"] == 2
    assert status(run_dir)["state"] == "interrupted"
    assert not no_procs_with(tag), "agents outlived the interrupted run"
    assert not run_tmp(env, run_dir).exists()
    assert not list(Path(env["TMPDIR"]).glob("harness-trial-*"))

    flag.unlink()  # from now on the agents finish at once
    code, _stdout, stderr = harness(env, tmp_path, "run", "--resume", run_dir)
    assert code == 0, stderr
    final = {r["id"]: r for r in records(run_dir)}
    assert len(final) == 4 and all(r["status"] == "completed" for r in final.values())
    for old in cancelled:
        rerun = final[old["id"]]
        assert rerun["attempt"] == 2
        (previous,) = rerun["previous_attempts"]
        assert previous["status"] == "cancelled" and previous["attempt"] == 1
        assert previous["errors"], "the cancelled attempt's errors were lost"
        assert (run_dir / previous["evidence_dir"]).is_dir()


# --------------------------------------------------------------------------- torn line


def test_a_torn_last_line_is_repaired_and_its_trial_rerun(
    tmp_path: Path, env: dict[str, str]
) -> None:
    tag = secrets.token_hex(3)
    tasks = make_tasks(tmp_path, 3)
    out = tmp_path / "runs"
    run_dir = out / f"resume-{tag}"
    code, _o, stderr = harness(env, tmp_path, "run", tasks, "--agent", "nop", "-o", out,
                               *local_options(tag))  # fmt: skip
    assert code == 0, stderr
    path = run_dir / "trials.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    assert len(lines) == 3
    # A crash mid-write of the last record: only part of its line reached the disk.
    path.write_bytes(b"".join(lines[:2]) + lines[2][: len(lines[2]) // 2])

    code, _o, stderr = harness(env, tmp_path, "run", "--resume", run_dir, "--display", "plain")
    assert code == 0, stderr
    assert "repaired a torn last line of trials.jsonl (line 3" in stderr
    assert "2 kept" in stderr and "1 never finished" in stderr
    repaired = path.read_bytes()
    assert repaired.endswith(b"\n") and repaired.startswith(b"".join(lines[:2]))
    final = records(run_dir)
    assert len(final) == 3 and len({r["id"] for r in final}) == 3
    assert all(r["status"] == "completed" for r in final)

    # Torn again, with every trial done: repaired, nothing to resume, exit 0.
    path.write_bytes(repaired + b'{"id": "half a rec')
    code, _o, stderr = harness(env, tmp_path, "run", "--resume", run_dir, "--display", "plain")
    assert code == 0, stderr
    assert "repaired a torn last line" in stderr and "nothing to resume" in stderr
    assert path.read_bytes() == repaired


# --------------------------------------------------------------------------- config


def test_resume_refuses_a_differing_config_naming_the_keys(
    tmp_path: Path, env: dict[str, str]
) -> None:
    tag = secrets.token_hex(3)
    tasks = make_tasks(tmp_path, 2)
    out = tmp_path / "runs"
    run_dir = out / f"resume-{tag}"
    code, _o, stderr = harness(env, tmp_path, "run", tasks, "--agent", "nop", "-o", out,
                               *local_options(tag))  # fmt: skip
    assert code == 0, stderr
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}

    code, stdout, stderr = harness(
        env, tmp_path, "run", "--resume", run_dir, "--agent", "oracle",
        "--set", "retry.max_retries=7", "-j", "4",
    )  # fmt: skip
    assert code == 2, stderr
    assert stdout == ""
    first = stderr.splitlines()[0]
    assert first.startswith("error:") and "agent.name, retry.max_retries" in first
    assert 'agent.name: saved "nop", given "oracle"' in stderr
    assert "retry.max_retries: saved 2, given 7" in stderr
    assert "concurrency" not in stderr.replace("-j", "")  # -j may differ
    after = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    assert after == before, "a refused resume changed the run dir"
    assert sorted(p.name for p in (run_dir / "logs").iterdir()) == ["invocation_1", "latest"]

    # The same values (and -j, display options) are accepted.
    code, _o, stderr = harness(
        env, tmp_path, "run", "--resume", run_dir, "--agent", "nop", "-j", "3",
        "--display", "none", "--json",
    )  # fmt: skip
    assert code == 0, stderr
    assert "nothing to resume" in stderr


def test_a_non_empty_run_dir_is_refused_without_resume(tmp_path: Path, env: dict[str, str]) -> None:
    tag = secrets.token_hex(3)
    tasks = make_tasks(tmp_path, 1)
    out = tmp_path / "runs"
    args = ("run", tasks, "--agent", "nop", "-o", out, *local_options(tag))
    code, _o, stderr = harness(env, tmp_path, *args)
    assert code == 0, stderr
    code, _o, stderr = harness(env, tmp_path, *args)
    assert code == 2
    assert "not empty" in stderr and "--resume" in stderr
    assert len(records(out / f"resume-{tag}")) == 1


def test_config_file_and_set_and_selection(tmp_path: Path, env: dict[str, str]) -> None:
    tasks = make_tasks(tmp_path, 6)
    config = tmp_path / "conf" / "run.toml"
    config.parent.mkdir()
    config.write_text(
        f'paths = ["../tasks"]\nagent = "nop"\nrollouts = 2\noutput_dir = "../runs"\n'
        f"sandbox_uid = {UID_BASE}\nsandbox_gid = {UID_BASE}\n"
        'categories = ["even"]\n\n[retry]\nmax_retries = 1\n'
    )
    code, stdout, stderr = harness(
        env, tmp_path, "run", "-c", config, "--set", "rollouts=1", "--exclude", "resume/t4",
        "--set", "retry.backoff_sec=0.5", "--json",
    )  # fmt: skip
    assert code == 0, stderr
    data = json.loads(stdout)
    run_dir = Path(data["run_dir"])
    assert run_dir.parent == tmp_path / "runs"
    assert sorted(r["task"]["key"] for r in records(run_dir)) == ["resume/t0", "resume/t2"]
    saved = tomllib.loads((run_dir / "config.toml").read_text())["run"]
    assert saved["tasks"]["paths"] == [str(tasks)] and saved["rollouts"] == 1
    assert saved["retry"] == {**saved["retry"], "max_retries": 1, "backoff_sec": 0.5}
    assert saved["tasks"]["exclude"] == ["resume/t4"] and saved["tasks"]["categories"] == ["even"]
    assert saved["sandbox"]["uid"] == UID_BASE  # the file's flat 0.1 keys went to their sections

    code, _o, stderr = harness(env, tmp_path, "run", "-c", config, "--set", "retry.tries=3")
    assert code == 2
    assert stderr.strip() == "error: unknown config key 'retry.tries'"

    code, _o, stderr = harness(env, tmp_path, "run", tasks, "--agent", "nop",
                               "--task-name", "nothing-*", "-o", tmp_path / "none")  # fmt: skip
    assert code == 2 and "--task-name nothing-*" in stderr
    assert not (tmp_path / "none").exists()


def test_a_credential_in_the_config_is_refused(tmp_path: Path, env: dict[str, str]) -> None:
    key = f"sk-e2e-{secrets.token_hex(12)}"
    tasks = make_tasks(tmp_path, 1)
    code, _o, stderr = harness(
        {**env, "OPENAI_API_KEY": key}, tmp_path, "run", tasks, "--agent", "command",
        "--agent-cmd", f"agent --api-key {key}", "-o", tmp_path / "runs",
    )  # fmt: skip
    assert code == 2
    assert "agent.cmd" in stderr and key not in stderr
    assert not (tmp_path / "runs").exists()


def test_a_second_ctrl_c_aborts_and_still_cleans_up(tmp_path: Path, env: dict[str, str]) -> None:
    tag = numeric_tag()
    tasks = make_tasks(tmp_path, 2)
    out = tmp_path / "runs"
    run_dir = out / f"resume-{tag}"
    # 100,000 files in each workspace: the cleanup after the first Ctrl-C takes long enough
    # for the second one to find the trials still cleaning up.
    agent = f"bash -c 'touch f{{{{1..100000}}}} && exec sleep 50.{tag}'"
    started = start(
        env, tmp_path, "run", tasks, "--agent", "command", "--agent-cmd", agent,
        "-j", "2", "-o", out, *local_options(tag),
    )  # fmt: skip

    def two_agents_running() -> bool:
        # The harness's own command line holds the agent's command: the trials' phases
        # from status.json, and two processes besides the harness.
        running = [t for t in status(run_dir).get("running", []) if t["phase"] == "execute"]
        return len(running) == 2 and len(procs_with(f"sleep 50.{tag}")) >= 3

    wait_for(two_agents_running, "two agents running", started)
    os.killpg(started.proc.pid, signal.SIGINT)
    # Two signals that reach a busy process close together run Python's handler once: send
    # the second after the first was handled, while the trials still clean up.
    wait_for(
        lambda: "interrupted:" in started.err.read_text(),
        "the first interrupt handled",
        started,
        timeout=30,
    )
    os.killpg(started.proc.pid, signal.SIGINT)
    code, _stdout, stderr = started.wait(timeout=60)
    assert code == 130, stderr
    assert "aborting" in stderr, stderr  # whole: what each trial ended as, and why
    assert not no_procs_with(tag), "agents outlived the aborted run"
    assert not run_tmp(env, run_dir).exists()
    assert json.loads((run_dir / "summary.json").read_text())["interrupted"] is True
    # Whatever was recorded is a cancelled trial; the rest is left for --resume.
    assert all(r["status"] == "cancelled" for r in records(run_dir))


def test_a_run_dir_written_before_resume_existed_can_be_resumed(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Old layout: relative paths in config.toml, no new keys, a plain eval.log, no logs/."""
    tag = secrets.token_hex(3)
    tasks = make_tasks(tmp_path, 2)
    out = tmp_path / "runs"
    run_dir = out / f"resume-{tag}"
    code, _o, stderr = harness(env, tmp_path, "run", tasks, "--agent", "nop", "-o", out,
                               *local_options(tag))  # fmt: skip
    assert code == 0, stderr
    (run_dir / "config.toml").write_text(
        '[run]\npaths = ["tasks"]\nagent = "nop"\nsandbox = "local"\nrollouts = 1\n'
        f'concurrency = 1\noutput_dir = "runs"\nsandbox_uid = {UID_BASE}\n'
        f'sandbox_gid = {UID_BASE}\n\n[versions]\nharness = "0.0.9"\n'
    )
    (run_dir / "eval.log").unlink()
    shutil.rmtree(run_dir / "logs")
    (run_dir / "eval.log").write_text("old log line\n")
    first, second = (run_dir / "trials.jsonl").read_text().splitlines()
    (run_dir / "trials.jsonl").write_text(first + "\n")

    # Relative paths of an old config.toml are taken from where the resume runs.
    code, _o, stderr = harness(env, tmp_path, "run", "--resume", run_dir)
    assert code == 2 and "does not exist" in stderr  # started from the repo: no ./tasks
    resumed = subprocess.run(
        [str(HARNESS), "run", "--resume", str(run_dir), "--display", "plain"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert "1 kept" in resumed.stderr and "1 never finished" in resumed.stderr
    assert len(records(run_dir)) == 2
    assert (run_dir / "logs" / "invocation_1" / "eval.log").read_text() == "old log line\n"
    assert "invocation 2" in (run_dir / "eval.log").read_text()


def test_a_run_dir_written_by_0_1_0_resumes(
    tmp_path: Path, env: dict[str, str], legacy_run: Callable[[Path], Path]
) -> None:
    """Flat config keys, logs/attempt_1, one record short (tests/fixtures/legacy-run-0.1.0)."""
    run_dir = legacy_run(tmp_path)
    config_before = (run_dir / "config.toml").read_bytes()
    kept = records(run_dir)
    assert len(kept) == 1

    code, _o, stderr = harness(env, tmp_path, "run", "--resume", run_dir, "-j", "2",
                               "--display", "plain")  # fmt: skip
    assert code == 0, stderr
    assert "1 kept" in stderr and "1 never finished" in stderr
    final = records(run_dir)
    assert [r["id"] for r in final] == [kept[0]["id"], "copy-instruction-f59e19.r1"]
    assert final[0] == kept[0] and final[1]["status"] == "completed" and final[1]["reward"] == 1.0
    assert final[1]["agent"]["command"] == "cp {instruction_file} {workspace}/answer.txt"
    assert (run_dir / "config.toml").read_bytes() == config_before  # a resume never rewrites it
    # The old invocation log keeps its 0.1 name; numbering goes on from it.
    logs = sorted(p.name for p in (run_dir / "logs").iterdir())
    assert logs == ["attempt_1", "invocation_2", "latest"]
    assert os.readlink(run_dir / "logs" / "latest") == "invocation_2"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["trials"] == 2 and summary["invocation"] == 2 and summary["threshold"] == 0.5


def test_a_second_live_run_of_the_same_name_is_refused_and_the_first_goes_on(
    tmp_path: Path, env: dict[str, str], flag_dir: Path
) -> None:
    """A run's name is what its sandboxes answer to on the host (its temp dir, its labels).

    A second run of that name in another output dir, started while the first runs, would
    empty the first's temp dir and remove what is labelled with the name: it is refused
    before anything is opened or written, and the first finishes whole. The first's agents
    hold until the test removes a flag, so the first is live however slow the second starts.
    """
    tag = numeric_tag()
    flag = flag_dir / "hold"
    flag.touch()
    tasks = make_tasks(tmp_path, 2)
    first_out, second_out = tmp_path / "a", tmp_path / "b"
    hold = f"bash -c 'for i in $(seq 3000); do [ -e {flag} ] || exit 0; sleep 0.1; done' hold-{tag}"
    first = start(
        env, tmp_path, "run", tasks, "--agent", "command", "--agent-cmd", hold,
        "-j", "2", "-o", first_out, *local_options(tag), "--set", f'expose=["{flag_dir}"]',
    )  # fmt: skip
    wait_for(lambda: len(procs_with(f"hold-{tag}")) >= 2, "two agents running", first)
    code, _stdout, stderr = harness(
        env, tmp_path, "run", tasks, "--agent", "nop", "-o", second_out, *local_options(tag)
    )
    assert code == 2, stderr
    assert f"a run named resume-{tag} is already running on this host" in stderr, stderr
    assert not second_out.exists()
    assert first.proc.poll() is None, "the first run ended before the second was refused"
    flag.unlink()
    code, _stdout, stderr = first.wait(timeout=120)
    assert code == 0, stderr
    statuses = [r["status"] for r in records(first_out / f"resume-{tag}")]
    assert statuses == ["completed", "completed"], statuses
    # Once it ended, the name is free again.
    code, _stdout, stderr = harness(
        env, tmp_path, "run", tasks, "--agent", "nop", "-o", second_out, *local_options(tag)
    )
    assert code == 0, stderr
