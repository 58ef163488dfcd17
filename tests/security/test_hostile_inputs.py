"""Hostile run dirs, task dirs and templates against the harness's host-side readers.

docs/security.md, "Run dirs, tasks and templates". Every attack plants a canary file of
its own OUTSIDE the run dir (or task dir) and checks, from outside, that no output of the
real CLI — ``harness report``'s HTML, ``harness view``'s HTTP answers, ``harness regrade``'s
new run dir, ``harness export``'s trajectories, a sandbox's evidence — holds its bytes:

- a manifest ``sha256`` of ``/…//./…`` (64 characters) that would escape ``objects/``;
- symlinks in the run dir (an agent log, a verifier file, the transcript, an object) to it;
- a task whose ``workspace/``, ``instruction.md``, ``judge/rubric.md``, ``solution/`` or
  ``tests/`` is a symlink to it;
- ``${CANARY_SECRET}`` in a task's env without ``--task-env``;
- ``artifacts = ["/app/x/.."]``, a 100 MB ``instruction.md`` (peak RSS measured by the
  parent, from ``wait4``), ``workdir = "/etc"``, ``storage_mb = 64``, ``cpus = 0``.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, Cli, files_containing, read_records, unique, write_task
from support.cli import harness, spawn_view


@pytest.fixture
def canary() -> Iterator[tuple[Path, str]]:
    """A canary file outside every run and task dir (short path: it fits in a sha256)."""
    top = Path(tempfile.mkdtemp(prefix="hrc", dir="/tmp"))
    token = f"CANARY-{secrets.token_hex(12)}"
    path = top / "c"
    path.write_text(token + "\n")
    (top / "c.jsonl").write_text(
        json.dumps({"type": "message", "role": "assistant", "content": token}) + "\n"
    )
    (top / "dir").mkdir()
    (top / "dir" / "test.sh").write_text(f"#!/bin/bash\necho {token}\n")
    (top / "dir" / "solve.sh").write_text(f"#!/bin/bash\necho {token}\n")
    (top / "dir" / "file.txt").write_text(token + "\n")
    yield path, token
    shutil.rmtree(top, ignore_errors=True)


def escaping_sha(target: Path) -> str:
    """``target`` written as a 64-character "sha256" (``//`` padding), as a forger would."""
    text = str(target)
    assert len(text) < 60
    head, name = str(target.parent), target.name
    padded = head + "/" * (64 - len(head) - len(name)) + name
    assert len(padded) == 64 and Path(padded).read_text() == target.read_text()
    return padded


def assert_no_canary(top: Path, token: str) -> None:
    leaked = files_containing(top, token)
    assert not leaked, f"the canary reached {leaked}"


# ------------------------------------------------------------------ a hostile run dir


def make_source_run(tmp_path: Path) -> Path:
    """A real run (local sandbox, ``--evidence diff``): two trials that each change files."""
    name = unique("hostile-run")
    task = write_task(
        tmp_path / "tasks",
        name,
        attack='echo agent-wrote > "$HARNESS_WORKSPACE/out.txt"\n'
        'echo "second $RANDOM-$$-$(date +%s%N)" > "$HARNESS_WORKSPACE/two.txt"\n',
        test_sh='R="$HARNESS_VERIFIER_DIR/reward.txt"\n'
        'test -f "$HARNESS_WORKSPACE/out.txt" && echo 1 > "$R" || echo 0 > "$R"\n',
        workspace={"seed.txt": "seeded\n"},
    )
    cli = Cli(tmp_path, sandbox="local")
    result = cli.run([task], extra=["--set", "rollouts=2"], timeout=300)
    assert result.code == 0, str(result)
    assert result.run_dir is not None and len(result.records) == 2
    return result.run_dir


def forge(run_dir: Path, canary: Path) -> tuple[str, str]:
    """Plant the attacks in the first trial; return (forged id, clean id)."""
    records = sorted(read_records(run_dir), key=lambda r: r["id"])
    forged, clean = records[0]["id"], records[1]["id"]
    evidence = run_dir / "trials" / forged
    manifest = json.loads((evidence / "workspace.manifest.json").read_text())
    changed = [e for e in manifest["files"] if not e.get("unchanged")]
    assert changed, manifest
    # 1. a "sha256" that is an absolute path to the canary (objects/<"/h">/<sha> escapes)
    changed[0]["sha256"] = escaping_sha(canary)
    # 2. a path that leaves the workspace, and one that is absolute
    manifest["files"].append({"path": "../../../c", "sha256": "0" * 64, "size": 1, "mode": 420})
    manifest["files"].append({"path": str(canary), "sha256": "0" * 64, "size": 1, "mode": 420})
    (evidence / "workspace.manifest.json").write_text(json.dumps(manifest))
    # 3. an object of the store replaced by a link to the canary
    if len(changed) > 1:
        sha = changed[1]["sha256"]
        obj = run_dir / "objects" / sha[:2] / sha
        obj.chmod(0o644)
        obj.unlink()
        obj.symlink_to(canary)
    # 4. evidence files replaced by links
    for name in ("agent.log", "agent.stderr.log"):
        (evidence / name).unlink(missing_ok=True)
        (evidence / name).symlink_to(canary)
    (evidence / "transcript.jsonl").unlink(missing_ok=True)
    (evidence / "transcript.jsonl").symlink_to(canary.parent / "c.jsonl")
    (evidence / "session.jsonl").unlink(missing_ok=True)
    (evidence / "session.jsonl").symlink_to(canary.parent / "c.jsonl")
    (evidence / "verifier" / "leak.txt").symlink_to(canary)
    (evidence / "verifier" / "linkdir").symlink_to(canary.parent / "dir")
    # 5. the run's own files
    for name in ("summary.json", "status.json"):
        (run_dir / name).unlink(missing_ok=True)
        (run_dir / name).symlink_to(canary.parent / "c.jsonl")
    return forged, clean


@pytest.mark.root
def test_a_forged_run_dir_is_read_without_leaving_it(
    tmp_path: Path, canary: tuple[Path, str]
) -> None:
    canary_path, token = canary
    run_dir = make_source_run(tmp_path)
    forged, clean = forge(run_dir, canary_path)
    out = tmp_path / "out"
    out.mkdir()

    # harness report: the HTML never embeds the canary, and names the entry damaged
    report = out / "report.html"
    done = harness("report", str(run_dir), "-o", str(report))
    assert done.returncode == 0, done.stderr
    assert report.is_file()
    assert token not in report.read_text(errors="replace")

    # harness view: real HTTP requests
    view = spawn_view(run_dir)
    try:
        assert view.url, view.stderr()
        base = view.url
        bodies = []
        for path in (
            "",
            "api/index",
            f"api/trial?run=0&id={forged}",
            f"api/trial?run=0&id={clean}",
        ):
            with urllib.request.urlopen(base + path, timeout=60) as answer:
                bodies.append(answer.read().decode(errors="replace"))
        for path in (
            f"trials/{forged}/agent.log",
            f"trials/{forged}/verifier/leak.txt",
            f"trials/{forged}/verifier/linkdir/file.txt",
            f"trials/{forged}/transcript.jsonl",
        ):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(f"{base}api/raw?run=0&path={path}", timeout=60)
            assert refused.value.code == 404
            bodies.append(refused.value.read().decode(errors="replace"))
    finally:
        view.kill()
    assert not any(token in body for body in bodies)
    detail = json.loads(bodies[2])
    files = detail["evidence"]["changes"]["files"]
    damaged = {f["path"] for f in files if f["change"] == "damaged"}
    assert {"../../../c", str(canary_path)} <= damaged, files
    assert any("sha256" in (f.get("preview") or "") for f in files if f["change"] == "damaged")

    # harness export: no trajectory embeds the canary
    exported = out / "export"
    done = harness("export", str(run_dir), "-o", str(exported))
    assert done.returncode == 0, done.stderr
    assert list(exported.rglob("trajectory.json"))
    assert_no_canary(exported, token)

    # harness regrade: the forged trial is left out (damaged), the clean one regraded
    regrades = out / "regrades"
    done = harness(
        "regrade", str(run_dir), "--sandbox", "local", "-o", str(regrades), "--json", timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (new_run,) = list(regrades.iterdir())
    assert_no_canary(new_run, token)
    regrade = json.loads((new_run / "regrade.json").read_text())
    assert [t["trial_id"] for t in regrade["trials"]] == [clean]
    (left_out,) = regrade["not_regraded"]
    assert left_out["trial_id"] == forged and "damaged" in left_out["reason"]
    assert token not in done.stdout + done.stderr
    # and nothing the harness wrote anywhere in the source run dir holds it either
    assert_no_canary(run_dir, token)


# ------------------------------------------------------------------ a hostile task dir

LINKED = {
    "workspace": ("workspace", "dir"),
    "instruction": ("instruction.md", "c"),
    "rubric": ("judge/rubric.md", "c"),
    "solution": ("solution", "dir"),
    "tests": ("tests", "dir"),
    "nested": ("workspace/inner.txt", "c"),
}


@pytest.mark.parametrize("what", sorted(LINKED))
def test_a_task_symlink_out_of_the_task_is_refused(
    what: str, backend: str, any_cli: Cli, tmp_path: Path, canary: tuple[Path, str]
) -> None:
    canary_path, token = canary
    rel, target = LINKED[what]
    name = unique(f"link-{what}")
    task = write_task(tmp_path / "tasks", name, attack="echo hi\n", workspace={"a.txt": "a\n"})
    (task / "judge").mkdir()
    (task / "judge" / "rubric.md").write_text("Be good.\n")
    (task / "solution").mkdir()
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\necho solved\n")
    link = task / rel
    if link.is_dir():
        shutil.rmtree(link)
    else:
        link.unlink(missing_ok=True)
    link.symlink_to(canary_path.parent / target)

    checked = harness("tasks", "check", str(task))
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert rel in checked.stdout + checked.stderr
    assert "symlink" in checked.stdout + checked.stderr

    result = any_cli.run([task], agent="oracle" if what == "solution" else "command")
    assert result.code == 2, str(result)
    assert rel in result.stderr
    assert result.run_dir is None or not result.records
    if any_cli.output.exists():
        assert_no_canary(any_cli.output, token)
    assert_no_canary(any_cli.tmpdir, token)


@pytest.mark.root
def test_a_symlink_inside_the_task_that_stays_inside_is_kept(tmp_path: Path) -> None:
    task = write_task(tmp_path / "tasks", unique("inner-link"), attack="echo hi\n")
    (task / "docs").mkdir()
    (task / "docs" / "notes.md").write_text("notes\n")
    (task / "notes-link.md").symlink_to("docs/notes.md")
    checked = harness("tasks", "check", str(task))
    assert checked.returncode == 0, checked.stdout + checked.stderr


# ------------------------------------------------------------------ templates


def test_a_task_template_reads_only_allowed_variables(
    backend: str, any_cli: Cli, tmp_path: Path
) -> None:
    secret = f"SECRET-{secrets.token_hex(10)}"
    name = unique("template")
    task = write_task(
        tmp_path / "tasks",
        name,
        attack='echo "got:$LEAK:$FALLBACK" > "$HARNESS_WORKSPACE/got.txt"\n',
    )
    toml = (task / "task.toml").read_text()
    toml = toml.replace(
        "[environment]\n",
        '[environment]\nenv = { LEAK = "${CANARY_SECRET}", FALLBACK = "${CANARY_OTHER:-dflt}" }\n',
    )
    (task / "task.toml").write_text(toml)
    env = {"CANARY_SECRET": secret, "CANARY_OTHER": "other-" + secret}

    refused = any_cli.run([task], env=env)
    assert refused.code == 2, str(refused)
    assert "--task-env CANARY_SECRET" in refused.stderr
    assert refused.run_dir is None  # nothing written
    assert not files_containing(any_cli.tmpdir, secret)

    allowed = any_cli.run([task], env=env, extra=["--task-env", "CANARY_SECRET"], timeout=300)
    assert allowed.code == 0, str(allowed)
    assert allowed.run_dir is not None
    # the allowed value arrived; the unlisted one took its default
    assert files_containing(allowed.run_dir, f"got:{secret}:dflt")
    assert not files_containing(allowed.run_dir, "other-" + secret)
    # the allow list is part of the saved config (a --resume keeps it)
    saved = tomllib.loads((allowed.run_dir / "config.toml").read_text())
    assert saved["run"]["tasks"]["env_allow"] == ["CANARY_SECRET"]


@pytest.mark.root
def test_a_provider_key_stays_refused_even_when_allowed(tmp_path: Path) -> None:
    task = write_task(tmp_path / "tasks", unique("provider"), attack="echo hi\n")
    toml = (task / "task.toml").read_text()
    toml = toml.replace("[environment]\n", '[environment]\nenv = { K = "${OPENAI_API_KEY}" }\n')
    (task / "task.toml").write_text(toml)
    cli = Cli(tmp_path, sandbox="local")
    result = cli.run(
        [task],
        env={"OPENAI_API_KEY": "sk-test-" + secrets.token_hex(8)},
        extra=["--task-env", "OPENAI_API_KEY"],
    )
    assert result.code == 2, str(result)
    assert "provider credential" in result.stderr
    assert result.run_dir is None


# ------------------------------------------------------------------ validation


def _task_with(tmp_path: Path, name: str, environment: str = "", top: str = "") -> Path:
    task = write_task(tmp_path / "tasks", unique(name), attack="echo hi\n")
    toml = (task / "task.toml").read_text()
    toml = top + toml.replace("cpus = 1\nmemory_mb = 512\n", environment or "cpus = 1\n")
    (task / "task.toml").write_text(toml)
    return task


@pytest.mark.root
@pytest.mark.parametrize(
    ("name", "environment", "top", "field", "words"),
    [
        ("artifact", "", 'artifacts = ["/app/x/.."]\n', "artifacts", "'..'"),
        (
            "artifact-dest",
            "",
            'artifacts = [{ source = "/app", destination = "." }]\n',
            "artifacts",
            "artifacts dir itself",
        ),
        ("workdir", 'workdir = "/etc"\n', "", "environment.workdir", "system directory"),
        (
            "workdir-dots",
            'workdir = "/usr/../etc/."\n',
            "",
            "environment.workdir",
            "system directory",
        ),
        ("storage", "storage_mb = 64\n", "", "environment.storage_mb", "256"),
        ("cpus", "cpus = 0\n", "", "environment.cpus", "greater than 0"),
        ("memory", "memory_mb = -1\n", "", "environment.memory_mb", "greater than 0"),
    ],
)
def test_invalid_task_settings_are_refused_at_check(
    tmp_path: Path, name: str, environment: str, top: str, field: str, words: str
) -> None:
    task = _task_with(tmp_path, name, environment, top)
    checked = harness("tasks", "check", str(task))
    assert checked.returncode == 2, checked.stdout + checked.stderr
    output = checked.stdout + checked.stderr
    assert field.split(".")[-1] in output and words in output, output


@pytest.mark.root
def test_a_request_beyond_the_host_is_refused_before_anything_runs(tmp_path: Path) -> None:
    cpus = (os.cpu_count() or 1) + 64
    task = _task_with(tmp_path, "big-cpus", f"cpus = {cpus}\nmemory_mb = 512\n")
    cli = Cli(tmp_path, sandbox="local")
    result = cli.run([task])
    assert result.code == 2, str(result)
    assert "[environment].cpus" in result.stderr
    assert not result.records
    with open("/proc/meminfo") as fh:
        total_mb = int(fh.readline().split()[1]) >> 10
    task = _task_with(tmp_path, "big-mem", f"cpus = 1\nmemory_mb = {total_mb + 4096}\n")
    result = cli.run([task])
    assert result.code == 2, str(result)
    assert "[environment].memory_mb" in result.stderr


def _peak_rss_kib(argv: list[str]) -> tuple[int, str]:
    """Run ``argv``; its exit code and its peak RSS as the kernel reports it to the parent."""
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=REPO,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
    )
    assert proc.stdout is not None
    output = proc.stdout.read().decode(errors="replace")
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_maxrss, f"exit {proc.returncode}\n{output}"


@pytest.mark.root
def test_a_huge_instruction_is_refused_with_bounded_memory(tmp_path: Path) -> None:
    small = write_task(tmp_path / "tasks", unique("small"), attack="echo hi\n")
    huge = write_task(tmp_path / "tasks", unique("huge"), attack="echo hi\n")
    with open(huge / "instruction.md", "r+b") as fh:
        fh.truncate(100 * 1024 * 1024)  # 100 MB (sparse: cheap on disk, not to read)
    baseline, output = _peak_rss_kib(
        [sys.executable, "-m", "harness", "tasks", "check", str(small)]
    )
    assert output.startswith("exit 0"), output
    peak, output = _peak_rss_kib([sys.executable, "-m", "harness", "tasks", "check", str(huge)])
    assert output.startswith("exit 2"), output
    assert "instruction.md" in output and str(4 << 20) in output, output
    # Reading it whole would cost 100 MB or more; the bounded read costs at most its cap.
    assert peak - baseline < 32 * 1024, (baseline, peak)
