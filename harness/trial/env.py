"""The environments of a trial's phases: the agent's, and the verifier's (never the agent's)."""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.tasks import Task
from sandbox.backend import Sandbox
from sandbox.environment import FIXED_PATH, isolated_env
from sandbox.image_config import ImageConfig
from sandbox.verifier_tools import verifier_env

#: Where the agent finds its task's MCP servers (JSON) and its skills.
MCP_SERVERS_VAR = "HARNESS_MCP_SERVERS"
SKILLS_VAR = "HARNESS_SKILLS_DIR"
#: What keeps a Python started by a grader (a verifier, a judge) from importing files an
#: agent left behind: no user site dir (``usercustomize``, ``.pth``), and no start dir on
#: ``sys.path`` (a ``pytest.py`` in the workspace is never ``-m pytest``); a verifier's
#: script gets its own dir back (:mod:`sandbox.verifier_python`).
UNSTEERED_PYTHON = {"PYTHONNOUSERSITE": "1", "PYTHONSAFEPATH": "1"}
#: The harness's variables put in front of a phase's own value, never in its place.
_PREPENDED = ("PATH", "PYTHONPATH")
#: What :func:`~sandbox.environment.isolated_env` points at the phase's own HOME.
HOME_NAMES = (
    "HOME",
    "USERPROFILE",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "XDG_RUNTIME_DIR",
    "TMPDIR",
)


def mcp_servers_json(task: Task) -> str | None:
    """The task's ``mcp_servers`` as the agent is told them (None when it has none)."""
    servers = task.config.environment.mcp_servers
    if not servers:
        return None
    return json.dumps([server.model_dump(mode="json", exclude_none=True) for server in servers])


#: The names the model gateway gives an agent phase (docs/model-access.md §1) and the
#: credential a provider may read its key from: an image's ``ENV`` never sets them (the
#: supervisor also writes the phase's own values over whatever is there).
MODEL_ACCESS_NAMES = frozenset(
    {
        "OPENAI_BASE_URL",
        "ANTHROPIC_BASE_URL",
        "GOOGLE_GEMINI_BASE_URL",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "GEMINI_API_KEY",
    }
)
#: Loader variables an image's ``ENV`` never passes on: the harness's own programs in a
#: phase (an installed agent's runtime, ``$HARNESS_AGENT_EXEC``) run on their own loader
#: and libraries (``--library-path`` already overrides ``LD_LIBRARY_PATH``), and these
#: would load the image's code into them all the same.
LOADER_INJECTION_NAMES = frozenset({"LD_PRELOAD", "LD_AUDIT"})
#: How many image variable names the trial record lists (of those applied, of those withheld).
RECORDED_NAMES = 64


@dataclass(frozen=True)
class ImageEnv:
    """What of an image's ``ENV`` a phase gets.

    Attributes:
        applied: The image's variables that enter every phase's environment (under the
            task's and the harness's); ``PATH`` holds absolute entries only.
        withheld: Names of the image's variables that are the harness's own (HOME, TMPDIR,
            XDG_*, HARNESS_*, the gateway's, :data:`LOADER_INJECTION_NAMES`).
    """

    applied: Mapping[str, str]
    withheld: tuple[str, ...]

    def describe(self) -> dict[str, Any]:
        """Names only, bounded, for the trial record's ``sandbox.image_env``."""
        applied, withheld = sorted(self.applied), sorted(self.withheld)
        info: dict[str, Any] = {
            "applied": applied[:RECORDED_NAMES],
            "withheld": withheld[:RECORDED_NAMES],
        }
        more = max(0, len(applied) - RECORDED_NAMES) + max(0, len(withheld) - RECORDED_NAMES)
        if more:
            info["unlisted"] = more
        return info


def image_env(config: ImageConfig | None, ours: Collection[str] = HOME_NAMES) -> ImageEnv:
    """The part of an image's ``ENV`` a phase may get (see :func:`merge_phase_env`).

    Args:
        config: The sandbox's image config (None: no image, nothing applies).
        ours: Names the harness sets for every phase itself (HOME and friends).
    """
    if config is None:
        return ImageEnv({}, ())
    applied: dict[str, str] = {}
    withheld: list[str] = []
    for name, value in config.env.items():
        if (
            name in ours
            or name.startswith("HARNESS_")
            or name in MODEL_ACCESS_NAMES
            or name in LOADER_INJECTION_NAMES
        ):
            withheld.append(name)
        elif name == "PATH":
            # A relative entry ("", ".") would look commands up in the phase's cwd, the
            # agent's workspace: a verifier would run the agent's ``pytest``.
            entries = [entry for entry in value.split(":") if entry.startswith("/")]
            if entries:
                applied[name] = ":".join(entries)
        else:
            applied[name] = value
    return ImageEnv(applied, tuple(withheld))


def merge_phase_env(
    base: Mapping[str, str],
    image: ImageEnv,
    task_layers: Sequence[Mapping[str, str]],
    ours: Mapping[str, str],
) -> dict[str, str]:
    """The one rule for every phase's environment, lowest layer first.

    1. The host's locale variables (``LANG``, ``TZ``, ...) and the fixed PATH from ``base``.
    2. The image's ``ENV`` (``image.applied``): its PATH replaces the fixed one.
    3. The phase's HOME, USERPROFILE, XDG_* and TMPDIR from ``base``: never the image's.
    4. ``task_layers`` in order: a compose file's ``main.environment``, ``[environment.env]``,
       then the phase's table (``[verifier.env]``); each replaces what is below.
    5. ``ours``: the harness's variables (``HARNESS_*``, an agent's own, ``solution.env``).
       A PATH (or PYTHONPATH) here is put in front of the phase's, never in its place.

    The supervisor then adds the phase's secrets and the gateway's URLs over all of it.
    """
    home = {name: base[name] for name in HOME_NAMES if name in base}
    env = {name: value for name, value in base.items() if name not in home}
    env.update(image.applied)
    env.update(home)
    for layer in task_layers:
        env.update(layer)
    env.update({name: value for name, value in ours.items() if name not in _PREPENDED})
    if ours.get("PATH"):
        below = env.get("PATH") or FIXED_PATH
        env["PATH"] = f"{ours['PATH']}:{below}"
    if ours.get("PYTHONPATH"):
        python_path = env.get("PYTHONPATH")
        top = ours["PYTHONPATH"]
        env["PYTHONPATH"] = f"{top}:{python_path}" if python_path else top
    return env


def phase_env(
    sandbox: Sandbox,
    task: Task,
    trial_id: str,
    *,
    home: str,
    extra: Mapping[str, str],
    task_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """A phase's environment (:func:`merge_phase_env`), HOME and TMPDIR under ``home``.

    The image's variables first, then the environment's and the task's, the harness's own
    last (a task cannot override them).
    """
    paths = sandbox.paths
    return merge_phase_env(
        isolated_env(Path(paths.root), os.environ, home=Path(home)),
        image_env(sandbox.image_config()),
        (sandbox.environment_env(), task.config.environment.env, task_env or {}),
        {"HARNESS_WORKSPACE": paths.workspace, "HARNESS_TRIAL_ID": trial_id, **extra},
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
    any Python the tests start, and the harness's ``sitecustomize``
    (:mod:`sandbox.verifier_python`, first on ``PYTHONPATH``) gives a script its own dir.
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


def image_env_record(sandbox: Sandbox) -> dict[str, Any] | None:
    """The trial record's ``sandbox.image_env`` (None: the sandbox has no image)."""
    config = sandbox.image_config()
    return None if config is None else image_env(config).describe()
