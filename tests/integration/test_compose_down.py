"""A compose project's objects go at its end even where compose cannot read it again.

``ComposeProject.down`` asks compose to remove the project; compose reads the project's
files again, so one it now rejects (here: the task's file turned invalid after ``up``,
as a merged project compose rejected at ``up`` is rejected again) fails. Then the
containers, networks and volumes are removed by compose's project label through the
engine. A real engine and real compose.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.compose_tasks import BASE_IMAGE, guarded_project
from support.docker import docker_client, require_image

pytestmark = pytest.mark.docker

COMPOSE = (
    "services:\n"
    "  kv:\n"
    f"    image: {BASE_IMAGE}\n"
    "    command: [sleep, infinity]\n"
    "    volumes: [data:/data]\n"
    "volumes:\n"
    "  data: {}\n"
)


def _left(client: object, project: str) -> dict[str, list[str]]:
    label = {"label": f"com.docker.compose.project={project}"}
    engine = client  # a docker SDK client
    return {
        "containers": [c.name for c in engine.containers.list(all=True, filters=label)],  # type: ignore[attr-defined]
        "networks": [n.name for n in engine.networks.list(filters=label)],  # type: ignore[attr-defined]
        "volumes": [v.name for v in engine.volumes.list(filters=label)],  # type: ignore[attr-defined]
    }


def test_a_project_compose_cannot_read_again_is_removed_by_its_label(tmp_path: Path) -> None:
    client = docker_client()
    require_image(client, BASE_IMAGE)
    compose_file = tmp_path / "docker-compose.yaml"
    compose_file.write_text(COMPOSE)
    project = guarded_project(compose_file, client, "down")
    try:
        project.up()
        made = _left(client, project.name)
        assert made["containers"] and made["networks"] and made["volumes"], made
        compose_file.write_text("services: [this is not a compose file\n")
    finally:
        project.down()  # compose fails to read it; the label removes what it made
    assert _left(client, project.name) == {"containers": [], "networks": [], "volumes": []}
