"""Workspace seeding: bad paths rejected, planted symlinks never followed (attack #14)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from sandbox.errors import SeedingError
from sandbox.seeding import check_fixture_path, collect_fixture_dir, seed_workspace


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    ws.mkdir()
    return ws


@pytest.fixture
def outside(tmp_path: Path, canary: str) -> Path:
    out = tmp_path / "outside"
    out.mkdir()
    (out / "canary.txt").write_text(canary)
    return out


def snapshot(path: Path) -> dict[str, bytes | None]:
    """Every entry under ``path`` with its content (None for dirs), never following links."""
    found: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames:
            found[os.path.relpath(os.path.join(dirpath, name), path)] = None
        for name in filenames:
            full = os.path.join(dirpath, name)
            found[os.path.relpath(full, path)] = Path(full).read_bytes()
    return found


@pytest.mark.parametrize(
    "name",
    [
        "",
        " ",
        "\t\n",
        "/etc/passwd",
        "/abs/inside",
        "~",
        "~/x",
        "~root/.ssh/authorized_keys",
        "..",
        "../x",
        "a/../../x",
        "a/b/../../../x",
        "a\0b",
        "\0",
    ],
)
def test_bad_fixture_paths_are_rejected(name: str) -> None:
    with pytest.raises(SeedingError):
        check_fixture_path(name)


@pytest.mark.parametrize("name", [".", "./", "a/.."])
def test_paths_naming_the_workspace_itself_are_rejected(name: str, workspace: Path) -> None:
    # "." would make write_fixture open "" (a raw OSError); it is no fixture file at all.
    with pytest.raises(SeedingError):
        seed_workspace(workspace, {name: b"x"})


@pytest.mark.parametrize("name", ["a.txt", "dir/sub/b.txt", "a..b", "..hidden", "x/~y"])
def test_ordinary_paths_are_accepted(name: str, workspace: Path) -> None:
    check_fixture_path(name)
    seed_workspace(workspace, {name: b"data"})
    assert (workspace / name).read_bytes() == b"data"


def test_validation_is_all_or_nothing(workspace: Path) -> None:
    with pytest.raises(SeedingError, match=r"\.\./evil"):
        seed_workspace(workspace, {"good.txt": b"ok", "sub/also.txt": b"ok", "../evil": b"x"})
    assert list(workspace.iterdir()) == []


def test_dir_symlink_in_workspace_is_never_followed(
    workspace: Path, outside: Path, canary: str
) -> None:
    (workspace / "link").symlink_to(outside, target_is_directory=True)
    before = snapshot(outside)
    with pytest.raises(SeedingError, match="symlink"):
        seed_workspace(workspace, {"link/planted.txt": b"pwned"})
    with pytest.raises(SeedingError, match="symlink"):
        seed_workspace(workspace, {"link/new/deeper.txt": b"pwned"})
    assert snapshot(outside) == before
    assert (outside / "canary.txt").read_text() == canary


def test_file_symlink_in_workspace_is_never_written_through(
    workspace: Path, outside: Path, canary: str
) -> None:
    (workspace / "notes.txt").symlink_to(outside / "canary.txt")
    with pytest.raises(SeedingError, match="symlink"):
        seed_workspace(workspace, {"notes.txt": b"overwritten"})
    assert (outside / "canary.txt").read_text() == canary


def test_dangling_symlink_does_not_create_a_file_outside(workspace: Path, outside: Path) -> None:
    (workspace / "new.txt").symlink_to(outside / "created-by-seeding")
    with pytest.raises(SeedingError):
        seed_workspace(workspace, {"new.txt": b"x"})
    assert not (outside / "created-by-seeding").exists()


def test_symlinked_workspace_itself_is_not_followed(tmp_path: Path, outside: Path) -> None:
    ws_link = tmp_path / "ws-link"
    ws_link.symlink_to(outside, target_is_directory=True)
    before = snapshot(outside)
    with pytest.raises((SeedingError, OSError)):
        seed_workspace(ws_link, {"planted.txt": b"x"})
    assert snapshot(outside) == before


def test_exec_bit_is_kept_and_content_is_exact(workspace: Path) -> None:
    blob = bytes(range(256)) * 300
    seed_workspace(
        workspace,
        {"run.sh": (b"#!/bin/sh\necho hi\n", 0o755), "data.bin": blob, "plain.txt": (b"x", 0o644)},
    )
    assert os.stat(workspace / "run.sh").st_mode & stat.S_IXUSR
    assert not os.stat(workspace / "plain.txt").st_mode & 0o111
    assert not os.stat(workspace / "data.bin").st_mode & 0o111
    assert (workspace / "data.bin").read_bytes() == blob


def test_collect_fixture_dir_keeps_exec_bit_and_round_trips(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "bin").mkdir(parents=True)
    (src / "bin" / "tool").write_bytes(b"#!/bin/sh\n")
    (src / "bin" / "tool").chmod(0o755)
    (src / "readme").write_bytes(b"r")
    files = collect_fixture_dir(src)
    assert files == {"bin/tool": (b"#!/bin/sh\n", 0o755), "readme": (b"r", 0o644)}
    ws = tmp_path / "ws"
    ws.mkdir()
    seed_workspace(ws, files)
    assert os.stat(ws / "bin" / "tool").st_mode & stat.S_IXUSR


@pytest.mark.parametrize("kind", ["file_symlink", "dir_symlink", "fifo"])
def test_collect_fixture_dir_refuses_links_and_special_files(
    tmp_path: Path, outside: Path, kind: str
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    if kind == "file_symlink":
        (src / "leak").symlink_to(outside / "canary.txt")
    elif kind == "dir_symlink":
        (src / "leak").symlink_to(outside, target_is_directory=True)
    else:
        os.mkfifo(src / "leak")  # would block forever if opened for reading
    with pytest.raises(SeedingError, match="leak"):
        collect_fixture_dir(src)


def test_collect_fixture_dir_caps_total_size(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "big").write_bytes(b"x" * 2000)
    with pytest.raises(SeedingError, match="exceed"):
        collect_fixture_dir(src, max_bytes=1000)
