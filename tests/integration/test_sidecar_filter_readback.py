"""An engine-guarded sidecar's filtered namespace is read back from the engine, not assumed.

``ComposeProject.up`` asks compose to start each sidecar only once its filter exited 0;
the record's ``host_guard.sidecars_filtered`` is then set from what the engine says it
did: each filter exited 0, each sidecar runs in its holder's namespace and started after
its filter finished. A real engine and real compose; the filter is run again after the
sidecar started, so the engine's account no longer matches, and the check says so.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support.compose_tasks import BASE_IMAGE, guarded_project
from support.docker import docker_client, require_image

from sandbox.docker.hostguard import HostGuardUnavailable

pytestmark = pytest.mark.docker

COMPOSE = f"services:\n  kv:\n    image: {BASE_IMAGE}\n    command: [sleep, infinity]\n"


def test_the_engine_is_asked_whether_each_sidecar_runs_behind_its_filter(tmp_path: Path) -> None:
    client = docker_client()
    require_image(client, BASE_IMAGE)
    (tmp_path / "docker-compose.yaml").write_text(COMPOSE)
    project = guarded_project(tmp_path / "docker-compose.yaml", client, "readback")
    try:
        project.up()
        assert project.describe()["host_guard"]["sidecars_filtered"] is True
        project._check_sidecar_filters()  # what up() read back holds still
        # The filter run again, after the sidecar started: the engine's account differs.
        (net,) = project.netns
        filters = client.containers.list(
            all=True,
            filters={
                "label": [
                    f"com.docker.compose.project={project.name}",
                    f"com.docker.compose.service={net.filter}",
                ]
            },
        )
        assert len(filters) == 1
        subprocess.run(["docker", "start", "-a", filters[0].id], check=True, timeout=60)
        with pytest.raises(HostGuardUnavailable, match="started before its filter finished"):
            project._check_sidecar_filters()
    finally:
        project.down()
