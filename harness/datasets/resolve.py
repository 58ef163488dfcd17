"""From ``-d NAME@VERSION`` (or ``--repo``, or a lock) to task dirs on disk, pinned.

:func:`resolve` reads the registry, picks the datasets and tasks, turns every ref into a
commit, and :func:`materialize` brings each task into the cache (a blobless sparse
checkout of the task paths at the commit, once per repository and commit) or takes it from
there, verified. A task already cached needs no network at all, so a pinned dataset runs
again offline.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.config import DatasetsConfig
from harness.datasets import git
from harness.datasets.cache import TaskCache, key, write_json_atomic
from harness.datasets.hub import Hub, TaskVersion, is_hub_ref, parse_ref
from harness.datasets.inputs import check_git_url, check_ref
from harness.datasets.lock import DatasetsLock, LockedTask, read_lock
from harness.datasets.metrics import DeclaredMetric, parse_declared, store_script, unique_names
from harness.datasets.model import Dataset, DatasetError, Registry, RegistryTask, is_full_sha
from harness.datasets.packages import PackageError, package_digest, unpack

logger = logging.getLogger("harness.datasets")

#: Harbor's public registry (its legacy ``registry.json``), the default registry.
DEFAULT_REGISTRY_URL = "https://raw.githubusercontent.com/laude-institute/harbor/main/registry.json"
#: Overrides the default registry URL.
REGISTRY_URL_ENV = "HARNESS_REGISTRY_URL"
_HTTP_TIMEOUT_SEC = 30.0


def default_registry_url() -> str:
    """``$HARNESS_REGISTRY_URL``, else Harbor's public registry."""
    return os.environ.get(REGISTRY_URL_ENV) or DEFAULT_REGISTRY_URL


@dataclass
class Resolved:
    """Tasks brought onto disk.

    Attributes:
        lock: What to write into the run dir.
        task_dirs: The cached task dirs, in the lock's order.
        warnings: What the user should know (a moved ref, an unpinned version...).
    """

    lock: DatasetsLock
    task_dirs: list[Path]
    warnings: list[str] = field(default_factory=list)


def load_registry(
    *, path: str | None = None, url: str | None = None, cache: TaskCache | None = None
) -> Registry:
    """Read a legacy ``registry.json`` from a file or a URL (default: the default URL).

    A URL's last good copy is kept in the cache; when the URL cannot be reached the copy
    is used, with a warning.

    Raises:
        DatasetError: The file or URL cannot be read (and no copy is cached), or it is not
            a registry.
    """
    if path is not None:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise DatasetError(f"registry {path} cannot be read: {exc.strerror}") from None
        return Registry.parse(_json(text, path), path)
    url = url or default_registry_url()
    if url.startswith("file://"):
        return load_registry(path=url.removeprefix("file://"))
    cache = cache or TaskCache()
    copy = cache.registry_copy(url)
    import httpx  # here, not at the top: only a run that reads the network loads it

    try:
        response = httpx.get(url, timeout=_HTTP_TIMEOUT_SEC, follow_redirects=True)
        response.raise_for_status()
    except httpx.HTTPError as exc:
        if copy.is_file():
            logger.warning(
                "warning: registry %s is unreachable (%s); using its copy of %s", url, exc, copy
            )
            return Registry.parse(_json(copy.read_text(), url), url)
        raise DatasetError(f"registry {url} is unreachable: {exc}") from None
    data = _json(response.text, url)
    registry = Registry.parse(data, url)
    write_json_atomic(copy, data)
    return registry


def _json(text: str, source: str) -> object:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise DatasetError(f"registry {source} is not JSON: {exc}") from None


def parse_repo(spec: str) -> tuple[str, str]:
    """``OWNER/NAME[@REF]``, a URL or a path (each with an optional ``@REF``) → (URL, ref).

    ``OWNER/NAME`` is a GitHub repository, unless it is a local directory. The URL and the
    ref are checked as a registry's are (:mod:`harness.datasets.inputs`).

    Raises:
        DatasetError: The URL or the ref is refused, naming which and why.
    """
    base, at, ref = spec.rpartition("@")
    if not at or not base or "/" in ref or ":" in ref:
        base, ref = spec, "HEAD"
    if "://" in base or base.startswith(("/", ".", "~")) or ":" in base or Path(base).is_dir():
        url = (
            os.path.abspath(os.path.expanduser(base)) if Path(base).expanduser().is_dir() else base
        )
    else:
        url = f"https://github.com/{base}.git"
    try:
        return check_git_url(url), check_ref(ref)
    except ValueError as exc:
        raise DatasetError(f"--repo {spec[:80]!r}: {exc}") from None


