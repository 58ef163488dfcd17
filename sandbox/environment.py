"""Isolated environment variables for a trial, applied and restored exactly."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping, MutableMapping
from pathlib import Path

#: The only PATH an agent or verifier gets: nothing from the user's PATH can be planted in.
FIXED_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_CREDENTIAL_NAME = re.compile(
    r"(KEY|SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|_PAT$|^PAT_)",
    re.IGNORECASE,
)
_ALWAYS_DROPPED_PREFIXES = ("HARNESS_", "AWS_", "AZURE_", "GOOGLE_", "GCP_", "DOCKER_", "SSH_")
_PASSED_THROUGH = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM")
_lock = threading.Lock()


def is_credential_name(name: str) -> bool:
    """Whether an environment variable name looks like it holds a credential."""
    return bool(_CREDENTIAL_NAME.search(name)) or name.startswith(_ALWAYS_DROPPED_PREFIXES)


def isolated_env(
    root: Path,
    base: Mapping[str, str],
    *,
    home: Path | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Compute the environment of a trial process from scratch.

    Only a few locale variables pass through from ``base``; HOME, USERPROFILE, XDG_* and
    TMPDIR point into the trial root; PATH is fixed; no ``HARNESS_*`` or credential-looking
    variable survives unless ``extra`` sets it explicitly (the harness's own
    ``HARNESS_WORKSPACE`` and friends).
    """
    home = home or root / "home"
    env = {k: base[k] for k in _PASSED_THROUGH if k in base and not is_credential_name(k)}
    env.update(
        {
            "PATH": FIXED_PATH,
            "HOME": str(home),
            "USERPROFILE": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "XDG_DATA_HOME": str(home / ".local" / "share"),
            "XDG_STATE_HOME": str(home / ".local" / "state"),
            "XDG_RUNTIME_DIR": str(home / ".run"),
            "TMPDIR": str(home / "tmp"),
        }
    )
    env.update(extra or {})
    return env


class EnvironmentIsolation:
    """Applies an isolated environment to a mapping and restores it exactly.

    The mapping is ``os.environ`` for agents that run inside the harness process, or a
    private copy for subprocess agents (so concurrent trials never race on ``os.environ``).
    Restore puts back every changed value and re-deletes every variable that was unset
    before, so the mapping ends bit-for-bit as it started.
    """

    def __init__(self, target: MutableMapping[str, str] | None = None) -> None:
        self.target: MutableMapping[str, str] = os.environ if target is None else target
        self._saved: dict[str, str | None] | None = None

    @property
    def applied(self) -> bool:
        """Whether the isolation is currently applied."""
        return self._saved is not None

    def apply(self, env: Mapping[str, str]) -> None:
        """Replace the target's contents with ``env``, remembering what was there."""
        if self._saved is not None:
            raise RuntimeError("environment isolation is already applied")
        with _lock:
            names = set(self.target) | set(env)
            self._saved = {name: self.target.get(name) for name in names}
            for name in list(self.target):
                if name not in env:
                    del self.target[name]
            for name, value in env.items():
                self.target[name] = value

    def restore(self) -> None:
        """Restore the target exactly as it was before ``apply``; a no-op if not applied."""
        if self._saved is None:
            return
        with _lock:
            for name, value in self._saved.items():
                if value is None:
                    self.target.pop(name, None)
                else:
                    self.target[name] = value
            self._saved = None
