"""An image's ENV that names the gateway's token never replaces it, nor reaches the verifier.

The real merge rule (``harness.trial.env``) over an image config that sets
``OPENAI_API_KEY`` and ``ANTHROPIC_API_KEY``, then a real supervisor phase (local backend)
with the trial's token as a secret: the agent's process sees the token, the verifier's
sees neither the token nor the image's value.
"""

from __future__ import annotations

import secrets
import shutil
import sys
from collections.abc import Callable, Iterator

import pytest
from support.workers import uid_base

from harness.tasks import Task
from harness.trial.env import agent_env, grader_env
from sandbox.backend import PhaseRequest, Role, Sandbox, SandboxSpec
from sandbox.environment import FIXED_PATH
from sandbox.image_config import ImageConfig
from sandbox.local.sandbox import IdentityPool, LocalSandbox

pytestmark = pytest.mark.root

SYSTEM_PYTHON = shutil.which("python3", path=FIXED_PATH) or sys.executable
UID_BASE = uid_base(61460)
IMAGE = {"OPENAI_API_KEY": "image-key", "ANTHROPIC_API_KEY": "image-key", "FOO": "from-image"}


class _ImageLocalSandbox(LocalSandbox):
    def image_config(self) -> ImageConfig | None:
        return ImageConfig(env=IMAGE)


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    made = _ImageLocalSandbox(
        SandboxSpec(trial_id=f"imgenv-{secrets.token_hex(4)}"),
        identities=IdentityPool(UID_BASE, UID_BASE),
        python=SYSTEM_PYTHON,
    )
    made.start()
    yield made
    made.stop()


def _printed(sandbox: Sandbox, role: Role, env: dict[str, str], token: str) -> str:
    script = 'echo "$FOO|${OPENAI_API_KEY-unset}|${ANTHROPIC_API_KEY-unset}"'
    result = sandbox.run_phase(
        PhaseRequest(
            role=role,
            argv=["sh", "-c", script],
            env=env,
            secret_env={"OPENAI_API_KEY": token} if role == "agent" else {},
            timeout_sec=30,
        )
    )
    assert result.error is None and result.exit_code == 0, result
    data, event = sandbox.read_file(f"{sandbox.paths.logs}/{role}.stdout", max_bytes=1 << 16)
    assert event is None and data is not None, event
    return data.decode().strip()


def test_the_images_key_names_are_ours(
    sandbox: Sandbox, make_task: Callable[..., Task], canary: str
) -> None:
    task = make_task()
    agent = agent_env(sandbox, task, "t1", {})
    assert _printed(sandbox, "agent", agent, canary) == f"from-image|{canary}|unset"
    sandbox.reset_verifier_dir()
    grader = grader_env(sandbox, task, "t1")
    assert _printed(sandbox, "verifier", grader, canary) == "from-image|unset|unset"