def repo_dataset(spec: str, cache: TaskCache | None = None) -> tuple[Dataset, list[str]]:
    """The dataset of a git repository of task dirs (``--repo``), at its ref's commit.

    Every directory holding ``task.toml`` is a task (the root too, if it is one).

    Returns:
        The dataset (named after the repository, versioned by the ref) and warnings.

    Raises:
        DatasetError: Unreachable, no such ref or commit, or no task dir in it.
    """
    cache = cache or TaskCache()
    url, ref = parse_repo(spec)
    commit, warnings = _pin(url, ref, cache)
    listing = cache.root / "listings" / f"{key(url, commit)}.json"
    if listing.is_file():
        paths = [str(p) for p in json.loads(listing.read_text())]
    else:
        with tempfile.TemporaryDirectory(prefix="harness-repo-") as scratch:
            git.fetch_commit(url, commit, Path(scratch))
            files = git.tree_paths(Path(scratch), commit)
        paths = sorted({f.rpartition("/")[0] for f in files if f.rpartition("/")[2] == "task.toml"})
        write_json_atomic(listing, paths)
    if not paths:
        raise DatasetError(
            f"repository {url} has no task dir (a dir holding task.toml) at {commit}"
        )
    name = url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
    tasks = [
        RegistryTask(
            name=p.rsplit("/", 1)[-1] if p else name, git_url=url, git_commit_id=commit, path=p
        )
        for p in paths
    ]
    return Dataset(name=name, version=ref, tasks=tasks), warnings


def _pin(url: str, ref: str, cache: TaskCache) -> tuple[str, list[str]]:
    """The commit ``ref`` of ``url`` is at: asked of the remote, else the one pinned before.

    A ref seen at another commit before is told (never silently followed unannounced); an
    unreachable remote falls back to the commit pinned when the ref was last resolved.
    """
    if is_full_sha(ref):
        return ref, []
    pins_path = cache.pins_file(url)
    pins: dict[str, str] = json.loads(pins_path.read_text()) if pins_path.is_file() else {}
    try:
        commit = git.resolve_ref(url, ref)
    except DatasetError as exc:
        if ref in pins and "unreachable" in str(exc):
            return pins[ref], [
                f"{url} is unreachable; using {ref} as last resolved, {pins[ref]} (cached)"
            ]
        raise
    warnings = [
        f"{url}@{ref} is not a full commit id (not pinned); it is {commit} now (in the lock)"
    ]
    before = pins.get(ref)
    if before is not None and before != commit:
        warnings.append(
            f"{url}@{ref} moved from {before} to {commit} since it was first fetched; pin "
            f"{before} in the registry (or @{before[:12]}...) to keep the old tasks"
        )
    pins[ref] = commit
    write_json_atomic(pins_path, pins)
    return commit, warnings


def _version_changed(source: str, dataset: Dataset, cache: TaskCache) -> list[str]:
    """Tell when a registry's ``NAME@VERSION`` lists other tasks than when first used.

    The first entry seen is kept (per registry and version) and never overwritten, so an
    entry edited upstream is told every time until the cache is cleared.
    """
    path = cache.root / "versions" / f"{key(source, dataset.ref)}.json"
    entry = [[t.name, t.git_url, t.git_commit_id, t.path] for t in dataset.tasks]
    if not path.is_file():
        write_json_atomic(path, entry)
        return []
    if json.loads(path.read_text()) == entry:
        return []
    return [
        f"{dataset.ref} of registry {source} lists other tasks or commits than when first "
        "used here; this run uses the registry's current entry (rerun an earlier run's tasks "
        "with --from-lock RUN_DIR)"
    ]


