"""Root changes read from an overlay upper dir (sandbox/root_scan.py), on a real kernel overlay.

The changes are made through a real ``mount -t overlay`` (as the engine's container root
is), then the upper dir is read as the harness reads a trial's writable layer: whiteouts,
opaque dirs, copied-up parents, hostile names, symlinks and the bounds.
"""

from __future__ import annotations

import base64
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.root_changes import RootChange, RootChanges
from sandbox.root_scan import MAX_DEPTH, baseline, escape_path, scan

pytestmark = pytest.mark.root


class Overlay:
    """A lower dir (the image) and a mounted overlay over it, like a container's root."""

    def __init__(self, top: Path) -> None:
        self.lower, self.upper = top / "lower", top / "upper"
        self.work, self.merged = top / "work", top / "merged"
        for path in (self.lower, self.upper, self.work, self.merged):
            path.mkdir()
        (self.lower / "etc").mkdir()
        (self.lower / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
        (self.lower / "etc" / "issue").write_text("Debian\n")
        (self.lower / "usr" / "bin").mkdir(parents=True)
        (self.lower / "usr" / "bin" / "python3").write_text("#!real\n")
        (self.lower / "usr" / "share" / "doc" / "a").mkdir(parents=True)
        (self.lower / "usr" / "share" / "doc" / "b").write_text("b\n")
        (self.lower / "opt").mkdir()

    def mount(self) -> None:
        options = f"lowerdir={self.lower},upperdir={self.upper},workdir={self.work}"
        subprocess.run(
            ["mount", "-t", "overlay", "overlay", "-o", options, str(self.merged)], check=True
        )

    def unmount(self) -> None:
        subprocess.run(["umount", str(self.merged)], check=False)

    def scan(self, **more: object) -> RootChanges:
        return scan(self.upper, (self.lower,), **more)  # type: ignore[arg-type]


@pytest.fixture
def overlay(tmp_path: Path) -> Iterator[Overlay]:
    made = Overlay(tmp_path)
    made.mount()
    yield made
    made.unmount()


def _by_path(changes: RootChanges) -> dict[str, RootChange]:
    return {c.path: c for c in changes.changes}


def test_added_modified_removed_and_opaque_dirs_as_the_kernel_writes_them(
    overlay: Overlay,
) -> None:
    m = overlay.merged
    (m / "usr" / "bin" / "python3").write_text("#!trojan\n")  # modified (copy-up)
    (m / "usr" / "bin" / "newtool").write_text("x")  # added
    os.chmod(m / "usr" / "bin" / "newtool", 0o4755)
    (m / "etc" / "issue").unlink()  # removed: a whiteout
    subprocess.run(["rm", "-rf", str(m / "usr" / "share" / "doc")], check=True)
    (m / "usr" / "share" / "doc").mkdir()  # an opaque dir over the lower one
    (m / "usr" / "share" / "doc" / "b").write_text("new b\n")
    (m / "opt" / "made").mkdir()
    os.symlink("/etc/shadow", m / "opt" / "made" / "link")
    (m / "etc" / "gone-again").write_text("x")
    (m / "etc" / "gone-again").unlink()  # made and removed: no change at all

    found = _by_path(overlay.scan())
    assert found["/usr/bin/python3"].kind == "modified"
    assert found["/usr/bin/python3"].size == len("#!trojan\n")
    assert found["/usr/bin/newtool"].kind == "added"
    assert found["/usr/bin/newtool"].mode == 0o4755
    assert found["/etc/issue"].kind == "removed" and found["/etc/issue"].type == "file"
    assert found["/usr/share/doc"].kind == "modified" and found["/usr/share/doc"].type == "dir"
    assert found["/usr/share/doc/a"].kind == "removed" and found["/usr/share/doc/a"].type == "dir"
    assert found["/usr/share/doc/b"].kind == "modified"
    assert found["/opt/made"].kind == "added"
    assert found["/opt/made/link"].type == "symlink"
    # Dirs only copied up to hold a changed child are not changes themselves.
    assert "/usr/bin" not in found and "/usr" not in found and "/etc" not in found
    assert "/etc/gone-again" not in found
    assert list(found) == sorted(found)


def test_the_baseline_and_the_trials_own_mount_points_are_left_out(overlay: Overlay) -> None:
    m = overlay.merged
    (m / "trial").mkdir()  # what the engine makes at start (a mount point)
    (m / "opt" / "harness").mkdir()
    base = baseline(overlay.upper, ["/trial"])
    (m / "trial" / "x").write_text("x")
    (m / "app").mkdir()
    (m / "app" / "work.txt").write_text("x")
    (m / "etc" / "new").write_text("x")
    found = _by_path(overlay.scan(base=base, skip=["/trial", "/app"]))
    assert set(found) == {"/etc/new"}, found


def test_hostile_names_are_kept_lossless_and_links_never_followed(overlay: Overlay) -> None:
    m = os.fsencode(overlay.merged)
    names = [b"caf\xe9-latin1", b"line\nbreak", b"back\\slash", "日本".encode()]
    for name in names:
        with open(m + b"/opt/" + name, "wb") as fh:
            fh.write(b"x")
    os.symlink(str(overlay.lower), overlay.merged / "opt" / "to-lower")
    found = overlay.scan().changes
    raw = {base64.b64decode(c.path_b64) if c.path_b64 else c.path.encode(): c for c in found}
    for name in names:
        assert b"/opt/" + name in raw, sorted(raw)
    assert "\n" not in "".join(c.path for c in found)
    assert raw[b"/opt/caf\xe9-latin1"].path == "/opt/caf\\xe9-latin1"
    assert raw[b"/opt/line\nbreak"].path == "/opt/line\\x0abreak"
    assert raw["/opt/日本".encode()].path_b64 is None
    # The link is listed as a link; nothing of what it points at is read.
    assert raw[b"/opt/to-lower"].type == "symlink"
    assert not any(c.path.startswith("/opt/to-lower/") for c in found)


def test_counts_and_depth_are_bounded_and_say_so(overlay: Overlay) -> None:
    many = overlay.merged / "opt" / "many"
    many.mkdir()
    for i in range(300):
        (many / f"f{i:04d}").write_bytes(b"")
    bounded = overlay.scan(limit=100)
    assert len(bounded.changes) == 100 and bounded.truncated
    assert bounded.total == 301  # every change counted, the first 100 kept
    deep = overlay.merged / "opt"
    fd = os.open(deep, os.O_RDONLY | os.O_DIRECTORY)
    try:  # deeper than the walk goes, built relative to a dir fd (past PATH_MAX)
        for _ in range(MAX_DEPTH + 20):
            os.mkdir("d", dir_fd=fd)
            nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
    finally:
        os.close(fd)
    (overlay.merged / "opt" / "zz-after").write_text("x")  # met after the cut subtree
    cut = overlay.scan()
    assert cut.truncated
    assert "/opt/zz-after" in {c.path for c in cut.changes}
    assert max(c.path.count("/") for c in cut.changes) <= MAX_DEPTH + 1


def test_escape_path_is_exact_for_plain_text() -> None:
    assert escape_path(b"/usr/bin/python3") == ("/usr/bin/python3", None)
    text, b64 = escape_path(b"/a\x01b")
    assert text == "/a\\x01b" and b64 is not None and base64.b64decode(b64) == b"/a\x01b"
