"""Seed a phase's fresh HOME from the image: its user's dotfiles, else ``/etc/skel``.

Harbor runs a phase with the image's own HOME (``/root`` for root), so a test's login shell
reads the image's ``.bashrc`` and ``.profile``. Our phases keep a fresh HOME of their own
(never the agent's for a verifier); the supervisor copies the image's dotfiles into it
before the phase starts (op ``seed_home``).

The image is the task's, so the copy trusts nothing in it:

- The user's home is read from ``/etc/passwd`` by :mod:`passwd`, never through NSS
  (``pwd``): NSS loads the modules the container's ``/etc/nsswitch.conf`` names, and a
  root agent writes that file before the verifier's HOME is seeded.
- Only the top-level entries whose names start with ``.`` are copied, regular files and
  dirs, and below a dir only regular files and dirs. Symlinks, FIFOs, sockets and devices
  are skipped (listed in ``skipped``). Every open is ``O_NOFOLLOW`` relative to its parent
  dir's fd, so a path swapped for a link mid-copy is never followed, and a FIFO never
  blocks (``O_NONBLOCK``, then ``fstat`` must say a regular file).
- At most :data:`MAX_FILES` entries, :data:`MAX_BYTES` bytes in all, :data:`MAX_FILE_BYTES`
  a file and :data:`MAX_DEPTH` levels (``truncated`` says a bound was met). Files come
  before dirs, so ``.bashrc`` is never crowded out by a large ``.cache``; a dot-dir is
  copied whole or not at all (measured first), so a tool's half-copied tree never
  replaces its absence.
- A source that is (under) one of ``deny`` (the agent's workspace, its home, the scratch
  dirs) is never used: its dotfiles would be the agent's, and would run in the verifier's
  login shell.
- Copies belong to the phase's user with the source's permission bits, setuid, setgid and
  sticky bits cleared; nothing already in HOME is replaced.

Stdlib-only, Python >= 3.9 (it runs in the supervisor).
"""

from __future__ import annotations

import os
import stat
from typing import Any, Dict, List, Optional, Tuple

try:  # in the harness: the sandbox.inside package; inside a sandbox: siblings on sys.path
    from sandbox.inside import git_repos, passwd
except ImportError:  # pragma: no cover - inside a sandbox
    import git_repos  # type: ignore[no-redef,import-not-found]
    import passwd  # type: ignore[no-redef,import-not-found]

SKEL = "/etc/skel"
MAX_FILES = 2000
MAX_BYTES = 8 << 20
MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 8
_CHUNK = 65536
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _under(path: str, roots: List[str]) -> bool:
    path = os.path.normpath(path)
    for root in roots:
        root = os.path.normpath(root)
        if path == root or path.startswith(root.rstrip("/") + "/") or root == "/":
            return True
    return False


def source_home(uid: int, deny: List[str]) -> Optional[str]:
    """The dir to seed from: the passwd home of ``uid`` if it is a real dir, else skel.

    The home comes from :mod:`passwd` (our own parse of ``/etc/passwd``): never NSS, whose
    modules the container's root names and a root agent can plant.
    """
    try:
        entry = passwd.lookup(uid)
    except OSError:
        entry = None
    home: Optional[str] = entry.home if entry is not None else None
    for candidate in (home, SKEL):
        if not candidate or not candidate.startswith("/") or candidate == "/":
            continue
        real = os.path.realpath(candidate)
        if _under(candidate, deny) or _under(real, deny):
            continue
        if os.path.isdir(real):
            return real
    return None


