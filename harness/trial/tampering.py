"""What an agent phase changed in the image's root, and which of it is tampering.

A root agent (``sandbox.agent_root``) can rewrite the image a shared verifier then uses: a
trojaned ``python3``, ``pytest``, ``sh`` or ``curl`` on ``PATH`` that writes reward 1 is
Harbor's classic reward hack. After every agent phase the trial asks the sandbox for the
phase's root changes (:meth:`sandbox.backend.Sandbox.root_changes`) and compares the
bind-mounted name files (``/etc/hosts``, ``/etc/resolv.conf``, ``/etc/hostname``: outside
the image's layers) with their content before the phase; it keeps all of them in the
evidence (``root_changes.jsonl``, bounded) and a summary in the record (``root_changes``),
and marks every one as a ``tampering`` event (:func:`tampering_reason`), except those under
the reviewed :data:`~harness.trial.tampering_paths.NOT_READ` and those the task declares
expected in ``[harness].expected_root_changes``. An event's reason is the most specific of
the reviewed lists of :mod:`harness.trial.tampering_paths`, the image's ``PATH`` dirs and
the trial's own trees (the HOME the verifier's is seeded from, the dirs of the image's
search-path variables and of its ``ld.so.conf``), else a generic one. The events stay
bounded: one per path for the first :data:`MAX_TAMPERING_EVENTS` (files before the dirs
made to hold them), then one per top dir with its count.
A verifier that runs in the agent's container after such an event gives a verdict taken
after tampering: the record says so (``tampered_verdict``). A verifier that ran beside a
root agent's kept services (``agent_services = keep``) shares the root with them: what
changed in it while the verifier ran is classified as an agent phase's is (events with
``phase`` ``verifier``), and such an event marks that verdict too. ``[verifier].environment_mode =
"separate"`` is the defence: a separate verifier never sees the agent's root
(docs/grading.md).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import posixpath
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.records.layout import ROOT_CHANGES_FILENAME
from harness.trial.tampering_paths import (
    BIND_MOUNTED,
    DEFAULT_COMPONENTS,
    DEFAULT_NAMES,
    DEFAULT_SUFFIXES,
    DEFAULT_TREES,
    GENERIC_REASON,
    HOME_REASON,
    IMAGE_PATH_REASON,
    LD_SO_CONF_REASON,
    NOT_READ,
    SEARCH_PATH_VARS,
)
from sandbox.backend import Sandbox
from sandbox.errors import SandboxError
from sandbox.root_changes import ChangeKind, RootChange, RootChanges

#: Tampering events naming a path one phase adds to the record at most (the evidence file
#: has them all); the rest are counted per top dir.
MAX_TAMPERING_EVENTS = 50
#: Top dirs the rest are counted under at most; past them, one event counts what is left.
MAX_TAMPERING_GROUPS = 16
#: Changes the record's summary lists (the evidence file has them all).
MAX_SUMMARY_PATHS = 20
#: Bytes of a config file (``/etc/passwd``, ``ld.so.conf``) read at most.
MAX_CONFIG_BYTES = 1 << 20
#: The trial's own trees (HOME, search-path dirs) kept at most.
MAX_TRIAL_TREES = 256
#: ``include`` lines of ``/etc/ld.so.conf`` followed at most.
MAX_LD_SO_INCLUDES = 8


class _Node:
    """One component of :class:`PathPatterns`' tree."""

    __slots__ = ("exact", "reason", "wild")

    def __init__(self) -> None:
        self.exact: dict[str, _Node] = {}
        self.wild: dict[str, _Node] = {}
        self.reason: str | None = None


