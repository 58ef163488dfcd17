"""Attack: a task's ``[[verifier.collect]]`` hooks and sidecar artifacts (schema 1.4).

docs/security.md, "Collect hooks and sidecar artifacts". A hook is task code run in a
compose sidecar after the agent, and a sidecar artifact is whatever that sidecar's files
are: every field is hostile input, and so is every file a sidecar gives. Judged from
outside, through the real CLI on docker (runc and gVisor):

- hostile fields (a user that is an option or a shell line, a service that is a path, one
  the compose file lacks or a task without a compose file names, a NUL in the command, a
  negative time) are refused by ``harness tasks check`` and ``harness run`` before
  anything runs, each field named;
- a sidecar artifact that is a link, holds links (to the container's ``/``, to a host
  path), a FIFO and a file past the evidence cap comes out as its regular files only: no
  link in the run dir, no byte of the host canary anywhere, the trial graded on attempt 1;
- a hook that tries to write a host path writes nothing there (it runs in the sidecar),
  one that never ends is left behind at its time (the trial completes, the record says
  ``timed_out``), and one whose user the sidecar lacks fails alone.
"""

from __future__ import annotations

import secrets
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import BASE_IMAGE, every_file, files_containing, unique, write_task
from support.cli import harness

#: The sidecar makes its hostile tree at start, then idles.
SIDECAR_TREE = (
    "mkdir -p /out/d && echo sidecar-real > /out/d/real.txt && ln -s / /out/d/root"
    " && ln -s /etc/passwd /out/passwd-link && ln -s {canary} /out/canary-link"
    " && ln /out/d/real.txt /out/hard && mkfifo /out/fifo"
    " && mkdir /big && dd if=/dev/zero of=/big/file bs=1M count=0 seek=1024 2>/dev/null"
    " && exec sleep infinity"
)


#: A hook counting the processes still running ``sleep 100000`` (``[0]``: not itself).
COUNT_LEFT = """
[[verifier.collect]]
service = "side"
command = '''for f in /proc/[0-9]*/cmdline; do tr "\\0" " " < "$f"; echo; done \
| grep -c "sleep 10000[0]" > /tmp/left; true'''
"""


def _compose(tree: str) -> str:
    return textwrap.dedent(
        f"""\
        services:
          main:
            build:
              context: .
          side:
            image: {BASE_IMAGE}
            command: ["sh", "-c", "{tree}"]
        """
    )


def _task(
    parent: Path, name: str, toml_extra: str, *, compose: str | None, artifacts: str = ""
) -> Path:
    task = write_task(
        parent,
        name,
        attack="true\n",
        dockerfile=f"FROM {BASE_IMAGE}\nWORKDIR /app\n",
        verifier_timeout=60,
    )
    toml = task / "task.toml"
    toml.write_text(artifacts + toml.read_text() + toml_extra)
    if compose is not None:
        (task / "environment" / "docker-compose.yaml").write_text(compose)
    return task


HOSTILE_FIELDS = {
    "user-option": ('service = "side"\ncommand = "true"\nuser = "--privileged"\n', "user"),
    "user-shell": ('service = "side"\ncommand = "true"\nuser = "root; id"\n', "user"),
    "service-path": ('service = "../../etc"\ncommand = "true"\n', "service"),
    "service-missing": ('service = "nosuch"\ncommand = "true"\n', "nosuch"),
    "command-nul": ('service = "side"\ncommand = "true\\u0000x"\n', "NUL"),
    "timeout-negative": ('service = "side"\ncommand = "true"\ntimeout_sec = -1\n', "timeout"),
}


