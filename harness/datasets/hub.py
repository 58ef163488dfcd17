"""Harbor Hub: datasets and tasks by ``ORG/NAME[@REF]``, read anonymously, checked on read.

The Hub's read API is the one Harbor's client uses (PostgREST tables, one RPC, a storage
bucket), at :func:`hub_url`:

- ``GET /rest/v1/dataset_version_tag`` (a tag), or ``GET /rest/v1/dataset_version`` (a
  revision number, or a ``sha256:`` digest): the dataset version of ``ORG/NAME@REF``.
- ``GET /rest/v1/dataset_version_task``: its task versions, paged, each
  ``{task_version: {content_hash, package: {name, org: {name}}}}`` (``null`` when hidden).
- ``POST /rest/v1/rpc/resolve_task_version`` ``{p_org, p_name, p_ref}``: one task version,
  ``{id, archive_path, content_hash, revision, yanked_at, yanked_reason}``.
- ``GET /storage/v1/object/authenticated/packages/<archive_path>``: its ``tar.gz``.

A ref is ``latest`` (none given), a revision number (digits), ``sha256:<hex>`` (a digest),
or else a tag. Every field of every answer is checked (:mod:`harness.datasets.inputs`)
before it is used; no field ever reaches a command line, and an archive path only ever
becomes a path of the Hub's own storage URL. Answers are bounded in size, redirects are
not followed.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from harness.datasets.inputs import (
    check_digest,
    check_hub_ref,
    check_package_name,
    check_ref,
    check_remote_git_url,
    check_storage_path,
    check_task_path,
    check_text,
)
from harness.datasets.model import DatasetError, RegistryTask

logger = logging.getLogger("harness.datasets")

#: Harbor Hub's public read API (the Supabase project Harbor's client reads).
DEFAULT_HUB_URL = "https://ofhuhcpkvzjlejydnvyd.supabase.co"
#: Overrides the Hub URL (a mirror, a test server).
HUB_URL_ENV = "HARNESS_HUB_URL"
#: The Hub's publishable (anonymous) key, sent as ``apikey`` when set.
HUB_KEY_ENV = "HARNESS_HUB_KEY"
#: Caps on what the Hub may send.
MAX_JSON_BYTES = 64 << 20
MAX_ARCHIVE_BYTES = 1 << 30
MAX_TASKS = 100_000
_PAGE = 1000
_TIMEOUT_SEC = 60.0
_BUCKET = "packages"
_VERSION_FIELDS = "id,revision,content_hash,description,yanked_at,yanked_reason"
_PACKAGE_EMBED = "package:package_id!inner(name,type,org:org_id!inner(name))"
_TASK_SELECT = (
    "task_version:task_version_id(content_hash,package:package_id(name,org:org_id(name)))"
)
_HUB_REF = re.compile(r"^[^@/\s]+/[^@/\s]+(?:@[^\s]*)?\Z")


def hub_url(given: str | None = None) -> str:
    """The Hub to read: ``given``, else ``$HARNESS_HUB_URL``, else Harbor's."""
    return (given or os.environ.get(HUB_URL_ENV) or DEFAULT_HUB_URL).rstrip("/")


def is_hub_ref(spec: str) -> bool:
    """Whether ``spec`` has the shape of a Hub ref, ``ORG/NAME[@REF]`` (no ``@`` before ``/``)."""
    return bool(_HUB_REF.match(spec))


def parse_ref(spec: str, what: str = "-d") -> tuple[str, str]:
    """``ORG/NAME[@REF]`` → (``ORG/NAME``, ref), both checked; the ref defaults to ``latest``.

    Raises:
        DatasetError: The name or the ref is refused, naming which and why.
    """
    name, _, ref = spec.partition("@")
    try:
        return check_package_name(name), check_hub_ref(ref or "latest")
    except ValueError as exc:
        raise DatasetError(f"{what} {spec[:120]!r}: {exc}") from None


@dataclass(frozen=True)
class HubTask:
    """One task of a Hub dataset: a package pinned by digest, or a git pin.

    Attributes:
        name: ``ORG/NAME``.
        digest: ``sha256:<hex>`` of the package (None for a git pin).
        git: The git pin (a mirror may serve one), checked as a registry task is, and
            naming a remote repository only (never a path of this machine).
    """

    name: str
    digest: str | None = None
    git: RegistryTask | None = None


@dataclass(frozen=True)
class HubDataset:
    """A dataset version of the Hub.

    Attributes:
        name: ``ORG/NAME``.
        asked: The ref asked for.
        digest: The version's own ``sha256:`` digest.
        description: Its description.
        tasks: Its tasks.
        warnings: What the user should know (a yanked version).
    """

    name: str
    asked: str
    digest: str
    description: str
    tasks: list[HubTask]
    warnings: list[str] = field(default_factory=list)

    @property
    def ref(self) -> str:
        """``ORG/NAME@sha256:<hex>``: the version, pinned."""
        return f"{self.name}@{self.digest}"


