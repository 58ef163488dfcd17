"""``--base-alias`` rewriting and build-log cleaning, on the texts themselves."""

from __future__ import annotations

from pathlib import Path

from sandbox.docker.aliases import AliasUse, mark_task_images, normal, rewrite_dockerfile
from sandbox.docker.images import clean_log, label_stages

LOCAL = "harness/base:bookworm"


def test_every_image_a_dockerfile_names_is_aliased_and_stage_names_never() -> None:
    use = AliasUse({"ubuntu:24.04": LOCAL, "python:3.12": LOCAL, "unused:1": LOCAL})
    text = (
        "# syntax=docker/dockerfile:1\n"
        "ARG BASE=ubuntu:24.04\n"
        "FROM ${BASE} AS build\n"
        "RUN --mount=type=bind,from=python:3.12,target=/py true\n"
        "FROM --platform=linux/amd64 docker.io/library/ubuntu:24.04 AS second\n"
        "COPY --from=build /a /b\n"
        "COPY --from=0 /a /b\n"
        "COPY --from=python:3.12 /c /d\n"
        "FROM build\n"
        "FROM other:2\n"
    )
    assert rewrite_dockerfile(text, use) == (
        "# syntax=docker/dockerfile:1\n"
        "ARG BASE=ubuntu:24.04\n"
        f"FROM {LOCAL} AS build\n"
        f"RUN --mount=type=bind,from={LOCAL},target=/py true\n"
        f"FROM --platform=linux/amd64 {LOCAL} AS second\n"
        "COPY --from=build /a /b\n"
        "COPY --from=0 /a /b\n"
        f"COPY --from={LOCAL} /c /d\n"
        "FROM build\n"
        "FROM other:2\n"
    )
    assert use.unused() == [f"unused:1={LOCAL}"]
    assert "unused:1" in (use.warning() or "")


def test_references_compare_as_the_engine_reads_them() -> None:
    assert normal("ubuntu") == "docker.io/library/ubuntu:latest"
    assert normal("docker.io/ubuntu:24.04") == normal("ubuntu:24.04")
    assert normal("library/ubuntu:24.04") == normal("ubuntu:24.04")
    assert normal("127.0.0.1:5000/a/b") == "127.0.0.1:5000/a/b:latest"
    assert normal("ubuntu@sha256:ab") == "docker.io/library/ubuntu@sha256:ab"
    assert normal("quay.io/x/y:1") != normal("x/y:1")


def test_a_task_is_scanned_for_the_images_its_build_would_name(tmp_path: Path) -> None:
    env = tmp_path / "environment"
    (env / "side").mkdir(parents=True)
    (env / "Dockerfile").write_text("FROM main-base:1\n")
    (env / "side" / "Dockerfile").write_text("FROM side-base:1\n")
    compose = env / "docker-compose.yaml"
    compose.write_text(
        "services:\n  main: {image: ignored:1}\n  side: {build: ./side}\n"
        "  named: {image: named:1}\n"
    )
    aliases = {s: LOCAL for s in ("main-base:1", "side-base:1", "named:1", "pulled:1")}
    use = AliasUse(dict(aliases))
    dockerfile = env / "Dockerfile"
    mark_task_images(
        use, image="pulled:1", dockerfile=dockerfile, force_build=False, compose_file=compose
    )
    # Without --force-build the docker_image is used, not the Dockerfile.
    assert use.unused() == [f"main-base:1={LOCAL}"]
    forced = AliasUse(dict(aliases))
    mark_task_images(
        forced, image="pulled:1", dockerfile=env / "Dockerfile", force_build=True, compose_file=None
    )
    assert sorted(forced.unused()) == sorted(
        f"{s}={LOCAL}" for s in ("side-base:1", "named:1", "pulled:1")
    )


def test_build_logs_lose_ansi_and_the_legacy_banner() -> None:
    raw = (
        "DEPRECATED: The legacy builder is deprecated and will be removed in a future release.\n"
        "            Install the buildx component to build images with BuildKit:\n"
        "            https://docs.docker.com/go/buildx/\n"
        "\n"
        "Step 1/2 : FROM base\n"
        "\x1b[31mred\x1b[0m text\n"
        "progress 10%\rprogress 100%\n"
    )
    assert clean_log(raw) == "Step 1/2 : FROM base\nred text\nprogress 100%\n"


def test_every_stage_is_labelled_from_its_first_layer() -> None:
    text = "FROM a AS one\nRUN x\nFROM one"
    assert label_stages(text, {"k": "v"}) == (
        'FROM a AS one\nLABEL "k"="v"\nRUN x\nFROM one\nLABEL "k"="v"\n'
    )
