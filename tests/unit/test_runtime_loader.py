"""The supervisor's loader and command line (sandbox/docker/runtime.py), without an engine.

The loader of the runtime volume reads no ``/etc/ld.so.preload`` (its one built-in path is
renamed into the supervisor's read-only mount), no ``/etc/ld.so.cache``, and only the
runtime's libraries: a root agent's plants in the container's root stay out of every
supervisor, the one-shot ones included (tests/security/test_supervisor_trust.py attacks it).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from support.docker import prerequisite_missing

from sandbox.docker.runtime import (
    NO_PRELOAD_LIST,
    PRELOAD_LIST,
    PRELOAD_PATCH,
    PYTHON_MOUNT,
    RUNTIME_LOADER,
    SUPERVISOR_MOUNT,
    DockerRuntime,
)

HOST_LOADER = Path("/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")


def test_the_supervisor_starts_on_the_runtimes_own_loader_and_libraries() -> None:
    fake = cast(Any, SimpleNamespace(supervisor_file=f"{SUPERVISOR_MOUNT}/supervisor.pyc"))
    argv = DockerRuntime.supervisor_command(fake)
    assert argv == [
        f"{PYTHON_MOUNT}/{RUNTIME_LOADER}",
        "--inhibit-cache",
        "--library-path",
        f"{PYTHON_MOUNT}/lib/x86_64-linux-gnu",
        f"{PYTHON_MOUNT}/bin/python3",
        "-I",
        "-S",
        f"{SUPERVISOR_MOUNT}/supervisor.pyc",
    ]


def test_the_preload_list_is_renamed_into_the_read_only_mount() -> None:
    assert len(NO_PRELOAD_LIST) == len(PRELOAD_LIST)  # an in-place rename of a C string
    assert NO_PRELOAD_LIST.decode().startswith(SUPERVISOR_MOUNT + "/")
    # Nothing the runtime stages is ever called that (the staged files are modules).
    assert not NO_PRELOAD_LIST.decode().endswith((".py", ".pyc"))


def test_the_patch_makes_a_working_loader_that_names_no_etc_preload(tmp_path: Path) -> None:
    if not HOST_LOADER.is_file() or sys.platform != "linux":
        prerequisite_missing(f"glibc's x86-64 loader at {HOST_LOADER}")
    usr = tmp_path / "usr"
    script = PRELOAD_PATCH.replace("'/usr/", f"'{usr}/")
    (usr / "lib" / "x86_64-linux-gnu").mkdir(parents=True)
    (usr / "lib" / "x86_64-linux-gnu" / HOST_LOADER.name).write_bytes(HOST_LOADER.read_bytes())
    subprocess.run([sys.executable, "-I", "-S", "-c", script], check=True)
    patched = usr / RUNTIME_LOADER
    data = patched.read_bytes()
    assert PRELOAD_LIST not in data and data.count(NO_PRELOAD_LIST) == 1
    assert stat.S_IMODE(patched.stat().st_mode) == 0o755
    assert not (usr / f"{RUNTIME_LOADER}.tmp").exists()
    # It still loads a program: the host's python, on the host's libraries.
    out = subprocess.run(
        [
            str(patched),
            "--inhibit-cache",
            "--library-path",
            str(HOST_LOADER.parent),
            os.path.realpath(sys.executable),
            "-I",
            "-S",
            "-c",
            "print('loaded')",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "loaded"
