"""The verifier's ``safe.directory`` entries: which repositories the walk finds, and real git.

Real dirs and a real ``git`` (the host's, 2.39: no ``<dir>/*`` glob, like Ubuntu 24.04's
2.43): a repository the agent's uid owns is accepted by root's git through the listed
entries, and a dir name the agent chose never adds a line of config to the verifier's git.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from support.docker import prerequisite_missing

from sandbox.inside import git_repos, home_seed

OTHER_UID = 1_600_009_999  # the "agent": an owner that is not root


def _git(home: Path, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(
        ["git", *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def _init(path: Path, *, bare: bool = False) -> None:
    path.mkdir(parents=True, exist_ok=True)
    flags = ["--bare"] if bare else []
    done = subprocess.run(
        ["git", "init", "-q", *flags, str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done


@pytest.fixture
def git() -> None:
    if shutil.which("git") is None:
        prerequisite_missing("git")


def test_the_walk_finds_repositories_and_follows_no_link(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / ".git").mkdir(parents=True)
    (ws / "a" / "b" / ".git").mkdir(parents=True)
    (ws / "a" / "b" / ".git" / "nested" / ".git").mkdir(parents=True)  # inside .git: not seen
    (ws / "sub").mkdir()
    (ws / "sub" / ".git").write_text("gitdir: ../.git/modules/sub\n")
    bare = ws / "srv" / "project.git"
    for name in ("objects", "refs"):
        (bare / name).mkdir(parents=True)
    (bare / "HEAD").write_text("ref: refs/heads/main\n")
    outside = tmp_path / "outside"
    (outside / ".git").mkdir(parents=True)
    (ws / "link").symlink_to(outside)
    (ws / "c").mkdir()
    (ws / "c" / ".git").symlink_to(outside / ".git")  # a linked .git is no repository
    repos, truncated = git_repos.find(str(ws))
    real = os.path.realpath(ws)
    assert sorted(repos) == sorted(f"{real}{p}" for p in ("", "/a/b", "/sub", "/srv/project.git"))
    assert not truncated


def test_the_walk_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    deep = tmp_path / "ws"
    path = deep
    for level in range(git_repos.MAX_DEPTH + 3):
        path = path / f"d{level}"
    (path / ".git").mkdir(parents=True)
    repos, truncated = git_repos.find(str(deep))
    assert repos == [] and truncated
    wide = tmp_path / "wide"
    for index in range(50):
        (wide / f"r{index:02}" / ".git").mkdir(parents=True)
    monkeypatch.setattr(git_repos, "MAX_REPOS", 10)
    repos, truncated = git_repos.find(str(wide))
    assert len(repos) == 10 and truncated
    monkeypatch.setattr(git_repos, "MAX_REPOS", 256)
    monkeypatch.setattr(git_repos, "MAX_ENTRIES", 20)
    repos, truncated = git_repos.find(str(wide))
    assert len(repos) < 20 and truncated
    # Breadth first: a shallow repository beside a large tree is found within the budget.
    beside = tmp_path / "beside"
    for index in range(30):
        (beside / "big" / f"d{index:02}" / "deeper").mkdir(parents=True)
    (beside / "zrepo" / ".git").mkdir(parents=True)
    monkeypatch.setattr(git_repos, "MAX_ENTRIES", 40)
    repos, truncated = git_repos.find(str(beside))
    assert repos == [os.path.realpath(beside / "zrepo")] and truncated


def test_config_values_are_quoted_and_control_characters_refused() -> None:
    assert git_repos.config_value('/app/a "b\\c') == '"/app/a \\"b\\\\c"'
    for bad in ("/app/x\n[core]", "/app/x\r", "/app/\x7f", "/app/\udcff"):
        assert git_repos.config_value(bad) is None


def test_roots_git_accepts_the_agents_nested_repository(git: None, tmp_path: Path) -> None:
    """git 2.39 reads no glob: only the repository's own entry makes it safe."""
    if os.geteuid() != 0:
        prerequisite_missing("root (to give the repository another owner)")
    ws = tmp_path / "app"
    repo = ws / "project" / "repo"
    _init(repo)
    for top, _dirs, files in os.walk(ws):
        os.lchown(top, OTHER_UID, OTHER_UID)
        for name in files:
            os.lchown(os.path.join(top, name), OTHER_UID, OTHER_UID)
    globbed, walked = tmp_path / "globbed", tmp_path / "walked"
    for home in (globbed, walked):
        home.mkdir()
    home_seed.seed(str(globbed), None, 0, 0, [str(ws), f"{ws}/*"])
    refused = _git(globbed, "rev-parse", "--git-dir", cwd=repo)
    assert refused.returncode != 0 and "dubious ownership" in refused.stderr, refused
    home_seed.op_seed_home(
        {
            "home": str(walked),
            "owner": {"uid": 0, "gid": 0},
            "deny": ["/"],  # nothing of the host's seeded
            "git_safe_directories": [str(ws), f"{ws}/*"],
            "git_safe_walk": [str(ws)],
        }
    )
    accepted = _git(walked, "rev-parse", "--git-dir", cwd=repo)
    assert accepted.returncode == 0, accepted