@dataclass(frozen=True)
class TaskVersion:
    """One task version of the Hub: where its archive is and what it must hash to.

    Attributes:
        name: ``ORG/NAME``.
        digest: ``sha256:<hex>``.
        archive_path: Its archive's path in the Hub's storage.
        warnings: What the user should know (a yanked version).
    """

    name: str
    digest: str
    archive_path: str
    warnings: list[str] = field(default_factory=list)


class Hub:
    """A reader of the Hub at ``url`` (default :func:`hub_url`).

    Args:
        url: The Hub's base URL.
    """

    def __init__(self, url: str | None = None) -> None:
        self.url = hub_url(url)
        key = os.environ.get(HUB_KEY_ENV)
        headers = {"apikey": key, "Authorization": f"Bearer {key}"} if key else {}
        import httpx  # here, not at the top: only a run that reads the network loads it

        self._http = httpx.Client(
            base_url=self.url, headers=headers, timeout=_TIMEOUT_SEC, follow_redirects=False
        )

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def _unreachable(self, exc: Exception) -> DatasetError:
        return DatasetError(
            f"Harbor Hub {self.url} is unreachable ({exc}): give a reachable Hub or mirror "
            f"with --hub-url URL or ${HUB_URL_ENV}, or use the legacy registry "
            "(--registry-url, --registry-path)"
        )

    def _get_json(self, method: str, path: str, **kwargs: Any) -> Any:
        import httpx  # here, not at the top: only a run that reads the network loads it

        try:
            with self._http.stream(method, path, **kwargs) as response:
                if response.status_code >= 300:
                    if response.status_code in (404, 406):
                        return None
                    if response.status_code in (401, 403):
                        raise DatasetError(
                            f"Harbor Hub {self.url} refused an anonymous read "
                            f"({response.status_code}): set ${HUB_KEY_ENV} to the Hub's "
                            "publishable key (docs/datasets.md, Harbor Hub)"
                        )
                    raise DatasetError(
                        f"Harbor Hub {self.url} answered {response.status_code} to {path}: "
                        f"check --hub-url / ${HUB_URL_ENV}"
                    )
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > MAX_JSON_BYTES:
                        raise DatasetError(
                            f"Harbor Hub {self.url}: the answer to {path} is larger than "
                            f"{MAX_JSON_BYTES} bytes; refusing it"
                        )
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from None
        try:
            return json.loads(bytes(body))
        except ValueError:
            raise DatasetError(f"Harbor Hub {self.url}: the answer to {path} is not JSON") from None

    def _select(self, table: str, params: dict[str, str]) -> list[dict[str, Any]]:
        rows = self._get_json("GET", f"/rest/v1/{table}", params=params)
        if rows is None:
            return []
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise DatasetError(f"Harbor Hub {self.url}: {table} did not answer a list of rows")
        return rows

    def dataset(self, spec: str) -> HubDataset:
        """The dataset version ``ORG/NAME[@REF]`` names, with its tasks.

        Raises:
            DatasetError: Not on the Hub, unreachable, hidden tasks, or a field refused.
        """
        name, ref = parse_ref(spec, "-d")
        org, short = name.split("/")
        common = {
            "package.name": f"eq.{short}",
            "package.type": "eq.dataset",
            "package.org.name": f"eq.{org}",
            "limit": "1",
        }
        version: Any
        if ref.startswith("sha256:") or ref.isdigit():
            column = "revision" if ref.isdigit() else "content_hash"
            value = ref.removeprefix("sha256:")
            rows = self._select(
                "dataset_version",
                {"select": f"{_VERSION_FIELDS},{_PACKAGE_EMBED}", column: f"eq.{value}", **common},
            )
            version = rows[0] if rows else None
        else:
            rows = self._select(
                "dataset_version_tag",
                {
                    "select": (
                        f"dataset_version:dataset_version_id({_VERSION_FIELDS}),{_PACKAGE_EMBED}"
                    ),
                    "tag": f"eq.{ref}",
                    **common,
                },
            )
            version = rows[0].get("dataset_version") if rows else None
        if not isinstance(version, dict):
            raise DatasetError(
                f"dataset {name}@{ref} is not on Harbor Hub {self.url} (no such dataset, "
                "version or tag)"
            )
        where = f"Harbor Hub {self.url}: dataset {name}@{ref}"
        version_id = _field(version, "id", where)
        digest = _checked(check_digest, version.get("content_hash"), f"{where}: content_hash")
        description = version.get("description") or ""
        description = _checked(check_text, str(description)[:1024], f"{where}: description")
        warnings = _yanked(version, f"dataset {name}@{ref}")
        tasks = self._tasks(str(version_id), where)
        return HubDataset(name, ref, digest, description, tasks, warnings)

    def _tasks(self, version_id: str, where: str) -> list[HubTask]:
        tasks: list[HubTask] = []
        hidden = 0
        offset = 0
        while True:
            rows = self._select(
                "dataset_version_task",
                {
                    "select": _TASK_SELECT,
                    "dataset_version_id": f"eq.{version_id}",
                    "order": "task_version_id",
                    "limit": str(_PAGE),
                    "offset": str(offset),
                },
            )
            for index, row in enumerate(rows):
                version = row.get("task_version")
                if version is None:
                    hidden += 1
                    continue
                tasks.append(_task(version, f"{where}: tasks[{offset + index}]"))
            if len(tasks) > MAX_TASKS:
                raise DatasetError(f"{where}: more than {MAX_TASKS} tasks; refusing it")
            if len(rows) < _PAGE:
                break
            offset += _PAGE
        if hidden:
            raise DatasetError(
                f"{where}: {hidden} of its task versions are not readable anonymously "
                "(private or hidden)"
            )
        return tasks

    def task_version(self, name: str, ref: str) -> TaskVersion:
        """The task version ``ORG/NAME@REF`` (``ref`` checked already), with its archive.

        Raises:
            DatasetError: Not on the Hub, unreachable, or a field refused.
        """
        org, short = name.split("/")
        row = self._get_json(
            "POST",
            "/rest/v1/rpc/resolve_task_version",
            json={"p_org": org, "p_name": short, "p_ref": ref},
        )
        if isinstance(row, list):
            row = row[0] if row else None
        if not isinstance(row, dict):
            raise DatasetError(f"task {name}@{ref} is not on Harbor Hub {self.url}")
        where = f"Harbor Hub {self.url}: task {name}@{ref}"
        digest = _checked(check_digest, row.get("content_hash"), f"{where}: content_hash")
        archive = _checked(check_storage_path, row.get("archive_path"), f"{where}: archive_path")
        if ref.startswith("sha256:") and digest != ref:
            raise DatasetError(f"{where}: the Hub answered another digest, {digest}")
        return TaskVersion(name, digest, archive, _yanked(row, f"task {name}@{ref}"))

    def download(self, version: TaskVersion, dest: Path) -> None:
        """Write the archive of ``version`` to the new file ``dest`` (bounded in size).

        Raises:
            DatasetError: Unreachable, not found, or larger than :data:`MAX_ARCHIVE_BYTES`.
        """
        import httpx  # here, not at the top: only a run that reads the network loads it

        path = f"/storage/v1/object/authenticated/{_BUCKET}/{quote(version.archive_path)}"
        try:
            with (
                self._http.stream("GET", path) as response,
                open(dest, "xb") as out,
            ):
                if response.status_code >= 300:
                    raise DatasetError(
                        f"Harbor Hub {self.url}: the archive of {version.name}@{version.digest} "
                        f"cannot be had ({response.status_code} for {path})"
                    )
                size = 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > MAX_ARCHIVE_BYTES:
                        raise DatasetError(
                            f"Harbor Hub {self.url}: the archive of {version.name}@"
                            f"{version.digest} is larger than {MAX_ARCHIVE_BYTES} bytes; "
                            "refusing it"
                        )
                    out.write(chunk)
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from None


