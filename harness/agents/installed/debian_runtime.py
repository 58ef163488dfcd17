"""A Python 3.13 runtime (and tmux) from Debian 13's packages, for agents that need Python >= 3.12.

The host's relocated CPython (:mod:`~harness.agents.installed.python_runtime`) is whatever
version the harness runs on; agents such as Terminus-2 (PyPI ``harbor``) need 3.12 or
later. This runtime is Debian 13 (trixie)'s ``python3.13``, fetched from Debian's mirror
with the host's own ``apt-get`` (a private apt dir: its own ``sources.list``, an empty
``dpkg`` status, so the whole dependency closure, glibc and its loader included, is
downloaded; ``apt`` checks the mirror's signed ``Release`` against the host's
``debian-archive-keyring``), unpacked with ``dpkg-deb -x`` (no maintainer script runs) and
laid out as the host runtime is:

- ``python/bin/python3.13`` and ``python/lib/python3.13`` (standard library and
  ``lib-dynload``, without tests, IDLE, tkinter);
- ``python/libs``: every shared library of the unpacked packages, ``ld-linux-*.so.*``
  (trixie's glibc loader) among them;
- ``python/lib/python3/dist-packages``: the agent's packages (``pip install --target``
  run by the host's pip for CPython 3.13's wheel tags, wheels only), on Debian's
  ``sys.path``;
- ``python/bin/tmux`` (Debian's ``tmux``) and ``bin/tmux``, a ``/bin/sh`` wrapper that
  starts it with the entry's loader and its ``C.utf8`` locale (``python/locale``;
  ``LOCPATH``, kept from the panes by ``python/share/tmux.conf``), for agents that drive a
  tmux session; ``python/share/terminfo``;
- ``python/debian-packages.txt``: the ``name=version`` of every package used.

No link that resolves out of the unpacked packages is followed or kept: Debian's
``sitecustomize.py`` links to ``/etc/python3.13/``, which in the sandbox is the image's.

The sandbox runs the interpreter as the host runtime's: the entry's loader, its
``--library-path`` (an argument, never an environment variable), so the image's C library
(glibc of another version, musl, none) and its Python are never used. The key holds the
suite and the package names; the versions are whatever the mirror serves when the entry is
first fetched (Debian's mirror keeps only a suite's current ones), recorded in the entry.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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
    Platform,
    run_fetch,
)
from harness.agents.installed.python_runtime import (
    RUNTIME,
    STDLIB_SKIP,
    PythonAgentSpec,
    loader_name,
)

#: Debian's suite and the interpreter's version in it.
SUITE = "trixie"
PYTHON_XY = "3.13"
#: Overrides the Debian mirror the packages come from.
MIRROR_ENV = "HARNESS_DEBIAN_MIRROR"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
#: The host's keyring ``apt`` checks the mirror's ``Release`` against.
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
#: What is installed (apt resolves the rest): the interpreter, tmux, terminfo, and
#: ``libc-bin`` for its ``C.utf8`` locale (tmux refuses to start without a UTF-8 one).
PACKAGES = (f"python{PYTHON_XY}", "tmux", "ncurses-base", "libc-bin")
#: Debian's dir (on ``sys.path``) the agent's packages go to.
DIST_PACKAGES = "lib/python3/dist-packages"
#: The tmux wrapper's dir in the entry (put first on ``PATH`` by an agent that uses it).
WRAPPER_BIN = "bin"
_MULTIARCH = {"x86_64": ("amd64", "x86_64-linux-gnu"), "aarch64": ("arm64", "aarch64-linux-gnu")}


@dataclass(frozen=True)
class DebianPythonSpec(PythonAgentSpec):
    """A :class:`PythonAgentSpec` on Debian's Python (its suite and packages keyed).

    Attributes:
        pypi_no_deps: Requirements installed without their declared dependencies (``pip
            --no-deps``), after :attr:`pypi`: for a package whose declared dependencies
            include ones with no wheel (never built here) that the agent does not import;
            what it does import is listed in :attr:`pypi`.
    """

    pypi_no_deps: tuple[str, ...] = ()

    @override
    def as_json(self) -> dict[str, Any]:
        extra = {"pypi_no_deps": list(self.pypi_no_deps)} if self.pypi_no_deps else {}
        return {
            **super().as_json(),
            "debian_packages": list(PACKAGES),
            "runtime_layout": 4,
            **extra,
        }


def debian_python_spec(
    agent: str, version: str, requirements: tuple[str, ...], no_deps: tuple[str, ...] = ()
) -> DebianPythonSpec:
    """The spec of an agent's entry: its pinned PyPI packages on Debian's Python."""
    return DebianPythonSpec(
        agent=agent,
        version=version,
        pypi=requirements,
        runtime=f"debian-{SUITE}-python{PYTHON_XY}",
        pypi_no_deps=no_deps,
    )


def ensure_debian_python_agent(cache: AgentCache, spec: DebianPythonSpec, mount: str) -> CacheEntry:
    """The checked entry holding Debian's Python, tmux and the agent's packages.

    Args:
        cache: Where entries live.
        spec: The agent's packages.
        mount: Where the sandbox sees the entry (the tmux wrapper names it).

    Raises:
        InstallError: A package cannot be had, or the runtime cannot be built here.
    """
    platform = Platform.host()
    if platform.arch not in _MULTIARCH or platform.libc != "glibc":
        raise InstallError(
            f"cannot build Debian's Python runtime for agent {spec.agent} on a {platform} "
            "host: the packages are unpacked and checked with this host's apt-get and "
            f"dpkg-deb, for {', '.join(_MULTIARCH)} only"
        )
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise InstallError(
                f"cannot build Debian's Python runtime for agent {spec.agent}: this host "
                f"has no {tool} (a Debian or Ubuntu host is needed), or pre-fill the cache"
            )
    if not KEYRING.is_file():
        raise InstallError(
            f"cannot build Debian's Python runtime for agent {spec.agent}: {KEYRING} is "
            "missing (install debian-archive-keyring)"
        )

    def fetch(spec_: InstallSpec, staging: Path) -> None:
        work = staging / ".debian"
        debs = download_debs(spec_, work, platform.arch)
        root = work / "root"
        for deb in debs:
            _run(spec_, ["dpkg-deb", "-x", str(deb), str(root)])
        versions = [f"{d.name.split('_')[0]}={d.name.split('_')[1]}" for d in debs]
        lay_out(root, staging / RUNTIME, platform.arch)
        (staging / RUNTIME / "debian-packages.txt").write_text("\n".join(versions) + "\n")
        shutil.rmtree(work)
        write_tmux_wrapper(staging, mount)
        site = staging / RUNTIME / DIST_PACKAGES
        site.mkdir(parents=True, exist_ok=True)
        if spec_.pypi:
            run_fetch(spec_, _pip_argv(site, spec_.pypi), cwd=cache.root)
        if spec.pypi_no_deps:
            # pip --target skips (or, with --upgrade, replaces) a top-level dir that is
            # there already, such as a namespace package's: a dir of its own, merged.
            alone = staging / ".no-deps"
            run_fetch(spec_, _pip_argv(alone, spec.pypi_no_deps, "--no-deps"), cwd=cache.root)
            _merge(spec, alone, site)
        shutil.rmtree(site / "bin", ignore_errors=True)
        compile_with_runtime(spec_, staging, mount)

    return cache._make(spec, fetch)  # the cache's own entry builder


def _pip_argv(target: Path, requirements: tuple[str, ...], *options: str) -> list[str]:
    """The host's pip installing wheels for CPython 3.13 (never a build) into ``target``."""
    return [
        sys.executable, "-m", "pip", "install", "--disable-pip-version-check",
        "--no-input", "--no-compile", "--only-binary=:all:",
        "--python-version", PYTHON_XY, "--implementation", "cp",
        "--abi", f"cp{PYTHON_XY.replace('.', '')}", "--abi", "abi3", "--abi", "none",
        *options, "--target", str(target), *requirements,
    ]  # fmt: skip