def resolve(config: DatasetsConfig, cache: TaskCache | None = None) -> Resolved:
    """Pick, pin and fetch the tasks ``config`` asks for.

    An ``ORG/NAME[@REF]`` dataset or task, with no registry or ``--repo`` given, is read
    from the Harbor Hub (:mod:`harness.datasets.hub`); any other name from the registry.

    Raises:
        DatasetError: An unknown dataset, version or task (listing what there is), an
            unreachable registry, Hub or repository, a missing commit, a task path not in
            its commit, a cached task changed on disk, a package whose content is not its
            digest, or a lock whose task content changed.
    """
    cache = cache or TaskCache()
    if config.from_lock is not None:
        if config.names or config.tasks or config.repo:
            raise DatasetError("--from-lock reruns a lock's tasks: give no -d, -t or --repo")
        return materialize(read_lock(Path(config.from_lock)), cache, hub_url=config.hub_url)
    on_hub = config.registry_path is None and config.registry_url is None and config.repo is None
    hub_names = [spec for spec in config.names if on_hub and is_hub_ref(spec)]
    names = [spec for spec in config.names if spec not in hub_names]
    hub_specs = [spec for spec in config.tasks if on_hub and not names and is_hub_ref(spec)]
    specs = [spec for spec in config.tasks if spec not in hub_specs]
    warnings: list[str] = []
    locked: list[LockedTask] = []
    sources: list[str] = []
    labels: list[str] = []
    metrics: list[DeclaredMetric] = []
    if names or specs or config.repo is not None or not (hub_names or hub_specs):
        registry, chosen, picked, told = _from_registry(config, names, specs, cache)
        warnings += told
        sources.append(registry.source)
        labels += [d.ref for d in chosen]
        locked += _pin_all(picked, cache, warnings)
        metrics += _declared_metrics(config, registry, chosen, cache, warnings)
    known: dict[tuple[str, str], TaskVersion] = {}
    if hub_names or hub_specs:
        hub = Hub(config.hub_url)
        try:
            sources.append(f"hub:{hub.url}")
            for spec in hub_names:
                dataset = hub.dataset(spec)
                warnings += dataset.warnings
                warnings += _tag_moved(hub.url, dataset.name, dataset.asked, dataset.digest, cache)
                labels.append(dataset.ref)
                if dataset.asked != dataset.digest:
                    logger.info("%s@%s is %s", dataset.name, dataset.asked, dataset.ref)
                gits = [(dataset.ref, t.git) for t in dataset.tasks if t.git is not None]
                locked += _pin_all(
                    [(Dataset(name=d, version="hub"), t) for d, t in gits], cache, warnings
                )
                locked += [
                    LockedTask(
                        name=t.name,
                        dataset=dataset.ref,
                        package=t.name,
                        digest=t.digest,
                        content_hash="",
                    )
                    for t in dataset.tasks
                    if t.digest is not None
                ]
            for spec in hub_specs:
                name, ref = parse_ref(spec, "-t")
                version = hub.task_version(name, ref)
                warnings += version.warnings
                warnings += _tag_moved(hub.url, name, ref, version.digest, cache)
                known[(name, version.digest)] = version
                locked.append(
                    LockedTask(
                        name=name,
                        package=name,
                        digest=version.digest,
                        requested_ref=None if ref.startswith("sha256:") else ref,
                        content_hash="",
                    )
                )
        finally:
            hub.close()
    seen: set[str] = set()
    unique = []
    for task in locked:
        if task.source not in seen or not task.source:
            seen.add(task.source)
            unique.append(task)
    if not unique:
        raise DatasetError(f"{', '.join(labels) or 'the selection'} has no tasks")
    lock = DatasetsLock(
        registry=" + ".join(sources),
        datasets=labels,
        tasks=unique,
        metrics=unique_names(metrics),
    )
    resolved = materialize(lock, cache, hub_url=config.hub_url, known=known)
    resolved.warnings[:0] = warnings
    for line in warnings:
        logger.warning("warning: %s", line)
    return resolved


