"""Trial filesystems made ahead, handed out once, removed in the background (real loop mounts)."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from sandbox.storage import StorageBudget, mounts_under, storage_supported
from sandbox.storage_pool import NoRoomForSpare, PreparedStorage, StoragePool


def _need_root() -> None:
    if not storage_supported():
        pytest.fail("the storage pool needs root and /dev/loop-control")


def test_each_filesystem_serves_one_trial_and_close_leaves_nothing(tmp_path: Path) -> None:
    _need_root()
    budget = StorageBudget(tmp_path)
    pool = StoragePool(tmp_path / "run", budget, spares=1)
    first = pool.take(300)
    (first.storage.mount_point / "left-by-trial-1").write_text("x")
    second = pool.take(300)  # the spare made while the first was in use
    assert second.root != first.root
    assert not (second.storage.mount_point / "left-by-trial-1").exists()
    assert second.storage.usage().limit_bytes <= 300 << 20
    pool.give_back(first)
    pool.give_back(second)
    assert pool.close() == []
    assert mounts_under(tmp_path) == []
    assert list((tmp_path / "run").iterdir()) == []
    assert budget._promised == 0  # every promise given back, spares included
    shutil.rmtree(tmp_path / "run")


def test_a_trial_short_of_room_gets_it_from_spares_of_another_size(tmp_path: Path) -> None:
    _need_root()
    free = shutil.disk_usage(tmp_path).free >> 20
    # Room for two filesystems of 300 MB (each + its 256 MB reserve), not for 300 + 400.
    budget = StorageBudget(tmp_path, margin_mb=free - 1150)
    pool = StoragePool(tmp_path / "run", budget, spares=1)
    taken = pool.take(300)
    spare = pool._ready[300][0].result()  # made ahead, holding its room
    pool.give_back(taken)
    other = pool.take(400)  # must not wait forever on the spare of another size
    assert other.storage.size_mb == 400
    assert spare.storage.mounted is False or not spare.root.exists()
    pool.give_back(other)
    assert pool.close() == []
    assert budget._promised == 0


def _mount_options(point: Path) -> str:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == str(point):
            return line
    raise AssertionError(f"{point} is not mounted")


def test_spares_come_laid_out_for_the_last_grader_group(tmp_path: Path) -> None:
    """The layout hook runs as a filesystem is made; spares are made for the taker's group."""
    _need_root()
    laid_out: list[Path] = []

    def layout(fs: Path) -> None:
        (fs / "workspace").mkdir()
        laid_out.append(fs)

    pool = StoragePool(tmp_path / "run", StorageBudget(tmp_path), spares=1, layout=layout)
    first = pool.take(300, 61990)  # no spare yet: made now, for its group
    assert first.laid_out and (first.storage.mount_point / "workspace").is_dir()
    assert "resgid=61990" in _mount_options(first.storage.mount_point)
    pool._ready[300][0].result()  # the replacement, made for the same group
    second = pool.take(300, 61990)
    assert second.storage.grader_gid == 61990 and second.laid_out
    assert "resgid=61990" in _mount_options(second.storage.mount_point)
    pool._ready[300][0].result()
    third = pool.take(300, 61991)  # another slot's grader: the spare is remounted for it
    assert "resgid=61991" in _mount_options(third.storage.mount_point)
    assert laid_out[:3] == [p.storage.mount_point for p in (first, second, third)]
    for prepared in (first, second, third):
        pool.give_back(prepared)
    assert pool.close() == []
    assert mounts_under(tmp_path) == []


def test_a_spare_makes_nothing_ahead_and_waits_only_for_room_coming_back(tmp_path: Path) -> None:
    """Something made ahead (a warm container) takes only free room, or room on its way back.

    Nothing is made ahead of it (that would hold the disk's room twice). Short of room,
    it fails at once when nothing is being removed, and waits when a finished trial's
    filesystem is: its room comes back when the removal is done.
    """
    _need_root()
    free = shutil.disk_usage(tmp_path).free >> 20
    # Room for one filesystem of 300 MB (+ its 256 MB reserve), not two.
    budget = StorageBudget(tmp_path, margin_mb=free - 800)
    pool = StoragePool(tmp_path / "run", budget, spares=1)
    first = pool.take(300, spare=True)
    assert pool._ready.get(300, []) == []  # no filesystem made ahead of a spare
    with pytest.raises(NoRoomForSpare):
        pool.take(300, spare=True)  # no room, and none on its way back
    release = threading.Event()
    pool._remover.submit(release.wait, 10)  # the remover is busy...
    pool.give_back(first)  # ...so the finished trial's removal waits behind it
    got: list[object] = []
    taker = threading.Thread(target=lambda: got.append(pool.take(300, spare=True)))
    taker.start()
    taker.join(0.5)
    assert taker.is_alive() and got == []  # waiting for the room, not refused
    release.set()
    taker.join(30)
    second = got[0]
    assert isinstance(second, PreparedStorage) and second.storage.size_mb == 300
    pool.give_back(second)
    assert pool.close() == []
    assert mounts_under(tmp_path) == []
    assert budget._promised == 0