def test_a_dir_name_never_adds_config_to_the_verifiers_git(git: None, tmp_path: Path) -> None:
    """Attack: a repository whose dir name holds a newline and a ``[core]`` section.

    Written unquoted into ``.gitconfig`` it would set ``core.fsmonitor`` for every git the
    verifier runs, a command run as the verifier. From outside: the marker never appears,
    and git reads the config without the planted key.
    """
    ws = tmp_path / "app"
    evil = ws / "x\n[core]\n\tfsmonitor = touch fsmonitor-ran"  # a name has no "/"
    _init(evil)
    plain = tmp_path / "plain"
    _init(plain)
    marker = plain / "fsmonitor-ran"  # the hook runs in the repository's top dir
    (plain / "f").write_text("x")
    home = tmp_path / "home"
    home.mkdir()
    home_seed.op_seed_home(
        {
            "home": str(home),
            "owner": {"uid": os.geteuid(), "gid": os.getegid()},
            "deny": ["/"],  # nothing of the host's seeded
            "git_safe_walk": [str(ws)],
        }
    )
    listed = _git(home, "config", "--global", "--list", cwd=plain)
    assert listed.returncode == 0, listed
    assert "core.fsmonitor" not in listed.stdout, listed.stdout
    _git(home, "status", "--porcelain", cwd=plain)
    assert not marker.exists()


def _agents_repo(ws: Path, *config: tuple[str, str]) -> Path:
    """A repository as the agent leaves it: init, a commit, its config keys, owned by it."""
    _init(ws)
    env = {"HOME": str(ws.parent), "PATH": "/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1"}
    (ws / "f").write_text("x")
    for argv in (
        ["config", "user.name", "agent"],
        ["config", "user.email", "agent@example.com"],
        ["remote", "add", "origin", "https://example.com/r.git"],
        ["add", "f"],
        ["commit", "-qm", "one"],
        *(["config", key, value] for key, value in config),
    ):
        done = subprocess.run(["git", *argv], cwd=ws, env=env, capture_output=True, timeout=60)
        assert done.returncode == 0, done
    return ws


def _give_away(ws: Path) -> None:
    for top, dirs, files in os.walk(ws):
        for name in [top, *(os.path.join(top, n) for n in dirs + files)]:
            os.lchown(name, OTHER_UID, OTHER_UID)


def test_an_ordinary_repository_is_vetted_and_trusted(git: None, tmp_path: Path) -> None:
    repo = _agents_repo(tmp_path / "app")
    assert git_repos.vet(str(repo)) is None
    safe, refused, _ = git_repos.trusted(str(tmp_path / "app"))
    assert safe == [os.path.realpath(repo)] and refused == []


