"""A dataset's declared metrics: read as hostile input, and Harbor's built-ins computed.

A registry entry may declare ``metrics``, as Harbor's ``registry.json`` does: a list of
``{"type": T, "kwargs": {...}}`` where ``T`` is a built-in (``mean``, ``sum``, ``min``,
``max``) or ``uv-script``, whose ``kwargs.script_path`` names a Python script (Harbor's
``metric.py``). The script is the dataset's code: it is never run here, but by
:mod:`harness.runner.dataset_metrics` in a sandbox, over the run's ``rewards.jsonl``.

What is checked before anything is used (a registry may come from anyone):

- at most :data:`MAX_METRICS` metrics, each a JSON object of a known type; a name, if
  given, is short text;
- a script path is relative, normalised, without a ``..`` part or a leading ``-``, and is
  read without following a link at any component, from the registry file's own dir (a
  registry read from a URL cannot name a file of this machine), at most
  :data:`MAX_SCRIPT_BYTES`;
- the script is kept in the cache by its SHA-256 and pinned in the lock by it
  (:class:`DeclaredMetric`), so a resumed run computes the same script or says it cannot;
- a local task set's ``metric.py`` is pinned by its SHA-256 too (:class:`LocalMetricPin`,
  the lock's ``local_metrics``): a resumed or ``--from-lock`` run whose set holds another
  script is refused (:func:`check_local_pin`). A pin read from a run dir names only the
  set it belongs to and the digest; the script read is always the set's own
  :data:`METRIC_FILENAME`, beneath it, without links.

The built-ins (:func:`builtin_value`) follow Harbor's: over every trial the metric counts,
a trial without a reward counting 0, one aggregate per reward key.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from harness.datasets.cache import TaskCache
from harness.datasets.inputs import check_task_path, check_text
from harness.datasets.model import DatasetError
from sandbox.beneath import read_beneath

#: Harbor's built-in metric types, computed here.
BUILTIN_METRICS = ("mean", "sum", "min", "max")
#: Harbor's script metric type: a Python script over ``rewards.jsonl``.
SCRIPT_METRIC = "uv-script"
#: Harbor's name of a dataset's metric script.
METRIC_FILENAME = "metric.py"
#: The most metrics one dataset may declare.
MAX_METRICS = 16
#: The largest metric script read.
MAX_SCRIPT_BYTES = 256 << 10
#: The longest metric name.
MAX_NAME = 64
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@:+-]*\Z")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_MAX_ERROR = 1024

MetricType = Literal["mean", "sum", "min", "max", "uv-script"]
#: A metric's value: one number (a single ``reward`` key), else one number per key.
MetricValue = float | dict[str, float]


def check_metric_name(value: str) -> str:
    """A metric's name: letters, digits and ``_.@:+-``, at most :data:`MAX_NAME` characters.

    Raises:
        ValueError: Anything else.
    """
    if not isinstance(value, str) or len(value) > MAX_NAME or not _NAME.match(value):
        raise ValueError(
            f"metric name {str(value)[:80]!r} is not a short name (letters, digits, "
            f"'_.@:+-', at most {MAX_NAME} characters, not starting with a sign or '.')"
        )
    return value


def _checked_digest(value: str | None) -> str | None:
    """``value`` if it is ``sha256:<64 hex digits>`` (or None).

    Raises:
        ValueError: any other string (from a lock or a registry: untrusted).
    """
    if value is not None and not _DIGEST.match(value):
        raise ValueError(f"script digest {value[:80]!r} is not sha256:<64 hex digits>")
    return value


class DeclaredMetric(BaseModel):
    """One metric a dataset declares, as the lock pins it.

    Attributes:
        name: Its name in ``summary.json``'s ``dataset_metrics`` (unique in the run).
        type: A built-in, or ``uv-script``.
        dataset: ``NAME@VERSION`` of the dataset that declares it.
        script_digest: ``sha256:<hex>`` of the script's bytes (``uv-script`` only).
        script_path: Where the dataset keeps the script (relative), for messages.
        error: Why the declaration cannot be computed (the summary records it), if so.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    type: MetricType
    dataset: str = ""
    script_digest: str | None = None
    script_path: str | None = None
    error: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_metric_name(value)

    @field_validator("dataset")
    @classmethod
    def _dataset(cls, value: str) -> str:
        return check_text(value, "dataset")

    @field_validator("script_digest")
    @classmethod
    def _digest(cls, value: str | None) -> str | None:
        return _checked_digest(value)

    @field_validator("script_path")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        if value is not None and (not value or check_task_path(value) != value):
            raise ValueError(f"script path {value[:80]!r} is not a normalised relative path")
        return value

    @field_validator("error")
    @classmethod
    def _error(cls, value: str | None) -> str | None:
        return None if value is None else value[:_MAX_ERROR]

    @property
    def source(self) -> Literal["builtin", "script"]:
        """``builtin`` or ``script``."""
        return "script" if self.type == SCRIPT_METRIC else "builtin"


