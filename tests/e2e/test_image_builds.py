"""Task image builds on the real engine, watched from outside: ``--force-build`` over a
``docker_image`` no registry answers for, ``--base-alias`` on a compose sidecar's
Dockerfile and ``image:`` (an alias that matches nothing is warned once), the build's own
phase and log (``timings.build``, ``build.log`` without ANSI, the display's lines), and a
failed legacy build whose layers carry the harness's labels until ``images prune`` removes
them (``docker images -a`` before and after)."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pytest
from support.cli import harness
from support.docker import docker_client, require_image

from sandbox.docker.images import ImageBuildError, ImageRequest, ImageResolver
from sandbox.docker.labels import IMAGE_HASH, MANAGED

BASE = "harness/base:bookworm"
#: Port 9 (discard) on loopback: nothing listens, so a pull is refused at once.
UNREACHABLE = "127.0.0.1:9/nowhere/app:1"
# `images prune --untagged` would take other workers' untagged layers: alone (serial).
pytestmark = [pytest.mark.docker, pytest.mark.serial]


@pytest.fixture(autouse=True)
def _engine() -> None:
    require_image(docker_client())


def _task(root: Path, name: str, *, dockerfile: str, toml_env: str = "") -> Path:
    task = root / name
    (task / "tests").mkdir(parents=True)
    (task / "environment").mkdir()
    (task / "task.toml").write_text(
        f'[task]\nname = "buildtest/{name}"\n[agent]\ntimeout_sec = 60\n'
        f"[verifier]\ntimeout_sec = 60\n[environment]\n{toml_env}"
    )
    (task / "instruction.md").write_text("nothing to do\n")
    (task / "tests" / "test.sh").write_text('echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n')
    (task / "environment" / "Dockerfile").write_text(dockerfile)
    return task


def _records(out: Path) -> list[dict[str, Any]]:
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    lines = (run_dir / "trials.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _run_dir(out: Path) -> Path:
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return run_dir


def _harness_on_a_tty(*args: str | Path, timeout: float = 600) -> tuple[int, str]:
    """``python -m harness ARGS`` with a pseudo-terminal as its stdout and stderr."""
    import os
    import pty
    import select
    import subprocess
    import sys
    import time

    from support.cli import CLI_ENV, REPO

    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", *map(str, args)],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        cwd=REPO,
        env={**os.environ, **CLI_ENV},
    )
    os.close(follower)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 1)
            if ready:
                try:
                    data = os.read(leader, 65536)
                except OSError:  # the last writer closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(leader)
    return code, b"".join(chunks).decode("utf-8", "replace")


def _all_images() -> dict[str, dict[str, Any]]:
    """Every image of the engine, intermediate layers included (``docker images -a``)."""
    return {str(i["Id"]): i for i in docker_client().api.images(all=True)}


def test_force_build_over_an_unreachable_docker_image_is_recorded_and_watchable(
    tmp_path: Path,
) -> None:
    marker = secrets.token_hex(8)  # a context no earlier run built: this run builds it
    _task(
        tmp_path / "tasks",
        "forced",
        dockerfile=(
            "# syntax=docker/dockerfile:1\n"  # a frontend image no registry here serves
            f"FROM {BASE}\n"
            f"RUN printf '\\033[31mcoloured {marker}\\033[0m\\n' && echo {marker} > /marker\n"
        ),
        toml_env=f'docker_image = "{UNREACHABLE}"\n',
    )
    check = harness("tasks", "check", tmp_path / "tasks")
    assert check.returncode == 0, check.stderr
    assert "docker_image and environment/Dockerfile: the image is pulled" in check.stderr
    assert "--force-build builds it" in check.stderr
    out = tmp_path / "o"
    # On a terminal, as a person watching it: the default display is the live view.
    code, shown = _harness_on_a_tty(
        "run", tmp_path / "tasks", "--sandbox", "docker", "--agent", "nop", "--force-build",
        "--rollouts", "2", "--concurrency", "1", "-o", out,
    )  # fmt: skip
    assert code == 0, shown
    first, second = sorted(_records(out), key=lambda r: r["rollout"])
    assert [first["status"], second["status"]] == ["completed", "completed"]
    # The Dockerfile was built (the unreachable docker_image never pulled), once per run.
    assert first["sandbox"]["image"].startswith("harness-task/buildtest-forced:")
    assert first["sandbox"]["image_build"]["source"] == "built"
    assert first["sandbox"]["image_build"]["builder"] in ("buildkit", "legacy")
    assert second["sandbox"]["image_build"]["source"] == "cached"
    image_id = docker_client().images.get(first["sandbox"]["image"]).id
    assert first["sandbox"]["image_build"]["id"] == second["sandbox"]["image_build"]["id"]
    assert first["sandbox"]["image_build"]["id"] == image_id
    # The build is its own phase, apart from the container's start.
    assert {"build", "reset"} <= set(first["timings"])
    assert first["sandbox"]["image_build"]["build_seconds"] <= first["timings"]["build"]
    # The build's whole log, ANSI stripped, in the building trial's evidence only.
    log = (_run_dir(out) / first["evidence_dir"] / "build.log").read_text()
    assert f"coloured {marker}" in log and "\x1b" not in log
    assert log.splitlines()[0].startswith(("builder: BuildKit", "BuildKit unavailable"))
    if first["sandbox"]["image_build"]["builder"] == "buildkit":
        assert "# syntax=docker/dockerfile:1 left out" in log
    assert not (_run_dir(out) / second["evidence_dir"] / "build.log").exists()
    # The display said what was going on: the build, its steps, how long it took.
    assert "building image of buildtest/forced" in shown
    assert f"RUN printf '\\033[31mcoloured {marker}" in shown  # a step of the build
    assert "built image of buildtest/forced in" in shown
    # The same task without --force-build tries the docker_image, and says it cannot.
    again = harness(
        "run", tmp_path / "tasks", "--sandbox", "docker", "--agent", "nop",
        "--display", "none", "-o", tmp_path / "o2", timeout=300,
    )  # fmt: skip
    assert again.returncode == 1
    (record,) = _records(tmp_path / "o2")
    assert record["status"] == "environment_error"
    assert UNREACHABLE in record["errors"][0]["message"]
    assert record["errors"][0]["retryable"] is False
    # images list shows the whole tag.
    listed = harness("images", "list", "--plain")
    assert listed.returncode == 0, listed.stderr
    assert first["sandbox"]["image"] in listed.stdout.split()
    narrow = harness("images", "list", env={"COLUMNS": "80"})
    assert narrow.returncode == 0 and "…" not in narrow.stdout  # folded, never cut


COMPOSE = """\
services:
  built:
    build:
      context: ./built
    command: ["sleep", "infinity"]
  named:
    image: example.invalid/sidecar:7
    command: ["sleep", "infinity"]