def _merge(spec: InstallSpec, source: Path, dest: Path) -> None:
    """Move the tree ``source`` into ``dest``: dirs merged, a file already there refused."""
    for path in sorted(source.rglob("*")):
        target = dest / path.relative_to(source)
        if path.is_dir() and not path.is_symlink():
            target.mkdir(exist_ok=True)
        elif target.exists() or target.is_symlink():
            raise InstallError(
                f"cannot install agent {spec.agent}: {path.relative_to(source)} of its "
                "--no-deps packages is also in its other packages"
            )
        else:
            os.replace(path, target)
    shutil.rmtree(source)


def download_debs(spec: InstallSpec, work: Path, arch: str) -> list[Path]:
    """Download :data:`PACKAGES` and their closure from the mirror into ``work``."""
    deb_arch = _MULTIARCH[arch][0]
    mirror = os.environ.get(MIRROR_ENV) or DEFAULT_MIRROR
    for sub in (
        "etc/apt/apt.conf.d", "etc/apt/preferences.d", "etc/apt/sources.list.d",
        "var/lib/apt/lists/partial", "var/cache/apt/archives/partial", "var/lib/dpkg",
    ):  # fmt: skip
        (work / sub).mkdir(parents=True, exist_ok=True)
    status = work / "var/lib/dpkg/status"
    status.write_text("")
    (work / "etc/apt/sources.list").write_text(f"deb [signed-by={KEYRING}] {mirror} {SUITE} main\n")
    options = [
        "-o", f"Dir={work}", "-o", f"Dir::State::status={status}",
        "-o", "Debug::NoLocking=1", "-o", f"APT::Architecture={deb_arch}",
        "-o", "APT::Architectures::=", "-o", "APT::Install-Recommends=false",
        "-o", "Dir::Etc::Parts=" + str(work / "etc/apt/apt.conf.d"),
        "-o", "Dir::Etc::TrustedParts=" + str(work / "etc/apt/trusted.gpg.d"),
        "-q",
    ]  # fmt: skip
    _run(spec, ["apt-get", *options, "update"])
    _run(spec, ["apt-get", *options, "-y", "--download-only", "install", *PACKAGES])
    debs = sorted((work / "var/cache/apt/archives").glob("*.deb"))
    if not any(d.name.startswith(f"python{PYTHON_XY}_") for d in debs):
        raise InstallError(f"cannot install agent {spec.agent}: apt fetched no python{PYTHON_XY}")
    return debs