class PathPatterns:
    """Absolute path patterns (``*`` within a component), each matching a path and its tree.

    The most specific pattern (the most components) that matches decides. Held as a tree
    of components, so a path costs a walk down its own components, whatever the count of
    patterns.
    """

    def __init__(self, entries: Iterable[tuple[str, str]]) -> None:
        self._root = _Node()
        for pattern, reason in entries:
            parts = _parts(pattern)
            if not parts:
                continue
            node = self._root
            for part in parts:
                children = node.wild if "*" in part else node.exact
                node = children.setdefault(part, _Node())
            node.reason = reason

    def match(self, path: str) -> str | None:
        """The reason of the most specific pattern ``path`` is at or under, or None."""
        found = self.deepest(path)
        return None if found is None else found[1]

    def deepest(self, path: str) -> tuple[int, str] | None:
        """(components, reason) of the most specific pattern ``path`` is under, or None."""
        parts = _parts(path)
        best: tuple[int, str] | None = None
        stack = [(self._root, 0)]
        while stack:
            node, depth = stack.pop()
            if node.reason is not None and depth > 0 and (best is None or depth > best[0]):
                best = (depth, node.reason)
            if depth == len(parts):
                continue
            name = parts[depth]
            child = node.exact.get(name)
            if child is not None:
                stack.append((child, depth + 1))
            for pattern, wild in node.wild.items():
                if fnmatch.fnmatchcase(name, pattern):
                    stack.append((wild, depth + 1))
        return best


def _parts(path: str) -> tuple[str, ...]:
    return tuple(part for part in posixpath.normpath(path).split("/") if part)


#: The reviewed default (:mod:`harness.trial.tampering_paths`), compiled once.
_TREES = PathPatterns(DEFAULT_TREES)
_NOT_READ = PathPatterns(NOT_READ)
_NAMES = dict(DEFAULT_NAMES)
_COMPONENTS = dict(DEFAULT_COMPONENTS)
_SUFFIXES = dict(DEFAULT_SUFFIXES)


def tampering_reason(
    path: str,
    image_path: Sequence[str] = (),
    *,
    extra: PathPatterns | None = None,
    expected: PathPatterns | None = None,
) -> str | None:
    """Why a change to ``path`` is tampering; None for the reviewed exceptions only.

    Every path of the image root counts but those under
    :data:`~harness.trial.tampering_paths.NOT_READ` (unless a name, suffix or component
    python acts on wherever it is says otherwise) and the task's expected ones.

    Args:
        path: An absolute path of the sandbox's root that an agent phase changed.
        image_path: The image's ``PATH`` dirs (its ``ENV PATH``), besides the usual ones.
        extra: The trial's own trees besides the default (:func:`trial_trees`: the
            verifier's HOME, the image's search paths).
        expected: The task's expected root changes: never tampering.

    Returns:
        The most specific reason (``an executable on PATH``...), else the generic one;
        None when the change is no tampering.
    """
    path = posixpath.normpath(path)
    if expected is not None and expected.match(path) is not None:
        return None
    found = specific_reason(path, image_path, extra=extra)
    if found is not None:
        return found
    if _NOT_READ.match(path) is not None:
        return None
    return GENERIC_REASON


def specific_reason(
    path: str, image_path: Sequence[str] = (), *, extra: PathPatterns | None = None
) -> str | None:
    """The reason the reviewed lists give ``path`` (the most specific entry), or None."""
    path = posixpath.normpath(path)
    name = posixpath.basename(path)
    if name in _NAMES:
        return _NAMES[name]
    suffix = posixpath.splitext(name)[1]
    if suffix in _SUFFIXES:
        return _SUFFIXES[suffix]
    for part in path.split("/"):
        if part in _COMPONENTS:
            return _COMPONENTS[part]
    for top in image_path:
        if top.startswith("/") and posixpath.dirname(path) == posixpath.normpath(top):
            return IMAGE_PATH_REASON
    # The most specific of the default's trees and the trial's own (a HOME under /home).
    found = _TREES.deepest(path)
    own = extra.deepest(path) if extra is not None else None
    if own is not None and (found is None or own[0] >= found[0]):
        found = own
    return None if found is None else found[1]