class _Copy:
    def __init__(self, uid: int, gid: int) -> None:
        self.uid, self.gid = uid, gid
        self.files = 0
        self.bytes = 0
        self.skipped: List[Dict[str, str]] = []
        self.truncated = False

    def _room(self) -> bool:
        if self.files >= MAX_FILES or self.bytes >= MAX_BYTES:
            self.truncated = True
            return False
        return True

    def _skip(self, rel: str, why: str) -> None:
        if len(self.skipped) < 50:
            self.skipped.append({"path": rel, "why": why})

    def tree(self, src_fd: int, dst_fd: int, rel: str, depth: int, dotfiles_only: bool) -> None:
        """Copy the entries of ``src_fd`` into ``dst_fd``: files first, then dirs."""
        entries: List[Tuple[str, os.stat_result]] = []
        for name in sorted(os.listdir(src_fd)):
            if dotfiles_only and not name.startswith("."):
                continue
            try:
                entries.append((name, os.stat(name, dir_fd=src_fd, follow_symlinks=False)))
            except OSError:
                continue
        entries.sort(key=lambda item: stat.S_ISDIR(item[1].st_mode))
        for name, info in entries:
            path = f"{rel}/{name}" if rel else name
            if not self._room():
                return
            if stat.S_ISREG(info.st_mode):
                self.file(src_fd, dst_fd, name, path)
            elif stat.S_ISDIR(info.st_mode):
                if depth >= MAX_DEPTH:
                    self.truncated = True
                    continue
                if dotfiles_only and not self._fits(src_fd, name):
                    # A dot-dir is copied whole or not at all: half a ``.nvm`` would
                    # break what a complete absence only leaves out.
                    self._skip(path, "too large")
                    self.truncated = True
                    continue
                self.dir(src_fd, dst_fd, name, path, depth)
            else:
                kind = "symlink" if stat.S_ISLNK(info.st_mode) else "special file"
                self._skip(path, kind)

    def _fits(self, parent_fd: int, name: str) -> bool:
        """Whether the dir ``name`` fits whole in what the bounds leave (links not counted)."""
        return self._measure(parent_fd, name, 0, [MAX_FILES - self.files, MAX_BYTES - self.bytes])

    def _measure(self, parent_fd: int, name: str, depth: int, left: List[int]) -> bool:
        try:
            sub = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
        except OSError:
            return True  # skipped by the copy too
        try:
            for child in os.listdir(sub):
                try:
                    info = os.stat(child, dir_fd=sub, follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(info.st_mode):
                    left[0] -= 1
                    left[1] -= info.st_size
                    if info.st_size > MAX_FILE_BYTES:
                        return False
                elif stat.S_ISDIR(info.st_mode):
                    left[0] -= 1
                    if depth + 1 >= MAX_DEPTH or not self._measure(sub, child, depth + 1, left):
                        return False
                if left[0] < 0 or left[1] < 0:
                    return False
        finally:
            os.close(sub)
        return True

    def file(self, src_fd: int, dst_fd: int, name: str, rel: str) -> None:
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=src_fd)
        except OSError as exc:  # a link swapped in (ELOOP), unreadable: skipped
            self._skip(rel, exc.strerror or "unreadable")
            return
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                self._skip(rel, "special file")
                return
            if info.st_size > MAX_FILE_BYTES or self.bytes + info.st_size > MAX_BYTES:
                self._skip(rel, "too large")
                self.truncated = True
                return
            os.set_blocking(fd, True)
            data = b""
            while len(data) <= MAX_FILE_BYTES:
                chunk = os.read(fd, _CHUNK)
                if not chunk:
                    break
                data += chunk
            if len(data) > MAX_FILE_BYTES:  # grew while read
                self._skip(rel, "too large")
                self.truncated = True
                return
        finally:
            os.close(fd)
        mode = stat.S_IMODE(info.st_mode) & 0o777
        try:
            out = os.open(
                name,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
                dir_fd=dst_fd,
            )
        except FileExistsError:
            return  # HOME's own entry (a file the harness wrote) stays
        try:
            os.fchown(out, self.uid, self.gid)
            os.fchmod(out, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(out, view) :]
        finally:
            os.close(out)
        self.files += 1
        self.bytes += len(data)

    def dir(self, src_fd: int, dst_fd: int, name: str, rel: str, depth: int) -> None:
        try:
            sub_src = os.open(name, _DIR_FLAGS, dir_fd=src_fd)
        except OSError as exc:
            self._skip(rel, exc.strerror or "unreadable")
            return
        try:
            mode = stat.S_IMODE(os.fstat(sub_src).st_mode) & 0o777
            try:
                os.mkdir(name, 0o700, dir_fd=dst_fd)
                made = True
            except FileExistsError:
                made = False
            try:
                sub_dst = os.open(name, _DIR_FLAGS, dir_fd=dst_fd)
            except OSError:  # HOME holds a file or link of that name: left alone
                return
            try:
                if made:
                    os.fchown(sub_dst, self.uid, self.gid)
                self.files += 1
                self.tree(sub_src, sub_dst, rel, depth + 1, dotfiles_only=False)
                if made:
                    os.fchmod(sub_dst, mode | 0o700)
            finally:
                os.close(sub_dst)
        finally:
            os.close(sub_src)


