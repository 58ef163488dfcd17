"""Where the engine keeps a container's own dir (``sandbox/docker/enginefiles.py``)."""

from __future__ import annotations

from pathlib import Path

from sandbox.docker.enginefiles import container_dir


def test_the_dir_is_found_beside_the_overlay2_layers() -> None:
    attrs = {
        "Id": "abc123",
        "GraphDriver": {
            "Name": "overlay2",
            "Data": {"UpperDir": "/srv/docker/overlay2/f00/diff", "LowerDir": "/x/diff"},
        },
    }
    assert container_dir(attrs) == Path("/srv/docker/containers/abc123")


def test_another_driver_or_no_id_gives_none() -> None:
    assert container_dir({"Id": "a", "GraphDriver": {"Name": "vfs", "Data": {}}}) is None
    overlay = {"Name": "overlay2", "Data": {"UpperDir": "/d/overlay2/f/diff"}}
    assert container_dir({"GraphDriver": overlay}) is None
