"""Evidence copy-out (attack #31): planted symlinks, FIFOs, devices, huge files."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from sandbox.inside.evidence import EvidenceEvent, copy_file, copy_tree, read_file

T = TypeVar("T")


def no_hang(fn: Callable[[], T], timeout: float = 10.0) -> T:
    """Run ``fn`` in a daemon thread; fail (instead of hanging the suite) if it blocks."""
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the caller
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"blocked for more than {timeout}s"
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    (r / "session").mkdir(parents=True)
    return r


@pytest.fixture
def outside(tmp_path: Path, canary: str) -> Path:
    out = tmp_path / "outside"
    out.mkdir()
    (out / "canary.txt").write_text(canary)
    return out


def tree_text(path: Path) -> str:
    """All bytes of every regular file under ``path`` (or of the file itself)."""
    if path.is_file():
        return path.read_bytes().decode("latin-1")
    chunks = []
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(dirpath, name)
            if not os.path.islink(full):
                chunks.append(Path(full).read_bytes().decode("latin-1"))
    return "".join(chunks)


def kinds(events: list[EvidenceEvent]) -> dict[str, str]:
    return {e.path: e.kind for e in events}


def test_regular_files_are_copied_byte_exact(root: Path, tmp_path: Path) -> None:
    blob = os.urandom(300_000) + b"\0\r\n\x1b[31m"
    (root / "session" / "t.jsonl").write_bytes(blob)
    (root / "session" / "sub").mkdir()
    (root / "session" / "sub" / "empty").write_bytes(b"")
    assert copy_file(root, "session/t.jsonl", tmp_path / "out.jsonl", max_bytes=1 << 20) == []
    assert (tmp_path / "out.jsonl").read_bytes() == blob
    data, event = read_file(root, "session/t.jsonl", max_bytes=1 << 20)
    assert event is None and data == blob
    events = copy_tree(
        root, "session", tmp_path / "tree", max_file_bytes=1 << 20, max_total_bytes=1 << 21
    )
    assert events == []
    assert (tmp_path / "tree" / "t.jsonl").read_bytes() == blob
    assert (tmp_path / "tree" / "sub" / "empty").read_bytes() == b""


def test_planted_file_symlink_is_refused_everywhere(
    root: Path, outside: Path, tmp_path: Path, canary: str
) -> None:
    (root / "session" / "t.jsonl").symlink_to(outside / "canary.txt")
    dest = tmp_path / "dest"
    events = copy_file(root, "session/t.jsonl", dest / "t.jsonl", max_bytes=1 << 20)
    assert [e.kind for e in events] == ["symlink"]
    assert not (dest / "t.jsonl").exists()
    data, event = read_file(root, "session/t.jsonl", max_bytes=1 << 20)
    assert data is None and event is not None and event.kind == "symlink"
    events = copy_tree(
        root, "session", dest / "tree", max_file_bytes=1 << 20, max_total_bytes=1 << 20
    )
    assert kinds(events) == {"session/t.jsonl": "symlink"}
    assert events[0].as_dict()["type"] == "evidence"
    assert canary not in (tree_text(dest) if dest.exists() else "")


def test_planted_dir_symlink_is_never_walked(
    root: Path, outside: Path, tmp_path: Path, canary: str
) -> None:
    (root / "session" / "escape").symlink_to(outside, target_is_directory=True)
    (root / "session" / "ok.txt").write_text("fine")
    dest = tmp_path / "tree"
    events = copy_tree(root, "session", dest, max_file_bytes=1 << 20, max_total_bytes=1 << 20)
    assert kinds(events) == {"session/escape": "symlink"}
    assert (dest / "ok.txt").read_text() == "fine"
    assert canary not in tree_text(dest)
    assert not (dest / "escape").exists()


def test_symlinked_parent_dir_is_refused(
    root: Path, outside: Path, tmp_path: Path, canary: str
) -> None:
    (root / "logs").symlink_to(outside, target_is_directory=True)
    dest = tmp_path / "dest"
    events = copy_file(root, "logs/canary.txt", dest / "x", max_bytes=1 << 20)
    assert [e.kind for e in events] == ["symlink"]
    assert not dest.exists()
    data, event = read_file(root, "logs/canary.txt", max_bytes=1 << 20)
    assert data is None and event is not None and event.kind == "symlink"
    # Copying the symlinked dir itself as a tree is refused too.
    events = copy_tree(root, "logs", dest / "tree", max_file_bytes=1 << 20, max_total_bytes=1 << 20)
    assert [e.kind for e in events] == ["symlink"]
    assert canary not in (tree_text(dest) if dest.exists() else "")


def test_symlinked_root_is_refused(outside: Path, tmp_path: Path) -> None:
    fake_root = tmp_path / "fake-root"
    fake_root.symlink_to(outside, target_is_directory=True)
    data, event = read_file(fake_root, "canary.txt", max_bytes=100)
    assert data is None and event is not None


def test_fifo_never_blocks(root: Path, tmp_path: Path) -> None:
    os.mkfifo(root / "session" / "t.jsonl")
    dest = tmp_path / "dest"
    events = no_hang(lambda: copy_file(root, "session/t.jsonl", dest / "x", max_bytes=100))
    assert [e.kind for e in events] == ["fifo"]
    data, event = no_hang(lambda: read_file(root, "session/t.jsonl", max_bytes=100))
    assert data is None and event is not None and event.kind == "fifo"
    events = no_hang(
        lambda: copy_tree(root, "session", dest / "t", max_file_bytes=100, max_total_bytes=100)
    )
    assert kinds(events) == {"session/t.jsonl": "fifo"}
    assert not (dest / "x").exists()


@pytest.fixture
def short_root() -> Iterator[Path]:
    """A trial root with a short path: an AF_UNIX socket path must fit in 108 bytes."""
    base = Path(tempfile.mkdtemp(prefix="ev", dir="/tmp"))
    (base / "session").mkdir()
    yield base
    shutil.rmtree(base, ignore_errors=True)


def test_unix_socket_is_refused(short_root: Path, tmp_path: Path) -> None:
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(short_root / "session" / "sock"))
        events = no_hang(
            lambda: copy_file(short_root, "session/sock", tmp_path / "x", max_bytes=100)
        )
        assert [e.kind for e in events] == ["socket"]
        data, event = no_hang(lambda: read_file(short_root, "session/sock", max_bytes=100))
        assert data is None and event is not None and event.kind == "socket"
    finally:
        server.close()


@pytest.mark.root
def test_device_node_is_never_read(root: Path, tmp_path: Path) -> None:
    dev = root / "session" / "t.jsonl"
    os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 5))  # /dev/zero: an endless read
    dest = tmp_path / "dest"
    events = no_hang(lambda: copy_file(root, "session/t.jsonl", dest / "x", max_bytes=1 << 30))
    assert [e.kind for e in events] == ["device"]
    assert not (dest / "x").exists()
    data, event = no_hang(lambda: read_file(root, "session/t.jsonl", max_bytes=1 << 30))
    assert data is None and event is not None and event.kind == "device"
    events = no_hang(
        lambda: copy_tree(
            root, "session", dest / "t", max_file_bytes=1 << 30, max_total_bytes=1 << 30
        )
    )
    assert kinds(events) == {"session/t.jsonl": "device"}
    assert not (dest / "t" / "t.jsonl").exists()


def test_too_large_file_is_truncated_with_an_event(root: Path, tmp_path: Path) -> None:
    (root / "session" / "big").write_bytes(b"a" * 1000 + b"b" * 1000)
    events = copy_file(root, "session/big", tmp_path / "big", max_bytes=1000)
    assert [e.kind for e in events] == ["too_large"]
    assert (tmp_path / "big").read_bytes() == b"a" * 1000
    data, event = read_file(root, "session/big", max_bytes=1000)
    assert data is None and event is not None and event.kind == "too_large"
    data, event = read_file(root, "session/big", max_bytes=2000)
    assert event is None and data is not None and len(data) == 2000


def test_tree_caps_per_file_and_total(root: Path, tmp_path: Path) -> None:
    for i in range(5):
        (root / "session" / f"f{i}").write_bytes(b"x" * 100)
    dest = tmp_path / "tree"
    events = copy_tree(root, "session", dest, max_file_bytes=60, max_total_bytes=150)
    copied = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    assert copied <= 150
    assert all(p.stat().st_size <= 60 for p in dest.rglob("*") if p.is_file())
    assert "too_large" in {e.kind for e in events}


def test_tree_caps_file_count(root: Path, tmp_path: Path) -> None:
    for i in range(5):
        (root / "session" / f"f{i}").write_bytes(b"x")
    dest = tmp_path / "tree"
    events = copy_tree(root, "session", dest, max_file_bytes=10, max_total_bytes=100, max_files=3)
    assert len(list(dest.iterdir())) == 3
    assert [(e.kind, e.cap) for e in events] == [("limit", "files")]


@pytest.mark.parametrize("rel", ["../outside/canary.txt", "session/../../outside/canary.txt"])
def test_dot_dot_paths_are_rejected(root: Path, outside: Path, tmp_path: Path, rel: str) -> None:
    with pytest.raises(ValueError):
        read_file(root, rel, max_bytes=100)
    with pytest.raises(ValueError):
        copy_file(root, rel, tmp_path / "x", max_bytes=100)
    assert not (tmp_path / "x").exists()


def test_missing_file_is_an_event_only_when_required(root: Path, tmp_path: Path) -> None:
    assert copy_file(root, "session/none", tmp_path / "x", max_bytes=10) == []
    events = copy_file(root, "session/none", tmp_path / "x", max_bytes=10, required=True)
    assert [e.kind for e in events] == ["missing"]
    data, event = read_file(root, "session/none", max_bytes=10)
    assert data is None and event is not None and event.kind == "missing"
    assert copy_tree(root, "nothing", tmp_path / "t", max_file_bytes=1, max_total_bytes=1) == []