def image_path_dirs(env: Iterable[str]) -> tuple[str, ...]:
    """The ``PATH`` dirs of an image's ``Env`` list (``NAME=value`` entries)."""
    for item in env:
        name, _, value = item.partition("=")
        if name == "PATH":
            return tuple(part for part in value.split(":") if part.startswith("/"))
    return ()


def tampering_events(
    changes: RootChanges,
    image_path: Sequence[str] = (),
    step: str | None = None,
    *,
    extra: PathPatterns | None = None,
    expected: PathPatterns | None = None,
    phase: str = "agent",
) -> list[dict[str, Any]]:
    """The ``tampering`` events of a phase's changes, bounded.

    One per path for the first :data:`MAX_TAMPERING_EVENTS` (files, links and removals
    first, then the dirs added to hold them; by path within each), then one of kind
    ``more`` per top dir (``dir``, ``count``) for the rest, at most
    :data:`MAX_TAMPERING_GROUPS`, and one ``more`` without ``dir`` for what is left.
    """
    flagged: list[tuple[bool, RootChange, str]] = []
    for change in changes.changes:
        reason = tampering_reason(change.path, image_path, extra=extra, expected=expected)
        if reason is not None:
            flagged.append((change.kind == "added" and change.type == "dir", change, reason))
    flagged.sort(key=lambda item: item[0])  # stable: by path within each
    events = [_event(change, reason, step, phase) for _dir, change, reason in flagged]
    del events[MAX_TAMPERING_EVENTS:]
    groups: dict[str, int] = {}
    left = 0
    for _dir, change, _reason in flagged[MAX_TAMPERING_EVENTS:]:
        top = "/" + change.path.lstrip("/").split("/", 1)[0]
        if top in groups or len(groups) < MAX_TAMPERING_GROUPS:
            groups[top] = groups.get(top, 0) + 1
        else:
            left += 1
    stepped = {"step": step} if step is not None else {}
    for top, count in groups.items():
        events.append(
            {
                "type": "tampering",
                "kind": "more",
                "dir": top,
                "count": count,
                "detail": f"{count} more tampering changes under {top} (see "
                f"{ROOT_CHANGES_FILENAME})",
                **stepped,
            }
        )
    if left:
        events.append(
            {
                "type": "tampering",
                "kind": "more",
                "count": left,
                "detail": f"{left} more tampering changes (see {ROOT_CHANGES_FILENAME})",
                **stepped,
            }
        )
    return events


def _event(
    change: RootChange, reason: str, step: str | None, phase: str = "agent"
) -> dict[str, Any]:
    who = (
        "the agent"
        if phase == "agent"
        else "the agent's kept services (or the verifier beside them)"
    )
    return {
        "type": "tampering",
        "phase": phase,
        "path": change.path,
        "kind": change.kind,
        "detail": f"{who} {change.kind} {reason}: a verifier in this container reads it",
        **({"step": step} if step is not None else {}),
    }


def summary(changes: RootChanges, tampering: int) -> dict[str, Any]:
    """The record's ``root_changes`` summary of one phase's listing."""
    counts = {"added": 0, "modified": 0, "removed": 0}
    for change in changes.changes:
        counts[change.kind] = counts.get(change.kind, 0) + 1
    return {
        "total": max(changes.total, len(changes.changes)),
        "truncated": changes.truncated,
        **counts,
        "tampering": tampering,
        "paths": [change.path for change in changes.changes[:MAX_SUMMARY_PATHS]],
    }


def write_changes(evidence: Path, changes: RootChanges, step: str | None) -> None:
    """Append the listing to the trial's ``root_changes.jsonl`` (one line per change)."""
    evidence.mkdir(parents=True, exist_ok=True)
    with open(evidence / ROOT_CHANGES_FILENAME, "a", encoding="utf-8") as out:
        for change in changes.changes:
            line = change.to_json()
            if step is not None:
                line["step"] = step
            out.write(json.dumps(line) + "\n")
        if changes.truncated:
            out.write(json.dumps({"truncated": True, "total": changes.total}) + "\n")


