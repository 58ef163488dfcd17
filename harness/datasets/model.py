"""A registry of datasets: Harbor's legacy ``registry.json``, parsed and queried.

A registry is a JSON list of datasets, each ``{name, version, description, tasks}``, and
each task ``{name, git_url, git_commit_id, path}``: the task dir ``path`` of the git
repository ``git_url`` at ``git_commit_id``. A dataset is asked for as ``NAME[@VERSION]``;
without a version the newest is taken (``head`` and ``latest`` first, then the highest
version number).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harness.datasets.inputs import (
    FULL_COMMIT,
    check_git_url,
    check_ref,
    check_task_path,
    check_text,
)
from harness.errors import UsageError

#: Versions that name "whatever is newest" and win when no version is asked for.
_MOVING_VERSIONS = ("head", "latest")


class DatasetError(UsageError):
    """A dataset cannot be had: unknown, unreachable, missing commit or path, tampered.

    Raised before any trial runs (exit 2); the message is one line that says how to fix it.
    """


def is_full_sha(ref: str) -> bool:
    """Tell whether ``ref`` is a full (40 or 64 hex digit) commit id, which nothing can move."""
    return bool(FULL_COMMIT.match(ref))


class RegistryTask(BaseModel):
    """One task of a dataset: a task dir in a git repository at a commit.

    Attributes:
        name: The task's name within the dataset.
        git_url: The repository (any URL or path the ``git`` client takes).
        git_commit_id: A full commit id (pinned), or a ref (``HEAD``, a branch or tag),
            resolved when fetched and recorded in the run's lock.
        path: The task dir's path inside the repository ("" or "." for its root).
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str
    git_url: str
    git_commit_id: str = "HEAD"
    path: str = ""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_text(value, "task name")

    @field_validator("git_url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_git_url(value)

    @field_validator("path")
    @classmethod
    def _relative(cls, value: str) -> str:
        return check_task_path(value)

    @field_validator("git_commit_id")
    @classmethod
    def _ref(cls, value: str) -> str:
        ref = value.strip()
        return ref.lower() if FULL_COMMIT.match(ref.lower()) else check_ref(ref or "HEAD")


class Dataset(BaseModel):
    """A named, versioned list of tasks (one entry of ``registry.json``).

    Attributes:
        name: The dataset's name (``terminal-bench``).
        version: Its version (``2.0``, or ``head``).
        description: What it is.
        tasks: Its tasks.
        metrics: Its ``metrics`` as the registry has them, unchecked: read by
            :func:`harness.datasets.metrics.parse_declared`.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str
    version: str = "head"
    description: str = ""
    tasks: list[RegistryTask] = Field(default_factory=list)
    metrics: Any = None

    @field_validator("version", mode="before")
    @classmethod
    def _text(cls, value: object) -> object:
        return str(value) if isinstance(value, int | float) else value

    @field_validator("name", "version")
    @classmethod
    def _label(cls, value: str) -> str:
        return check_text(value, "dataset name or version")

    @property
    def ref(self) -> str:
        """``NAME@VERSION``."""
        return f"{self.name}@{self.version}"


class Registry(BaseModel):
    """A registry's datasets, with where it was read from.

    Attributes:
        source: Where it came from (a path, a URL, or ``repo:URL@COMMIT``), for the lock.
        datasets: Its datasets, in file order.
    """

    model_config = ConfigDict(frozen=True)

    source: str
    datasets: list[Dataset]

    @classmethod
    def parse(cls, data: object, source: str) -> Registry:
        """Validate the JSON of a legacy ``registry.json``.

        Raises:
            DatasetError: Not a list of datasets, naming the first bad entry.
        """
        if not isinstance(data, list):
            raise DatasetError(
                f"registry {source}: expected a JSON list of datasets "
                "({name, version, description, tasks}), got "
                f"{type(data).__name__}"
            )
        datasets = []
        for index, entry in enumerate(data):
            try:
                datasets.append(Dataset.model_validate(entry))
            except ValidationError as exc:
                first = exc.errors(include_url=False)[0]
                where = ".".join(str(part) for part in first["loc"])
                raise DatasetError(
                    f"registry {source}: dataset #{index + 1}: {where}: {first['msg']}"
                ) from None
        return cls(source=source, datasets=datasets)

    def offered(self) -> str:
        """What the registry has, on one line: ``a@1.0, a@2.0, b@head``."""
        refs = [dataset.ref for dataset in self.datasets]
        return ", ".join(refs) if refs else "no datasets"

    def find(self, spec: str) -> Dataset:
        """The dataset ``NAME[@VERSION]`` asks for.

        Raises:
            DatasetError: No such dataset or version, listing what the registry has.
        """
        name, _, version = spec.partition("@")
        named = [dataset for dataset in self.datasets if dataset.name == name]
        if not named:
            raise DatasetError(
                f"unknown dataset {name!r} in registry {self.source}; it has: {self.offered()}"
            )
        if version:
            for dataset in named:
                if dataset.version == version:
                    return dataset
            versions = ", ".join(dataset.version for dataset in named)
            raise DatasetError(
                f"dataset {name!r} has no version {version!r} in registry {self.source}; "
                f"its versions: {versions}"
            )
        return newest(named)

    def find_task(self, spec: str, chosen: Sequence[Dataset]) -> tuple[Dataset, RegistryTask]:
        """The one task ``[DATASET[@VERSION]/]TASK`` names (``-t``).

        Without a dataset part the task is looked for in ``chosen`` (the ``-d`` datasets),
        else in every dataset; it must be found in exactly one.

        Raises:
            DatasetError: No task of that name, or several datasets have one.
        """
        where, _, task_name = spec.rpartition("/")
        if where:
            try:
                pool = [self.find(where)]
            except DatasetError:
                # ORG/TASK where the task's own name holds the slash (``org/name``).
                pool, task_name = list(chosen or self.datasets), spec
        else:
            pool = list(chosen or self.datasets)
        hits = [(d, t) for d in pool for t in d.tasks if t.name == task_name]
        if len(hits) == 1:
            return hits[0]
        if not hits:
            names = ", ".join(d.ref for d in pool)
            raise DatasetError(f"no task {task_name!r} in {names or 'the registry'}")
        refs = ", ".join(d.ref for d, _ in hits)
        raise DatasetError(
            f"task {task_name!r} is in several datasets ({refs}); name one: DATASET@VERSION/"
            f"{task_name}"
        )


def newest(datasets: Sequence[Dataset]) -> Dataset:
    """The newest of the versions of one dataset: ``head``/``latest``, else the highest."""
    for moving in _MOVING_VERSIONS:
        for dataset in datasets:
            if dataset.version.lower() == moving:
                return dataset
    return max(datasets, key=lambda dataset: _version_key(dataset.version))


def _version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    """Order ``1.10`` after ``1.9``: numeric parts as numbers, the rest as text after them."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"[.\-+]", version)
    )


__all__ = [
    "Dataset",
    "DatasetError",
    "Registry",
    "RegistryTask",
    "is_full_sha",
    "newest",
]
