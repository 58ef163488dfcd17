"""Variants of the host-side trust-boundary attacks that the first fixes' tests did not cover.

docs/security.md, "The host-side trust boundary". Each test is an attack through the real
CLI, judged from outside (the run dir, host files, the record):

- a compose file's ``${VAR}`` template, which Docker Compose interpolates from its own
  process environment (the harness's), must not carry a host secret into the agent;
- a forged run dir whose ``trials.jsonl`` is a symlink to a root-only host file holding
  record-shaped lines must not be read by ``report``, ``regrade``, ``export`` or ``view``;
- hostile bytes in places the first tests did not put them (the agent's stdout, a file
  the verifier writes, an artifact's name), and a second step of a multi-step task.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    BASE_IMAGE,
    RUN_LABEL,
    Cli,
    files_containing,
    read_records,
    remove_labelled,
    unique,
    write_task,
)
from support.cli import harness, spawn_view


def one_trial_run(tmp_path: Path, prefix: str) -> Path:
    """A real finished run (local sandbox) of one trivial task: the run dir to make hostile."""
    task = write_task(tmp_path / "tasks", unique(prefix), attack="echo hi\n")
    run = Cli(tmp_path, sandbox="local").run([task], timeout=300)
    assert run.code == 0 and run.run_dir is not None, str(run)
    return run.run_dir


@pytest.fixture
def host_secret_dir() -> Iterator[Path]:
    """A root-only dir outside every run and task dir."""
    top = Path(tempfile.mkdtemp(prefix="hrt", dir="/tmp"))
    top.chmod(0o700)
    yield top
    shutil.rmtree(top, ignore_errors=True)


# ------------------------------------------------------------------ compose templates


@pytest.mark.docker
def test_a_compose_file_template_reads_no_host_secret(client: Any, tmp_path: Path) -> None:
    """Attack: ``environment: {LEAK: "${SECRET}"}`` in the task's docker-compose.yaml.

    Compose interpolates the file from its process environment; python-on-whales gave it
    the harness's whole environment, so the secret reached the agent (its log held it).
    """
    secret = f"RT-COMPOSE-{secrets.token_hex(12)}"
    name = unique("compose-tmpl")
    task = write_task(
        tmp_path / "tasks",
        name,
        attack='echo "leak:${LEAK}:${NESTED}:"\n',
        dockerfile=f"FROM {BASE_IMAGE}\n",
    )
    (task / "environment" / "docker-compose.yaml").write_text(
        "services:\n  main:\n    build:\n      context: .\n    environment:\n"
        '      LEAK: "${RT_COMPOSE_SECRET}"\n'
        '      NESTED: "${RT_UNSET_VAR:-${RT_COMPOSE_SECRET}}"\n'
    )
    cli = Cli(tmp_path, sandbox="docker")
    try:
        result = cli.run([task], env={"RT_COMPOSE_SECRET": secret}, timeout=300)
    finally:
        if cli.output.exists():
            for run_dir in cli.output.iterdir():
                remove_labelled(client, f"{RUN_LABEL}={run_dir.name}")
    assert result.code == 0, str(result)
    assert result.run_dir is not None
    record = result.by_task(name)
    assert record["status"] == "completed", record
    log = (result.evidence(record) / "agent.log").read_text(errors="replace")
    assert "leak:" in log, log  # the agent ran and printed the variables
    assert not files_containing(result.run_dir, secret)
    assert not files_containing(cli.tmpdir, secret)


# ------------------------------------------------------------------ a symlinked trials.jsonl


@pytest.mark.root
def test_a_symlinked_trials_file_is_never_read(tmp_path: Path, host_secret_dir: Path) -> None:
    """Attack: a run dir whose ``trials.jsonl`` links to a root-only host file of records.

    Before, ``report`` followed the link and embedded the host file's strings in its HTML.
    """
    run_dir = one_trial_run(tmp_path, "trials-link")
    token = f"RT-HOSTFILE-{secrets.token_hex(12)}"
    forged = dict(read_records(run_dir)[0])
    forged["task"] = {**forged["task"], "name": token}
    target = host_secret_dir / "records.jsonl"
    target.write_text(json.dumps(forged) + "\n")
    target.chmod(0o600)
    (run_dir / "trials.jsonl").unlink()
    (run_dir / "summary.json").unlink()
    (run_dir / "trials.jsonl").symlink_to(target)
    out = tmp_path / "out"
    out.mkdir()

    report = harness("report", str(run_dir), "-o", str(out / "report.html"))
    assert report.returncode == 2, report.stderr
    assert "trials.jsonl" in report.stderr and "Traceback" not in report.stderr
    regrade = harness("regrade", str(run_dir), "-o", str(out / "regrade"))
    assert regrade.returncode == 2, regrade.stderr
    assert "Traceback" not in regrade.stderr
    export = harness("export", str(run_dir), "-o", str(out / "export"))
    assert export.returncode != 0 and "Traceback" not in export.stderr, export.stderr

    view = spawn_view(run_dir)
    bodies = []
    try:
        if view.url:  # the view may refuse the run dir: then there is nothing to fetch
            for path in ("", "api/index"):
                try:
                    with urllib.request.urlopen(view.url + path, timeout=60) as answer:
                        bodies.append(answer.read().decode(errors="replace"))
                except urllib.error.HTTPError as refused:
                    bodies.append(refused.read().decode(errors="replace"))
    finally:
        view.kill()
    assert not any(token in body for body in bodies)
    assert not files_containing(out, token)
    assert token not in report.stderr + regrade.stderr + export.stderr
    assert target.read_text().count(token) == 1  # never written through the link either


@pytest.mark.root
def test_a_fifo_for_summary_json_never_hangs_a_reader(tmp_path: Path) -> None:
    """Attack: a run dir whose ``summary.json`` is a FIFO. ``regrade`` read it to learn the
    plan's size and blocked for ever; now each reader finishes (the FIFO is not read).
    """
    run_dir = one_trial_run(tmp_path, "summary-fifo")
    (run_dir / "summary.json").unlink()
    os.mkfifo(run_dir / "summary.json")
    out = tmp_path / "out"
    for args in (
        ("regrade", str(run_dir), "-o", str(out / "regrade")),
        ("report", str(run_dir), "-o", str(out / "report.html")),
        ("export", str(run_dir), "-o", str(out / "export")),
    ):
        done = harness(*args, timeout=120)  # TimeoutExpired (a failure) if it blocks
        assert done.returncode == 0, (args, done.stderr)
    assert len(read_records(next((out / "regrade").iterdir()))) == 1


# ------------------------------------------------------------------ hostile bytes, new places

_BYTES_AGENT = r"""
printf 'out \377\376 \xed\xa0\x80 \x1b[2J end\n'
printf 'err \377 \xc3\x28\n' >&2
W="$HARNESS_WORKSPACE"
mkdir -p "$W/rtart/$(printf 'd\377')" "$HARNESS_ARTIFACTS_DIR/manifest.json/x"
printf 'x' > "$W/rtart/$(printf 'd\377')/$(printf 'f\376\\x41')"
ln -s /etc/shadow "$W/rtart/$(printf 'l\377')"
printf 'y' > "$HARNESS_ARTIFACTS_DIR/$(printf 'a\377\n\\xff')"
"""

_BYTES_VERIFIER = r"""V="$HARNESS_VERIFIER_DIR"
printf 'v \377\n'
printf 'z' > "$V/$(printf 'n\377')"
printf '\377\376 junk' > "$V/notes.txt"
mkdir -p "$V/$(printf 'dd\377')"; ln -s /etc/shadow "$V/$(printf 'dd\377')/s"
echo 0 > "$V/reward.txt"
"""


def test_hostile_bytes_in_stdout_artifacts_and_verifier_files_keep_the_record(
    any_cli: Cli, backend: str, tmp_path: Path
) -> None:
    """Attack: non-UTF-8 bytes in the agent's stdout/stderr, in a declared artifact's and a
    ``/logs/artifacts`` name (one a dir named ``manifest.json``), and in names and content
    the verifier writes to its own dir (a non-UTF-8 dir holding a link to ``/etc/shadow``).

    From outside: one ``completed`` record on attempt 1 with the honest reward 0; the
    names survive byte for byte; no host byte of ``/etc/shadow`` is in the run dir; the
    harness's artifact manifest is a file, never the agent's dir.
    """
    name = unique("bytes")
    task = write_task(tmp_path / "tasks", name, attack=_BYTES_AGENT, test_sh=_BYTES_VERIFIER)
    workspace = "/trial/workspace" if backend == "local" else "/app"
    toml = (task / "task.toml").read_text()
    (task / "task.toml").write_text(f'artifacts = ["{workspace}/rtart"]\n' + toml)
    result = any_cli.run([task], timeout=300)
    assert result.code == 0, str(result)
    record = result.by_task(name)
    assert (record["status"], record["reward"], record["attempt"]) == ("completed", 0.0, 1)
    evidence = os.fsencode(result.evidence(record))
    assert b"\377\376" in Path(os.fsdecode(evidence + b"/agent.log")).read_bytes()
    assert os.path.isfile(evidence + b"/verifier/n\377")
    assert os.path.isfile(evidence + b"/artifacts/a\377\n\\xff")
    assert os.path.isfile(evidence + b"/artifacts/rtart/d\377/f\376\\x41")
    assert os.path.isfile(evidence + b"/artifacts/manifest.json")
    manifest = json.loads(Path(os.fsdecode(evidence + b"/artifacts/manifest.json")).read_bytes())
    assert {entry["status"] for entry in manifest} == {"ok"}, manifest
    links = {e["path"] for e in record["events"] if e.get("kind") == "symlink"}
    assert any(p.endswith("dd\\xff/s") for p in links) and any(
        p.endswith("rtart/l\\xff") for p in links
    ), links
    assert result.run_dir is not None
    shadow = Path("/etc/shadow").read_bytes().split(b"\n")[0]
    assert not files_containing(result.run_dir, shadow)


# ------------------------------------------------------------------ compose sidecars

_SIDECAR_AGENT = """for i in $(seq 1 40); do
  python3 -c "import urllib.request as u; print(u.urlopen('http://kv:8080/f', timeout=2).read())" \\
    && break
  sleep 0.5
