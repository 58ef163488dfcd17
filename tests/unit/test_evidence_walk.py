"""The evidence walk on real temp trees: deep, long, wide, many-filed, renamed, non-UTF-8.

Each tree is one an agent can leave in its workspace. The walk must neither raise nor hold
an fd per dir: every case here ends with events naming the cap it hit, a bounded copy, and
(for the fd cases) a measured peak of the process's open fds.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.evidence_diff import ObjectStore, snapshot_tree
from sandbox.inside.evidence import FD_WINDOW, EvidenceEvent, Limits, copy_tree, walk_tree

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    """A trial root; removed with ``rm -rf`` (pytest's own rmtree recurses per level)."""
    top = tmp_path / "root"
    (top / "ws").mkdir(parents=True)
    yield top
    subprocess.run(["rm", "-rf", str(top)], check=True)


def chain(top: Path, depth: int, name: str = "a", leaf: bytes | None = b"leaf") -> None:
    """``top/name/name/...`` ``depth`` levels deep, made by dir fd (no path is ever that long)."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir(name, dir_fd=fd)
            nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        if leaf is not None:
            out = os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
            os.write(out, leaf)
            os.close(out)
    finally:
        os.close(fd)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


class FdSampler:
    """A copy sink that also samples this process's open fds at every file."""

    def __init__(self, dest: Path) -> None:
        self.dest = dest
        self.peak = 0
        self.files = 0

    def __call__(self, sub: str, fd: int, limit: int) -> tuple[int, bool]:
        self.peak = max(self.peak, open_fds())
        self.files += 1
        data = os.read(fd, limit)
        return len(data), False


def caps(events: list[EvidenceEvent]) -> set[str]:
    return {e.cap for e in events if e.kind == "limit"}


def test_a_1200_deep_dir_is_a_depth_event_and_the_rest_is_kept(root: Path, tmp_path: Path) -> None:
    (root / "ws" / "answer.txt").write_text("42")
    chain(root / "ws", 1200)
    dest = tmp_path / "out"
    before = open_fds()
    sampler = FdSampler(dest)
    events = walk_tree(root, "ws", sampler, max_file_bytes=100, max_total_bytes=1000)
    assert caps(events) == {"depth"}
    depth_event = next(e for e in events if e.cap == "depth")
    assert depth_event.path.count("/a") == Limits().max_depth + 1
    assert sampler.files == 1  # answer.txt; the leaf is below the cap
    assert sampler.peak - before <= FD_WINDOW + 3
    assert open_fds() == before  # every fd closed


def test_a_30000_deep_path_is_an_event_not_enametoolong(root: Path, tmp_path: Path) -> None:
    chain(root / "ws", 30_000, name="d")
    (root / "ws" / "top.txt").write_bytes(b"top")
    dest = tmp_path / "out"
    limits = Limits(max_depth=1024, max_path_bytes=1000)
    events = copy_tree(root, "ws", dest, max_file_bytes=10, max_total_bytes=10, limits=limits)
    assert caps(events) == {"path_bytes"}
    assert (dest / "top.txt").read_bytes() == b"top"
    assert len(next(e.path for e in events if e.cap == "path_bytes")) <= 1000 + len("ws/") + 2
    # With the default caps the depth cap comes first.
    events = copy_tree(root, "ws", tmp_path / "out2", max_file_bytes=10, max_total_bytes=10)
    assert caps(events) == {"depth"}


def test_fds_stay_bounded_on_a_tree_wider_and_deeper_than_the_window(
    root: Path, tmp_path: Path
) -> None:
    for i in range(600):
        sub = root / "ws" / f"w{i:04d}"
        sub.mkdir()
        (sub / "f").write_bytes(b"x")
    chain(root / "ws" / "w0000", 60)
    before = open_fds()
    sampler = FdSampler(tmp_path / "out")
    events = walk_tree(root, "ws", sampler, max_file_bytes=10, max_total_bytes=1 << 20)
    assert events == []
    assert sampler.files == 601
    assert sampler.peak - before <= FD_WINDOW + 3
    assert open_fds() == before


def test_the_walk_runs_under_an_fd_limit_below_the_tree_width(root: Path) -> None:
    """In a process allowed 24 fds, a 2,000-dir-wide, 300-deep tree copies without EMFILE."""
    for i in range(2000):
        (root / "ws" / f"w{i:04d}").mkdir()
    chain(root / "ws" / "w0001", 300)
    script = (
        "import resource, sys\n"
        "from pathlib import Path\n"
        "from sandbox.inside.evidence import copy_tree, Limits\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (24, 24))\n"
        "ev = copy_tree(Path(sys.argv[1]), 'ws', Path(sys.argv[2]), max_file_bytes=10,\n"
        "               max_total_bytes=100, limits=Limits(max_depth=400, max_path_bytes=3000))\n"
        "print(sorted({(e.kind, e.cap) for e in ev}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(root), str(root.parent / "copy")],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"  # no error event: nothing hit EMFILE
    leaf = root.parent / "copy" / "w0001" / Path(*["a"] * 300) / "leaf.txt"
    assert os.read(fd := os.open(leaf, os.O_RDONLY), 10) == b"leaf"
    os.close(fd)
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] > 24  # only the child was limited


def test_many_tiny_files_stop_at_the_file_cap_and_the_block_cap(root: Path, tmp_path: Path) -> None:
    for i in range(300):
        (root / "ws" / f"f{i:03d}").write_bytes(b"x")
    dest = tmp_path / "files"
    events = copy_tree(
        root, "ws", dest, max_file_bytes=10, max_total_bytes=1 << 20, limits=Limits(max_files=50)
    )
    assert [(e.kind, e.cap) for e in events] == [("limit", "files")]
    assert len(list(dest.iterdir())) == 50
    # 4 KiB blocks: 20 one-byte files cost 80 KiB of disk, which a byte cap never sees.
    dest = tmp_path / "blocks"
    events = copy_tree(
        root,
        "ws",
        dest,
        max_file_bytes=10,
        max_total_bytes=1 << 20,
        limits=Limits(max_alloc_bytes=20 * 4096),
    )
    assert [(e.kind, e.cap) for e in events] == [("limit", "alloc_bytes")]
    assert len(list(dest.iterdir())) == 20


def test_the_entries_cap_bounds_a_walk_of_unchanged_files(root: Path, tmp_path: Path) -> None:
    for i in range(100):
        (root / "ws" / f"f{i:03d}").write_bytes(b"same")
    seed = {f"f{i:03d}": hashlib.sha256(b"same").hexdigest() for i in range(100)}
    manifest, events = snapshot_tree(
        root,
        "ws",
        store=ObjectStore(tmp_path / "objects"),
        seed=seed,
        links=tmp_path / "links",
        max_file_bytes=10,
        max_total_bytes=100,
        limits=Limits(max_files=5, max_entries=40),
    )
    # Unchanged files store nothing: the files cap (5) never applies, the entries cap does.
    assert [(e.kind, e.cap) for e in events] == [("limit", "entries")]
    assert manifest["files"] == [] and manifest["omitted"][0]["cap"] == "entries"


def test_a_dir_replaced_while_its_fd_was_closed_is_an_event(root: Path, tmp_path: Path) -> None:
    """A level closed by the window is re-opened by name and checked by device and inode."""
    (root / "ws" / "x").mkdir()
    chain(root / "ws" / "x", FD_WINDOW + 6)
    (root / "ws" / "x" / "zz.txt").write_text("after the deep part")
    swapped: list[str] = []

    def sink(sub: str, fd: int, limit: int) -> tuple[int, bool]:
        if sub.endswith("leaf.txt") and not swapped:
            os.rename(root / "ws" / "x", root / "ws" / "gone")
            (root / "ws" / "x").mkdir()
            (root / "ws" / "x" / "zz.txt").write_text("planted")
            swapped.append(sub)
        return len(os.read(fd, limit)), False

    events = walk_tree(root, "ws", sink, max_file_bytes=100, max_total_bytes=1000)
    assert swapped
    assert any(e.kind == "error" and "changed during the walk" in e.detail for e in events)


def test_names_that_are_not_utf8_are_kept_and_round_trip_through_the_manifest(
    root: Path, tmp_path: Path
) -> None:
    raw = b"caf\xe9-\xff.txt"
    wsb = os.fsencode(root / "ws")
    with open(os.path.join(wsb, raw), "wb") as fh:
        fh.write(b"latin-1 name")
    os.mkdir(os.path.join(wsb, b"\xfe-dir"))
    chain(Path(os.fsdecode(os.path.join(wsb, b"\xfe-dir"))), Limits().max_depth + 2)
    dest = tmp_path / "copy"
    events = copy_tree(root, "ws", dest, max_file_bytes=100, max_total_bytes=1000)
    assert (dest / os.fsdecode(raw)).read_bytes() == b"latin-1 name"
    assert os.path.exists(os.path.join(os.fsencode(dest), raw))  # the same bytes on disk
    depth = [e for e in events if e.cap == "depth"]
    assert depth and os.fsencode(depth[0].path).startswith(b"ws/\xfe-dir/")
    manifest, events = snapshot_tree(
        root,
        "ws",
        store=ObjectStore(tmp_path / "objects"),
        seed={},
        links=tmp_path / "links",
        max_file_bytes=100,
        max_total_bytes=1000,
    )
    text = json.dumps(manifest, separators=(",", ":"))
    text.encode("utf-8")  # writable as UTF-8: lone surrogates are escaped
    back = json.loads(text)
    assert back == manifest
    assert os.fsencode(back["files"][0]["path"]) == raw
    assert os.fsencode(back["omitted"][0]["path"]).startswith(b"\xfe-dir/")
    assert json.loads(json.dumps([e.as_dict() for e in events])) == [e.as_dict() for e in events]


def test_an_object_at_the_filesystem_s_link_limit_is_copied_not_an_error(
    root: Path, tmp_path: Path
) -> None:
    """Many trials making one file (every inode used by empty files) reach EMLINK on ext4."""
    store = ObjectStore(tmp_path / "objects")
    shared = store.put(b"")
    spare = tmp_path / "spare"
    spare.mkdir()
    hit = False
    for i in range(70_000):
        try:
            os.link(shared, spare / str(i))
        except OSError as exc:
            assert exc.errno == errno.EMLINK, exc
            hit = True
            break
    assert hit, "this filesystem has no link limit: run the test on ext4"
    (root / "ws" / "empty").write_bytes(b"")
    manifest, events = snapshot_tree(
        root,
        "ws",
        store=store,
        seed={},
        links=tmp_path / "links",
        max_file_bytes=10,
        max_total_bytes=10,
    )
    assert events == [] and [f["path"] for f in manifest["files"]] == ["empty"]
    assert (tmp_path / "links" / "empty").read_bytes() == b""
    subprocess.run(["rm", "-rf", str(spare)], check=True)