def lay_out(root: Path, dest: Path, arch: str) -> None:
    """Lay the unpacked packages under ``root`` out as the runtime (``dest``)."""
    triplet = _MULTIARCH[arch][1]
    (dest / "bin").mkdir(parents=True)
    for name in (f"python{PYTHON_XY}", "tmux"):
        shutil.copy2(root / "usr/bin" / name, dest / "bin" / name)
    stdlib = root / "usr/lib" / f"python{PYTHON_XY}"

    def skip(directory: str, names: list[str]) -> list[str]:
        top = Path(directory) == stdlib
        return [
            n for n in names
            if (top and (n in STDLIB_SKIP or n.startswith("config-"))) or n == "__pycache__"
            or _escapes(Path(directory, n), root)
        ]  # fmt: skip

    def escaping(directory: str, names: list[str]) -> list[str]:
        return [n for n in names if _escapes(Path(directory, n), root)]

    shutil.copytree(stdlib, dest / "lib" / f"python{PYTHON_XY}", ignore=skip, symlinks=True)
    libs = dest / "libs"
    libs.mkdir()
    for source in (root / "usr/lib" / triplet, root / "lib" / triplet):
        if not source.is_dir() or source.is_symlink():
            continue
        for path in sorted(source.iterdir()):
            if ".so" not in path.name or (libs / path.name).exists():
                continue
            if _escapes(path, root):
                continue  # a link out of the unpacked tree: never read, never kept
            if path.is_symlink() and "/" not in os.readlink(path):
                (libs / path.name).symlink_to(os.readlink(path))
            elif path.is_file():
                shutil.copy2(path.resolve(), libs / path.name)
    locale = root / "usr/lib/locale/C.utf8"
    if locale.is_dir():
        shutil.copytree(locale, dest / "locale" / "C.utf8", symlinks=True, ignore=escaping)
    terminfo = root / "usr/share/terminfo"
    if terminfo.is_dir():
        shutil.copytree(terminfo, dest / "share" / "terminfo", symlinks=True, ignore=escaping)
    try:
        loader_name(dest.parent)
    except InstallError:
        raise InstallError(
            "cannot build Debian's Python runtime: the unpacked libc6 has no dynamic loader"
        ) from None


