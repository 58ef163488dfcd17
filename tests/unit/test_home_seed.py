"""Seeding a phase's HOME from a hostile image home: links, FIFOs, huge files, bounds."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from sandbox.inside import home_seed
from sandbox.inside.home_seed import SKEL, seed, source_home

UID, GID = os.getuid(), os.getgid()


@pytest.fixture
def image_home(tmp_path: Path) -> Path:
    """A task image's home: dotfiles, and every kind of trap."""
    src = tmp_path / "root"
    src.mkdir()
    canary = tmp_path / "outside-canary"
    canary.write_text("CANARY")
    (src / ".bashrc").write_text("export A=1\n")
    (src / ".profile").write_text("export B=1\n")
    (src / ".tool").write_text("#!/bin/sh\n")
    os.chmod(src / ".tool", 0o4755)  # setuid: never copied as such
    (src / "not-a-dotfile").write_text("x")
    (src / ".link").symlink_to(canary)
    (src / ".dirlink").symlink_to(tmp_path)
    os.mkfifo(src / ".fifo")
    (src / ".config" / "app").mkdir(parents=True)
    (src / ".config" / "app" / "conf").write_text("c")
    (src / ".config" / "app" / "evil").symlink_to(canary)
    (src / ".big").write_bytes(b"\0" * (home_seed.MAX_FILE_BYTES + 1))
    deep = src / ".deep"
    for _ in range(home_seed.MAX_DEPTH + 2):
        deep = deep / "d"
    deep.mkdir(parents=True)
    return src


def test_dotfiles_only_no_links_no_fifos_no_huge_files(image_home: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".profile").write_text("the harness's own\n")
    done = threading.Event()
    result: dict[str, object] = {}

    def run() -> None:
        result.update(seed(str(home), str(image_home), UID, GID, []))
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(60), "the copy blocked (on the FIFO?)"
    assert (home / ".bashrc").read_text() == "export A=1\n"
    assert (home / ".profile").read_text() == "the harness's own\n"  # never replaced
    assert (home / ".config" / "app" / "conf").read_text() == "c"
    assert stat.S_IMODE((home / ".tool").stat().st_mode) == 0o755
    assert (home / ".bashrc").stat().st_uid == UID
    for absent in ("not-a-dotfile", ".link", ".dirlink", ".fifo", ".big"):
        assert not os.path.lexists(home / absent), absent
    assert not os.path.lexists(home / ".config" / "app" / "evil")
    assert result["truncated"] is True  # the huge file and the deep dir
    skipped = {s["path"]: s["why"] for s in result["skipped"]}  # type: ignore[attr-defined]
    assert skipped[".link"] == skipped[".dirlink"] == "symlink"
    assert skipped[".fifo"] == "special file" and skipped[".big"] == "too large"
    # Dot-dirs are whole or absent: too deep, or too large in all, is absent.
    assert not os.path.lexists(home / ".deep") and skipped[".deep"] == "too large"
    assert "CANARY" not in "".join(
        p.read_text(errors="replace") for p in home.rglob("*") if p.is_file()
    )


def test_files_come_before_dirs_and_a_dir_is_whole_or_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(home_seed, "MAX_BYTES", 1000)
    src = tmp_path / "src"
    (src / ".cache").mkdir(parents=True)
    for i in range(20):
        (src / ".cache" / f"f{i}").write_bytes(b"x" * 100)
    (src / ".zshrc").write_text("z")
    home = tmp_path / "home"
    home.mkdir()
    (src / ".small").mkdir()
    (src / ".small" / "f").write_bytes(b"y" * 100)
    result = seed(str(home), str(src), UID, GID, [])
    assert (home / ".zshrc").read_text() == "z"  # sorted after .cache, copied first
    assert (home / ".small" / "f").read_bytes() == b"y" * 100
    assert not (home / ".cache").exists()  # 2000 bytes: never half of it
    assert result["truncated"] is True and result["bytes"] == 101


def test_git_safe_directories_extend_the_images_gitconfig(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / ".gitconfig").write_text("[user]\n\tname = image\n")
    home = tmp_path / "home"
    home.mkdir()
    seed(str(home), str(src), UID, GID, ["/app", "/app/*"])
    text = (home / ".gitconfig").read_text()
    assert text.startswith("[user]\n\tname = image\n")
    assert '[safe]\n\tdirectory = "/app"\n\tdirectory = "/app/*"\n' in text
    # A planted link in HOME is never written through.
    other = tmp_path / "other"
    other.mkdir()
    canary = tmp_path / "canary"
    canary.write_text("CANARY")
    (other / ".gitconfig").symlink_to(canary)
    with pytest.raises(OSError):
        seed(str(other), None, UID, GID, ["/app"])
    assert canary.read_text() == "CANARY"


def test_the_source_is_the_users_home_else_skel_never_a_denied_dir() -> None:
    root_home = os.path.realpath(os.path.expanduser("~root"))
    assert source_home(0, []) == root_home
    skel = os.path.realpath(SKEL) if os.path.isdir(SKEL) else None
    # The agent's workspace (or anything under a denied dir) is never a source.
    assert source_home(0, [root_home]) == skel
    assert source_home(0, ["/"]) is None
    # A uid with no passwd entry gets the skeleton.
    unknown = next(u for u in range(61000, 62000) if not _has_passwd(u))
    assert source_home(unknown, []) == skel


def _has_passwd(uid: int) -> bool:
    import pwd

    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True
