"""The git repositories under the agent's workspace, for the verifier's ``safe.directory``.

The workspace belongs to the agent's uid and the verifier is another user, so ``git``
refuses its repositories ("detected dubious ownership") unless HOME's ``.gitconfig`` names
them. ``<workspace>/*`` names every repo below it only for git 2.46 and later; older git
(Ubuntu 24.04 has 2.43, Debian 12 2.39) compares each entry with the repository's path
exactly. So the supervisor lists the repositories themselves, found by a walk that:

- starts at the workspace (its real path) and opens each dir ``O_NOFOLLOW`` relative to
  its parent's fd: a symlink is never followed, and a dir swapped for one mid-walk is not
  entered;
- sees a repository where a dir holds ``.git`` (a dir or a gitfile, not a link), or is a
  bare one (``HEAD``, ``objects/`` and ``refs/``), and does not enter ``.git`` dirs;
- goes breadth first and stops at :data:`MAX_DEPTH` levels, :data:`MAX_ENTRIES` entries
  read and :data:`MAX_REPOS` repositories (``truncated``): a repo beyond them stays
  untrusted, and a shallow one is found before a large tree beside it uses the budget.

The dir names are the agent's: an entry becomes a quoted ``.gitconfig`` value
(:func:`config_value`), and a path git could not be given safely (a control character,
bytes that are not UTF-8) is skipped, never written, so a name cannot add a line of config
(``core.fsmonitor``) to the verifier's git.

Trust is given to a repository only once it is vetted (:func:`vet`): ownership is not what
makes another user's repository dangerous, its config is (CVE-2022-24765). A repository
whose ``config`` (or ``config.worktree``) sets a key outside :data:`SAFE_KEYS` (so no
``core.fsmonitor``, ``core.hooksPath``, ``core.sshCommand``, pager, editor, filter, diff or
merge driver, credential helper, alias, include...), holds a hook, is a linked worktree or
submodule (a gitfile, ``commondir``: its config lives elsewhere), or cannot be read plainly
(a link, an oversized file, a line this parser does not understand) stays untrusted, and
the verifier's git refuses it as git refuses any repository of another user.

Stdlib-only, Python >= 3.9 (it runs in the supervisor).
"""

from __future__ import annotations

import os
import re
import stat
from collections import deque
from typing import Deque, Dict, FrozenSet, List, Optional, Set, Tuple

MAX_DEPTH = 6
MAX_ENTRIES = 100_000
MAX_REPOS = 256
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
#: A repository config larger than this is not read: the repository stays untrusted.
MAX_CONFIG_BYTES = 256 * 1024

#: The config keys a vetted repository may set, as ``section.key`` (no subsection) or
#: ``section.*.key`` (any subsection): data git reads, never a command it runs, a file it
#: includes or a place it redirects to. Everything else makes the repository untrusted.
_SAFE_TABLE = """
core: repositoryformatversion filemode bare logallrefupdates ignorecase precomposeunicode
core: symlinks autocrlf eol safecrlf quotepath compression loosecompression bigfilethreshold
core: sharedrepository abbrev checkstat trustctime splitindex untrackedcache commentchar
core: commentstring whitespace sparsecheckout sparsecheckoutcone multipackindex preloadindex
core: warnambiguousrefs packedgitlimit packedgitwindowsize deltabasecachelimit protecthfs
core: protectntfs
remote.*: url pushurl fetch push mirror tagopt prune prunetags skipdefaultupdate
remote.*: skipfetchall promisor partialclonefilter
branch.*: remote merge rebase pushremote description
submodule.*: url active branch ignore shallow
user: name email
init: defaultbranch
extensions: objectformat worktreeconfig refstorage noop
gc: auto autopacklimit autodetach pruneexpire
receive: denycurrentbranch denynonfastforwards denydeletes
pull: rebase ff
push: default autosetupremote
fetch: prune
merge: ff conflictstyle
diff: renames algorithm mnemonicprefix noprefix renamelimit
rerere: enabled
index: version
status: showuntrackedfiles
advice: detachedhead
color: ui
"""
SAFE_KEYS: FrozenSet[str] = frozenset(
    f"{section}.{key}"
    for section, keys in (line.split(":") for line in _SAFE_TABLE.strip().splitlines())
    for key in keys.split()
)
_HEADER = re.compile(r'\[\s*([A-Za-z0-9.-]+)(?:\s+"((?:[^"\\\n]|\\.)*)")?\s*\](.*)$')
_KEY = re.compile(r"([A-Za-z][A-Za-z0-9-]*)\s*(?:=.*)?$")


