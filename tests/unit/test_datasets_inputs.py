"""The checks a registry, a lock and a ``--repo`` spec pass when read (harness.datasets.inputs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.datasets.inputs import (
    check_commit,
    check_git_url,
    check_ref,
    check_task_path,
    check_text,
)
from harness.datasets.lock import DatasetsLock, LockedTask, read_lock
from harness.datasets.model import DatasetError, Registry, is_full_sha
from harness.datasets.resolve import parse_repo

SHA1 = "0123456789abcdef0123456789abcdef01234567"
SHA256 = "0123456789abcdef" * 4
HASH = "sha256:" + "ab" * 32


def test_a_commit_is_exactly_40_or_64_lowercase_hex() -> None:
    assert check_commit(SHA1) == SHA1 and check_commit(SHA256) == SHA256
    assert is_full_sha(SHA1) and is_full_sha(SHA256)
    for bad in ["", "HEAD", SHA1.upper(), SHA1[:-1], SHA1 + "0", "--upload-pack=id", SHA1 + "\n"]:
        with pytest.raises(ValueError, match="full commit id"):
            check_commit(bad)


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("", ""),
        (".", ""),
        ("tasks/a", "tasks/a"),
        ("tasks/a/", "tasks/a"),
        ("./tasks/a", "tasks/a"),
    ],
)
def test_a_task_path_is_normalised(given: str, kept: str) -> None:
    assert check_task_path(given) == kept


@pytest.mark.parametrize(
    "bad", ["../x", "tasks/../../x", "/etc", "-x", "--output=f", "a//b", "a\nb", "a\0b", "./-x"]
)
def test_a_task_path_leaving_the_repository_or_looking_like_an_option_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="must be relative"):
        check_task_path(bad)


@pytest.mark.parametrize("good", ["HEAD", "main", "release/1.0", "v1.0", "abc1234", "feature-x"])
def test_ordinary_refs_pass(good: str) -> None:
    assert check_ref(good) == good


@pytest.mark.parametrize("bad", ["", "-x", "--upload-pack=id", "a b", "a..b", "a:b", "a\nb"])
def test_a_ref_like_an_option_or_a_range_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not a git ref"):
        check_ref(bad)


@pytest.mark.parametrize(
    "good",
    [
        "https://github.com/org/name.git",
        "http://127.0.0.1:8000/r.git",
        "git://127.0.0.1:9418/r",
        "ssh://git@host.example/org/r.git",
        "file:///srv/r.git",
        "git@host.example:org/name.git",
        "/srv/repos/r",
        "relative/dir",
    ],
)
def test_ordinary_git_urls_pass(good: str) -> None:
    assert check_git_url(good) == good


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "-uhelp",
        "--upload-pack=touch x",
        "ext::sh -c touch% x",
        "fd::3",
        "testgit::/r",
        "ssh://-oProxyCommand=touch% x/r",
        "ssh://user@-oProxyCommand=x/r",
        "ssh://%2doProxyCommand=x/r",
        "ssh://[-oProxyCommand=x]/r",
        "-oProxyCommand=x:r",
        "user@-oProxyCommand=x:r",
        "[-oProxyCommand=x]:r",
        "ftp://host/r",
        "https://host/r\nx",
    ],
)
def test_a_git_url_that_runs_a_command_or_is_an_option_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="git URL"):
        check_git_url(bad)


def test_text_refuses_control_characters() -> None:
    assert check_text("org/task-1") == "org/task-1"
    with pytest.raises(ValueError, match="control character"):
        check_text("a\x1b[2Jb")


def _task(**changes: str | None) -> dict[str, str | None]:
    task: dict[str, str | None] = {
        "name": "t", "dataset": "d@1", "git_url": "/srv/r", "commit": SHA1,
        "path": "tasks/t", "requested_ref": None, "content_hash": HASH,
    }  # fmt: skip
    task.update(changes)
    return task


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("commit", "--upload-pack=id > /tmp/x; false"),
        ("commit", "HEAD"),
        ("path", "../x"),
        ("path", "tasks/t/"),
        ("git_url", "ext::sh -c id"),
        ("requested_ref", "-x"),
        ("content_hash", "sha256:xyz"),
        ("content_hash", ""),
        ("name", "a\nb"),
    ],
)
def test_a_lock_is_refused_whole_naming_the_file_and_field(
    tmp_path: Path, field: str, value: str
) -> None:
    good = {"lock_version": 1, "registry": "r.json", "datasets": ["d@1"], "tasks": [_task()]}
    assert read_lock(_write(tmp_path / "good.json", good)).tasks[0].commit == SHA1
    bad = {**good, "tasks": [_task(), _task(**{field: value})]}
    lock_file = _write(tmp_path / "bad.json", bad)
    with pytest.raises(DatasetError) as caught:
        read_lock(lock_file)
    assert f"{lock_file}: tasks[1].{field}:" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_lock_of_another_version_is_refused(tmp_path: Path) -> None:
    lock_file = _write(tmp_path / "l.json", {"lock_version": 2, "tasks": [_task()]})
    with pytest.raises(DatasetError, match="lock_version"):
        read_lock(lock_file)


def test_the_models_refuse_on_construction_too() -> None:
    with pytest.raises(ValueError):
        LockedTask(name="t", git_url="/r", commit="--upload-pack=id", content_hash="")
    assert DatasetsLock().tasks == []


def test_a_registry_entry_naming_an_option_is_refused() -> None:
    for field, value in [
        ("git_commit_id", "--upload-pack=id"),
        ("path", "-x"),
        ("git_url", "ssh://-oProxyCommand=id/r"),
    ]:
        task = {"name": "t", "git_url": "/r", "path": "t", field: value}
        with pytest.raises(DatasetError, match=f"tasks.0.{field}"):
            Registry.parse([{"name": "d", "tasks": [task]}], "reg.json")


def test_a_repo_spec_is_checked_as_a_registry_is(tmp_path: Path) -> None:
    for spec in ["ext::sh -c id", "ssh://-oProxyCommand=id/r", f"{tmp_path}@-x"]:
        with pytest.raises(DatasetError, match="--repo"):
            parse_repo(spec)


def _write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data))
    return path