def script_digest(data: bytes) -> str:
    """``sha256:<hex>`` of a script's bytes."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def store_script(cache: TaskCache, data: bytes) -> str:
    """Keep a script in the cache under its digest (atomically); the digest."""
    digest = script_digest(data)
    folder = cache.root / "metrics"
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".metric-", dir=folder)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(tmp, folder / f"{digest.removeprefix('sha256:')}.py")
    return digest


def cached_script(cache: TaskCache, digest: str) -> bytes | None:
    """The cached script of ``digest``, if it is there and still hashes to it."""
    if not _DIGEST.match(digest):
        return None
    read = read_beneath(
        cache.root, f"metrics/{digest.removeprefix('sha256:')}.py", MAX_SCRIPT_BYTES
    )
    if read is None or script_digest(read.data) != digest:
        return None
    return read.data


def read_script(base: Path, rel: str, where: str) -> bytes:
    """The script ``rel`` below ``base``, read without following any link.

    Raises:
        DatasetError: ``rel`` is not a relative path inside ``base``, the file is missing,
            a link, not a regular file, or larger than :data:`MAX_SCRIPT_BYTES`.
    """
    try:
        path = check_task_path(rel)
    except ValueError as exc:
        raise DatasetError(f"{where}: {exc}") from None
    if not path or path == ".":
        raise DatasetError(f"{where}: script_path is empty")
    read = read_beneath(base, path, MAX_SCRIPT_BYTES + 1)
    if read is None:
        raise DatasetError(
            f"{where}: script {path!r} is missing below {base}, or is reached through a "
            "link, or is not a regular file: a metric script must be a file of the dataset"
        )
    if read.size > MAX_SCRIPT_BYTES or len(read.data) > MAX_SCRIPT_BYTES:
        raise DatasetError(
            f"{where}: script {path!r} is {read.size} bytes, more than {MAX_SCRIPT_BYTES}"
        )
    return read.data


def parse_declared(
    raw: object, *, dataset: str, where: str, base: Path | None
) -> list[tuple[DeclaredMetric, bytes | None]]:
    """A registry entry's ``metrics``, checked, each with its script's bytes (if a script).

    A declaration that cannot be used is not dropped, nor does it refuse the run: it
    comes back with its :attr:`DeclaredMetric.error`, which the summary records.

    Args:
        raw: The entry's ``metrics`` value (None: none declared).
        dataset: The dataset's ``NAME@VERSION``.
        where: The registry and dataset, for messages.
        base: The dir a script path is relative to (a local registry's dir); None when
            the registry came from a URL, which cannot name a file here.
    """
    if raw is None:
        return []
    if not isinstance(raw, list):
        return [(_refused("metrics", dataset, f"{where}: metrics is not a list"), None)]
    if len(raw) > MAX_METRICS:
        problem = f"{len(raw)} metrics, more than {MAX_METRICS}"
        return [(_refused("metrics", dataset, f"{where}: {problem}"), None)]
    found: list[tuple[DeclaredMetric, bytes | None]] = []
    for index, entry in enumerate(raw):
        try:
            found.append(_declared(entry, dataset, f"{where}: metrics[{index}]", base))
        except DatasetError as exc:
            found.append((_refused(f"metrics.{index}", dataset, str(exc)), None))
    return found


def _refused(name: str, dataset: str, error: str) -> DeclaredMetric:
    """A declaration that cannot be computed, kept with why."""
    return DeclaredMetric(name=name, type="mean", dataset=dataset, error=error[:_MAX_ERROR])


def _declared(
    entry: object, dataset: str, at: str, base: Path | None
) -> tuple[DeclaredMetric, bytes | None]:
    """One declaration, checked (see :func:`parse_declared`)."""
    if not isinstance(entry, dict):
        raise DatasetError(f"{at}: not an object")
    kind = entry.get("type", "mean")
    if kind not in (*BUILTIN_METRICS, SCRIPT_METRIC):
        raise DatasetError(
            f"{at}: type {str(kind)[:40]!r} is not one of "
            f"{', '.join((*BUILTIN_METRICS, SCRIPT_METRIC))}"
        )
    kwargs = entry.get("kwargs", {})
    kwargs = {} if kwargs is None else kwargs
    if not isinstance(kwargs, dict):
        raise DatasetError(f"{at}: kwargs is not an object")
    name = entry.get("name", kind)
    if not isinstance(name, str):
        raise DatasetError(f"{at}: name is not a string")
    data: bytes | None = None
    rel: str | None = None
    if kind == SCRIPT_METRIC:
        script = kwargs.get("script_path")
        if not isinstance(script, str):
            raise DatasetError(f"{at}: a uv-script metric names its script_path")
        if base is None:
            raise DatasetError(
                f"{at}: script {script[:80]!r} of a registry read from a URL cannot be "
                "read here; use a local registry (--registry-path) that ships it"
            )
        data = read_script(base, script, at)
        rel = check_task_path(script)
    try:
        metric = DeclaredMetric(
            name=name,
            type=kind,
            dataset=dataset,
            script_digest=None if data is None else script_digest(data),
            script_path=rel,
        )
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        message = str(first["msg"]).removeprefix("Value error, ")
        raise DatasetError(f"{at}: {message}") from None
    return metric, data


def local_dataset_metric(task_set: Path) -> tuple[DeclaredMetric, bytes | None] | None:
    """A local task set's own ``metric.py`` (Harbor's dataset dir), as a ``uv-script``.

    ``task_set`` is a dir of task dirs (not a task dir itself); its metric is declared by a
    :data:`METRIC_FILENAME` at its root, read as :func:`read_script` reads one (a link, a
    FIFO or an oversized file is kept as the metric's error). Its dataset is
    ``<dir name>@local``.

    Returns:
        None when ``task_set`` is a task dir, or has no ``metric.py`` at all.
    """
    if (task_set / "task.toml").exists() or not os.path.lexists(task_set / METRIC_FILENAME):
        return None
    dataset = check_text(f"{task_set.name or 'tasks'}@local"[:200], "dataset")
    where = f"task set {task_set}"
    try:
        data = read_script(task_set, METRIC_FILENAME, where)
    except DatasetError as exc:
        return _refused(SCRIPT_METRIC, dataset, str(exc)), None
    metric = DeclaredMetric(
        name=SCRIPT_METRIC,
        type="uv-script",
        dataset=dataset,
        script_digest=script_digest(data),
        script_path=METRIC_FILENAME,
    )
    return metric, data


class MetricPinError(DatasetError):
    """A local task set's ``metric.py`` is not the script its run (or lock) pinned."""


class LocalMetricPin(BaseModel):
    """A local task set's ``metric.py`` as a run pins it (``datasets.lock.json``).

    A run dir may come from anyone: every field is checked when the lock is read, and
    none is ever opened. The task set is matched against the run's own task paths; the
    script is always that set's :data:`METRIC_FILENAME`, read beneath it without links.

    Attributes:
        task_set: The task set's absolute path, as the run named it.
        script_path: :data:`METRIC_FILENAME` (nothing else is a local set's metric).
        script_digest: ``sha256:<hex>`` of the script the run started with; None when
            the set's ``metric.py`` could not be used then (a link, too large...).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_set: str
    script_path: str = METRIC_FILENAME
    script_digest: str | None = None

    @field_validator("task_set")
    @classmethod
    def _task_set(cls, value: str) -> str:
        parts = value.split("/")
        if (
            not value.startswith("/")
            or len(value) > 4096
            or _CONTROL.search(value)
            or any(part in (".", "..") for part in parts)
        ):
            raise ValueError(
                f"task set {value[:80]!r} is not an absolute path without '.' or '..' parts "
                "or control characters"
            )
        return value

    @field_validator("script_path")
    @classmethod
    def _script_path(cls, value: str) -> str:
        if value != METRIC_FILENAME:
            raise ValueError(
                f"script path {value[:80]!r} is not {METRIC_FILENAME!r}: a local task set's "
                f"metric is its own {METRIC_FILENAME}, never another file"
            )
        return value

    @field_validator("script_digest")
    @classmethod
    def _digest(cls, value: str | None) -> str | None:
        return _checked_digest(value)


def local_pin(task_set: Path, metric: DeclaredMetric) -> LocalMetricPin:
    """The pin of a local task set's metric (:func:`local_dataset_metric`'s)."""
    return LocalMetricPin(task_set=task_set_key(task_set), script_digest=metric.script_digest)


def task_set_key(task_set: Path) -> str:
    """A task set's path as a pin names it: absolute, normalised, links not followed."""
    return os.path.normpath(os.path.abspath(task_set))