done
"""


def _sidecar_task(parent: Path, name: str, compose: str) -> Path:
    task = write_task(
        parent, name, attack=_SIDECAR_AGENT, dockerfile=f"FROM {BASE_IMAGE}\n", agent_timeout=60
    )
    (task / "environment" / "docker-compose.yaml").write_text(compose)
    return task


@pytest.mark.docker
def test_a_compose_sidecar_cannot_hand_host_files_to_the_agent(
    client: Any, tmp_path: Path, host_secret_dir: Path
) -> None:
    """Attack: a task's sidecar bind-mounts a root-only host dir (and reads a host env_file,
    builds from a host context, runs privileged) and serves it to the agent over HTTP.

    Before, the agent printed the host file (``/etc/shadow`` in the first trial of this
    attack). Now the task is refused before the run (exit 2), naming each key; a sidecar
    binding a dir inside the task read-only still serves the agent.
    """
    token = f"RT-SIDECAR-{secrets.token_hex(12)}"
    (host_secret_dir / "f").write_text(token + "\n")
    (host_secret_dir / "f").chmod(0o600)
    (host_secret_dir / "secret.env").write_text(f"LEAKED={token}\n")
    (host_secret_dir / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nCOPY f /srv/f\n")
    serve = '["python3", "-m", "http.server", "8080", "-d", "/srv"]'
    hostile_name, honest_name = unique("sidecar-host"), unique("sidecar-task")
    hostile = _sidecar_task(
        tmp_path / "tasks",
        hostile_name,
        "services:\n  main:\n    build:\n      context: .\n"
        f"  kv:\n    image: {BASE_IMAGE}\n    command: {serve}\n"
        f"    volumes:\n      - {host_secret_dir}:/srv:ro\n"
        f"    env_file:\n      - {host_secret_dir}/secret.env\n",
    )
    other_name = unique("sidecar-priv")
    other = _sidecar_task(
        tmp_path / "tasks",
        other_name,
        "services:\n  main:\n    build:\n      context: .\n"
        f"  kv:\n    image: {BASE_IMAGE}\n    command: {serve}\n    privileged: true\n"
        f"  kv2:\n    build:\n      context: {host_secret_dir}\n    command: {serve}\n",
    )
    honest = _sidecar_task(
        tmp_path / "tasks",
        honest_name,
        "services:\n  main:\n    build:\n      context: .\n"
        f"  kv:\n    image: {BASE_IMAGE}\n    command: {serve}\n"
        "    volumes:\n      - ./data:/srv:ro\n",
    )
    (honest / "environment" / "data").mkdir()
    (honest / "environment" / "data" / "f").write_text("in-task-file\n")
    cli = Cli(tmp_path, sandbox="docker")
    try:
        refused = cli.run([hostile, other], timeout=400)
        result = cli.run([honest], timeout=400)
    finally:
        if cli.output.exists():
            for run_dir in cli.output.iterdir():
                remove_labelled(client, f"{RUN_LABEL}={run_dir.name}")
    # Refused before anything runs (sandbox/docker/compose_check.py), each key named.
    assert refused.code == 2 and not refused.records, str(refused)
    for task, keys in (
        (hostile, ("volumes binds", "env_file")),
        (other, ("privileged", "build context")),
    ):
        message = " ".join(line for line in refused.stderr.splitlines() if str(task) in line)
        assert all(key in message for key in keys), refused.stderr
    assert result.run_dir is not None, str(result)
    served = result.by_task(honest_name)
    assert served["status"] == "completed", served
    assert "in-task-file" in (result.evidence(served) / "agent.log").read_text()
    assert not files_containing(result.run_dir, token)
    assert not files_containing(cli.tmpdir, token)


# ------------------------------------------------------------------ out of memory on purpose

_OOM_WHEN_WRONG = """if [ "$RT_RIGHT" = 1 ]; then
  echo right > "$HARNESS_WORKSPACE/answer.txt"