def fresh_changes(changes: RootChanges, seen: dict[str, RootChange]) -> RootChanges:
    """The changes not listed (the same) before; ``seen`` learns the whole listing.

    A sandbox lists what every phase so far changed: each phase's own share is what is new
    or different since the last listing.
    """
    fresh = tuple(change for change in changes.changes if seen.get(change.path) != change)
    for change in changes.changes:
        seen[change.path] = change
    unlisted = max(0, changes.total - len(changes.changes))
    return RootChanges(fresh, changes.truncated, len(fresh) + unlisted)


def passwd_home(passwd: bytes, user: str) -> str | None:
    """The HOME ``/etc/passwd`` gives ``user`` (a name or a uid), or None.

    The file is the agent's to write: it is parsed as text, line by line, and a home that
    is not an absolute path (or is ``/``) is no answer.
    """
    for line in passwd.decode("utf-8", errors="replace").splitlines():
        fields = line.split(":")
        if len(fields) < 7 or user not in (fields[0], fields[2]):
            continue
        home = posixpath.normpath(fields[5]) if fields[5].startswith("/") else ""
        return home if home not in ("", "/") else None
    return None


class RootChangeLog:
    """One trial's record of its root changes, phase by phase (see the module doc).

    Attributes:
        evidence: The trial's evidence dir (``root_changes.jsonl`` goes there).
        summaries: The record's ``root_changes``: one summary per agent phase that changed
            anything.
        events: Where ``tampering`` (and ``root_changes_error``) events go: the record's.
        expected: The task's expected root changes (never ``tampering``).
        tampered: An agent phase so far made a tampering change.
        tampered_verdict: A verifier ran in the agent's container after a tampering change.
    """

    def __init__(
        self, evidence: Path, events: list[dict[str, Any]], expected: Sequence[str] = ()
    ) -> None:
        self.evidence = evidence
        self.events = events
        self.expected = PathPatterns((pattern, "expected") for pattern in expected)
        self.summaries: list[dict[str, Any]] = []
        self.tampered = False
        self.tampered_verdict = False
        self._seen: dict[str, RootChange] = {}
        self._mounted: dict[str, str | None] = {}

    def before_agent(self, sandbox: Sandbox) -> None:
        """Note the bind-mounted name files' content before an agent phase."""
        if type(sandbox).root_changes is Sandbox.root_changes:
            return  # no image root of its own (the local backend): nothing to watch
        self._mounted = {path: _content(sandbox, path) for path in BIND_MOUNTED}

    def _mounted_changes(self, sandbox: Sandbox) -> list[RootChange]:
        """The bind-mounted name files whose content the phase changed."""
        found: list[RootChange] = []
        for path, before in self._mounted.items():
            after = _content(sandbox, path)
            if after == before:
                continue
            kind: ChangeKind = (
                "added" if before is None else "removed" if after is None else "modified"
            )
            found.append(RootChange(path, kind, "file"))
        self._mounted = {}
        return found

    def _listing(self, sandbox: Sandbox) -> RootChanges | None:
        try:
            return sandbox.root_changes()
        except SandboxError as exc:
            detail = f"{type(exc).__name__}: {exc}"
            self.events.append({"type": "root_changes_error", "detail": detail})
            return None

    def after_agent(self, sandbox: Sandbox, step: str | None, phase: str = "agent") -> None:
        """Record what the agent phase just ended changed, and mark its tampering."""
        listing = self._listing(sandbox)
        if listing is None:
            return
        changes = fresh_changes(listing, self._seen)
        mounted = self._mounted_changes(sandbox)
        if mounted:
            merged = tuple(sorted((*changes.changes, *mounted), key=lambda c: c.path))
            changes = RootChanges(merged, changes.truncated, changes.total + len(mounted))
        if not changes.changes and not changes.truncated:
            return
        env = phase_env(sandbox)
        dirs = tuple(part for part in env.get("PATH", "").split(":") if part)
        extra = trial_trees(sandbox, env)
        events = tampering_events(
            changes, dirs, step, extra=extra, expected=self.expected, phase=phase
        )
        if changes.truncated:
            # Changes past the listing's bounds are unseen: one of them may be tampering.
            events.append(
                {
                    "type": "tampering",
                    "kind": "unlisted",
                    "detail": f"the root changes were listed up to a bound ({changes.total} "
                    "found): those left out may be tampering",
                    **({"step": step} if step is not None else {}),
                }
            )
        self.events.extend(events)
        self.tampered = self.tampered or bool(events)
        write_changes(self.evidence, changes, step)
        tampered = sum(1 if e.get("path") else int(e.get("count", 0)) for e in events)
        entry = summary(changes, tampered)
        if phase != "agent":
            entry["phase"] = phase
        if step is not None:
            entry["step"] = step
        self.summaries.append(entry)

    def after_grader(self, sandbox: Sandbox) -> None:
        """A shared verifier's own changes (its ``apt-get install``) are not the agent's."""
        listing = self._listing(sandbox)
        if listing is not None:
            fresh_changes(listing, self._seen)

    def before_verifier(self, sandbox: Sandbox) -> None:
        """Note the bind-mounted name files before a verifier the agent's services may join."""
        self.before_agent(sandbox)

    def after_verifier(
        self, sandbox: Sandbox, step: str | None = None, *, beside_agent: bool = False
    ) -> None:
        """A verifier in the agent's container ran: its verdict follows any tampering.

        Args:
            sandbox: The agent's sandbox.
            step: The step the verifier graded (multi-step tasks).
            beside_agent: A root agent's kept services ran beside it: what changed in the
                root meanwhile may be theirs, and is classified as an agent phase's changes
                are (its tampering marks this verdict too); otherwise it is the verifier's
                own (its installs).
        """
        if beside_agent:
            self.after_agent(sandbox, step, phase="verifier")
            self.tampered_verdict = self.tampered_verdict or self.tampered
            return
        self._mounted = {}
        self.tampered_verdict = self.tampered_verdict or self.tampered
        self.after_grader(sandbox)


