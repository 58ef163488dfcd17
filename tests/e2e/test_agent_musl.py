"""``--agent claude-code`` on a musl image (Alpine-like): the CLI's musl build, reward 1.

The image (tests/e2e/musl_image.py) has musl's loader and C library, a static busybox, a
static bash and nothing else: no glibc loader or library, no python, no node. With
``agent.kwargs.libc = "musl"`` the harness fetches Claude Code's ``linux-x64-musl``
native package on the host into its own cache entry, mounts it read-only, and the real
CLI runs there under docker (runc), driven by a faux script in its own tool protocol
(``Bash``). Judged from outside: the record (reward, the entry's platform), the
workspace, and the image itself (no glibc loader in it).
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

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


def _task_set(root: Path, image: str, script: dict[str, object]) -> Path:
    task = root / "tasks" / "hello-musl"
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text(
        '[task]\nname = "musl/hello"\n\n[agent]\ntimeout_sec = 300\n\n'
        "[verifier]\ntimeout_sec = 60\n\n"
        f'[environment]\ndocker_image = "{image}"\ncpus = 1\nmemory_mb = 1024\n'
    )
    (task / "instruction.md").write_text("Create hello.txt containing exactly 'Hello, world!'.\n")
    (task / "tests" / "test.sh").write_text(TEST_SH)
    (task / "tests" / "test.sh").chmod(0o755)
    (root / "tasks" / "script.json").write_text(json.dumps(script))
    (root / "tasks" / "models.toml").write_text(
        '[models."faux/musl"]\nscript = "script.json"\napi = "anthropic-messages"\n'
    )
    return root / "tasks"


def test_claude_code_runs_its_musl_build_on_a_musl_image(tmp_path: Path) -> None:
    client = docker_client()
    require_image(client)  # the base image lends the supervisor its Python runtime
    image = build_musl_image(client, tmp_path / "image")
    # The image is musl-only: a glibc program has no loader there.
    probe = client.containers.run(
        image, ["/bin/sh", "-c", "ls /lib; ls /lib64 2>&1; command -v python3 node || true"],
        remove=True, network_mode="none",
    )  # fmt: skip
    assert b"ld-musl-x86_64.so.1" in probe and b"ld-linux" not in probe, probe
    write = "printf 'Hello, world!\\n' > hello.txt"
    script = {
        "responses": [
            {"tool_calls": [{"name": "Bash", "arguments": {"command": write}}]},
            {"text": "Created hello.txt."},
        ]
    }
    tasks = _task_set(tmp_path, image, script)
    out = tmp_path / "runs"
    canary = "sk-ant-canary-" + secrets.token_hex(16)
    result = run_cli(
        "run", tasks, "--agent", "claude-code", "--model", "faux/musl", "--sandbox", "docker",
        "--set", 'agent.kwargs.libc="musl"', "-o", out,
        env={"ANTHROPIC_API_KEY": canary, "HARNESS_PROVIDER": "", "HARNESS_MODEL": ""},
        timeout=900,
    )  # fmt: skip
    assert result.code == 0, result
    run = read_run_dir(only_run_dir(out))
    [record] = run.records
    assert record["status"] == "completed" and record["reward"] == 1, record["errors"]
    assert record["sandbox"]["image"] == image
    install = record["agent"]["install"]
    assert install["platform"] == "linux-x86_64-musl"
    native = Path(install["path"]) / "npm/node_modules/@anthropic-ai/claude-code-linux-x64-musl"
    assert (native / "claude").is_file()
    evidence = run.evidence(record)
    transcript = [json.loads(line) for line in (evidence / "transcript.jsonl").open()]
    assert [e["name"] for e in transcript if e["type"] == "tool_call"] == ["Bash"]
    assert (evidence / "workspace" / "hello.txt").read_text() == "Hello, world!\n"
    files = [p for p in out.rglob("*") if p.is_file()]
    assert not any(canary.encode() in p.read_bytes() for p in files)


def test_an_unknown_libc_is_refused_before_any_trial(tmp_path: Path) -> None:
    tasks = _task_set(tmp_path, "harness/base:bookworm", {"responses": [{"text": "x"}]})
    result = run_cli(
        "run", tasks, "--agent", "claude-code", "--model", "faux/musl",
        "--set", 'agent.kwargs.libc="uclibc"', "-o", tmp_path / "runs",
        env={"HARNESS_PROVIDER": "", "HARNESS_MODEL": ""}, timeout=300,
    )  # fmt: skip
    assert result.code == 2, result
    assert "agent.kwargs.libc" in result.stderr and "musl" in result.stderr
