"""The in-memory credential store: hide from env, restore, redact, auth files."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.credentials import KNOWN_CREDENTIAL_VARS, REDACTED, CredentialStore


def test_hide_from_env_moves_secrets_and_restore_puts_them_back(canary: str) -> None:
    env = {"OPENAI_API_KEY": canary, "ANTHROPIC_API_KEY": canary + "2", "PATH": "/usr/bin"}
    original = dict(env)
    store = CredentialStore()
    moved = store.hide_from_env(env=env)
    assert sorted(moved) == ["ANTHROPIC_API_KEY", "OPENAI_API_KEY"]
    assert env == {"PATH": "/usr/bin"}
    assert store.get("OPENAI_API_KEY") == canary
    assert store.names() == ["ANTHROPIC_API_KEY", "OPENAI_API_KEY"]
    assert canary not in repr(store)
    store.restore_env()
    assert env == original
    store.restore_env()  # idempotent
    assert env == original


def test_restore_puts_back_an_empty_variable_it_removed() -> None:
    env = {"OPENAI_API_KEY": "", "PATH": "/usr/bin"}
    original = dict(env)
    store = CredentialStore()
    store.hide_from_env(env=env)
    assert "OPENAI_API_KEY" not in store.names()
    store.restore_env()
    assert env == original


def test_hide_from_os_environ_keeps_it_from_children(canary: str) -> None:
    name = f"HARNESS_TEST_KEY_{secrets.token_hex(4).upper()}"
    os.environ[name] = canary
    try:
        store = CredentialStore()
        assert store.hide_from_env([name]) == [name]
        assert name not in os.environ
        child = subprocess.run(
            [sys.executable, "-I", "-c", "import os; print(dict(os.environ))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert canary not in child
        store.restore_env()
        assert os.environ[name] == canary
    finally:
        os.environ.pop(name, None)


def test_known_vars_cover_the_main_providers() -> None:
    assert {"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"} <= set(KNOWN_CREDENTIAL_VARS)


@pytest.mark.parametrize("name", ["lower_case", "1ABC", "A-B", "A B", "A=B", ""])
def test_hide_rejects_non_env_names(name: str) -> None:
    with pytest.raises(ValueError, match="not an environment variable name"):
        CredentialStore().hide_from_env([name], env={})


def test_set_rejects_empty_secret() -> None:
    with pytest.raises(ValueError, match="empty"):
        CredentialStore().set("X", "")


def test_redact_replaces_every_secret_longest_first(canary: str) -> None:
    store = CredentialStore()
    store.set("A", canary)
    store.set("B", canary + "-suffix")
    store.set("SHORT", "abc")
    text = f"key={canary} long={canary}-suffix short=abc again {canary}"
    out = store.redact(text)
    assert canary not in out
    assert out == f"key={REDACTED} long={REDACTED} short=abc again {REDACTED}"


def test_load_auth_file_and_delete(tmp_path: Path, canary: str) -> None:
    path = tmp_path / "auth.json"
    path.write_text(json.dumps({"OPENAI_API_KEY": canary}))
    store = CredentialStore()
    assert store.load_auth_file(path, delete=True) == ["OPENAI_API_KEY"]
    assert store.get("OPENAI_API_KEY") == canary
    assert not path.exists()


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        "[]",
        '"a string"',
        '{"OPENAI_API_KEY": 42}',
        '{"OPENAI_API_KEY": null}',
        '{"OPENAI_API_KEY": ["x"]}',
        '{"OPENAI_API_KEY": ""}',
        "",
    ],
)
def test_invalid_auth_file_names_the_file(tmp_path: Path, content: str) -> None:
    path = tmp_path / "bad-auth.json"
    path.write_text(content)
    with pytest.raises(ValueError, match="bad-auth.json"):
        CredentialStore().load_auth_file(path, delete=True)
    assert path.exists()  # never deleted when invalid


def test_missing_auth_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="nope.json"):
        CredentialStore().load_auth_file(tmp_path / "nope.json")


def test_invalid_auth_file_error_never_echoes_a_secret(tmp_path: Path, canary: str) -> None:
    path = tmp_path / "auth.json"
    path.write_text('{"OPENAI_API_KEY": "' + canary + '", "BROKEN": 1}')
    with pytest.raises(ValueError) as info:
        CredentialStore().load_auth_file(path)
    assert canary not in str(info.value)