def _declared_metrics(
    config: DatasetsConfig,
    registry: Registry,
    chosen: Sequence[Dataset],
    cache: TaskCache,
    warnings: list[str],
) -> list[DeclaredMetric]:
    """The metrics the chosen datasets declare, scripts kept in the cache by digest.

    A script path is read from a local registry's own dir only; a declaration that cannot
    be used is told and kept with its error (the summary records it), never run.
    """
    where = config.registry_path
    if where is None and (config.registry_url or "").startswith("file://"):
        where = (config.registry_url or "").removeprefix("file://")
    base = Path(where).absolute().parent if where is not None and config.repo is None else None
    found: list[DeclaredMetric] = []
    for dataset in chosen:
        declared = parse_declared(
            dataset.metrics,
            dataset=dataset.ref,
            where=f"registry {registry.source}: {dataset.ref}",
            base=base,
        )
        for metric, data in declared:
            if data is not None:
                store_script(cache, data)
            if metric.error is not None:
                warnings.append(f"metric not computed: {metric.error}")
            found.append(metric)
    return found


def _tag_moved(url: str, name: str, ref: str, digest: str, cache: TaskCache) -> list[str]:
    """Tell when a Hub tag or revision names another digest than when first used here.

    The first digest seen is kept (per Hub and ``NAME@REF``) and never overwritten, so a
    moved tag is told every time until the cache is cleared; a digest ref cannot move.
    """
    if ref.startswith("sha256:"):
        return []
    path = cache.root / "versions" / f"{key(f'hub:{url}', f'{name}@{ref}')}.json"
    if not path.is_file():
        write_json_atomic(path, digest)
        return []
    first = json.loads(path.read_text())
    if first == digest:
        return []
    return [
        f"{name}@{ref} is {digest} now, but was {first} when first used here; pin "
        f"{name}@{first} (or rerun an earlier run's tasks with --from-lock RUN_DIR) to keep "
        "the old one"
    ]


def _from_registry(
    config: DatasetsConfig, names: Sequence[str], specs: Sequence[str], cache: TaskCache
) -> tuple[Registry, list[Dataset], list[tuple[Dataset, RegistryTask]], list[str]]:
    """The registry (or ``--repo``) datasets and tasks asked for, with warnings."""
    warnings: list[str] = []
    if config.repo is not None:
        if names or config.registry_path or config.registry_url:
            raise DatasetError("--repo is a dataset of its own: pick its tasks with -t, not -d")
        dataset, warnings = repo_dataset(config.repo, cache)
        registry = Registry(source=f"repo:{config.repo}", datasets=[dataset])
        chosen = [] if specs else [dataset]
    else:
        registry = load_registry(path=config.registry_path, url=config.registry_url, cache=cache)
        chosen = [registry.find(spec) for spec in names]
    picked: list[tuple[Dataset, RegistryTask]] = [(d, t) for d in chosen for t in d.tasks]
    picked += [registry.find_task(spec, chosen) for spec in specs]
    for dataset in chosen:
        warnings += _version_changed(registry.source, dataset, cache)
    return registry, chosen, picked, warnings


def _pin_all(
    picked: Sequence[tuple[Dataset, RegistryTask]], cache: TaskCache, warnings: list[str]
) -> list[LockedTask]:
    """Each git task with its ref turned into a commit (told moves go into ``warnings``)."""
    seen: set[tuple[str, str, str]] = set()
    commits: dict[tuple[str, str], str] = {}
    locked = []
    for dataset, task in picked:
        if (task.git_url, task.git_commit_id, task.path) in seen:
            continue
        seen.add((task.git_url, task.git_commit_id, task.path))
        pair = (task.git_url, task.git_commit_id)
        if pair not in commits:
            commits[pair], told = _pin(task.git_url, task.git_commit_id, cache)
            warnings += told
        pinned = is_full_sha(task.git_commit_id)
        locked.append(
            LockedTask(
                name=task.name,
                dataset=dataset.name if dataset.version == "hub" else dataset.ref,
                git_url=task.git_url,
                commit=commits[pair],
                path=task.path,
                requested_ref=None if pinned else task.git_commit_id,
                content_hash="",
            )
        )
    return locked