def _git_safe(dst_fd: int, dirs: List[str], uid: int, gid: int) -> None:
    """Append ``safe.directory`` entries to HOME's ``.gitconfig`` (created if missing)."""
    fd = os.open(
        ".gitconfig",
        os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o644,
        dir_fd=dst_fd,
    )
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("HOME's .gitconfig is not a regular file")
        os.fchown(fd, uid, gid)
        values = (git_repos.config_value(d) for d in dirs)
        lines = "".join("\tdirectory = %s\n" % v for v in values if v is not None)
        os.write(fd, ("\n# the agent's workspace (harness)\n[safe]\n" + lines).encode())
    finally:
        os.close(fd)


def seed(
    home: str, source: Optional[str], uid: int, gid: int, git_safe: List[str]
) -> Dict[str, Any]:
    """Copy ``source``'s dotfiles into ``home`` for ``uid``/``gid``; see the module doc.

    ``git_safe``: dirs written as ``safe.directory`` to HOME's ``.gitconfig`` after the copy.
    """
    copy = _Copy(uid, gid)
    dst_fd = os.open(home, _DIR_FLAGS)
    try:
        if source is not None:
            src_fd = os.open(source, _DIR_FLAGS)
            try:
                copy.tree(src_fd, dst_fd, "", 0, dotfiles_only=True)
            finally:
                os.close(src_fd)
        if git_safe:
            _git_safe(dst_fd, git_safe, uid, gid)
    finally:
        os.close(dst_fd)
    return {
        "source": source,
        "files": copy.files,
        "bytes": copy.bytes,
        "truncated": copy.truncated,
        "skipped": copy.skipped,
    }


def op_seed_home(req: Dict[str, Any]) -> Dict[str, Any]:
    """Seed ``home`` (an existing dir) for the user ``owner`` {uid, gid}.

    Request keys: ``home``; ``owner``; ``deny`` (dirs never seeded from);
    ``git_safe_directories`` (written to HOME's ``.gitconfig`` after the copy);
    ``git_safe_walk`` (dirs whose repositories, found and vetted by
    :func:`git_repos.trusted`, are written there too; a repository whose config could run
    a command is not).
    Result: ``source`` (the dir copied, or None), ``files``, ``bytes``, ``truncated``,
    ``skipped`` (up to 50 ``{path, why}``), and with a walk ``git_repos`` ``{found,
    trusted, untrusted (up to 50 {path, why}), truncated}``.
    """
    uid, gid = int(req["owner"]["uid"]), int(req["owner"]["gid"])
    deny = [str(d) for d in req.get("deny") or []]
    dirs = [str(d) for d in req.get("git_safe_directories") or []]
    walked: Optional[Dict[str, Any]] = None
    for top in req.get("git_safe_walk") or []:
        repos, refused, cut = git_repos.trusted(str(top))
        dirs += [repo for repo in repos if repo not in dirs]
        walked = walked or {"found": 0, "trusted": 0, "untrusted": [], "truncated": False}
        walked["found"] += len(repos) + len(refused)
        walked["trusted"] += len(repos)
        walked["untrusted"] = (walked["untrusted"] + refused)[:50]
        walked["truncated"] = walked["truncated"] or cut
    result = seed(str(req["home"]), source_home(uid, deny), uid, gid, dirs)
    if walked is not None:
        result["git_repos"] = walked
    return result