def check_local_pin(
    task_set: Path,
    metric: DeclaredMetric | None,
    pin: LocalMetricPin,
    *,
    where: str,
    fix: str,
) -> None:
    """Refuse a local task set whose ``metric.py`` is not the script ``pin`` names.

    Args:
        task_set: The task set.
        metric: Its metric now (:func:`local_dataset_metric`), None when it has no
            ``metric.py`` any more.
        pin: What the run (or lock) pinned for it.
        where: The lock, for the message.
        fix: What the user does instead, for the message.

    Raises:
        MetricPinError: The script now is not the pinned one (changed, gone, or usable
            only now or only then).
    """
    now = None if metric is None else metric.script_digest
    if metric is not None and now == pin.script_digest:
        return
    if metric is None:
        state = f"has no {METRIC_FILENAME} any more"
    elif now is None:
        state = f"has a {METRIC_FILENAME} that cannot be used ({metric.error})"
    else:
        state = f"has a {METRIC_FILENAME} of content {now}"
    started = (
        f"content {pin.script_digest}"
        if pin.script_digest is not None
        else f"a {METRIC_FILENAME} that could not be used"
    )
    raise MetricPinError(
        f"task set {task_set} {state}, but {where} pinned {started}; a dataset metric is "
        f"computed by the script its run started with: put that {METRIC_FILENAME} back, "
        f"or {fix}"
    )