def materialize(
    lock: DatasetsLock,
    cache: TaskCache | None = None,
    *,
    hub_url: str | None = None,
    known: dict[tuple[str, str], TaskVersion] | None = None,
) -> Resolved:
    """Bring every task of ``lock`` onto disk (cache, else fetch) and verify its hash.

    A task with a recorded ``content_hash`` must have exactly it; one without (a fresh
    resolve) gets the hash it was fetched with. A Hub package missing from the cache is
    fetched from the Hub at ``hub_url`` (never from a URL the lock names) by its digest,
    and must hash to it.

    Raises:
        DatasetError: A fetch failed, a cached task changed on disk, a package is not its
            digest, or a task's content differs from the lock's.
    """
    cache = cache or TaskCache()
    found: dict[int, Path] = {}
    hashes: dict[int, str] = {}
    wanted: dict[tuple[str, str], list[int]] = defaultdict(list)
    packages: list[int] = []
    for index, task in enumerate(lock.tasks):
        if task.package is not None and task.digest is not None:
            entry = cache.lookup_package(task.package, task.digest)
            if entry is None:
                packages.append(index)
            else:
                found[index], hashes[index] = entry.task_dir, entry.content_hash
            continue
        entry = cache.lookup(task.git_url, task.commit, task.path)
        if entry is None:
            wanted[(task.git_url, task.commit)].append(index)
        else:
            found[index], hashes[index] = entry.task_dir, entry.content_hash
    for (url, commit), indexes in wanted.items():
        paths = sorted({lock.tasks[i].path for i in indexes})
        fetched = _fetch(url, commit, paths, cache)
        for index in indexes:
            found[index], hashes[index] = fetched[lock.tasks[index].path]
    if packages:
        hub = Hub(hub_url)
        try:
            for index in packages:
                task = lock.tasks[index]
                assert task.package is not None and task.digest is not None
                version = (known or {}).get((task.package, task.digest))
                version = version or hub.task_version(task.package, task.digest)
                found[index], hashes[index] = _fetch_package(hub, version, cache)
        finally:
            hub.close()
    tasks = []
    for index, task in enumerate(lock.tasks):
        if task.content_hash and task.content_hash != hashes[index]:
            raise DatasetError(
                f"task {task.name} ({task.source}) has content {hashes[index]}, but the lock "
                f"recorded {task.content_hash}: refusing to run a different task under the "
                "same pin"
            )
        tasks.append(task.model_copy(update={"content_hash": hashes[index]}))
    final = lock.model_copy(update={"tasks": tasks})
    return Resolved(final, [found[i] for i in range(len(lock.tasks))])


def _fetch_package(hub: Hub, version: TaskVersion, cache: TaskCache) -> tuple[Path, str]:
    """Download, unpack and check one package; store it in the cache."""
    logger.info("fetching %s@%s from %s", version.name, version.digest, hub.url)
    cache.root.mkdir(parents=True, exist_ok=True)
    label = f"{version.name}@{version.digest}"
    with tempfile.TemporaryDirectory(prefix=".package-", dir=cache.root) as scratch:
        archive = Path(scratch) / "archive.tar.gz"
        hub.download(version, archive)
        tree = Path(scratch) / "tree"
        tree.mkdir(mode=0o755)
        try:
            with open(archive, "rb") as stream:
                unpack(stream, tree)
            if not (tree / "task.toml").is_file():
                raise PackageError("it has no task.toml at its root")
            digest = package_digest(tree)
        except PackageError as exc:
            raise DatasetError(
                f"package {label} from Harbor Hub {hub.url} is refused: {exc}"
            ) from None
        if digest != version.digest:
            raise DatasetError(
                f"package {label} from Harbor Hub {hub.url} has content {digest}, not its "
                "digest: refusing it (tampered with, or a wrong archive)"
            )
        entry = cache.store_package(version.name, version.digest, tree)
    return entry.task_dir, entry.content_hash


def _fetch(
    url: str, commit: str, paths: Sequence[str], cache: TaskCache
) -> dict[str, tuple[Path, str]]:
    """Sparse-checkout ``paths`` of ``commit`` once and store each into the cache."""
    logger.info("fetching %d task(s) of %s at %s", len(paths), url, commit)
    cache.root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=cache.root) as scratch:
        repo = Path(scratch)
        git.fetch_commit(url, commit, repo)
        git.checkout_paths(repo, url, commit, paths)
        stored = {}
        for path in paths:
            entry = cache.store(url, commit, path, repo / path if path else repo)
            stored[path] = (entry.task_dir, entry.content_hash)
    return stored


__all__ = [
    "DEFAULT_REGISTRY_URL",
    "REGISTRY_URL_ENV",
    "Resolved",
    "default_registry_url",
    "load_registry",
    "materialize",
    "parse_repo",
    "repo_dataset",
    "resolve",
]
