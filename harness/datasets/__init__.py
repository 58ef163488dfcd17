"""Benchmarks by name: a registry of datasets, their tasks fetched, cached and pinned.

``harness run -d NAME@VERSION`` reads a registry (Harbor's legacy ``registry.json``),
fetches each task dir with a blobless sparse checkout at its pinned commit into a cache
shared by runs, and writes ``datasets.lock.json`` into the run dir; ``-d ORG/NAME@REF``
reads Harbor Hub and fetches each task as a package checked against its digest
(:mod:`harness.datasets.hub`, :mod:`harness.datasets.packages`). See docs/datasets.md.
"""

from harness.datasets.cache import CACHE_ENV, TaskCache, cache_root, tree_digest
from harness.datasets.hub import DEFAULT_HUB_URL, HUB_URL_ENV, Hub, hub_url
from harness.datasets.lock import (
    DATASETS_LOCK_FILENAME,
    DatasetsLock,
    LockedTask,
    read_lock,
    write_lock,
)
from harness.datasets.model import Dataset, DatasetError, Registry, RegistryTask
from harness.datasets.resolve import (
    DEFAULT_REGISTRY_URL,
    REGISTRY_URL_ENV,
    Resolved,
    default_registry_url,
    load_registry,
    materialize,
    repo_dataset,
    resolve,
)

__all__ = [
    "CACHE_ENV",
    "DATASETS_LOCK_FILENAME",
    "DEFAULT_HUB_URL",
    "DEFAULT_REGISTRY_URL",
    "HUB_URL_ENV",
    "REGISTRY_URL_ENV",
    "Dataset",
    "DatasetError",
    "DatasetsLock",
    "Hub",
    "LockedTask",
    "Registry",
    "RegistryTask",
    "Resolved",
    "TaskCache",
    "cache_root",
    "default_registry_url",
    "hub_url",
    "load_registry",
    "materialize",
    "read_lock",
    "repo_dataset",
    "resolve",
    "tree_digest",
    "write_lock",
]
