"""``sandbox.agent_root``: who the agent is, the second boundary, and the run's one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config.model import SandboxConfig
from harness.tasks import load_task
from sandbox.agent_root import announcement, dockerfile_user, wants_root
from sandbox.docker.boundary import second_boundary
from sandbox.docker.identity import DEFAULT_UID, resolve
from sandbox.errors import PermanentStartError

USERS = {"root": (0, 0), "0": (0, 0), "app": (1000, 1000), "toor": (0, 0)}


def whois(name: str) -> tuple[int, int]:
    return USERS[name]


# rule, [agent].user, image USER, boundary -> (uid, wanted_root, user)
CASES = [
    ("never", None, None, "none", (DEFAULT_UID, True, None)),
    ("never", "root", None, "none", (DEFAULT_UID, True, None)),
    ("never", "toor", None, "none", (DEFAULT_UID, True, None)),
    ("never", None, "app", "none", (DEFAULT_UID, False, None)),
    ("never", "app", None, "none", (1000, False, "app")),
    ("allow", None, None, "none", (0, True, "root")),
    ("allow", None, "app", "none", (1000, False, "app")),
    ("allow", "root", "app", "none", (0, True, "root")),
    ("allow", None, "0:0", "none", (0, True, "0")),
    ("isolated", None, None, "gvisor", (0, True, "root")),
    ("isolated", "app", None, "none", (1000, False, "app")),
    ("isolated", None, "", "userns-remap", (0, True, "root")),
]


@pytest.mark.parametrize(("rule", "task_user", "image_user", "boundary", "expected"), CASES)
def test_resolve(
    rule: str,
    task_user: str | None,
    image_user: str | None,
    boundary: str,
    expected: tuple[int, bool, str | None],
) -> None:
    identity = resolve(rule, task_user, image_user, whois, boundary)
    assert (identity.uid, identity.wanted_root, identity.user) == expected
    record = identity.to_json()
    assert record["rule"] == rule and record["uid"] == expected[0]
    assert record["boundary"] == (boundary if expected[0] == 0 else None)


def test_isolated_root_without_a_boundary_is_refused() -> None:
    with pytest.raises(PermanentStartError, match="runsc"):
        resolve("isolated", None, None, whois, "none")


@pytest.mark.parametrize(
    ("runtime", "options", "boundary"),
    [
        ("runsc", [], "gvisor"),
        (None, ["name=seccomp,profile=default"], "none"),
        (None, ["name=seccomp,profile=default", "name=userns"], "userns-remap"),
        (None, ["name=rootless", "name=seccomp,profile=default"], "rootless"),
        ("runc", ["name=apparmor"], "none"),
    ],
)
def test_second_boundary(runtime: str | None, options: list[str], boundary: str) -> None:
    assert second_boundary(runtime, {"SecurityOptions": options}) == boundary


def test_config_key_and_values() -> None:
    assert SandboxConfig().agent_root == "never"
    assert SandboxConfig.model_validate({"agent_root": "allow"}).agent_root == "allow"
    with pytest.raises(ValueError, match="agent_root"):
        SandboxConfig.model_validate({"agent_root": "always"})


def _task(parent: Path, name: str, user: str | None, dockerfile: str | None) -> Path:
    task = parent / name
    (task / "tests").mkdir(parents=True)
    agent = f'[agent]\nuser = "{user}"\n' if user else ""
    (task / "task.toml").write_text(f'[task]\nname = "{name}"\n{agent}')
    (task / "instruction.md").write_text("do it\n")
    (task / "tests" / "test.sh").write_text("#!/bin/bash\n")
    if dockerfile is not None:
        (task / "environment").mkdir()
        (task / "environment" / "Dockerfile").write_text(dockerfile)
    return task


def test_announcement(tmp_path: Path) -> None:
    tasks = [
        load_task(_task(tmp_path, "explicit-root", "root", None)),
        load_task(_task(tmp_path, "image-root", None, "FROM debian\nRUN true\n")),
        load_task(
            _task(tmp_path, "image-app", None, "FROM debian AS b\nUSER root\nFROM x\nUSER app\n")
        ),
        load_task(_task(tmp_path, "task-app", "app", None)),
    ]
    tasks = [task.facts() for task in tasks]
    assert dockerfile_user(tasks[2].dockerfile) == "app"
    assert [wants_root(t) for t in tasks] == [True, True, False, False]
    line = announcement(tasks, "never", "none")
    assert line is not None and "explicit-root, image-root" in line and "image-app" not in line
    assert "--agent-root" in line
    local = announcement(tasks, "never", "none", images=False)
    assert local is not None and "explicit-root" in local and "image-root" not in local
    allowed = announcement(tasks, "isolated", "gvisor")
    assert allowed is not None and "behind gvisor" in allowed
    assert announcement(tasks[2:], "never", "none") is None