else
  echo wrong > "$HARNESS_WORKSPACE/answer.txt"
  python3 -c "b = bytearray(900 << 20)
for i in range(0, len(b), 4096): b[i] = 1"
fi
"""


def test_an_agent_that_runs_out_of_memory_when_wrong_scores_0_not_ungraded(
    any_cli: Cli, backend: str, tmp_path: Path
) -> None:
    """Attack: right on one task, wrong on the other, where it exhausts ``memory_mb`` on
    purpose. The OOM kill made the trial an ungraded ``agent_error``: it dropped out of the
    graded mean, pass@1 and success rate (1.0 / 100 % for an agent right half the time).

    From outside: both trials recorded on attempt 1, the OOM one ``agent_error`` with
    ``SandboxDied`` (local, gVisor) and reward 0, and the summary's graded mean and pass@1 are 0.5.
    """
    test_sh = (
        'R="$HARNESS_VERIFIER_DIR/reward.txt"\n'
        'grep -qx right "$HARNESS_WORKSPACE/answer.txt" && echo 1 > "$R" || echo 0 > "$R"\n'
    )
    right, wrong = unique("oom-right"), unique("oom-wrong")
    tasks = tmp_path / "tasks"
    for name, attack in ((right, "RT_RIGHT=1\n" + _OOM_WHEN_WRONG), (wrong, _OOM_WHEN_WRONG)):
        task = write_task(tasks, name, attack=attack, test_sh=test_sh)
        toml = (task / "task.toml").read_text().replace("memory_mb = 512", "memory_mb = 256")
        (task / "task.toml").write_text(toml)
    result = any_cli.run([tasks / right, tasks / wrong], timeout=300)
    assert result.run_dir is not None, str(result)
    assert len(result.records) == 2, str(result)
    assert all(r["attempt"] == 1 for r in result.records)
    assert result.by_task(right)["reward"] == 1.0
    oom = result.by_task(wrong)
    assert oom["status"] == "agent_error", oom
    if backend != "docker":  # runc reports the agent's exit 137 (graded, as before)
        assert any(e["type"] == "SandboxDied" for e in oom["errors"]), oom["errors"]
    assert oom["reward"] == 0.0, oom
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["graded"] == 2, summary
    assert summary["mean_reward"] == pytest.approx(0.5), summary
    assert summary["pass_at_k"]["1"] == pytest.approx(0.5), summary


# ------------------------------------------------------------------ the second step's tree

_STEP_TWO_HOSTILE = r"""W="$HARNESS_WORKSPACE"
ln -s x "$W/$(printf 'l\377')"
mkfifo "$W/$(printf 'p\376')"
python3 - "$W" <<'P'
import os, sys
os.chdir(sys.argv[1])
fd = os.open(".", os.O_RDONLY)
for _ in range(2100):
    os.mkdir("d", dir_fd=fd)
    new = os.open("d", os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    fd = new
for i in range(1500):
    os.makedirs(os.path.join(sys.argv[1], "wide", str(i)))
P
echo wrong > "$W/answer.txt"
"""


def test_a_hostile_tree_left_by_a_second_step_is_graded_not_retried(
    any_cli: Cli, backend: str, tmp_path: Path
) -> None:
    """Attack: step one is answered right; step two's agent leaves a non-UTF-8 link and
    FIFO, a 2,100-deep dir and 1,500 dirs side by side, and answers wrong.

    From outside: one ``completed`` record on attempt 1 (never retried into a luckier
    grade), step rewards 1 then 0, the caps in its events.
    """
    name = unique("step-two")
    task = tmp_path / "tasks" / name
    (task / "steps").mkdir(parents=True)
    (task / "task.toml").write_text(
        f'[task]\nname = "{name}"\n\n[agent]\ntimeout_sec = 60\n\n[verifier]\ntimeout_sec = 30\n'
        '\n[environment]\ncpus = 1\nmemory_mb = 512\n\n[[steps]]\nname = "one"\n\n'
        '[[steps]]\nname = "two"\n'
    )
    (task / "instruction.md").write_text("Two steps.\n")
    test_sh = (
        '#!/bin/bash\nR="$HARNESS_VERIFIER_DIR/reward.txt"\n'
        'grep -qx right "$HARNESS_WORKSPACE/answer.txt" && echo 1 > "$R" || echo 0 > "$R"\n'
    )
    for step, script in (
        ("one", 'echo right > "$HARNESS_WORKSPACE/answer.txt"\n'),
        ("two", _STEP_TWO_HOSTILE),
    ):
        (task / "steps" / step / "tests").mkdir(parents=True)
        (task / "steps" / step / "instruction.md").write_text("#!/bin/bash\n" + script)
        (task / "steps" / step / "tests" / "test.sh").write_text(test_sh)
        (task / "steps" / step / "tests" / "test.sh").chmod(0o755)
    result = any_cli.run([task], timeout=400)
    assert result.run_dir is not None, str(result)
    record = result.by_task(name)
    assert record["status"] == "completed" and record["attempt"] == 1, record
    assert not record["previous_attempts"], record
    assert [step.get("reward") for step in record["steps"]] == [1.0, 0.0], record["steps"]
    kinds = {e.get("kind") for e in record["events"] if e.get("type") == "evidence"}
    assert "limit" in kinds, record["events"]


# ------------------------------------------------------------------ a separate verifier's inputs

_ARTIFACTS_HOSTILE = r"""A="$HARNESS_ARTIFACTS_DIR"
mkdir -p /app/out
ln -s /etc/shadow "/app/out/$(printf 'l\377')"
mkfifo "$A/$(printf 'p\376')"
python3 - "$A" /app/out <<'P'
import os, sys
for top in sys.argv[1:]:
    fd = os.open(top, os.O_RDONLY)
    for _ in range(2100):
        os.mkdir("d", dir_fd=fd)
        new = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = new
    for i in range(1500):
        os.makedirs(os.path.join(top, "wide", str(i)))
P
echo wrong > /app/out/answer.txt
"""


@pytest.mark.docker
def test_a_separate_verifier_copies_a_hostile_artifacts_tree_and_grades(
    cli: Cli, tmp_path: Path
) -> None:
    """Attack: ``/logs/artifacts`` and a declared artifact dir holding a 2,100-deep and a
    1,500-wide tree, a FIFO and a non-UTF-8 link to ``/etc/shadow``, copied into a
    separate verifier's sandbox. From outside: one ``completed`` record on attempt 1 with
    the honest reward 0 (the verifier saw ``answer.txt``), nothing of the host's
    ``/etc/shadow`` in the run dir.
    """
    name = unique("separate-tree")
    task = write_task(
        tmp_path / "tasks",
        name,
        attack=_ARTIFACTS_HOSTILE,
        test_sh='R="$HARNESS_VERIFIER_DIR/reward.txt"\n'
        'grep -qx right /app/out/answer.txt && echo 1 > "$R" || echo 0 > "$R"\n'
        "test -f /app/out/answer.txt && echo SAW-ANSWER\n",
        dockerfile=f"FROM {BASE_IMAGE}\nWORKDIR /app\n",
        agent_timeout=60,
    )
    toml = (task / "task.toml").read_text()
    toml = toml.replace("[verifier]\n", '[verifier]\nenvironment_mode = "separate"\n')
    (task / "task.toml").write_text('artifacts = ["/app/out"]\n' + toml)
    (task / "tests" / "Dockerfile").write_text(
        f"FROM {BASE_IMAGE}\nWORKDIR /app\nCOPY test.sh /tests/test.sh\n"
        "RUN chmod 755 /tests/test.sh\n"
    )
    result = cli.run([task], timeout=400)
    assert result.run_dir is not None, str(result)
    record = result.by_task(name)
    assert (record["status"], record["reward"], record["attempt"]) == ("completed", 0.0, 1)
    assert not record["previous_attempts"], record
    stdout = (result.evidence(record) / "verifier" / "test-stdout.txt").read_text()
    assert "SAW-ANSWER" in stdout, stdout
    shadow = Path("/etc/shadow").read_bytes().split(b"\n")[0]
    assert not files_containing(result.run_dir, shadow)


@pytest.mark.root
def test_a_nested_default_template_never_reads_the_inner_variable(tmp_path: Path) -> None:
    """Attack: ``${UNLISTED:-${SECRET}}`` and ``$SECRET`` inside a default, in the
    environment's and the verifier's env tables, with ``SECRET`` set on the host and not
    allowed. From outside: the agent and the verifier print the literal default; the
    secret is in no file of the run.
    """
    secret = f"RT-NESTED-{secrets.token_hex(12)}"
    name = unique("nested")
    task = write_task(
        tmp_path / "tasks",
        name,
        attack='echo "A=$A B=$B"\n',
        test_sh='echo "V=$V"\necho 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n',
    )
    toml = (task / "task.toml").read_text()
    toml = toml.replace(
        "[verifier]\n", '[verifier]\nenv = { V = "${RT_UNLISTED:-${RT_NESTED_SECRET}}" }\n'
    ).replace(
        "[environment]\n",
        '[environment]\nenv = { A = "${RT_UNLISTED:-${RT_NESTED_SECRET}}", '
        'B = "x${RT_UNLISTED:-$RT_NESTED_SECRET}y" }\n',
    )
    (task / "task.toml").write_text(toml)
    cli = Cli(tmp_path, sandbox="local")
    result = cli.run([task], env={"RT_NESTED_SECRET": secret}, timeout=300)
    assert result.code == 0 and result.run_dir is not None, str(result)
    record = result.by_task(name)
    log = (result.evidence(record) / "agent.log").read_text()
    assert "A=${RT_NESTED_SECRET} B=x$RT_NESTED_SECRETy" in log, log
    stdout = (result.evidence(record) / "verifier" / "test-stdout.txt").read_text()
    assert "V=${RT_NESTED_SECRET}" in stdout, stdout
    assert not files_containing(result.run_dir, secret)
