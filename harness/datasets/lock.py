"""The run dir's ``datasets.lock.json``: exactly which tasks a dataset run ran.

It names the registry, the datasets and versions asked for, and for each task its source
(git URL, the commit it resolved to, path) and content hash. ``--resume`` and ``harness run
--from-lock RUN_DIR`` rerun those tasks, from the cache or fetched again, and refuse one
whose content hash differs.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.datasets.cache import write_json_atomic
from harness.datasets.model import DatasetError
from harness.records.layout import DATASETS_LOCK_FILENAME

LOCK_VERSION = 1


class LockedTask(BaseModel):
    """One task of the lock.

    Attributes:
        name: The task's name in its dataset.
        dataset: ``NAME@VERSION`` it came from ("" for a ``-t`` task of no dataset).
        git_url: The repository.
        commit: The full commit id it was fetched at.
        path: Its path in the repository.
        requested_ref: What the registry named when it was not a commit id (``HEAD``).
        content_hash: Its tree digest (:func:`harness.datasets.cache.tree_digest`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    dataset: str = ""
    git_url: str
    commit: str
    path: str = ""
    requested_ref: str | None = None
    content_hash: str


class DatasetsLock(BaseModel):
    """What ``datasets.lock.json`` holds.

    Attributes:
        lock_version: The format's version.
        registry: Where the registry was read (path, URL, ``repo:URL``), if any.
        datasets: The ``NAME@VERSION`` of each dataset asked for.
        tasks: Every task, in run order.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    lock_version: int = LOCK_VERSION
    registry: str | None = None
    datasets: list[str] = Field(default_factory=list)
    tasks: list[LockedTask] = Field(default_factory=list)


def lock_path(where: Path) -> Path:
    """The lock file of a run dir, or ``where`` itself when it is a file."""
    where = Path(where)
    return where if where.is_file() else where / DATASETS_LOCK_FILENAME


def read_lock(where: Path) -> DatasetsLock:
    """Read the lock of a run dir (or a lock file).

    Raises:
        DatasetError: There is none, or it is not a valid lock.
    """
    path = lock_path(where)
    if not path.is_file():
        raise DatasetError(
            f"{where} has no {DATASETS_LOCK_FILENAME}: give the run dir of a dataset run "
            "(harness run -d NAME@VERSION) or a lock file"
        )
    try:
        return DatasetsLock.model_validate(json.loads(path.read_text()))
    except (ValueError, ValidationError) as exc:
        first = str(exc).splitlines()[0]
        raise DatasetError(f"{path} is not a valid datasets lock: {first}") from None


def write_lock(lock: DatasetsLock, run_dir: Path) -> Path:
    """Write ``lock`` into ``run_dir`` (atomically); its path."""
    path = Path(run_dir) / DATASETS_LOCK_FILENAME
    write_json_atomic(path, lock.model_dump(mode="json"))
    return path


__all__ = [
    "DATASETS_LOCK_FILENAME",
    "DatasetsLock",
    "LockedTask",
    "lock_path",
    "read_lock",
    "write_lock",
]