"""


def test_base_alias_reaches_compose_sidecars_and_an_unused_alias_is_warned_once(
    tmp_path: Path,
) -> None:
    marker = secrets.token_hex(8)
    task = _task(tmp_path / "tasks", "sidecars", dockerfile="FROM ubuntu:24.04\n")
    (task / "environment" / "built").mkdir()
    (task / "environment" / "built" / "Dockerfile").write_text(
        f"ARG BASE=ubuntu:24.04\nFROM ${{BASE}} AS base\nRUN echo {marker} > /marker\nFROM base\n"
    )
    (task / "environment" / "docker-compose.yaml").write_text(COMPOSE)
    out = tmp_path / "o"
    result = harness(
        "run", tmp_path / "tasks", "--sandbox", "docker", "--agent", "nop",
        "--display", "plain", "-o", out,
        "--base-alias", f"ubuntu:24.04={BASE}",
        "--base-alias", f"example.invalid/sidecar:7={BASE}",
        "--base-alias", f"never-named/anything:1={BASE}",
        timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    (record,) = _records(out)
    assert record["status"] == "completed", record["errors"]
    sidecars = record["sandbox"]["sidecar_images"]
    assert sidecars["built"]["source"] == "built"
    assert sidecars["named"]["source"] == "cached"  # the alias target is local: no pull
    assert sorted(record["sandbox"]["compose"]["sidecars"]) == ["built", "named"]
    # The sidecar's image was built from the aliased base, and carries the labels.
    built = docker_client().images.get(sidecars["built"]["id"])
    assert built.labels.get(MANAGED) == "1"
    assert "sidecar" in " ".join(built.tags)
    # The sidecar build's log is in the trial's evidence with the main image's.
    log = (_run_dir(out) / record["evidence_dir"] / "build.log").read_text()
    assert "=== sidecar built ===" in log
    shown = result.stdout + result.stderr
    warnings = [line for line in shown.splitlines() if "matched no image" in line]
    assert len(warnings) == 1, shown
    assert "never-named/anything:1" in warnings[0]
    assert "ubuntu:24.04" not in warnings[0] and "example.invalid" not in warnings[0]


def test_a_failed_legacy_build_leaves_only_labelled_layers_that_prune_removes(
    tmp_path: Path,
) -> None:
    marker = secrets.token_hex(8)
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(
        f"FROM {BASE}\nRUN echo {marker} > /one\nRUN echo two > /two\n"
        "RUN printf '\\033[1mbold failure\\033[0m\\n'; exit 3\n"
    )
    before = _all_images()
    request = ImageRequest(f"buildtest/broken-{marker}", dockerfile=dockerfile)
    legacy = ImageResolver(docker_client(), builder_choice="legacy")
    with pytest.raises(ImageBuildError) as failed:
        legacy.resolve(request)
    tag_hash = legacy.tag_for(request).rsplit(":", 1)[1]
    tail = failed.value.log_tail
    assert "bold failure" in tail and "\x1b" not in tail
    assert "DEPRECATED" not in tail
    assert failed.value.build_log is not None and "builder: legacy" in failed.value.build_log
    after = _all_images()
    ours = {i for i, im in after.items() if (im.get("Labels") or {}).get(IMAGE_HASH) == tag_hash}
    new = set(after) - set(before)
    # The build left layers (the two RUNs that succeeded), every one labelled...
    assert len(ours) >= 2 and ours <= new
    # ... and no unlabelled layer of its own: none of the new images descends from ours
    # without our label.
    for image_id in new - ours:
        assert str(after[image_id].get("ParentId") or "") not in ours
    # BuildKit fails the same build without leaving any image.
    if _buildkit():
        with pytest.raises(ImageBuildError):
            ImageResolver(docker_client()).resolve(request)
        assert (
            not {
                i
                for i, image in _all_images().items()
                if (image.get("Labels") or {}).get(IMAGE_HASH) == tag_hash
            }
            - ours
        )
    listed = harness("images", "list", "--plain")
    assert any(line.startswith("<untagged>") for line in listed.stdout.splitlines())
    pruned = harness("images", "prune", "--untagged")
    assert pruned.returncode == 0, pruned.stderr
    assert not ours & set(_all_images())


def _buildkit() -> bool:
    from sandbox.docker.builder import builder

    return builder().buildkit


def test_images_build_forces_the_build_and_warns_of_an_unused_alias(tmp_path: Path) -> None:
    marker = secrets.token_hex(8)
    _task(
        tmp_path / "tasks",
        "cli",
        dockerfile=f"FROM debian:bookworm\nRUN echo {marker} > /marker\n",
        toml_env=f'docker_image = "{UNREACHABLE}"\n',
    )
    args = ("images", "build", tmp_path / "tasks", "--base-alias", f"debian:bookworm={BASE}")
    built = harness(*args, "--force-build", "--base-alias", f"nothing-here:1={BASE}")
    assert built.returncode == 0, built.stderr
    assert "buildtest/cli: harness-task/buildtest-cli:" in built.stdout
    assert built.stdout.rstrip().endswith("(built)")
    assert "building image of buildtest/cli" in built.stderr
    (warning,) = [line for line in built.stderr.splitlines() if "matched no image" in line]
    assert "nothing-here:1" in warning and "debian:bookworm" not in warning
    # Built once: the next build of the same context reuses the tag.
    again = harness(*args, "--force-build")
    assert again.returncode == 0 and again.stdout.rstrip().endswith("(cached)")
    assert "matched no image" not in again.stderr
    # Without --force-build the unreachable docker_image is what the task names.
    pulled = harness(*args)
    assert pulled.returncode == 1 and UNREACHABLE in pulled.stderr
