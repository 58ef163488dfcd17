"""The ``replay`` agent: puts back what an earlier run's agent left, so it can be graded again.

``harness regrade`` runs it instead of an agent: no agent logic and no model runs. Before
the agent phase, the trial's saved workspace (``<source>/trials/<id>/workspace``) is staged
read-only in the sandbox (and its ``session.jsonl`` in the session dir, for judges); the
agent phase — confined as the agent user, as any agent phase — then makes the workspace
exactly that copy: files not in it are deleted, the others written. The verifier and the
judges then run as in any trial. Evidence keeps regular files only, up to its size caps,
without modes: a file the original copy dropped (``too_large``) is missing here too.

The source run dir is untrusted input: everything staged is read beneath it by dir fd,
without following a link (:mod:`harness.records.workspace`), and a forged manifest entry
makes the trial's workspace incomplete (not regradable), never a path that is followed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from typing_extensions import override

from harness.agents.kinds import AgentCommand, SandboxAgent
from harness.errors import AgentConfigError, AgentRunError
from harness.records.layout import SESSION_FILENAME, TRIALS_DIRNAME, trial_evidence_dir
from harness.records.workspace import WORKSPACE_DIRNAME, final_workspace, workspace_kept
from harness.tasks import Task
from sandbox.backend import Sandbox
from sandbox.beneath import is_dir_beneath, read_beneath, safe_relative

__all__ = ["MAX_SESSION_BYTES", "RESTORE_SCRIPT", "ReplayAgent"]

#: The largest saved session staged for judges (a larger one is left out).
MAX_SESSION_BYTES = 256 << 20

#: Makes the workspace (argv[2]) exactly the staged copy (argv[1]); Python >= 3.9, stdlib.
RESTORE_SCRIPT = """
import os, shutil, sys
src, dst = sys.argv[1], sys.argv[2]
keep = set()
for root, dirs, files in os.walk(src):
    rel = os.path.relpath(root, src)
    keep.add(os.path.normpath(rel))
    for name in files:
        keep.add(os.path.normpath(os.path.join(rel, name)))
for root, dirs, files in os.walk(dst, topdown=False):
    rel = os.path.relpath(root, dst)
    for name in files + dirs:
        path = os.path.join(root, name)
        if os.path.normpath(os.path.join(rel, name)) in keep and not os.path.islink(path):
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
for root, dirs, files in os.walk(src):
    rel = os.path.relpath(root, src)
    os.makedirs(os.path.join(dst, rel), exist_ok=True)
    for name in files:
        target = os.path.join(dst, rel, name)
        with open(os.path.join(root, name), "rb") as f:
            data = f.read()
        try:
            with open(target, "rb") as f:
                if f.read() == data:
                    continue
        except OSError:
            pass
        with open(target, "wb") as f:
            f.write(data)
"""


class ReplayAgent(SandboxAgent):
    """Restores an earlier run's saved workspaces instead of running an agent (regrade).

    Args:
        source: The run dir whose evidence is replayed.
        session: Stage each trial's saved ``session.jsonl`` too (for judges).
    """

    name = "replay"

    def __init__(self, *, source: str, session: bool = False) -> None:
        self.source = Path(source)
        self.session_file = SESSION_FILENAME if session else None

    def _evidence(self, trial_id: str) -> Path:
        """The trial's evidence dir, reached from the source without a link (else refused)."""
        if safe_relative(trial_id) is None or "/" in trial_id:
            raise AgentRunError(f"trial id {trial_id!r} does not name an evidence dir")
        relative = trial_evidence_dir(trial_id)
        if not is_dir_beneath(self.source, relative):
            raise AgentRunError(
                f"{self.source}: {relative} is not a directory of the run dir (missing, "
                "or a symlink, which a run dir never holds)"
            )
        return self.source / relative

    @override
    def check(self, task: Task) -> None:
        if not (self.source / TRIALS_DIRNAME).is_dir():
            raise AgentConfigError(f"replay: {self.source} holds no trials/ evidence to replay")

    @override
    def prepare(self, task: Task, sandbox: Sandbox) -> None:
        evidence = self._evidence(sandbox.spec.trial_id)
        seed = task.path / WORKSPACE_DIRNAME
        with final_workspace(evidence, seed) as workspace:
            if workspace is None or not workspace_kept(evidence, seed):
                raise AgentRunError(
                    f"no complete saved workspace for trial {sandbox.spec.trial_id} in "
                    f"{self.source} (a run with --evidence none keeps only its manifest)"
                )
            sandbox.put_dir(workspace, sandbox.paths.solution, agent_readable=True)
        if self.session_file is not None:
            session = read_beneath(evidence, SESSION_FILENAME, MAX_SESSION_BYTES)
            if session is not None and session.size <= len(session.data):
                sandbox.put_file(
                    f"{sandbox.paths.session}/{self.session_file}",
                    session.data,
                    agent_readable=True,
                )

    @override
    def command(self, task: Task, sandbox: Sandbox) -> AgentCommand:
        paths = sandbox.paths
        return AgentCommand(["python3", "-c", RESTORE_SCRIPT, paths.solution, paths.workspace])

    @override
    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "source": str(self.source)}