def _content(sandbox: Sandbox, path: str) -> str | None:
    """A digest of what ``path`` holds (read as evidence is: no link followed, capped)."""
    try:
        data, event = sandbox.read_file(path, max_bytes=MAX_CONFIG_BYTES)
    except SandboxError as exc:
        return f"error: {type(exc).__name__}"
    if data is None:
        return None if event is None or event.kind == "missing" else f"not read: {event.kind}"
    return hashlib.sha256(data).hexdigest() + ("" if event is None else f" {event.kind}")


def phase_env(sandbox: Sandbox) -> dict[str, str]:
    """The image's ``ENV`` under the environment's own (compose's): what a phase starts from."""
    config = sandbox.image_config()
    env = dict(config.env) if config is not None else {}
    env.update(sandbox.environment_env())
    return env


def trial_trees(sandbox: Sandbox, env: Mapping[str, str]) -> PathPatterns:
    """This trial's trees a verifier reads besides the default list.

    The HOME the verifier's is seeded from (:func:`verifier_home`), the dirs on the
    search-path variables of ``env`` (:func:`phase_env`;
    :data:`~harness.trial.tampering_paths.SEARCH_PATH_VARS`) and those the image's
    ``/etc/ld.so.conf`` names (:func:`ld_so_conf_dirs`).
    """
    trees: list[tuple[str, str]] = []
    home = verifier_home(sandbox)
    if home is not None:
        trees.append((home, HOME_REASON))
    for name, reason in SEARCH_PATH_VARS:
        trees.extend((part, reason) for part in _absolute_dirs(env.get(name, "").split(":")))
    trees.extend((part, LD_SO_CONF_REASON) for part in ld_so_conf_dirs(sandbox))
    return PathPatterns(trees[:MAX_TRIAL_TREES])


