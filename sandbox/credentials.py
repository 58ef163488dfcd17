"""Real provider credentials, held in memory in the host process and nowhere else."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, MutableMapping
from pathlib import Path

from sandbox.inside.confine import erase_environ

#: Provider keys the harness takes out of the environment at start-up.
KNOWN_CREDENTIAL_VARS = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "MISTRAL_API_KEY",
    "OPENROUTER_API_KEY",
    "GROQ_API_KEY",
    "TOGETHER_API_KEY",
    "DEEPSEEK_API_KEY",
    "XAI_API_KEY",
    "HF_TOKEN",
)
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
REDACTED = "[REDACTED]"


class CredentialStore:
    """An in-memory store of secrets that also knows how to hide and restore them.

    ``hide_from_env`` moves credentials out of an environment mapping (by default
    ``os.environ``) so no subprocess inherits them; ``restore_env`` puts back exactly what
    it took. ``redact`` scrubs every stored value out of text before it is logged.
    """

    def __init__(self) -> None:
        self._secrets: dict[str, str] = {}
        self._hidden: dict[str, str] = {}
        self._env: MutableMapping[str, str] | None = None

    def __repr__(self) -> str:
        return f"CredentialStore(names={sorted(self._secrets)})"

    def names(self) -> list[str]:
        """The names of the stored secrets (never their values)."""
        return sorted(self._secrets)

    def set(self, name: str, value: str) -> None:
        """Store a secret under ``name``."""
        if not value:
            raise ValueError(f"credential {name} is empty")
        self._secrets[name] = value

    def get(self, name: str) -> str | None:
        """Return the secret stored under ``name``, or None."""
        return self._secrets.get(name)

    def hide_from_env(
        self,
        names: Iterable[str] = KNOWN_CREDENTIAL_VARS,
        env: MutableMapping[str, str] | None = None,
    ) -> list[str]:
        """Move the named variables from ``env`` into the store; return the names moved."""
        target: MutableMapping[str, str] = os.environ if env is None else env
        self._env = target
        moved = []
        for name in names:
            if not _ENV_NAME.match(name):
                raise ValueError(f"not an environment variable name: {name!r}")
            value = target.pop(name, None)
            if value is None:
                continue
            self._hidden[name] = value  # restored exactly, even when empty
            if value:
                self._secrets[name] = value
                moved.append(name)
        if target is os.environ:
            scrub_environ_block(moved)
        return moved

    def load_auth_file(self, path: Path, *, delete: bool = False) -> list[str]:
        """Load ``{name: secret}`` from a JSON auth file; optionally delete the file after.

        Raises:
            ValueError: if the file is not a JSON object of strings.
        """
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"auth file {path} is invalid: {exc}") from exc
        if not isinstance(data, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in data.items()
        ):
            raise ValueError(f"auth file {path} is invalid: expected an object of strings")
        empty = sorted(k for k, v in data.items() if not v)
        if empty:
            names = ", ".join(empty)
            raise ValueError(f"auth file {path} is invalid: empty credential for {names}")
        for name, value in data.items():
            self.set(name, value)
        if delete:
            path.unlink()
        return sorted(data)

    def restore_env(self) -> None:
        """Put every hidden variable back where it was taken from."""
        if self._env is None:
            return
        for name, value in self._hidden.items():
            self._env[name] = value
        self._hidden.clear()

    def redact(self, text: str) -> str:
        """Replace every stored secret value in ``text`` with a marker."""
        for value in sorted(self._secrets.values(), key=len, reverse=True):
            if len(value) >= 4:
                text = text.replace(value, REDACTED)
        return text


def scrub_environ_block(names: Iterable[str]) -> list[str]:
    """Erase ``NAME=value`` entries from this process's original environment block.

    Removing a variable from ``os.environ`` leaves it in the block the kernel shows as
    ``/proc/<pid>/environ`` (the process's initial stack): anyone who may read that file
    would still find the key. This overwrites those bytes with NULs in place, so the key
    lives only in the credential store's memory. Returns the names erased.
    """
    wanted = set(names)
    return erase_environ(wanted) if wanted else []
