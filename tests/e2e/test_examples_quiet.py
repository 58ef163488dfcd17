"""End-to-end: the project's own examples print no warning, on every sandbox.

``examples/tasks`` is what the README runs first, so a warning there is one every newcomer
reads and learns to ignore. Each example declares ``[agent].user`` (an unprivileged uid), so
no backend announces agents that would run as root under Harbor; ``harness tasks check``
and a run of the examples with the oracle (local sandbox, docker on runc and on runsc) print
no line holding "warning".
"""

from __future__ import annotations

from typing import Any

import pytest
from support.docker import docker_client, require_image, unavailable

from harness.tasks import load_tasks
from sandbox.agent_root import announcement, wants_root
from sandbox.users import is_root_user


def _warnings(result: Any) -> list[str]:
    lines = (result.stdout + result.stderr).splitlines()
    return [line for line in lines if "warning" in line.lower()]


def test_every_example_declares_an_unprivileged_agent_user(e2e: Any) -> None:
    tasks = load_tasks([e2e.EXAMPLES])
    assert sorted(task.name for task in tasks) == sorted(e2e.EXAMPLE_KEYS)
    for task in tasks:
        for view in task.views():
            user = view.agent_user
            assert user is not None and not is_root_user(user), (task.name, user)
        assert not wants_root(task.facts()), task.name
    for rule in ("never", "isolated", "allow"):
        facts = [task.facts() for task in tasks]
        assert announcement(facts, rule, "none") is None
        assert announcement(facts, rule, "none", images=False) is None


def test_tasks_check_of_the_examples_prints_no_warning(e2e: Any) -> None:
    result = e2e.run("tasks", "check", e2e.EXAMPLES)
    assert result.code == 0, result
    assert "4 task(s) OK" in result.stdout, result
    assert _warnings(result) == [], result


def _run_oracle(e2e: Any, tmp_path: Any, *sandbox: str) -> Any:
    result = e2e.run(
        "run", e2e.EXAMPLES, "--agent", "oracle", *sandbox, "-o", tmp_path,
        "--fail-under", "1.0", "--display", "plain",
        timeout=240,
    )  # fmt: skip
    assert result.code == 0, result
    return result


def test_the_examples_run_locally_without_a_warning(e2e: Any, tmp_path: Any) -> None:
    result = _run_oracle(e2e, tmp_path, "--sandbox", "local")
    assert _warnings(result) == [], result


@pytest.mark.docker
@pytest.mark.parametrize("runtime", ["runc", "runsc"])
def test_the_examples_run_in_docker_without_a_warning(
    e2e: Any, tmp_path: Any, runtime: str
) -> None:
    client = docker_client()
    require_image(client)
    if runtime not in (client.info().get("Runtimes") or {}):
        unavailable(f"runtime {runtime} is not registered (docker/start-engine.sh does it)")
    result = _run_oracle(e2e, tmp_path, "--sandbox", "docker", "--runtime", runtime)
    assert _warnings(result) == [], result