def _absolute_dirs(parts: Iterable[str]) -> list[str]:
    """The absolute dirs among ``parts``, normalised, ``/`` left out (it is everything)."""
    found = []
    for part in parts:
        part = part.strip()
        if part.startswith("/") and "\x00" not in part and posixpath.normpath(part) != "/":
            found.append(posixpath.normpath(part))
    return found


def verifier_home(sandbox: Sandbox) -> str | None:
    """The HOME the verifier's is seeded from, as ``/etc/passwd`` says it after the agent.

    The verifier is ``[verifier].user``, else the image's ``USER``, else root; its fresh
    HOME is seeded from the passwd home of that user (``sandbox/inside/home_seed.py``).
    """
    config = sandbox.image_config()
    user = sandbox.spec.verifier_user
    if user in (None, ""):
        user = (config.user if config is not None else None) or "root"
    name = str(user).split(":")[0]
    try:
        data, _event = sandbox.read_file("/etc/passwd", max_bytes=MAX_CONFIG_BYTES)
    except SandboxError:
        return None
    return passwd_home(data, name) if data is not None else None


def ld_so_conf_dirs(sandbox: Sandbox) -> list[str]:
    """The dirs the image's ``/etc/ld.so.conf`` names, with those of the files it includes.

    Read after the agent (a changed conf is itself a tampering event), bounded: the conf
    and the dirs of its ``include`` globs are copied out as evidence is (regular files
    only, never following a link, size-capped), and only absolute dirs are kept.
    """
    try:
        data, _event = sandbox.read_file("/etc/ld.so.conf", max_bytes=MAX_CONFIG_BYTES)
    except SandboxError:
        return []
    if data is None:
        return []
    found: list[str] = []
    includes: list[str] = []
    for line in _conf_lines(data):
        if line.startswith("include"):
            includes.extend(part for part in line.split()[1:] if part.startswith("/"))
        else:
            found.extend(_absolute_dirs([line]))
    for pattern in includes[:MAX_LD_SO_INCLUDES]:
        found.extend(_included_dirs(sandbox, posixpath.normpath(pattern)))
    return found[:MAX_TRIAL_TREES]


def _conf_lines(data: bytes) -> list[str]:
    lines = []
    for raw in data.decode("utf-8", errors="replace").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            lines.append(line)
    return lines


def _included_dirs(sandbox: Sandbox, pattern: str) -> list[str]:
    """The dirs named by the files an ``include`` glob of ld.so.conf matches."""
    parent, glob = posixpath.split(pattern)
    if not parent.startswith("/") or "*" in parent:
        return []
    found: list[str] = []
    with tempfile.TemporaryDirectory(prefix="harness-ldconf-") as tmp:
        dest = Path(tmp) / "conf"
        try:
            sandbox.copy_out(
                parent,
                dest,
                max_file_bytes=MAX_CONFIG_BYTES,
                max_total_bytes=MAX_CONFIG_BYTES * 4,
            )
        except SandboxError:
            return []
        if not dest.is_dir():
            return []
        for item in sorted(dest.iterdir()):
            if not fnmatch.fnmatchcase(item.name, glob) or item.is_symlink() or not item.is_file():
                continue
            found.extend(_absolute_dirs(_conf_lines(item.read_bytes()[:MAX_CONFIG_BYTES])))
    return found


__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_LD_SO_INCLUDES",
    "MAX_SUMMARY_PATHS",
    "MAX_TAMPERING_EVENTS",
    "MAX_TAMPERING_GROUPS",
    "MAX_TRIAL_TREES",
    "PathPatterns",
    "RootChangeLog",
    "fresh_changes",
    "image_path_dirs",
    "ld_so_conf_dirs",
    "passwd_home",
    "phase_env",
    "specific_reason",
    "summary",
    "tampering_events",
    "tampering_reason",
    "trial_trees",
    "verifier_home",
    "write_changes",
]
