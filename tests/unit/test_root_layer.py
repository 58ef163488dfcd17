"""The writable root's layer dir and its leftovers (sandbox/docker/rootlayer.py, storage.py).

Where the layer cannot be moved onto a trial filesystem the answer is a reason, and the
run says once that its roots are capped softly; a bind of a trial's filesystem left over
the engine's layer dir by a killed run is found from the loop device's image and
unmounted, before the trial filesystems.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from pathlib import Path

import pytest

from sandbox.docker.rootlayer import layer_paths, root_layer_problem, warn_soft_root
from sandbox.storage import TrialStorage, binds_of, release_leftovers


def test_layer_paths_come_from_overlay2_only() -> None:
    attrs = {
        "GraphDriver": {
            "Name": "overlay2",
            "Data": {"UpperDir": "/var/lib/docker/overlay2/abc/diff", "LowerDir": "/l1:/l2"},
        }
    }
    paths = layer_paths(attrs)
    assert paths is not None
    assert paths.layer == Path("/var/lib/docker/overlay2/abc")
    assert paths.lowers == (Path("/l1"), Path("/l2"))
    assert layer_paths({"GraphDriver": {"Name": "vfs", "Data": {}}}) is None
    assert layer_paths({}) is None


def test_the_layer_is_moved_only_where_it_can_be() -> None:
    assert root_layer_problem(host_storage=True, driver="overlay2") is None
    assert "not root" in str(root_layer_problem(host_storage=False, driver=None))
    assert "btrfs" in str(root_layer_problem(host_storage=True, driver="btrfs"))


def test_the_soft_cap_is_said_once_per_run(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert warn_soft_root("run-once-a", "why", "refused")
        assert not warn_soft_root("run-once-a", "why", "refused")
        assert warn_soft_root("run-once-b", "why", "refused")
    lines = [r.getMessage() for r in caplog.records if "softly" in r.getMessage()]
    assert len(lines) == 2 and "storage_mb" in lines[0] and "refused" in lines[0]


@pytest.mark.root
def test_a_leftover_bind_of_a_trial_filesystem_is_released(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    storage = TrialStorage(run_dir, 512)
    storage.create()
    layer = tmp_path / "engine-layer"  # stands for /var/lib/docker/overlay2/<id>
    layer.mkdir()
    (storage.mount_point / "root-layer").mkdir()
    subprocess.run(
        ["mount", "--bind", str(storage.mount_point / "root-layer"), str(layer)], check=True
    )
    try:
        assert binds_of(run_dir) == [layer]
        assert binds_of(tmp_path / "other-run") == []
        released = release_leftovers(run_dir)
        assert released == [str(layer), str(storage.mount_point)]
    finally:
        for point in (layer, storage.mount_point):
            if os.path.ismount(point):
                subprocess.run(["umount", "-l", str(point)], check=False)
    assert not os.path.ismount(layer) and not os.path.ismount(storage.mount_point)
    # Autoclear detaches the loop device once its last mount is gone: the kernel does it
    # a moment after the unmount returns (deferred work), so it is waited for, bounded.
    image = str(storage.image)
    deadline = time.monotonic() + 10
    while True:
        loops = subprocess.run(["losetup", "-j", image], capture_output=True, text=True).stdout
        if not loops.strip() or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert loops.strip() == ""
