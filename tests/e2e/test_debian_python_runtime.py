"""Debian 13's Python 3.13 runtime runs in a foreign image, never using the image's libc.

The entry (harness/agents/installed/debian_runtime.py) is built on the host from Debian's
mirror, mounted read-only into a container of the musl-only image (tests/e2e/musl_image.py:
musl's loader, busybox, no glibc, no python) as an unprivileged user with no network, and
its interpreter imports ``ssl`` and ``sqlite3`` there; its tmux starts a session there.
Judged from outside: the container's output and the entry, unchanged, checked against its
manifest afterwards.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from musl_image import build_musl_image
from support.docker import docker_client, require_image

from harness.agents.installed.base import INSTALL_MOUNT
from harness.agents.installed.cache import AgentCache
from harness.agents.installed.debian_runtime import (
    debian_python_spec,
    ensure_debian_python_agent,
)
from harness.agents.installed.python_runtime import python_argv

pytestmark = pytest.mark.docker


def test_python313_runs_in_a_musl_image_as_the_agent_user(tmp_path: Path) -> None:
    client = docker_client()
    require_image(client)
    image = build_musl_image(client, tmp_path / "image")
    cache = AgentCache()
    spec = debian_python_spec("python3.13-runtime", "1", ())
    entry = ensure_debian_python_agent(cache, spec, INSTALL_MOUNT)
    python = " ".join(python_argv(entry, INSTALL_MOUNT))
    script = (
        f"{python} -I -c 'import sys, ssl, sqlite3; print(sys.version_info[:2] >= (3, 12), "
        "sys.version.split()[0], sys.prefix, ssl.OPENSSL_VERSION)'; "
        f"{INSTALL_MOUNT}/bin/tmux -S /tmp/t.sock new-session -d -x 80 -y 20 && "
        f"{INSTALL_MOUNT}/bin/tmux -S /tmp/t.sock send-keys 'echo tmux-ran-$((6*7))' Enter && "
        f"sleep 1 && {INSTALL_MOUNT}/bin/tmux -S /tmp/t.sock capture-pane -p | grep -m1 tmux-ran-42"
        "; id -u; ls /lib"
    )
    out = client.containers.run(
        image, ["/bin/sh", "-c", script], remove=True, network_mode="none", user="1000:1000",
        environment={"TERM": "xterm", "SHELL": "/bin/sh", "HOME": "/tmp"},
        volumes={str(entry.path): {"bind": INSTALL_MOUNT, "mode": "ro"}},
    ).decode()  # fmt: skip
    lines = out.splitlines()
    ok, version, prefix, *openssl = lines[0].split()
    assert (ok, prefix, openssl[0]) == ("True", f"{INSTALL_MOUNT}/python", "OpenSSL"), out
    assert version.startswith("3.13."), out
    assert "tmux-ran-42" in lines, out
    assert "1000" in lines, out
    # The image had no glibc of its own: what ran was the entry's.
    assert "ld-musl-x86_64.so.1" in out and "ld-linux" not in out, out
    # The entry is unchanged (the reuse check hashes every file against its manifest).
    again = ensure_debian_python_agent(cache, spec, INSTALL_MOUNT)
    assert again.tree == entry.tree