def config_value(path: str) -> Optional[str]:
    """``path`` as a quoted git config value, or None if it cannot be one safely."""
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in path):
        return None
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:  # surrogate-escaped bytes of a non-UTF-8 name
        return None
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _open_below(top_fd: int, parts: List[str]) -> Optional[int]:
    """The dir ``top/parts...``, each step ``O_NOFOLLOW`` from its parent's fd (or None)."""
    fd = os.dup(top_fd)
    for name in parts:
        try:
            sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError:  # swapped for a link, removed, unreadable: not entered
            os.close(fd)
            return None
        os.close(fd)
        fd = sub
    return fd


def _list(fd: int, budget: int) -> Tuple[List[str], Set[str], int]:
    """Subdir names (``.git`` aside), the names seen (dirs with a ``/``), entries read."""
    subdirs: List[str] = []
    names: Set[str] = set()
    read = 0
    try:
        with os.scandir(fd) as it:
            for entry in it:
                read += 1
                if read > budget:
                    break
                try:
                    mode = entry.stat(follow_symlinks=False).st_mode
                except OSError:
                    continue
                if stat.S_ISDIR(mode):
                    names.add(entry.name + "/")
                    if entry.name != ".git":
                        subdirs.append(entry.name)
                elif stat.S_ISREG(mode):
                    names.add(entry.name)
    except OSError:  # unreadable: its repositories stay untrusted, the seeding goes on
        pass
    return sorted(subdirs), names, read


def find(root: str) -> Tuple[List[str], bool]:
    """The repositories at and under ``root`` (real paths) and whether a bound was met.

    Breadth first, so the shallow repositories are found before a bound is met in a
    large tree (a ``node_modules`` beside the repository).
    """
    top = os.path.realpath(root)
    try:
        top_fd = os.open(top, _DIR_FLAGS)
    except OSError:
        return [], False
    repos: List[str] = []
    entries = 0
    truncated = False
    queue: Deque[List[str]] = deque([[]])
    try:
        while queue:
            parts = queue.popleft()
            fd = _open_below(top_fd, parts)
            if fd is None:
                continue
            try:
                subdirs, names, read = _list(fd, MAX_ENTRIES - entries)
            finally:
                os.close(fd)
            entries += read
            path = "/".join([top.rstrip("/")] + parts) if parts else top
            if ".git/" in names or ".git" in names:
                repos.append(path)
            elif {"HEAD", "objects/", "refs/"} <= names:
                repos.append(path)
                continue  # a bare repository: its dirs are git's
            if entries >= MAX_ENTRIES or len(repos) >= MAX_REPOS:
                truncated = True
                break
            if len(parts) >= MAX_DEPTH:
                truncated = truncated or bool(subdirs)
                continue
            queue.extend(parts + [name] for name in subdirs)
    finally:
        os.close(top_fd)
    return repos[:MAX_REPOS], truncated


def _config_keys(text: str) -> Tuple[Optional[List[str]], str]:
    """The ``section[.*].key`` names a git config sets (lowercased), or None and why not.

    Conservative: a line this does not understand (a continuation, a header it cannot
    read) answers None, which leaves the repository untrusted.
    """
    keys: List[str] = []
    section: Optional[str] = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.endswith("\\"):
            return None, f"line {number} continues on the next (not read)"
        if line.startswith("["):
            header = _HEADER.match(line)
            if header is None:
                return None, f"line {number}: a section header not understood"
            name, sub, rest = header.group(1).lower(), header.group(2), header.group(3).strip()
            if "." in name:  # [section.subsection], the old spelling
                section = name.split(".", 1)[0] + ".*"
            else:
                section = name if sub is None else name + ".*"
            line = rest
        if not line or line[0] in "#;":
            continue
        key = _KEY.match(line)
        if key is None or section is None:
            return None, f"line {number}: not a key this parser reads"
        keys.append(f"{section}.{key.group(1).lower()}")
    return keys, ""


