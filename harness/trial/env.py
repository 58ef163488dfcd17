"""The environments of a trial's phases: the agent's, and the verifier's (never the agent's)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from harness.tasks import Task
from sandbox.backend import Sandbox
from sandbox.environment import isolated_env
from sandbox.verifier_tools import verifier_env

#: Where the agent finds its task's MCP servers (JSON) and its skills.
MCP_SERVERS_VAR = "HARNESS_MCP_SERVERS"
SKILLS_VAR = "HARNESS_SKILLS_DIR"
#: What keeps a Python started by a grader (a verifier, a judge) from importing files an
#: agent left behind: no user site dir (``usercustomize``, ``.pth``), and no start dir or
#: script dir on ``sys.path`` (a ``pytest.py`` in the workspace is never ``-m pytest``).
UNSTEERED_PYTHON = {"PYTHONNOUSERSITE": "1", "PYTHONSAFEPATH": "1"}


def mcp_servers_json(task: Task) -> str | None:
    """The task's ``mcp_servers`` as the agent is told them (None when it has none)."""
    servers = task.config.environment.mcp_servers
    if not servers:
        return None
    return json.dumps([server.model_dump(mode="json", exclude_none=True) for server in servers])


def phase_env(
    sandbox: Sandbox,
    task: Task,
    trial_id: str,
    *,
    home: str,
    extra: Mapping[str, str],
    task_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """A phase's environment from scratch: fixed PATH, HOME/TMPDIR under ``home``.

    The environment's and the task's variables first, the harness's own last (a task
    cannot override them).
    """
    paths = sandbox.paths
    return isolated_env(
        Path(paths.root),
        os.environ,
        home=Path(home),
        extra={
            **sandbox.environment_env(),
            **task.config.environment.env,
            **(task_env or {}),
            "HARNESS_WORKSPACE": paths.workspace,
            "HARNESS_TRIAL_ID": trial_id,
            **extra,
        },
    )


def agent_env(
    sandbox: Sandbox, task: Task, trial_id: str, extra: Mapping[str, str]
) -> dict[str, str]:
    """The agent's environment (never a secret: those travel in ``secret_env``)."""
    paths = sandbox.paths
    told: dict[str, str] = {}
    servers = mcp_servers_json(task)
    if servers is not None:
        told[MCP_SERVERS_VAR] = servers
    if task.config.environment.skills_dir is not None:
        told[SKILLS_VAR] = f"{paths.home}/skills"
    harness_vars = {
        "HARNESS_SESSION_DIR": paths.session,
        "HARNESS_ARTIFACTS_DIR": paths.artifacts,
        **told,
        **extra,
    }
    return phase_env(sandbox, task, trial_id, home=paths.home, extra=harness_vars)


def grader_env(sandbox: Sandbox, task: Task, trial_id: str) -> dict[str, str]:
    """The verifier's environment: fresh HOME and TMPDIR, fixed PATH, nothing of the agent's.

    The agent's home, its session and its command's variables are nowhere in it;
    :data:`UNSTEERED_PYTHON` keeps a user site dir and the start dir (the workspace) out of
    any Python the tests start.
    """
    paths = sandbox.paths
    return phase_env(
        sandbox,
        task,
        trial_id,
        home=paths.grader_home,
        extra={"HARNESS_VERIFIER_DIR": paths.verifier, **UNSTEERED_PYTHON, **verifier_env()},
        task_env=task.verifier_env,
    )


def judge_env(home: str) -> dict[str, str]:
    """What a judge agent's environment replaces: HOME (and TMPDIR, XDG_*) and Python's path.

    A shared judge works in the solver's sandbox: its HOME is a fresh dir, never the
    solver's (whose ``.bashrc``, ``.local`` site dir and config files would steer what the
    judge runs), and :data:`UNSTEERED_PYTHON` keeps the workspace's and any user site
    dir's modules out of its Python.
    """
    fresh = isolated_env(Path(home), {}, home=Path(home))
    del fresh["PATH"]  # the phase's own, fixed PATH stays
    return {**fresh, **UNSTEERED_PYTHON}
