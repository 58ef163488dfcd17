"""Capacity and platform per task, before anything is built: ``tasks check`` and ``run``.

Against the real engine: a task asking more CPUs than it has, a GPU task (this engine has
no GPU driver: its real "could not select device driver" answer to a probe), a Windows
task, and a fine one. ``tasks check`` names the engine and its capacity, and each problem;
with no engine it says it kept to the static checks. ``run`` refuses up front naming every
such task, and ``--skip-invalid`` runs the fine one, the GPU task's image never built.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
from support.docker import docker_client

pytestmark = pytest.mark.docker

#: More CPUs than any engine running this suite has.
CPUS = 4096


def _task_set(e2e: Any, root: Path) -> dict[str, Path]:
    tag = secrets.token_hex(4)
    tasks = {
        "big": e2e.make_task(root, "big", toml=f"[environment]\ncpus = {CPUS}\n"),
        "gpu": e2e.make_task(root, f"gpu-{tag}", toml="[environment]\ngpus = 1\n"),
        "win": e2e.make_task(root, "win", toml='[environment]\nos = "windows"\n', test_sh=None),
        "fine": e2e.make_task(root, "fine", toml="[environment]\ncpus = 1\n"),
    }
    (tasks["win"] / "tests").mkdir(exist_ok=True)
    (tasks["win"] / "tests" / "test.ps1").write_text("exit 0\n")
    # Built only if the GPU task got as far as its image: it must not.
    (tasks["gpu"] / "environment").mkdir()
    (tasks["gpu"] / "environment" / "Dockerfile").write_text(
        f"FROM harness/base:bookworm\nRUN echo {tag} > /built\n"
    )
    return tasks


def test_tasks_check_names_the_engine_its_capacity_and_each_task_it_cannot_run(
    e2e: Any, tmp_path: Path
) -> None:
    tasks = _task_set(e2e, tmp_path / "set")
    result = e2e.run("tasks", "check", tmp_path / "set")
    assert result.code == 2, result
    info = docker_client().info()
    assert (
        f"checked against the docker engine at unix:///var/run/docker.sock: {info['NCPU']} CPUs"
        in result.stdout
    ), result
    errors = result.error_lines()
    assert f"error: {tasks['big'] / 'task.toml'}: [environment].cpus = {CPUS} is more than " \
        f"the docker engine's {info['NCPU']} CPUs; lower it, run on a bigger machine, or leave " \
        "the task out with --skip-invalid" in errors, result  # fmt: skip
    gpu = [line for line in errors if line.startswith(f"error: {tasks['gpu'] / 'task.toml'}")]
    assert len(gpu) == 1 and "[environment].gpus = 1, but the Docker engine has no GPU" in gpu[0]
    assert 'could not select device driver "" with capabilities: [[gpu]]' in gpu[0], result
    win = [line for line in errors if line.startswith(f"error: {tasks['win'] / 'task.toml'}")]
    assert win == [
        f'error: {tasks["win"] / "task.toml"}: environment.os: "windows" is not supported: '
        "the harness runs Linux containers only (Harbor runs Windows containers on a Windows "
        "Docker engine); run this task there"
    ], result
    assert "test.sh" not in result.stderr, result
    assert errors[-1] == "3 problem(s); 1 valid task(s)", result

    # No engine: the static checks only, and said so (the CPU and GPU tasks pass them).
    away = e2e.run(
        "tasks", "check", tmp_path / "set", env={"DOCKER_HOST": f"unix://{tmp_path}/none.sock"}
    )
    assert away.code == 2, away
    said = "static checks only: the tasks' CPUs, memory, GPUs and networks were not checked: "
    said += "docker: "
    assert f"{said}cannot reach the Docker engine at unix://{tmp_path}/none.sock" in away.stdout
    assert away.error_lines()[-1] == "1 problem(s); 3 valid task(s)", away
    offline = e2e.run("tasks", "check", tasks["big"], tasks["fine"], "--sandbox", "none")
    assert offline.code == 0, offline
    assert "static checks only" in offline.stdout and "2 task(s) OK" in offline.stdout


def test_run_refuses_them_up_front_and_skip_invalid_runs_the_rest_building_nothing(
    e2e: Any, tmp_path: Path
) -> None:
    tasks = _task_set(e2e, tmp_path / "set")
    common = ("--sandbox", "docker", "--agent", "oracle", "--display", "none")
    # (A task that fails the static checks, like the Windows one, is refused before these.)
    loadable = (tasks["big"], tasks["gpu"], tasks["fine"])
    refused = e2e.run("run", *loadable, *common, "-o", tmp_path / "a", timeout=180)
    assert refused.code == 2, refused
    assert [line.split(": [environment]")[0] for line in refused.error_lines()] == [
        f"error: {tasks['big'] / 'task.toml'}",
        f"error: {tasks['gpu'] / 'task.toml'}",
    ], refused
    e2e.assert_nothing_created(tmp_path / "a")

    out = tmp_path / "b"
    result = e2e.run("run", tmp_path / "set", *common, "--skip-invalid", "-o", out, timeout=300)
    assert result.code == 0, result
    skipped = [line for line in result.error_lines() if "skipped invalid task:" in line]
    assert len(skipped) == 3, result
    assert any(f"{tasks['big'] / 'task.toml'}: [environment].cpus = {CPUS}" in s for s in skipped)
    assert any(f"{tasks['gpu'] / 'task.toml'}: [environment].gpus = 1" in s for s in skipped)
    records = e2e.read_run(e2e.only_run_dir(out)).records
    assert [(r["task"]["name"], r["reward"]) for r in records] == [("fine", 1.0)], records
    # The GPU task was refused before its Dockerfile was built.
    assert docker_client().images.list(name=f"harness-task/{tasks['gpu'].name}") == []


def test_without_the_host_filter_public_and_allowlist_tasks_check_ok(
    e2e: Any, tmp_path: Path
) -> None:
    """Where the host filter cannot be had, public and allowlist phases are still enforced.

    The harness's PATH without ``/usr/sbin`` (no ``iptables``), as on a host without the
    package: a SWE-bench-style task (``public`` agent and verifier) and an ``allowlist``
    agent phase both check OK, their phases filtered in each trial's own namespace (the
    allowlist's proxy relayed into it: tests/security/test_allowlist_without_root.py).
    """
    path = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
    swe = '[agent]\nnetwork_mode = "public"\n[verifier]\nnetwork_mode = "public"\n'
    task = e2e.make_task(tmp_path / "set", "swe", toml=swe)
    result = e2e.run("tasks", "check", task, env=path)
    assert result.code == 0, result
    listed = '[agent]\nnetwork_mode = "allowlist"\nallowed_hosts = ["example.com"]\n'
    task = e2e.make_task(tmp_path / "set2", "listed", toml=listed)
    result = e2e.run("tasks", "check", task, env=path)
    assert result.code == 0, result
