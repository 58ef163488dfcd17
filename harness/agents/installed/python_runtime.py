"""A Python runtime of the harness's own for Python agent CLIs (mini-swe-agent, aider).

A Python agent must not run on the image's Python: a task image may have none, or one of
another version, or one the task planted. no PyPI package we found ships a relocatable
CPython interpreter (``pbs-installer``, ``getpybs`` and ``portable-python`` download or
build one from GitHub at run time), so the
runtime is the host's own CPython, the one the harness runs on, *relocated* into the
agent's cache entry with everything it loads:

- ``python/bin/python3.X`` (the interpreter), ``python/lib/python3.X`` (its standard
  library, without tests, IDLE, tkinter and site-packages) and its ``lib-dynload``;
- ``python/lib/python3.X/site-packages``: the agent's packages, installed with the host's
  ``pip install --target`` (wheels only), so they fit that interpreter's ABI;
- ``python/libs``: every shared library any of those ELF files needs (``ldd``), glibc and
  its dynamic loader included.

The sandbox runs ``python/libs/ld-linux-*.so.* --library-path python/libs python/bin/python3.X``:
the entry's own loader and C library, so the image's libc (glibc of another version, musl,
none at all) and its Python are never used. ``--library-path`` is the loader's argument,
not an environment variable: the commands the agent runs (the image's ``bash``) see none of
it. The interpreter finds its prefix from its own path (``lib/python3.X/os.py``), so no
``PYTHONHOME`` leaks into those commands either.

Where this cannot be built (a host whose Python is not a glibc ELF, no ``ldd``), the agent
fails before any trial with one :class:`~harness.agents.installed.cache.InstallError`
naming what is missing; the image's Python is never used instead.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typing_extensions import override

from harness.agents.installed.cache import (
    FETCH_TIMEOUT_SEC,
    AgentCache,
    CacheEntry,
    InstallError,
    InstallSpec,
    file_sha256,
    run_fetch,
)

#: The runtime's dir inside a cache entry.
RUNTIME = "python"
#: Standard-library parts a CLI never needs (and that are large).
STDLIB_SKIP = frozenset(
    {
        "site-packages",
        "dist-packages",
        "test",
        "idlelib",
        "tkinter",
        "turtledemo",
        "ensurepip",
        "lib2to3",
        "__phello__",
    }
)
_LDD_LINE = re.compile(r"^\s*(?:(\S+)\s+=>\s+)?(\S+)\s+\(0x[0-9a-f]+\)\s*$")
_NOT_FOUND = re.compile(r"^\s*(\S+)\s+=>\s+not found\s*$")


@dataclass(frozen=True)
class HostPython:
    """The host's CPython, as the runtime copies it.

    Attributes:
        executable: The real interpreter binary (not a venv's link).
        stdlib: Its standard library dir (``lib/python3.X``).
        dynload: Its extension modules' dir (``lib-dynload``).
        version: ``3.X.Y``.
    """

    executable: Path
    stdlib: Path
    dynload: Path
    version: str

    @classmethod
    def current(cls) -> HostPython:
        """The interpreter this harness runs on (its base, never a venv)."""
        xy = f"{sys.version_info.major}.{sys.version_info.minor}"
        base = Path(sys.base_prefix)
        candidates = [base / "bin" / f"python{xy}", Path(getattr(sys, "_base_executable", ""))]
        executable = next((p.resolve() for p in candidates if p.is_file()), None)
        stdlib = Path(sysconfig.get_paths(vars={"base": sys.base_prefix})["stdlib"])
        dynload = Path(sysconfig.get_config_var("DESTSHARED") or stdlib / "lib-dynload")
        if executable is None or not (stdlib / "os.py").is_file():
            raise InstallError(
                f"cannot build a Python runtime for the agent: the host's Python "
                f"({sys.base_prefix}) has no interpreter binary or standard library where "
                "CPython keeps them. Run the harness on a CPython installed with its "
                "standard layout (pyenv, python.org, the distribution's python3)."
            )
        return cls(executable, stdlib, dynload, ".".join(map(str, sys.version_info[:3])))

    @property
    def xy(self) -> str:
        """``3.X``."""
        return ".".join(self.version.split(".")[:2])

    def identity(self) -> str:
        """What the cache key holds of it: version and the binary's SHA-256."""
        return f"cpython-{self.version}-{file_sha256(self.executable)[:16]}"


@dataclass(frozen=True)
class PythonAgentSpec(InstallSpec):
    """An :class:`InstallSpec` for a Python agent: its packages on the host's runtime.

    Attributes:
        runtime: The host Python's identity (a new interpreter makes a new entry).
    """

    runtime: str = ""

    @override
    def as_json(self) -> dict[str, Any]:
        return {**super().as_json(), "runtime": self.runtime, "runtime_layout": 2}


def python_agent_spec(agent: str, version: str, requirements: tuple[str, ...]) -> PythonAgentSpec:
    """The spec of a Python agent's entry: its pinned packages, for the host's Python."""
    return PythonAgentSpec(
        agent=agent, version=version, pypi=requirements, runtime=HostPython.current().identity()
    )


def ensure_python_agent(cache: AgentCache, spec: PythonAgentSpec) -> CacheEntry:
    """The checked entry holding the runtime and the agent's packages (built if needed).

    Raises:
        InstallError: A package cannot be had, or the runtime cannot be built.
    """
    host = HostPython.current()

    def fetch(spec_: InstallSpec, staging: Path) -> None:
        build_runtime(host, staging / RUNTIME)
        site = staging / RUNTIME / "lib" / f"python{host.xy}" / "site-packages"
        site.mkdir(parents=True, exist_ok=True)
        argv = [
            sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
            "--no-compile", "--only-binary=:all:", "--target", str(site), *spec_.pypi,
        ]  # fmt: skip
        run_fetch(spec_, argv, cwd=cache.root)
        # Console scripts carry the host's interpreter path in their shebang: never run.
        shutil.rmtree(site / "bin", ignore_errors=True)
        bundle_libraries(staging / RUNTIME, staging)
        compile_bytecode(spec_, staging / RUNTIME)

    return cache._make(spec, fetch)  # the cache's own entry builder


def build_runtime(host: HostPython, dest: Path) -> None:
    """Copy the host's interpreter and standard library into ``dest``."""
    (dest / "bin").mkdir(parents=True)
    binary = dest / "bin" / f"python{host.xy}"
    shutil.copy2(host.executable, binary)
    binary.chmod(0o755)
    lib = dest / "lib" / f"python{host.xy}"

    def skip(directory: str, names: list[str]) -> list[str]:
        top = Path(directory) == host.stdlib
        return [
            n for n in names
            if (top and (n in STDLIB_SKIP or n.startswith("config-"))) or n == "__pycache__"
        ]  # fmt: skip

    shutil.copytree(host.stdlib, lib, ignore=skip, symlinks=True)
    for tk in lib.glob("lib-dynload/_tkinter*"):  # Tk and X11: never a CLI's
        tk.unlink()
    if not (lib / "lib-dynload").is_dir() and host.dynload.is_dir():
        shutil.copytree(host.dynload, lib / "lib-dynload", symlinks=True)


def compile_bytecode(spec: InstallSpec, runtime: Path) -> None:
    """Compile every module of the runtime now: the sandbox sees it read-only.

    Without ``.pyc`` files each start would compile litellm and the rest again (tens of
    seconds). The host's interpreter is the runtime's, so its bytecode fits; the paths in
    it are the in-sandbox ones (tracebacks show the sources), and the ``.pyc`` files are
    never checked against their sources (``unchecked-hash``: the entry is immutable).
    Files that do not compile (a package's Python 2 examples) are left as they are.
    """
    from harness.agents.installed.base import INSTALL_MOUNT

    argv = [
        sys.executable, "-m", "compileall", "-q", "-j", "0",
        "--invalidation-mode", "unchecked-hash",
        "-s", str(runtime), "-p", f"{INSTALL_MOUNT}/{RUNTIME}", str(runtime),
    ]  # fmt: skip
    try:
        subprocess.run(  # the host's Python on the entry it just wrote
            argv, capture_output=True, timeout=FETCH_TIMEOUT_SEC, check=False,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise InstallError(
            f"cannot install agent {spec.agent} {spec.version}: compiling its modules took "
            f"over {FETCH_TIMEOUT_SEC:g}s"
        ) from None


def bundle_libraries(runtime: Path, root: Path) -> None:
    """Copy into ``runtime/libs`` every shared library an ELF file under ``root`` needs.

    Libraries a wheel ships itself (resolved inside ``root``) stay where they are.

    Raises:
        InstallError: ``ldd`` is missing, or names a library the host does not have.
    """
    libs = runtime / "libs"
    libs.mkdir()
    wanted: dict[str, Path] = {}
    loader: Path | None = None
    elves = sorted(elf_files(root))
    # Wheels ship their own libraries (``scipy.libs``) and find them by their RPATH
    # ($ORIGIN): ldd run on one of those alone may not; they are in the entry already.
    shipped = frozenset(path.name for path in elves)
    for path in elves:
        for name, resolved in ldd(path, shipped):
            if resolved.is_relative_to(root):
                continue
            if name.startswith("/"):  # the dynamic loader, named by its path
                loader = resolved
                name = Path(name).name
            wanted.setdefault(name, resolved)
    if loader is None:
        raise InstallError(
            "cannot build a Python runtime for the agent: the host's interpreter names no "
            "dynamic loader (ldd found none); a glibc host is needed"
        )
    for name, resolved in sorted(wanted.items()):
        target = libs / name
        if not target.exists():
            shutil.copy2(resolved.resolve(), target)
            target.chmod(0o755)


def elf_files(root: Path) -> list[Path]:
    """Regular files under ``root`` that start like an ELF object."""
    found = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath, name)
            if path.is_symlink() or not path.is_file():
                continue
            with path.open("rb") as handle:
                if handle.read(4) == b"\x7fELF":
                    found.append(path)
    return found


def ldd(path: Path, shipped: frozenset[str] = frozenset()) -> list[tuple[str, Path]]:
    """``(name, resolved path)`` of each library ``path`` loads (the host's ``ldd``).

    A library not found that the entry ships itself (``shipped``: file names) is left out.

    Raises:
        InstallError: ``ldd`` is missing or a needed library is not on the host.
    """
    try:
        done = subprocess.run(  # the host's ldd on a file the harness wrote
            ["ldd", str(path)], capture_output=True, text=True, timeout=FETCH_TIMEOUT_SEC,
            check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except FileNotFoundError:
        raise InstallError(
            "cannot build a Python runtime for the agent: the host has no ldd (install libc-bin)"
        ) from None
    out = []
    for line in done.stdout.splitlines():
        missing = _NOT_FOUND.match(line)
        if missing and missing.group(1) not in shipped:
            raise InstallError(
                f"cannot build a Python runtime for the agent: {path.name} needs "
                f"{missing.group(1)}, which this host does not have"
            )
        match = None if missing else _LDD_LINE.match(line)
        if match and match.group(2).startswith("/"):
            out.append((match.group(1) or match.group(2), Path(match.group(2))))
    return out


def loader_name(entry: Path) -> str:
    """The dynamic loader's file name in an entry's ``python/libs``."""
    for path in sorted((entry / RUNTIME / "libs").glob("ld-*.so*")):
        return path.name
    raise InstallError(f"the Python runtime in {entry} has no dynamic loader (fetch it again)")


def python_argv(entry: CacheEntry, mount: str, xy: str | None = None) -> list[str]:
    """The in-sandbox command line that starts the entry's interpreter (then its args)."""
    version = xy or runtime_xy(entry.path)
    base = f"{mount}/{RUNTIME}"
    return [
        f"{base}/libs/{loader_name(entry.path)}",
        "--library-path",
        f"{base}/libs",
        f"{base}/bin/python{version}",
    ]


def runtime_xy(entry: Path) -> str:
    """``3.X`` of the runtime in an entry."""
    for path in sorted((entry / RUNTIME / "bin").glob("python3.*")):
        return path.name.removeprefix("python")
    raise InstallError(f"the Python runtime in {entry} has no interpreter (fetch it again)")


__all__ = [
    "RUNTIME",
    "HostPython",
    "PythonAgentSpec",
    "ensure_python_agent",
    "python_agent_spec",
    "python_argv",
]