@pytest.mark.docker
def test_hostile_collect_fields_are_refused_before_anything_runs(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    compose = _compose("exec sleep infinity")
    for variant, (hook, _named) in HOSTILE_FIELDS.items():
        _task(tasks, variant, f"\n[[verifier.collect]]\n{hook}", compose=compose)
    _task(
        tasks,
        "no-compose",
        '\n[[verifier.collect]]\nservice = "db"\ncommand = "true"\n',
        compose=None,
    )
    _task(
        tasks,
        "artifact-service-option",
        "",
        compose=compose,
        artifacts='artifacts = [{ source = "/x", service = "-v" }]\n',
    )
    check = harness("tasks", "check", str(tasks))
    assert check.returncode == 2, check
    out = check.stdout + check.stderr
    for variant, (_hook, named) in HOSTILE_FIELDS.items():
        lines = [line for line in out.splitlines() if f"/{variant}" in line]
        assert lines and any(named in line for line in lines), (variant, out)
    assert "no readable environment/docker-compose.yaml" in out, out
    assert "artifacts.0.service" in out, out
    run = harness("run", str(tasks), "--sandbox", "docker", "--agent", "nop", "-o", str(tmp_path))
    assert run.returncode == 2, run
    assert not list(tmp_path.glob("*/trials.jsonl")), "a run dir with trials was made"


@pytest.mark.docker
def test_a_sidecar_artifact_keeps_no_link_and_reads_no_host_file(cli: Any, tmp_path: Path) -> None:
    canary = tmp_path / f"canary-{secrets.token_hex(4)}"
    secret = f"HOST-CANARY-{secrets.token_hex(16)}"
    canary.write_text(secret)
    canary.chmod(0o600)
    name = unique("collect-tree")
    task = _task(
        tmp_path / "tasks",
        name,
        '\n[[verifier.collect]]\nservice = "side"\ncommand = "cat /out/canary-link; ls -la /out"\n',
        compose=_compose(SIDECAR_TREE.format(canary=canary)),
        artifacts=(
            'artifacts = [{ source = "/out", service = "side" },'
            ' { source = "/out/canary-link", service = "side", destination = "top-link" },'
            ' { source = "/out/passwd-link", service = "side" },'
            ' { source = "/big", service = "side" }]\n'
        ),
    )
    run = cli.run([task], agent="nop", timeout=400)
    assert run.code == 0, run
    record = run.by_task(name)
    assert record["status"] == "completed" and record["attempt"] == 1, record
    assert record["reward"] == 1.0, record
    artifacts = run.evidence(record) / "artifacts"
    assert (artifacts / "out" / "d" / "real.txt").read_text() == "sidecar-real\n"
    links = [p for p in every_file(run.evidence(record)) if p.is_symlink()]
    assert links == [], links
    assert not (artifacts / "big" / "file").exists()
    assert not (artifacts / "out" / "fifo").exists()
    assert not (artifacts / "top-link").exists() and not (artifacts / "passwd-link").exists()
    assert files_containing(run.run_dir, secret) == []
    assert canary.read_text() == secret
    manifest = (artifacts / "manifest.json").read_text()
    assert '"symlink"' in manifest and '"too_large"' in manifest, manifest


@pytest.mark.docker
def test_a_hook_writes_no_host_path_and_its_time_is_bounded(cli: Any, tmp_path: Path) -> None:
    marker = tmp_path / f"host-marker-{secrets.token_hex(4)}"
    name = unique("collect-hooks")
    hooks = (
        '\n[[verifier.collect]]\nservice = "side"\n'
        f'command = "touch {marker}; echo $(touch {marker}x)"\n'
        '\n[[verifier.collect]]\nservice = "side"\n'
        "command = 'sleep 100000 & sleep 100000'\ntimeout_sec = 2\n"
        '\n[[verifier.collect]]\nservice = "side"\ncommand = "true"\nuser = "no-such-user"\n'
        '\n[[verifier.collect]]\nservice = "side"\ncommand = "id -u > /tmp/who"\nuser = "65534"\n'
        # The timed-out hook's processes (its child too) are gone: none left to count.
        + COUNT_LEFT
    )
    task = _task(
        tmp_path / "tasks",
        name,
        hooks,
        compose=_compose("exec sleep infinity"),
        artifacts=(
            'artifacts = [{ source = "/tmp/who", service = "side" },'
            ' { source = "/tmp/left", service = "side" }]\n'
        ),
    )
    run = cli.run([task], agent="nop", timeout=400)
    assert run.code == 0, run
    record = run.by_task(name)
    assert record["status"] == "completed" and record["attempt"] == 1, record
    assert record["reward"] == 1.0
    assert not marker.exists() and not Path(f"{marker}x").exists()
    hooks_seen = [e for e in record["events"] if e["type"] == "collect_hook"]
    assert [h["index"] for h in hooks_seen] == [0, 1, 2, 3, 4], hooks_seen
    assert hooks_seen[1]["timed_out"] is True and hooks_seen[1]["status"] == "failed"
    assert hooks_seen[2]["status"] == "failed", hooks_seen[2]
    assert hooks_seen[3]["status"] == "ok", hooks_seen[3]
    left = run.evidence(record) / "artifacts" / "left"
    assert left.read_text().strip() == "0", left.read_text()
    who = run.evidence(record) / "artifacts" / "who"
    assert who.read_text().strip() == "65534"
