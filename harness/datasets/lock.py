"""The run dir's ``datasets.lock.json``: exactly which tasks a dataset run ran.

It names the registry, the datasets and versions asked for, for each task its source
(git URL, the commit it resolved to, path) and content hash, and the SHA-256 of each
metric script (a registry's, and a local task set's ``metric.py``: it is written for a
run of such a set too). ``--resume`` and ``harness run --from-lock RUN_DIR`` rerun those
tasks, from the cache or fetched again, and refuse one whose content hash differs.

A lock comes with a run dir, which may be someone else's: every field is checked when it
is read (:mod:`harness.datasets.inputs`: a full commit id, a relative path, a plain git
URL, a ``sha256:`` content hash), and a lock that fails is refused whole, naming the field
and the file, before any ``git`` runs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.datasets.cache import write_json_atomic
from harness.datasets.inputs import (
    check_commit,
    check_digest,
    check_git_url,
    check_package_name,
    check_ref,
    check_task_path,
    check_text,
)
from harness.datasets.metrics import DeclaredMetric, LocalMetricPin
from harness.datasets.model import DatasetError
from harness.records.layout import DATASETS_LOCK_FILENAME
from sandbox.beneath import read_beneath

LOCK_VERSION = 1
#: The largest lock read (100,000 tasks of a few hundred bytes each).
MAX_LOCK_BYTES = 64 << 20
#: A task's recorded content: :func:`harness.datasets.cache.tree_digest`.
_CONTENT_HASH = re.compile(r"^sha256:[0-9a-f]{64}\Z")


class LockedTask(BaseModel):
    """One task of the lock: a git pin, or a Hub package pinned by digest.

    Attributes:
        name: The task's name in its dataset.
        dataset: ``NAME@VERSION`` it came from ("" for a ``-t`` task of no dataset).
        git_url: The repository ("" for a package).
        commit: The full commit id it was fetched at ("" for a package).
        path: Its path in the repository.
        requested_ref: What the registry named when it was not a commit id (``HEAD``), or
            the Hub ref of a ``-t`` package when it was not a digest.
        package: The Hub package ``ORG/NAME`` (None for a git pin).
        digest: The package's Hub digest, ``sha256:<hex>`` (None for a git pin).
        content_hash: Its tree digest (:func:`harness.datasets.cache.tree_digest`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    dataset: str = ""
    git_url: str = ""
    commit: str = ""
    path: str = ""
    requested_ref: str | None = None
    package: str | None = None
    digest: str | None = None
    content_hash: str

    @property
    def is_package(self) -> bool:
        """Whether the task is a Hub package (else a git pin)."""
        return self.package is not None

    @property
    def source(self) -> str:
        """Where it comes from, in one word: ``URL@COMMIT`` or ``ORG/NAME@sha256:...``."""
        if self.package is not None:
            return f"{self.package}@{self.digest}"
        return f"{self.git_url}@{self.commit[:12]}:{self.path or '.'}"

    @model_validator(mode="after")
    def _one_source(self) -> LockedTask:
        if self.package is not None:
            if self.digest is None or self.git_url or self.commit or self.path:
                raise ValueError(
                    "a package task names its package and digest, and no git_url, commit or path"
                )
        elif self.digest is not None or not self.git_url or not self.commit:
            raise ValueError("a git task names its git_url and commit, and no digest")
        return self

    @field_validator("package")
    @classmethod
    def _package(cls, value: str | None) -> str | None:
        return None if value is None else check_package_name(value)

    @field_validator("digest")
    @classmethod
    def _digest(cls, value: str | None) -> str | None:
        if value is not None and check_digest(value) != value:
            raise ValueError(f"digest {value[:80]!r} is not sha256:<64 lowercase hex digits>")
        return value

    @field_validator("name", "dataset")
    @classmethod
    def _text(cls, value: str) -> str:
        return check_text(value)

    @field_validator("git_url")
    @classmethod
    def _url(cls, value: str) -> str:
        return value and check_git_url(value)

    @field_validator("commit")
    @classmethod
    def _commit(cls, value: str) -> str:
        return value and check_commit(value)

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if check_task_path(value) != value:
            raise ValueError(
                f"task path {value!r} is not in the form a lock records (relative, "
                "normalised, no trailing '/')"
            )
        return value

    @field_validator("requested_ref")
    @classmethod
    def _ref(cls, value: str | None) -> str | None:
        return None if value is None else check_ref(value)

    @field_validator("content_hash")
    @classmethod
    def _hash(cls, value: str) -> str:
        # "" only while a fresh resolve fetches; read_lock requires one.
        if value and not _CONTENT_HASH.match(value):
            raise ValueError(f"content hash {value[:80]!r} is not sha256:<64 hex digits>")
        return value


class DatasetsLock(BaseModel):
    """What ``datasets.lock.json`` holds.

    Attributes:
        lock_version: The format's version.
        registry: Where the registry was read (path, URL, ``repo:URL``), if any.
        datasets: The ``NAME@VERSION`` of each dataset asked for.
        tasks: Every task, in run order.
        metrics: The metrics the datasets declare (a script's pinned by its digest).
        local_metrics: Each local task set's ``metric.py``, pinned by its digest.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    lock_version: int = LOCK_VERSION
    registry: str | None = None
    datasets: list[str] = Field(default_factory=list)
    tasks: list[LockedTask] = Field(default_factory=list)
    metrics: list[DeclaredMetric] = Field(default_factory=list, max_length=64)
    local_metrics: list[LocalMetricPin] = Field(default_factory=list, max_length=64)

    @field_validator("lock_version")
    @classmethod
    def _version(cls, value: int) -> int:
        if value != LOCK_VERSION:
            raise ValueError(f"lock version {value} is not {LOCK_VERSION}")
        return value

    @field_validator("registry")
    @classmethod
    def _registry(cls, value: str | None) -> str | None:
        return None if value is None else check_text(value, "registry")

    @field_validator("datasets")
    @classmethod
    def _datasets(cls, value: list[str]) -> list[str]:
        return [check_text(label, "dataset") for label in value]


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
    # A run dir's lock is read beneath it, never through a link (the run dir may be anyone's).
    read = (
        read_beneath(where, DATASETS_LOCK_FILENAME, MAX_LOCK_BYTES + 1)
        if Path(where).is_dir()
        else read_beneath(path.parent, path.name, MAX_LOCK_BYTES + 1)
    )
    if read is None:
        raise DatasetError(
            f"{where} has no {DATASETS_LOCK_FILENAME} (a regular file, not a link): give the "
            "run dir of a dataset run (harness run -d NAME@VERSION) or a lock file"
        )
    if read.size > MAX_LOCK_BYTES:
        raise DatasetError(f"{path} is larger than {MAX_LOCK_BYTES} bytes: not a datasets lock")
    try:
        data = json.loads(read.data)
    except ValueError as exc:
        raise DatasetError(f"{path} is not a valid datasets lock: {exc}") from None
    try:
        lock = DatasetsLock.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        field = "".join(
            f"[{part}]" if isinstance(part, int) else f".{part}" for part in first["loc"]
        ).lstrip(".")
        message = str(first["msg"]).removeprefix("Value error, ")
        raise DatasetError(
            f"{path}: {field or 'the lock'}: {message}; refusing the whole lock (a run dir "
            "may come from anyone): fix or remove that entry, or run the datasets anew "
            "with -d NAME@VERSION"
        ) from None
    for index, task in enumerate(lock.tasks):
        if not task.content_hash:
            raise DatasetError(
                f"{path}: tasks[{index}].content_hash: empty; a lock pins each task's content "
                "(sha256:<64 hex digits>): run the datasets anew with -d NAME@VERSION"
            )
    return lock


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
