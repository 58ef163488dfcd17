"""A hostile Harbor Hub never writes outside the cache, runs nothing, and runs no trial.

Every field the Hub answers is untrusted: the dataset's rows, a task version's archive path
and digest, a git pin's URL and commit, and the archive itself. Each attack makes the
stand-in Hub (a real HTTP server on 127.0.0.1, tests/support/harbor_hub.py) answer one
hostile thing, then runs the real CLI (``harness run -d acme/evil --hub-url URL``) and
judges from outside: exit 2 naming the refusal, no run dir, no task entry in the cache,
no file of the test's tree created or changed outside the cache, the canary a command
would create never created, and, where the refusal must come first, no archive ever asked
for. These refusals happen on the host before any sandbox exists, so one backend (local)
covers them all.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from support.cli import harness
from support.harbor_hub import HubState, hub_env, make_task, pack, serve_hub


def _snapshot(root: Path) -> dict[str, str]:
    """Every path under ``root`` but the cache and the run dirs, with its content's hash."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel.split("/")[0] in ("cache", "runs"):
            continue
        if path.is_symlink():
            found[rel] = "link:" + str(path.readlink())
        elif path.is_file():
            found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            found[rel] = "dir"
    return found


def _archive(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def _member(
    name: str, data: bytes = b"x\n", kind: bytes = tarfile.REGTYPE
) -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    info.mode = 0o755
    return info, (data if kind == tarfile.REGTYPE else None)


class Evil:
    """One published task ``acme/alpha`` in a dataset ``acme/evil``, before the attack."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.state = HubState()
        self.task = make_task(tmp_path / "src", "alpha")
        self.digest = self.state.publish_task("acme", self.task)
        self.row = self.state.task_row("acme", "alpha", self.digest)
        self.state.publish_dataset("acme", "evil", [self.row])
        self.canary = tmp_path / "canary"
        self.secret = tmp_path / "host-secret"
        self.secret.write_text("SECRET\n")

    @property
    def version(self) -> dict[str, object]:
        return self.state.task_versions[("acme", "alpha")][0]

    def replace_archive(self, blob: bytes) -> None:
        path = self.version["archive_path"]
        assert isinstance(path, str)
        self.state.storage[path] = blob

    def task_members(self) -> list[tuple[tarfile.TarInfo, bytes | None]]:
        with tarfile.open(fileobj=io.BytesIO(pack(self.task)), mode="r:gz") as tar:
            return [
                (m, tar.extractfile(m).read() if m.isreg() else None)  # type: ignore[union-attr]
                for m in tar.getmembers()
            ]


def _tampered(evil: Evil) -> None:
    # The verifier rewritten to pass whatever the agent does; the digest kept.
    members = [
        _member(m.name, b'#!/bin/bash\necho 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n')
        if m.name == "tests/test.sh"
        else (m, data)
        for m, data in evil.task_members()
    ]
    evil.replace_archive(_archive(members))


def _dotdot(evil: Evil) -> None:
    evil.replace_archive(
        _archive([*evil.task_members(), _member("tests/../../../../escaped", b"pwned\n")])
    )


def _absolute(evil: Evil) -> None:
    evil.replace_archive(
        _archive([*evil.task_members(), _member(str(evil.tmp / "escaped"), b"pwned\n")])
    )


def _symlink(evil: Evil) -> None:
    link = tarfile.TarInfo("tests/leak")
    link.type, link.linkname = tarfile.SYMTYPE, str(evil.secret)
    evil.replace_archive(_archive([*evil.task_members(), (link, None)]))


def _symlinked_dir_then_write(evil: Evil) -> None:
    # A link named like a dir, then a file "inside" it: written through, it lands outside.
    link = tarfile.TarInfo("steps")
    link.type, link.linkname = tarfile.SYMTYPE, str(evil.tmp)
    evil.replace_archive(
        _archive([*evil.task_members(), (link, None), _member("steps/escaped", b"pwned\n")])
    )


def _hardlink(evil: Evil) -> None:
    link = tarfile.TarInfo("tests/leak")
    link.type, link.linkname = tarfile.LNKTYPE, str(evil.secret)
    evil.replace_archive(_archive([*evil.task_members(), (link, None)]))


def _device(evil: Evil) -> None:
    dev = tarfile.TarInfo("tests/null")
    dev.type, dev.devmajor, dev.devminor = tarfile.CHRTYPE, 1, 3
    evil.replace_archive(_archive([*evil.task_members(), (dev, None)]))


def _oversized(evil: Evil) -> None:
    # A header claiming 5 GiB, with only a few bytes behind it: refused on the header.
    info, _ = _member("tests/huge.bin")
    info.size = 5 << 30
    buffer = io.BytesIO()
    tar = tarfile.TarFile(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT)
    for member, data in evil.task_members():
        tar.addfile(member, io.BytesIO(data) if data is not None else None)
    # Not closed: the end-of-archive blocks would come before the forged header.
    buffer.write(info.tobuf(format=tarfile.GNU_FORMAT) + b"A" * 4096)
    evil.replace_archive(gzip.compress(buffer.getvalue()))


ARCHIVE_ATTACKS: dict[str, tuple[Callable[[Evil], None], str]] = {
    "tampered": (_tampered, "not its digest"),
    "dotdot": (_dotdot, "leaves the archive"),
    "absolute": (_absolute, "absolute or unclean path"),
    "symlink": (_symlink, "is a link"),
    "symlinked-dir": (_symlinked_dir_then_write, "is a link"),
    "hardlink": (_hardlink, "is a link"),
    "device": (_device, "device, FIFO or other special file"),
    "oversized": (_oversized, "past its caps"),
}


def _run(evil: Evil, url: str, *args: str) -> object:
    return harness(
        "run", *args, "--hub-url", url, "--agent", "oracle", "--sandbox", "local",
        "-o", evil.tmp / "runs", "--display", "none",
        env=hub_env(evil.tmp / "cache"), timeout=300,
    )  # fmt: skip


def _judge(evil: Evil, done: object, before: dict[str, str], message: str) -> None:
    assert isinstance(done, subprocess.CompletedProcess)
    assert done.returncode == 2, done
    assert message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert not (evil.tmp / "runs").exists() or not any((evil.tmp / "runs").iterdir())
    tasks = evil.tmp / "cache" / "tasks"
    assert not tasks.exists() or not any(tasks.iterdir()), list(tasks.iterdir())
    assert not evil.canary.exists(), "a command ran"
    assert _snapshot(evil.tmp) == before, "a file outside the cache was written"
    leftovers = [p for p in (evil.tmp / "cache").rglob("*") if p.name == "escaped"]
    assert not leftovers, leftovers


@pytest.mark.root
@pytest.mark.parametrize("attack", sorted(ARCHIVE_ATTACKS))
def test_a_hostile_package_archive_is_refused_and_nothing_is_written_outside_the_cache(
    tmp_path: Path, attack: str
) -> None:
    evil = Evil(tmp_path)
    make, message = ARCHIVE_ATTACKS[attack]
    make(evil)
    before = _snapshot(tmp_path)
    with serve_hub(evil.state) as url:
        done = _run(evil, url, "-d", "acme/evil")
    _judge(evil, done, before, message)


def _git_pin_ref_option(evil: Evil) -> None:
    evil.state.dataset_tasks[next(iter(evil.state.dataset_tasks))] = [
        {
            "task_version": {
                "content_hash": evil.digest,
                "package": {"name": "alpha", "org": {"name": "acme"}},
                "git_url": "git://127.0.0.1:9/nothing-listens",
                "git_commit_id": f"--upload-pack=touch {evil.canary}",
                "path": "alpha",
            }
        }
    ]


def _git_pin_ext_url(evil: Evil) -> None:
    _git_pin_ref_option(evil)
    version = next(iter(evil.state.dataset_tasks.values()))[0]["task_version"]
    version["git_url"] = f"ext::sh -c touch% {evil.canary}"
    version["git_commit_id"] = "a" * 40


def _git_pin_path_dotdot(evil: Evil) -> None:
    _git_pin_ref_option(evil)
    version = next(iter(evil.state.dataset_tasks.values()))[0]["task_version"]
    version["git_commit_id"] = "a" * 40
    version["path"] = "../../outside"


def _git_pin_local_path(evil: Evil) -> None:
    # A remote Hub naming a real repository of this machine, at its real commit: fetched,
    # its content would become a task the agent sees.
    private = evil.tmp / "private"
    make_task(private, "alpha")
    git = ["git", "-c", "user.email=t@example.invalid", "-c", "user.name=t", "-C", str(private)]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "private"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True)
    _git_pin_ref_option(evil)
    version = next(iter(evil.state.dataset_tasks.values()))[0]["task_version"]
    version["git_commit_id"] = head.stdout.strip()
    version["git_url"] = f"file://{private}"


def _archive_path_dotdot(evil: Evil) -> None:
    evil.version["archive_path"] = "../../../etc/passwd"


def _archive_path_option(evil: Evil) -> None:
    evil.version["archive_path"] = "--output=/tmp/x"


def _package_name_option(evil: Evil) -> None:
    row = next(iter(evil.state.dataset_tasks.values()))[0]
    row["task_version"]["package"]["org"]["name"] = "-rf"


def _digest_not_hex(evil: Evil) -> None:
    row = next(iter(evil.state.dataset_tasks.values()))[0]
    row["task_version"]["content_hash"] = "../../x"


ANSWER_ATTACKS: dict[str, tuple[Callable[[Evil], None], str]] = {
    "git-ref-option": (_git_pin_ref_option, "is not a git ref"),
    "git-ext-url": (_git_pin_ext_url, "names a git transport helper"),
    "git-path-dotdot": (_git_pin_path_dotdot, "must be relative"),
    "git-local-path": (_git_pin_local_path, "names a repository of this machine"),
    "archive-path-dotdot": (_archive_path_dotdot, "is not a relative storage path"),
    "archive-path-option": (_archive_path_option, "is not a relative storage path"),
    "package-name-option": (_package_name_option, "is not ORG/NAME"),
    "digest-not-hex": (_digest_not_hex, "is not sha256:<64 hex digits>"),
}


@pytest.mark.root
@pytest.mark.parametrize("attack", sorted(ANSWER_ATTACKS))
def test_a_hostile_hub_answer_is_refused_before_any_archive_or_git_runs(
    tmp_path: Path, attack: str
) -> None:
    evil = Evil(tmp_path)
    make, message = ANSWER_ATTACKS[attack]
    make(evil)
    before = _snapshot(tmp_path)
    with serve_hub(evil.state) as url:
        done = _run(evil, url, "-d", "acme/evil")
    _judge(evil, done, before, message)
    assert not [r for r in evil.state.requests if "/storage/" in r], evil.state.requests


@pytest.mark.root
def test_a_ref_that_is_an_option_is_refused_before_the_hub_is_asked(tmp_path: Path) -> None:
    evil = Evil(tmp_path)
    before = _snapshot(tmp_path)
    with serve_hub(evil.state) as url:
        done = _run(evil, url, "-t", "acme/alpha@--upload-pack=touch-canary")
    _judge(evil, done, before, "is not a Hub ref")
    assert evil.state.requests == []