def _read_small(dir_fd: int, name: str) -> Tuple[Optional[bytes], str]:
    """A regular file's bytes (``O_NOFOLLOW``), b"" when absent, or None and why not."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return b"", ""
    except OSError as exc:
        return None, f"{name}: {exc.strerror or exc}"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, f"{name} is not a regular file"
        if info.st_size > MAX_CONFIG_BYTES:
            return None, f"{name} is larger than {MAX_CONFIG_BYTES} bytes"
        data = os.read(fd, MAX_CONFIG_BYTES + 1)
        if len(data) > MAX_CONFIG_BYTES:
            return None, f"{name} is larger than {MAX_CONFIG_BYTES} bytes"
        return data, ""
    finally:
        os.close(fd)


def _vet_gitdir(gitdir_fd: int) -> Optional[str]:  # noqa: C901
    """Why the git dir open at ``gitdir_fd`` is not safe to trust, or None."""
    for name in ("commondir", "gitdir"):
        try:
            os.stat(name, dir_fd=gitdir_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        except OSError:
            pass
        return f"a linked worktree ({name}): its config lives elsewhere"
    for name in ("config", "config.worktree"):
        data, why = _read_small(gitdir_fd, name)
        if data is None:
            return why
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return f"{name} is not UTF-8"
        keys, why = _config_keys(text)
        if keys is None:
            return f"{name}: {why}"
        for key in keys:
            parts = key.split(".")
            if key not in SAFE_KEYS:
                shown = key if len(parts) == 2 else ".".join((parts[0], "<name>", parts[-1]))
                return f"{name} sets {shown}, which is not vetted (it may run a command)"
    try:
        hooks_fd = os.open("hooks", _DIR_FLAGS, dir_fd=gitdir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"hooks: {exc.strerror or exc}"
    try:
        with os.scandir(hooks_fd) as it:
            for count, entry in enumerate(it):
                if count >= 1000:
                    return "hooks/ holds more than 1000 entries"
                if not (entry.name.endswith(".sample") and entry.is_file(follow_symlinks=False)):
                    return f"a hook: hooks/{entry.name}"
    except OSError as exc:
        return f"hooks: {exc.strerror or exc}"
    finally:
        os.close(hooks_fd)
    return None


def vet(repo: str) -> Optional[str]:
    """Why the repository at ``repo`` (a path :func:`find` gave) stays untrusted, or None.

    ``repo`` holds ``.git`` (a dir; a gitfile is refused) or is a bare repository. Every
    open is ``O_NOFOLLOW`` from the parent's fd, so a link swapped in is never read.
    """
    try:
        top_fd = os.open(repo, _DIR_FLAGS)
    except OSError as exc:
        return f"not opened: {exc.strerror or exc}"
    try:
        try:
            info = os.stat(".git", dir_fd=top_fd, follow_symlinks=False)
        except FileNotFoundError:
            return _vet_gitdir(top_fd)  # a bare repository: its dir is the git dir
        if not stat.S_ISDIR(info.st_mode):
            return "its .git is a gitfile or a link: the git dir lives elsewhere"
        try:
            gitdir_fd = os.open(".git", _DIR_FLAGS, dir_fd=top_fd)
        except OSError as exc:
            return f".git not opened: {exc.strerror or exc}"
        try:
            return _vet_gitdir(gitdir_fd)
        finally:
            os.close(gitdir_fd)
    finally:
        os.close(top_fd)


def trusted(root: str) -> Tuple[List[str], List[Dict[str, str]], bool]:
    """The vetted repositories at and under ``root``, the others with why, and truncation."""
    repos, cut = find(root)
    safe: List[str] = []
    refused: List[Dict[str, str]] = []
    for repo in repos:
        why = vet(repo)
        if why is None:
            safe.append(repo)
        else:
            refused.append({"path": repo, "why": why})
    return safe, refused, cut
