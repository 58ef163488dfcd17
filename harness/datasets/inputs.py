"""What a registry, a ``datasets.lock.json`` and a ``--repo`` spec may hold, checked on read.

A registry, a lock and a run dir come from others: every value that reaches a ``git``
command line or a path on the host is checked here before anything runs. Each check
returns the value (normalised where said) or raises :class:`ValueError` with a message
that says what the value must be; callers name the field and the file it came from.

- A commit is a full commit id: exactly 40 (SHA-1) or 64 (SHA-256) lowercase hex digits.
- A ref (``HEAD``, a branch, a tag, an abbreviated id) never starts with ``-`` and holds
  no whitespace, control character, ``..`` or ``:``.
- A task path is relative, stays in the repository (no ``..`` part, not absolute), and
  holds no control character (NUL, newline); it never starts with ``-``.
- A git URL is a plain ``file``, ``git``, ``http``, ``https`` or ``ssh`` URL, an scp-like
  ``[USER@]HOST:PATH``, or a path: never a ``TRANSPORT::ADDRESS`` (``ext::`` runs a
  command, ``fd::`` talks to a descriptor), never starting with ``-``, and never with a
  host or user starting with ``-`` (``ssh://-oProxyCommand=...``).
- A text field (a name, a label) holds no control character and is bounded.
- A Hub package name is ``ORG/NAME``: each part letters, digits, ``.``, ``_``, ``-``, not
  starting with ``-`` or ``.``. A Hub ref is ``latest``, a tag, a revision number or
  ``sha256:<64 hex>``; a digest is exactly ``sha256:`` and 64 lowercase hex digits. A Hub
  storage path is relative, of such parts joined by ``/``: nothing a URL or a path could
  read otherwise (no ``..``, ``%``, ``?``, ``#``, backslash).
"""

from __future__ import annotations

import re
from urllib.parse import unquote

#: A full commit id: SHA-1 (40) or SHA-256 (64) lowercase hex digits.
FULL_COMMIT = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})\Z")
#: The URL schemes git may use for a dataset (mirrored by ``protocol.*.allow`` in git.py).
ALLOWED_SCHEMES = ("file", "git", "http", "https", "ssh")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_MAX_TEXT = 1024
_MAX_URL = 4096
_PART = r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}"
#: A Hub package: ``ORG/NAME``.
PACKAGE_NAME = re.compile(rf"^{_PART}/{_PART}\Z")
#: A Hub content digest as the harness writes it.
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}\Z")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._+-]{0,127}\Z")
_STORAGE_PATH = re.compile(rf"^{_PART}(?:/{_PART}){{0,15}}\Z")