def unpinned_metric(metric: DeclaredMetric, where: str) -> DeclaredMetric:
    """A local task set's metric its resumed run did not pin: kept with why, never run."""
    return metric.model_copy(
        update={
            "error": (
                f"{where} pinned no {METRIC_FILENAME} for this task set when the run "
                "started (added since, or the run predates pins): not computed; start a "
                "new run to compute it"
            )[:_MAX_ERROR]
        }
    )


def unique_names(metrics: Sequence[DeclaredMetric]) -> list[DeclaredMetric]:
    """The metrics, each name made unique in the run (``mean``, ``mean#2``...).

    Several datasets of one run may declare the same type; the name gets the dataset
    prefix first (``NAME@VERSION:mean``), then a counter.
    """
    seen: dict[str, int] = {}
    counts: dict[str, int] = {}
    for metric in metrics:
        counts[metric.name] = counts.get(metric.name, 0) + 1
    named: list[DeclaredMetric] = []
    for metric in metrics:
        name = metric.name
        if counts[name] > 1 and metric.dataset:
            name = f"{metric.dataset}:{name}"[:MAX_NAME]
            if not _NAME.match(name):
                name = metric.name
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            name = f"{name[: MAX_NAME - 4]}#{seen[name]}"
        named.append(metric.model_copy(update={"name": name}))
    return named


def builtin_value(kind: str, rows: Sequence[Mapping[str, float] | None]) -> MetricValue | None:
    """A built-in metric over the trials' rewards, as Harbor computes it.

    Args:
        kind: ``mean``, ``sum``, ``min`` or ``max``.
        rows: One per trial counted: its rewards (key → value), or None when it has none
            (ungraded, or no record): it counts 0 for every key.

    Returns:
        None with no rows; a number when the only key is ``reward`` (or no trial has a
        reward at all); else key → the aggregate of that key, a trial without the key
        counting 0.

    Raises:
        ValueError: An unknown ``kind``.
    """
    if kind not in BUILTIN_METRICS:
        raise ValueError(f"unknown built-in metric {kind!r}")
    if not rows:
        return None
    keys = sorted({key for row in rows if row is not None for key in row})
    if not keys:
        keys = ["reward"]
    values: dict[str, float] = {}
    for key in keys:
        column = []
        for row in rows:
            value = 0.0 if row is None else row.get(key, 0.0)
            column.append(value if math.isfinite(value) else 0.0)
        if kind == "mean":
            values[key] = math.fsum(column) / len(column)
        elif kind == "sum":
            values[key] = math.fsum(column)
        elif kind == "min":
            values[key] = min(column)
        else:
            values[key] = max(column)
    if keys == ["reward"]:
        return values["reward"]
    return values


__all__ = [
    "BUILTIN_METRICS",
    "MAX_METRICS",
    "MAX_SCRIPT_BYTES",
    "METRIC_FILENAME",
    "SCRIPT_METRIC",
    "DeclaredMetric",
    "LocalMetricPin",
    "MetricPinError",
    "MetricType",
    "MetricValue",
    "builtin_value",
    "cached_script",
    "check_local_pin",
    "check_metric_name",
    "local_dataset_metric",
    "local_pin",
    "parse_declared",
    "read_script",
    "script_digest",
    "store_script",
    "task_set_key",
    "unique_names",
    "unpinned_metric",
]