def _escapes(path: Path, root: Path) -> bool:
    """Whether ``path`` is a link that resolves out of ``root`` (the unpacked packages)."""
    if not path.is_symlink():
        return False
    return not path.resolve().is_relative_to(root.resolve())


def write_tmux_wrapper(staging: Path, mount: str) -> None:
    """``bin/tmux``: starts the entry's tmux with its own loader, libraries and locale.

    ``LOCPATH`` (the entry's ``C.utf8``, which the image may lack: tmux refuses to start
    without a UTF-8 locale) is the one variable it sets, for tmux alone: its config
    (``python/share/tmux.conf``, read when the server starts, before any pane) removes it
    from the environment panes get, then reads the image's ``/etc/tmux.conf`` and the
    user's ``~/.tmux.conf`` as tmux would. With ``LOCPATH`` set, the image's glibc would
    look for locales there only, never in its own locale archive.
    """
    base = f"{mount}/{RUNTIME}"
    loader = f"{base}/libs/{loader_name(staging)}"
    conf = staging / RUNTIME / "share" / "tmux.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(
        "set-environment -g -u LOCPATH\n"
        "source-file -q /etc/tmux.conf\n"
        "source-file -q ~/.tmux.conf\n"
    )
    wrapper = staging / WRAPPER_BIN / "tmux"
    wrapper.parent.mkdir()
    wrapper.write_text(
        "#!/bin/sh\n"
        f"LOCPATH={base}/locale\nexport LOCPATH\n"
        f'exec {loader} --library-path {base}/libs {base}/bin/tmux -f {base}/share/tmux.conf "$@"\n'
    )
    wrapper.chmod(0o755)


def compile_with_runtime(spec: InstallSpec, staging: Path, mount: str) -> None:
    """Compile every module with the runtime itself (its bytecode is 3.13's, not the host's).

    One process: compileall's workers would start ``sys.executable`` without the loader.
    """
    runtime = staging / RUNTIME
    argv = [
        str(runtime / "libs" / loader_name(staging)), "--library-path", str(runtime / "libs"),
        str(runtime / "bin" / f"python{PYTHON_XY}"), "-I", "-m", "compileall", "-q",
        "--invalidation-mode", "unchecked-hash",
        "-s", str(runtime), "-p", f"{mount}/{RUNTIME}", str(runtime),
    ]  # fmt: skip
    try:
        done = subprocess.run(  # the entry's own interpreter on its own files
            argv, capture_output=True, text=True, timeout=FETCH_TIMEOUT_SEC, check=False,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise InstallError(
            f"cannot install agent {spec.agent}: compiling its modules took over "
            f"{FETCH_TIMEOUT_SEC:g}s"
        ) from None
    if "Traceback" in done.stderr or not (runtime / "lib" / f"python{PYTHON_XY}").is_dir():
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise InstallError(
            f"cannot install agent {spec.agent}: Debian's python{PYTHON_XY} does not run on "
            f"this host with its own loader: {tail}"
        )


def _run(spec: InstallSpec, argv: list[str]) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
    try:
        done = subprocess.run(  # the host's apt-get/dpkg-deb, fixed options
            argv, capture_output=True, text=True, timeout=FETCH_TIMEOUT_SEC, check=False,
            stdin=subprocess.DEVNULL, env=env,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise InstallError(
            f"cannot install agent {spec.agent}: {argv[0]} took over {FETCH_TIMEOUT_SEC:g}s "
            f"(is the Debian mirror reachable? {MIRROR_ENV} overrides it)"
        ) from None
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-4:])
        raise InstallError(
            f"cannot install agent {spec.agent}: {argv[0]} {argv[-1]} failed: {tail}. Check "
            f"that the Debian mirror is reachable ({MIRROR_ENV} overrides it)"
        )


__all__ = [
    "DIST_PACKAGES",
    "PYTHON_XY",
    "WRAPPER_BIN",
    "DebianPythonSpec",
    "debian_python_spec",
    "ensure_debian_python_agent",
]
