"""Laying unpacked Debian packages out as the runtime never reads a host file through a link.

The packages come from Debian's mirror, checked by apt against the host's keyring, and are
unpacked with ``dpkg-deb -x`` into a staging dir; a library there that is a link out of
that dir (``libevil.so.1 -> /etc/…``, or ``../../../../…``) must not pull the host's file
into the cache entry, which every sandbox then reads. Judged from outside: the entry's
files hold none of the host file's bytes.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from harness.agents.installed.debian_runtime import PYTHON_XY, lay_out


def _unpacked(root: Path, host_file: Path) -> None:
    """A minimal unpacked tree: interpreter, tmux, stdlib, loader, libc, and two bad links."""
    (root / "usr/bin").mkdir(parents=True)
    for name in (f"python{PYTHON_XY}", "tmux"):
        (root / "usr/bin" / name).write_bytes(b"\x7fELF binary")
    stdlib = root / "usr/lib" / f"python{PYTHON_XY}"
    stdlib.mkdir(parents=True)
    (stdlib / "os.py").write_text("# os\n")
    libs = root / "usr/lib/x86_64-linux-gnu"
    libs.mkdir(parents=True)
    (libs / "ld-linux-x86-64.so.2").write_bytes(b"\x7fELF loader")
    (libs / "libc.so.6").write_bytes(b"\x7fELF libc")
    (libs / "libz.so.1.3").write_bytes(b"\x7fELF z")
    (libs / "libz.so.1").symlink_to("libz.so.1.3")  # an ordinary SONAME link: kept
    (libs / "libevil.so.1").symlink_to(host_file)  # absolute, out of the tree
    (libs / "libevil2.so.1").symlink_to(os.path.relpath(host_file, libs))  # relative, out


def test_links_out_of_the_unpacked_tree_pull_no_host_file_into_the_entry(tmp_path: Path) -> None:
    secret = f"host-secret-{secrets.token_hex(16)}".encode()
    host_file = tmp_path / "host" / "secret.txt"
    host_file.parent.mkdir()
    host_file.write_bytes(secret)
    root = tmp_path / "unpacked"
    _unpacked(root, host_file)
    entry = tmp_path / "entry"
    entry.mkdir()
    lay_out(root, entry / "python", "x86_64")

    libs = entry / "python" / "libs"
    assert (libs / "libc.so.6").read_bytes() == b"\x7fELF libc"
    assert os.readlink(libs / "libz.so.1") == "libz.so.1.3"
    for path in entry.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert secret not in path.read_bytes(), path
    # Nor is a link out of the entry left for the sandbox to follow.
    links = [p for p in entry.rglob("*") if p.is_symlink()]
    assert [p.name for p in links] == ["libz.so.1"]