def _checked(check: Any, value: object, where: str) -> str:
    try:
        return str(check(value))
    except (ValueError, TypeError) as exc:
        raise DatasetError(f"{where}: {exc}; refusing the Hub's answer") from None


def _field(row: dict[str, Any], key: str, where: str) -> str:
    value = row.get(key)
    if not isinstance(value, str | int) or not re.match(r"^[A-Za-z0-9_-]{1,128}\Z", str(value)):
        raise DatasetError(f"{where}: {key} {str(value)[:80]!r} is not an id; refusing it")
    return str(value)


def _yanked(row: dict[str, Any], label: str) -> list[str]:
    if not row.get("yanked_at"):
        return []
    reason = row.get("yanked_reason")
    text = f": {check_text(str(reason)[:200], 'reason')}" if isinstance(reason, str) else ""
    return [f"{label} is yanked{text} (pin another version)"]


def _task(version: Any, where: str) -> HubTask:
    if not isinstance(version, dict):
        raise DatasetError(f"{where}: not a task version; refusing the Hub's answer")
    package = version.get("package")
    org = package.get("org") if isinstance(package, dict) else None
    if not isinstance(package, dict) or not isinstance(org, dict):
        raise DatasetError(f"{where}: no package name; refusing the Hub's answer")
    name = _checked(check_package_name, f"{org.get('name')}/{package.get('name')}", where)
    if version.get("git_url") is not None:
        try:
            git = RegistryTask(
                name=name,
                git_url=check_remote_git_url(str(version.get("git_url"))),
                git_commit_id=check_ref(str(version.get("git_commit_id") or "HEAD")),
                path=check_task_path(str(version.get("path") or "")),
            )
        except ValueError as exc:
            raise DatasetError(f"{where}: {exc}; refusing the Hub's answer") from None
        return HubTask(name, None, git)
    digest = _checked(check_digest, version.get("content_hash"), f"{where}: content_hash")
    return HubTask(name, digest)


__all__ = [
    "DEFAULT_HUB_URL",
    "HUB_KEY_ENV",
    "HUB_URL_ENV",
    "Hub",
    "HubDataset",
    "HubTask",
    "TaskVersion",
    "hub_url",
    "is_hub_ref",
    "parse_ref",
]
