"""The harness run as a user who is not root, against the engines such users have.

Most people drive Docker without root: as a member of the ``docker`` group, or through a
rootless engine. Tests of those places run the real CLI as such a user (``runuser``), from
a virtual environment of that user's own, made from Debian's ``/usr/bin/python3`` (the
default ``python3`` here may live under ``/root``), with the harness installed from a wheel
of this checkout. Task and output dirs live in a dir the user owns.

The rootless engine is ``docker/start-rootless-engine.sh``'s (``scripts/test`` starts it).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import filelock

from support.docker import prerequisite_missing

REPO = Path(__file__).resolve().parents[2]
ROOTLESS_USER = os.environ.get("HARNESS_ROOTLESS_USER", "harness-rootless")
ROOTLESS_HOST = f"unix:///run/{ROOTLESS_USER}/docker.sock"
SYSTEM_PYTHON = "/usr/bin/python3"
#: What the user's venv needs from PyPI besides the harness: its runtime dependencies, as
#: pyproject.toml names them (one list, never copied).
_DEPENDENCIES = tuple(
    tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
)
_SOURCES = ("harness", "sandbox", "pyproject.toml", "README.md")


@dataclass(frozen=True)
class UserHarness:
    """The harness CLI as ``user``, with its own venv and a dir of its own for files."""

    user: str
    home: Path
    venv: Path

    def workdir(self) -> Path:
        """A fresh dir the user owns (task dirs, output dirs), under its home."""
        path = self.home / "tests" / secrets.token_hex(6)
        path.mkdir(parents=True)
        shutil.chown(path.parent, self.user, self.user)
        shutil.chown(path, self.user, self.user)
        return path

    def give(self, path: Path) -> None:
        """Make everything under ``path`` the user's (files a test wrote as root)."""
        subprocess.run(["chown", "-R", f"{self.user}:{self.user}", str(path)], check=True)

    def _env(self, docker_host: str, tmpdir: Path, extra: dict[str, str] | None) -> list[str]:
        """``env -i``'s arguments: the user's HOME and venv, the engine, ``tmpdir``."""
        base = {
            "HOME": str(self.home),
            "PATH": f"{self.venv}/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "DOCKER_HOST": docker_host,
            "TMPDIR": str(tmpdir),
            "LANG": "C.UTF-8",
        }
        tmpdir.mkdir(exist_ok=True)
        shutil.chown(tmpdir, self.user, self.user)
        return [f"{k}={v}" for k, v in {**base, **(extra or {})}.items()]

    def cli(
        self, *args: str, docker_host: str, timeout: float = 600, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``harness ARGS...`` run as the user, against the engine at ``docker_host``."""
        env_args = self._env(docker_host, self.home / "tmp", env)
        return subprocess.run(
            ["runuser", "-u", self.user, "--", "env", "-i", *env_args, f"{self.venv}/bin/harness"]
            + list(args),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            cwd=str(self.home),
        )

    def python(
        self, script: str, stdin: str, *, docker_host: str, tmpdir: Path, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        """``python -I -c SCRIPT`` as the user on its venv's harness, ``stdin`` fed to it.

        For what the CLI cannot say (a pinned name, a backend driven directly); ``tmpdir``
        is the harness's TMPDIR, a test's own (other tests run as the same user at once).
        """
        env_args = self._env(docker_host, tmpdir, None)
        return subprocess.run(
            ["runuser", "-u", self.user, "--", "env", "-i", *env_args,
             f"{self.venv}/bin/python", "-I", "-c", script],
            input=stdin, capture_output=True, text=True, timeout=timeout, cwd=str(self.home),
        )  # fmt: skip


def _source_digest() -> str:
    """The SHA-256 of the files the wheel is made of: the venv is reinstalled when it moves."""
    digest = hashlib.sha256()
    for name in _SOURCES:
        origin = REPO / name
        files = (
            sorted(p for p in origin.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
            if origin.is_dir()
            else [origin]
        )
        for path in files:
            digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _wheel(into: Path) -> Path:
    """A wheel of this checkout's harness, built from a copy (the checkout stays clean)."""
    source = into / "source"
    source.mkdir()
    for name in _SOURCES:
        origin = REPO / name
        if origin.is_dir():
            shutil.copytree(origin, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(origin, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps"] + ["-w", str(into), str(source)],
        check=True,
        capture_output=True,
    )
    (wheel,) = into.glob("harness-*.whl")
    return wheel


def user_harness(user: str) -> UserHarness:
    """The harness installed for ``user`` (made once per test process; the deps are kept)."""
    try:
        home = Path(os.path.expanduser(f"~{user}"))
        subprocess.run(["id", user], check=True, capture_output=True)
    except (subprocess.CalledProcessError, KeyError):
        prerequisite_missing(f"user {user} (docker/start-rootless-engine.sh makes it)")
    if not Path(SYSTEM_PYTHON).exists():
        prerequisite_missing(f"{SYSTEM_PYTHON} (Debian's python3) for {user}'s venv")
    venv = home / "venv"
    with filelock.FileLock(str(home / ".venv.lock")):
        stamp = venv / ".deps"
        wanted = "\n".join(_DEPENDENCIES)
        if not stamp.exists() or stamp.read_text() != wanted:
            shutil.rmtree(venv, ignore_errors=True)
            run_as = ["runuser", "-u", user, "--", "env", f"HOME={home}"]
            subprocess.run([*run_as, SYSTEM_PYTHON, "-m", "venv", str(venv)], check=True)
            subprocess.run(
                [*run_as, f"{venv}/bin/pip", "install", "-q", *_DEPENDENCIES],
                check=True,
                capture_output=True,
            )
            stamp.write_text(wanted)
        marker = venv / ".harness-source"
        digest = _source_digest()
        if not marker.exists() or marker.read_text() != digest:
            with tempfile.TemporaryDirectory() as tmp:
                wheel = _wheel(Path(tmp))
                shutil.chown(tmp, user, user)
                for path in Path(tmp).iterdir():
                    shutil.chown(path, user, user)
                subprocess.run(
                    ["runuser", "-u", user, "--", "env", f"HOME={home}", f"{venv}/bin/pip"]
                    + ["install", "-q", "--no-deps", "--force-reinstall", str(wheel)],
                    check=True,
                    capture_output=True,
                )
            marker.write_text(digest)
    return UserHarness(user=user, home=home, venv=venv)


def rootless_engine() -> str:
    """The rootless engine's ``DOCKER_HOST``, once it answers (else skip, or fail in CI)."""
    probe = subprocess.run(
        ["docker", "-H", ROOTLESS_HOST, "info", "--format", "{{.CgroupDriver}}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if probe.returncode != 0:
        prerequisite_missing(
            f"the rootless engine at {ROOTLESS_HOST} (bash docker/start-rootless-engine.sh): "
            f"{probe.stderr.strip()[:200]}"
        )
    return ROOTLESS_HOST


def run_args(tasks: Path, out: Path, *options: str) -> Sequence[str]:
    """``run TASKS --sandbox docker -o OUT --display plain OPTIONS...``."""
    return (
        "run",
        str(tasks),
        "--sandbox",
        "docker",
        "-o",
        str(out),
        "--display",
        "plain",
        *options,
    )


DOCKER_GROUP_USER = os.environ.get("HARNESS_DOCKER_GROUP_USER", "harness-docker")


def docker_group_user() -> str:
    """A user in the ``docker`` group, made once (how most people drive rootful Docker)."""
    if subprocess.run(["id", DOCKER_GROUP_USER], capture_output=True).returncode != 0:
        done = subprocess.run(
            ["useradd", "--system", "--create-home", "--home-dir", f"/var/lib/{DOCKER_GROUP_USER}"]
            + ["--shell", "/usr/sbin/nologin", "--groups", "docker", DOCKER_GROUP_USER],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0 and "already exists" not in done.stderr:
            prerequisite_missing(f"a docker-group user ({DOCKER_GROUP_USER}): {done.stderr}")
    return DOCKER_GROUP_USER
