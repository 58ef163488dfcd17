"""The ``git`` client, as datasets use it: refs, a blobless sparse checkout, Git LFS.

Every call goes through :func:`_git`, which never prompts (``GIT_TERMINAL_PROMPT=0``),
allows only the ordinary transports (``protocol.allow=never`` but for ``file``, ``git``,
``http``, ``https`` and ``ssh``, on the command line and in ``GIT_ALLOW_PROTOCOL``: a
registry or lock could otherwise name an ``ext::`` URL, which runs a command), runs
outside any repository but the one it made (never a config the input chose), and turns a
failure into a :class:`DatasetError` with git's own first line of complaint.

Every command line puts ``--end-of-options`` (or ``--``) before the URLs, refs, commits
and paths it carries, so none is ever read as an option, even one a check missed.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from harness.datasets.inputs import ALLOWED_SCHEMES, check_git_url
from harness.datasets.model import DatasetError, is_full_sha

logger = logging.getLogger("harness.datasets")

#: Transports a registry or lock may name: never ``ext::`` (it runs a command) nor ``fd::``.
_ALLOWED_PROTOCOLS = ":".join(ALLOWED_SCHEMES)
#: The same, as configuration on every command line (it wins over any config file).
_PROTOCOL_CONFIG = (
    "-c",
    "protocol.allow=never",
    *(arg for name in ALLOWED_SCHEMES for arg in ("-c", f"protocol.{name}.allow=always")),
)
#: Before the values a command carries: none is read as an option (git >= 2.24).
END = "--end-of-options"
#: An abbreviated commit id (as some registries hold).
_SHORT_SHA = re.compile(r"^[0-9a-f]{7,39}\Z")
#: A clone of a big repository over a slow link takes a while; a dead one must not hang.
_TIMEOUT_SEC = 1800.0
_MISSING_COMMIT = (
    "not our ref",
    "couldn't find remote ref",
    "no such remote ref",
    "unadvertised object",
    "bad object",
    "not a valid object",
)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        GIT_TERMINAL_PROMPT="0",
        GIT_ALLOW_PROTOCOL=_ALLOWED_PROTOCOLS,
        GIT_LFS_SKIP_SMUDGE="1",  # LFS content comes from one `git lfs pull` of the paths
        GIT_CONFIG_NOSYSTEM="1",
    )
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY"):
        env.pop(name, None)
    return env


def _git(args: Sequence[str], *, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``git ARGS``; the completed process, whatever its exit code.

    Raises:
        DatasetError: ``git`` is not installed, or it did not finish in time.
    """
    if shutil.which("git") is None:
        raise DatasetError("datasets need the git client: install git (apt-get install git)")
    try:
        return subprocess.run(
            ["git", *_PROTOCOL_CONFIG, "-c", "advice.detachedHead=false", *args],
            # Outside any repository but ours: the caller's cwd may be in one whose config
            # (core.sshCommand, core.fsmonitor) would run a command.
            cwd=cwd if cwd is not None else "/",
            env=_env(),
            capture_output=True,
            text=True,
            timeout=_TIMEOUT_SEC,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise DatasetError(f"git {args[0]} did not finish in {_TIMEOUT_SEC:.0f} s") from None


def _complaint(proc: subprocess.CompletedProcess[str]) -> str:
    """Git's most telling line of stderr (its last ``fatal:``, else its last line)."""
    lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
    fatal = [line for line in lines if line.startswith(("fatal:", "error:"))]
    return (fatal or lines or [f"exit {proc.returncode}"])[-1]


def check_url(url: str) -> str:
    """Refuse a URL git would read as an option or run a command for.

    Raises:
        DatasetError: It fails :func:`harness.datasets.inputs.check_git_url`.
    """
    try:
        return check_git_url(url)
    except ValueError as exc:
        raise DatasetError(str(exc)) from None


def remote_refs(url: str) -> dict[str, str]:
    """Every ref of ``url`` (``HEAD``, ``refs/heads/...``, peeled tags) → commit.

    Raises:
        DatasetError: The repository is unreachable (git's reason on the same line).
    """
    proc = _git(["ls-remote", END, check_url(url)])
    if proc.returncode != 0:
        raise DatasetError(f"repository {url} is unreachable: {_complaint(proc)}")
    refs: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        sha, _, name = line.partition("\t")
        if name.endswith("^{}"):
            refs[name[:-3]] = sha  # a tag's commit wins over the tag object
        else:
            refs.setdefault(name, sha)
    return refs


def resolve_ref(url: str, ref: str) -> str:
    """The commit ``ref`` (HEAD, a branch, a tag or a full commit id) names in ``url`` now.

    Raises:
        DatasetError: Unreachable, or no such ref.
    """
    if is_full_sha(ref):
        return ref
    refs = remote_refs(url)
    for name in (ref, f"refs/heads/{ref}", f"refs/tags/{ref}"):
        if name in refs:
            return refs[name]
    if ref.lower() == "head" and "HEAD" in refs:
        return refs["HEAD"]
    if _SHORT_SHA.match(ref):
        # An abbreviated commit id: only the history can tell which commit it is.
        with tempfile.TemporaryDirectory(prefix="harness-ref-") as scratch:
            _init(url, Path(scratch))
            found = _from_history(url, Path(scratch), ref)
        if found is not None:
            return found
    raise DatasetError(
        f"repository {url} has no ref {ref!r} (pin a full commit id, or name a branch or tag)"
    )


def fetch_commit(url: str, commit: str, into: Path) -> None:
    """Make ``into`` a repository holding ``commit`` of ``url``: its trees, not its blobs.

    ``--filter=blob:none --depth 1``: only the commit and its trees cross the wire (a
    server that does not filter sends the blobs of that one commit, still no history).

    Raises:
        DatasetError: Unreachable, or it has no such commit.
    """
    _init(url, into)
    proc = _git(
        ["fetch", "-q", "--depth", "1", "--filter=blob:none", END, "origin", commit], cwd=into
    )
    if proc.returncode == 0:
        got = _git(["rev-parse", "--verify", END, "FETCH_HEAD"], cwd=into).stdout.strip()
        if got != commit:
            raise DatasetError(f"{url} sent {got} when asked for commit {commit}")
        return
    reason = _complaint(proc)
    if not any(marker in proc.stderr.lower() for marker in _MISSING_COMMIT):
        raise DatasetError(f"repository {url} is unreachable: {reason}")
    # A server that refuses to send a commit no ref points at (its uploadpack settings) may
    # still have it in a branch's history: fetch the refs' history, trees only, and look.
    if _from_history(url, into, commit) != commit:
        raise DatasetError(
            f"commit {commit} is not in {url} (force-pushed away, or a wrong id): {reason}"
        )


def _init(url: str, into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    for args in (["init", "-q"], ["remote", "add", END, "origin", check_url(url)]):
        proc = _git(args, cwd=into)
        if proc.returncode != 0:
            raise DatasetError(f"git {args[0]} in {into}: {_complaint(proc)}")


def _from_history(url: str, repo: Path, ref: str) -> str | None:
    """The full id of commit ``ref`` (full or abbreviated) in the history of ``url``'s refs."""
    refspecs = ["+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*"]
    proc = _git(["fetch", "-q", "--filter=blob:none", END, "origin", *refspecs], cwd=repo)
    if proc.returncode != 0:
        raise DatasetError(f"repository {url} is unreachable: {_complaint(proc)}")
    found = _git(["rev-parse", "-q", "--verify", END, f"{ref}^{{commit}}"], cwd=repo)
    return found.stdout.strip() if found.returncode == 0 else None


def tree_paths(repo: Path, commit: str) -> list[str]:
    """Every file path of ``commit`` (from its trees alone: no blob is needed)."""
    proc = _git(["ls-tree", "-r", "--name-only", "-z", END, commit], cwd=repo)
    if proc.returncode != 0:
        raise DatasetError(f"git ls-tree {commit}: {_complaint(proc)}")
    return [path for path in proc.stdout.split("\0") if path]


def has_dir(repo: Path, commit: str, path: str) -> bool:
    """Whether ``commit`` has the directory ``path`` ("" is the root)."""
    if not path:
        return True
    proc = _git(["cat-file", "-t", END, f"{commit}:{path}"], cwd=repo)
    return proc.returncode == 0 and proc.stdout.strip() == "tree"


def checkout_paths(repo: Path, url: str, commit: str, paths: Sequence[str]) -> None:
    """Check out only ``paths`` of ``commit`` into ``repo``'s work tree (sparse), with LFS.

    Blobs of those paths are fetched now (lazily, from the blobless fetch's promisor).

    Raises:
        DatasetError: A path is not a directory of the commit, or the checkout failed.
    """
    missing = [path for path in paths if not has_dir(repo, commit, path)]
    if missing:
        raise DatasetError(
            f"task path {missing[0]!r} is not in commit {commit} of {url} "
            f"({len(missing)} path(s) missing; check the registry entry)"
        )
    patterns = ["/*"] if "" in paths else [f"/{path}/" for path in paths]
    proc = _git(["sparse-checkout", "set", "--no-cone", END, *patterns], cwd=repo)
    if proc.returncode != 0:
        raise DatasetError(f"git sparse-checkout in {repo}: {_complaint(proc)}")
    proc = _git(["switch", "-q", "--detach", END, commit], cwd=repo)
    if proc.returncode != 0:
        raise DatasetError(f"checking out {commit} of {url}: {_complaint(proc)}")
    _lfs_pull(repo, url, paths)


def _uses_lfs(repo: Path, paths: Sequence[str]) -> bool:
    tops = [repo] + [repo / path for path in paths if path]
    for top in tops:
        for attributes in [top / ".gitattributes", *top.rglob(".gitattributes")]:
            if attributes.is_file() and "filter=lfs" in attributes.read_text(errors="replace"):
                return True
    return False


def _lfs_pull(repo: Path, url: str, paths: Sequence[str]) -> None:
    """Fetch the Git LFS content of ``paths``, or warn that they hold only LFS pointers."""
    if not _uses_lfs(repo, paths):
        return
    if _git(["lfs", "version"]).returncode != 0:
        logger.warning(
            "warning: %s uses Git LFS but git-lfs is not installed: its large files are "
            "fetched as pointer files (install git-lfs, run `harness datasets clear`, "
            "fetch again)",
            url,
        )
        return
    include = ",".join(f"{path}/**" for path in paths if path) or "*"
    # git-lfs takes no --end-of-options: the paths go as the option's own value.
    proc = _git(["lfs", "pull", f"--include={include}"], cwd=repo)
    if proc.returncode != 0:
        raise DatasetError(f"git lfs pull from {url}: {_complaint(proc)}")


__all__ = [
    "check_url",
    "checkout_paths",
    "fetch_commit",
    "has_dir",
    "remote_refs",
    "resolve_ref",
    "tree_paths",
]
