"""What a verifier phase gets from the harness besides the tests: ``$HARNESS_AGENT_EXEC``.

The tools dir holds ``run_as_agent.py`` and a ``agent-exec`` wrapper that runs it on a
Python the backend provides (the harness's own in the local sandbox, the mounted base
runtime in a container), so task images need no Python for it; and ``site/``, whose
``sitecustomize.py`` (:mod:`sandbox.verifier_python`) every Python of the verifier loads
through ``PYTHONPATH``. It is mounted read-only at
:data:`TOOLS_MOUNT`; the supervisor's socket for it is :data:`EXEC_SOCKET` (a dir only the
verifier's user can enter).
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Sequence
from pathlib import Path

from sandbox import verifier_python

TOOLS_MOUNT = "/opt/harness-tools"
EXEC_DIR = "/run/harness-exec"
EXEC_SOCKET = f"{EXEC_DIR}/agent.sock"
AGENT_EXEC = f"{TOOLS_MOUNT}/agent-exec"
#: In front of the verifier's ``PYTHONPATH``: the harness's ``sitecustomize``.
TOOLS_SITE = f"{TOOLS_MOUNT}/site"
#: Environment variables a verifier gets for it.
AGENT_EXEC_ENV = "HARNESS_AGENT_EXEC"
AGENT_EXEC_SOCKET_ENV = "HARNESS_AGENT_EXEC_SOCKET"

_CLIENT = Path(__file__).with_name("inside") / "run_as_agent.py"


def stage_tools(target: Path, python: Sequence[str]) -> Path:
    """Write the tools dir (world-readable, read-only content) for a Python command.

    Args:
        target: The dir to create (must not exist).
        python: The argv prefix that starts a Python >= 3.9 inside the sandbox.
    """
    target.mkdir(mode=0o755)
    os.chmod(target, 0o755)
    client = target / "run_as_agent.py"
    shutil.copyfile(_CLIENT, client)
    os.chmod(client, 0o644)
    wrapper = target / "agent-exec"
    command = " ".join(shlex.quote(part) for part in python)
    wrapper.write_text(
        "#!/bin/sh\n"
        "# Run a command as the agent, for the verifier (see run_as_agent.py).\n"
        f'exec {command} -I -S {TOOLS_MOUNT}/run_as_agent.py "$@"\n'
    )
    os.chmod(wrapper, 0o755)
    site = target / "site"
    site.mkdir(mode=0o755)
    os.chmod(site, 0o755)
    (site / verifier_python.NAME).write_text(verifier_python.SOURCE)
    os.chmod(site / verifier_python.NAME, 0o644)
    return target


def verifier_env() -> dict[str, str]:
    """The variables that point a verifier at the agent-exec command and socket.

    ``PYTHONPATH`` is :data:`TOOLS_SITE`, which the phase's environment puts in front of
    the task's or image's own.
    """
    return {
        AGENT_EXEC_ENV: AGENT_EXEC,
        AGENT_EXEC_SOCKET_ENV: EXEC_SOCKET,
        "PYTHONPATH": TOOLS_SITE,
    }