def _shown(value: str) -> str:
    """``value`` as a message shows it: quoted, escaped, cut to a readable length."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_commit(value: str) -> str:
    """A full commit id, exactly as a lock records it.

    Raises:
        ValueError: Not 40 or 64 lowercase hex digits.
    """
    if not isinstance(value, str) or not FULL_COMMIT.match(value):
        raise ValueError(
            f"commit {_shown(str(value))} is not a full commit id (40 or 64 lowercase hex digits)"
        )
    return value


def check_ref(value: str) -> str:
    """A ref a registry or ``--repo`` names: ``HEAD``, a branch, a tag or a commit id.

    Raises:
        ValueError: It is empty, starts with ``-``, or holds whitespace, a control
            character, ``..`` or ``:``.
    """
    if (
        not value
        or len(value) > _MAX_TEXT
        or value.startswith("-")
        or _CONTROL.search(value)
        or any(c.isspace() for c in value)
        or ".." in value
        or ":" in value
    ):
        raise ValueError(
            f"ref {_shown(value)} is not a git ref (HEAD, a branch, a tag or a commit id; "
            "never starting with '-', without spaces, '..' or ':')"
        )
    return value


def check_task_path(value: str) -> str:
    """A task dir's path in its repository, normalised (``""`` is the root).

    Raises:
        ValueError: It is absolute, has a ``..`` or empty part, starts with ``-``, or
            holds a control character.
    """
    clean = value.strip().rstrip("/")
    if clean in ("", "."):
        return ""
    parts = [part for part in clean.split("/") if part != "."]
    if not parts:
        return ""
    if (
        len(clean) > _MAX_TEXT
        or clean.startswith(("/", "-"))
        or _CONTROL.search(clean)
        or any(part in ("..", "") for part in parts)
        or parts[0].startswith("-")
    ):
        raise ValueError(
            f"task path {_shown(value)} must be relative and stay in the repository (no "
            "'..', not absolute, no control characters, not starting with '-')"
        )
    return "/".join(parts)


def check_git_url(value: str) -> str:
    """A repository URL or path ``git`` may fetch from without running anything else.

    Raises:
        ValueError: It is empty, starts with ``-``, holds a control character, names a
            ``TRANSPORT::`` helper or a scheme other than :data:`ALLOWED_SCHEMES`, or its
            host or user starts with ``-``.
    """
    problem = _url_problem(value)
    if problem:
        raise ValueError(
            f"git URL {_shown(value)} {problem}: give an https://, ssh://, git:// or "
            "file:// URL, USER@HOST:PATH, or a path"
        )
    return value


def _url_problem(url: str) -> str | None:
    if not url:
        return "is empty"
    if len(url) > _MAX_URL:
        return f"is longer than {_MAX_URL} characters"
    if url.startswith("-"):
        return "starts with '-' (git would take it as an option)"
    if _CONTROL.search(url):
        return "holds a control character"
    if "::" in url:
        return "names a git transport helper (TRANSPORT::ADDRESS, such as ext::)"
    scheme = _SCHEME.match(url)
    if scheme:
        if scheme.group(1).lower() not in ALLOWED_SCHEMES:
            return f"has scheme {scheme.group(1)!r}"
        authority = url[scheme.end() :].split("/", 1)[0]
    else:
        colon, slash = url.find(":"), url.find("/")
        if colon < 0 or (0 <= slash < colon):
            return None  # a local path
        authority = url[:colon]  # scp-like USER@HOST:PATH
    user, _, host = unquote(authority).rpartition("@")
    if host.lstrip("[").startswith("-") or user.startswith("-"):
        return "has a host or user starting with '-' (ssh would take it as an option)"
    return None


#: The transports by which a remote source (the Hub) may name a repository: never a path.
REMOTE_SCHEMES = ("git", "http", "https", "ssh")


def check_remote_git_url(value: str) -> str:
    """A git URL of a remote repository, as a remote source (the Hub) may name one.

    Checked as :func:`check_git_url`, and besides: an ``https``, ``http``, ``ssh`` or
    ``git`` URL or an scp-like ``USER@HOST:PATH``, never a path or ``file://`` (a remote
    answer must not make the harness read a repository of this machine).

    Raises:
        ValueError: It fails :func:`check_git_url`, or names a local repository.
    """
    check_git_url(value)
    scheme = _SCHEME.match(value)
    colon, slash = value.find(":"), value.find("/")
    scp_like = not scheme and colon > 0 and (slash < 0 or colon < slash)
    if scp_like or (scheme and scheme.group(1).lower() in REMOTE_SCHEMES):
        return value
    raise ValueError(
        f"git URL {_shown(value)} names a repository of this machine (a path or file://): "
        "a remote source may name only https://, http://, ssh://, git:// or USER@HOST:PATH"
    )


def check_text(value: str, what: str = "name") -> str:
    """A name or label: no control character, at most 1024 characters.

    Raises:
        ValueError: It holds a control character or is too long.
    """
    if len(value) > _MAX_TEXT or _CONTROL.search(value):
        raise ValueError(
            f"{what} {_shown(value)} holds a control character or is longer than "
            f"{_MAX_TEXT} characters"
        )
    return value


def check_package_name(value: str) -> str:
    """A Hub package name, ``ORG/NAME``.

    Raises:
        ValueError: Not two parts of letters, digits, ``.``, ``_``, ``-`` (none starting
            with ``-`` or ``.``).
    """
    if not isinstance(value, str) or not PACKAGE_NAME.match(value) or ".." in value:
        raise ValueError(
            f"package {_shown(str(value))} is not ORG/NAME (letters, digits, '.', '_', '-'; "
            "neither part starting with '-' or '.')"
        )
    return value


def check_digest(value: str) -> str:
    """A content digest, normalised to ``sha256:<64 lowercase hex>`` (a bare hex is taken).

    Raises:
        ValueError: Not 64 hex digits, with or without ``sha256:``.
    """
    text = value.strip().lower() if isinstance(value, str) else ""
    text = text if text.startswith("sha256:") else f"sha256:{text}"
    if not DIGEST.match(text):
        raise ValueError(f"digest {_shown(str(value))} is not sha256:<64 hex digits>")
    return text


def check_hub_ref(value: str) -> str:
    """A Hub version ref: ``latest``, a tag, a revision number, or ``sha256:<64 hex>``.

    Raises:
        ValueError: Anything else (a ref starting with ``-``, holding ``/``, ``..``, a
            space or a control character).
    """
    if isinstance(value, str) and value.lower().startswith("sha256:"):
        return check_digest(value)
    if not isinstance(value, str) or not _TAG.match(value) or ".." in value:
        raise ValueError(
            f"ref {_shown(str(value))} is not a Hub ref (latest, a tag, a revision number or "
            "sha256:<64 hex>; letters, digits, '.', '_', '+', '-', not starting with '-')"
        )
    return value


def check_storage_path(value: str) -> str:
    """A package archive's path in the Hub's storage, as a task version names it.

    Raises:
        ValueError: Not relative parts of letters, digits, ``.``, ``_``, ``-`` joined by
            ``/`` (so no ``..``, no ``%``, ``?``, ``#``, no scheme, no absolute path).
    """
    if not isinstance(value, str) or not _STORAGE_PATH.match(value) or ".." in value:
        raise ValueError(
            f"archive path {_shown(str(value))} is not a relative storage path (parts of "
            "letters, digits, '.', '_', '-' joined by '/'; no '..')"
        )
    return value


__all__ = [
    "ALLOWED_SCHEMES",
    "REMOTE_SCHEMES",
    "DIGEST",
    "PACKAGE_NAME",
    "check_digest",
    "check_hub_ref",
    "check_package_name",
    "check_remote_git_url",
    "check_storage_path",
    "FULL_COMMIT",
    "check_commit",
    "check_git_url",
    "check_ref",
    "check_task_path",
    "check_text",
]
