"""Hub refs, package locks and package archives: what each may hold, checked on read."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
from support.harbor_hub import harbor_digest, make_task, pack

from harness.datasets import DatasetError, read_lock
from harness.datasets.hub import is_hub_ref, parse_ref
from harness.datasets.packages import PackageError, package_digest, unpack

DIGEST = "sha256:" + "ab" * 32


def test_hub_refs_are_told_from_registry_names_and_checked() -> None:
    assert is_hub_ref("terminal-bench/terminal-bench-2-1")
    assert is_hub_ref("acme/task@sha256:" + "0" * 64)
    assert not is_hub_ref("terminal-bench@2.0") and not is_hub_ref("demo@1.0/alpha")
    assert parse_ref("acme/set") == ("acme/set", "latest")
    assert parse_ref("acme/set@SHA256:" + "AB" * 32) == ("acme/set", DIGEST)
    for bad in ["acme/set@--upload-pack=x", "-x/set", "acme/../set", "acme/set@a b"]:
        with pytest.raises(DatasetError):
            parse_ref(bad)


def _package_task(**fields: object) -> dict[str, object]:
    return {
        "name": "acme/t",
        "package": "acme/t",
        "digest": DIGEST,
        "content_hash": DIGEST,
        **fields,
    }


def test_a_lock_of_packages_reads_back_and_a_mixed_or_bad_one_is_refused(tmp_path: Path) -> None:
    lock = tmp_path / "l.json"
    lock.write_text(json.dumps({"lock_version": 1, "tasks": [_package_task()]}))
    task = read_lock(lock).tasks[0]
    assert task.is_package and task.source == f"acme/t@{DIGEST}"
    for field, value in [
        ("package", "-rf/x"),
        ("digest", "sha256:" + "AB" * 32),
        ("digest", "../x"),
        ("git_url", "/r"),
        ("commit", "a" * 40),
    ]:
        lock.write_text(json.dumps({"tasks": [_package_task(**{field: value})]}))
        with pytest.raises(DatasetError, match="refusing the whole lock"):
            read_lock(lock)


def test_the_package_digest_is_harbors_and_an_unpacked_archive_has_it(tmp_path: Path) -> None:
    task = make_task(tmp_path / "src", "alpha")
    (task / "notes.txt").write_text("not covered\n")
    assert package_digest(task) == "sha256:" + harbor_digest(task)
    out = tmp_path / "out"
    out.mkdir()
    assert unpack(io.BytesIO(pack(task)), out) == 4
    assert package_digest(out) == package_digest(task)
    assert not (out / "notes.txt").exists()  # what the digest does not cover is not written
    assert (out / "tests" / "test.sh").stat().st_mode & 0o100


def test_a_member_given_twice_or_a_file_under_a_file_is_refused(tmp_path: Path) -> None:
    for names in (["task.toml", "task.toml"], ["tests/test.sh", "tests/test.sh/x"]):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            for name in names:
                info = tarfile.TarInfo(name)
                info.size = 1
                tar.addfile(info, io.BytesIO(b"x"))
        out = tmp_path / f"out{len(list(tmp_path.iterdir()))}"
        out.mkdir()
        with pytest.raises(PackageError):
            unpack(io.BytesIO(buffer.getvalue()), out)
    with pytest.raises(PackageError, match="not a readable tar.gz"):
        unpack(io.BytesIO(b"not a tar"), out)