#: Config that runs a command (or names a file git would include) as whoever runs git.
HOSTILE_CONFIG = {
    "fsmonitor": ("core.fsmonitor", "touch {marker}"),
    "hooks-path": ("core.hooksPath", "/tmp/hooks"),
    "pager": ("core.pager", "touch {marker}; cat"),
    "ssh": ("core.sshCommand", "touch {marker}"),
    "external-diff": ("diff.external", "touch {marker}"),
    "textconv": ("diff.evil.textconv", "touch {marker}; cat"),
    "filter": ("filter.evil.clean", "touch {marker}; cat"),
    "merge-driver": ("merge.evil.driver", "touch {marker}"),
    "credential": ("credential.helper", "!touch {marker}"),
    "alias": ("alias.st", "!touch {marker}"),
    "include": ("include.path", "/tmp/evil.gitconfig"),
    "include-if": ("includeIf.gitdir:/.path", "/tmp/evil.gitconfig"),
    "upload-pack": ("remote.origin.uploadpack", "touch {marker}"),
    "submodule-update": ("submodule.x.update", "!touch {marker}"),
    "worktree": ("core.worktree", "/etc"),
    "trailer": ("trailer.x.command", "touch {marker}"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_CONFIG))
def test_a_repository_whose_config_can_run_a_command_is_not_trusted(
    git: None, tmp_path: Path, case: str
) -> None:
    """Attack: the agent's repository config names a command; root's git must refuse it.

    From outside: the repository is left out of the entries, root's git refuses it as
    another user's ("dubious ownership") and the marker the command would write never
    appears.
    """
    if os.geteuid() != 0:
        prerequisite_missing("root (to give the repository another owner)")
    marker = tmp_path / "ran"
    key, value = HOSTILE_CONFIG[case]
    ws = tmp_path / "app"
    repo = _agents_repo(ws, (key, value.format(marker=marker)))
    (repo / "f").write_text("changed")
    (repo / ".gitattributes").write_text("* filter=evil diff=evil merge=evil\n")
    _give_away(ws)
    why = git_repos.vet(str(repo))
    assert why is not None and "not vetted" in why, why
    home = tmp_path / "home"
    home.mkdir()
    seeded = home_seed.op_seed_home(
        {
            "home": str(home),
            "owner": {"uid": 0, "gid": 0},
            "deny": ["/"],
            "git_safe_walk": [str(ws)],
        }
    )
    assert seeded["git_repos"]["trusted"] == 0, seeded
    assert seeded["git_repos"]["untrusted"][0]["path"] == os.path.realpath(repo)
    for argv in (["status", "--porcelain"], ["diff"], ["log", "-p"], ["st"], ["fetch"]):
        done = _git(home, *argv, cwd=repo)
        assert done.returncode != 0, (argv, done)
    assert not marker.exists()


def test_hooks_gitfiles_links_and_unread_config_are_not_trusted(git: None, tmp_path: Path) -> None:
    hooked = _agents_repo(tmp_path / "hooked")
    (hooked / ".git" / "hooks" / "post-checkout").write_text("#!/bin/sh\ntouch ran\n")
    assert "a hook" in (git_repos.vet(str(hooked)) or "")
    sub = tmp_path / "gitfile"
    sub.mkdir()
    (sub / ".git").write_text(f"gitdir: {hooked}/.git\n")
    assert "gitfile" in (git_repos.vet(str(sub)) or "")
    linked = _agents_repo(tmp_path / "linked")
    config = linked / ".git" / "config"
    config.rename(linked / ".git" / "real-config")
    config.symlink_to(linked / ".git" / "real-config")
    assert "not a regular file" in (git_repos.vet(str(linked)) or "") or "Too many" in (
        git_repos.vet(str(linked)) or ""
    )
    continued = _agents_repo(tmp_path / "continued")
    with (continued / ".git" / "config").open("a") as out:
        out.write("[user]\n\tname = a \\\n\tfsmonitor\n")
    assert "continues" in (git_repos.vet(str(continued)) or "")
    worktree = _agents_repo(tmp_path / "worktree")
    (worktree / ".git" / "commondir").write_text("../../elsewhere\n")
    assert "linked worktree" in (git_repos.vet(str(worktree)) or "")
    big = _agents_repo(tmp_path / "big")
    with (big / ".git" / "config").open("a") as out:
        out.write("# " + "x" * git_repos.MAX_CONFIG_BYTES + "\n")
    assert "larger" in (git_repos.vet(str(big)) or "")
