"""After the agent: collect its logs and workspace, grade, collect the artifacts.

Grading runs in the agent's sandbox (tests copied in only now, every agent process dead)
or, for ``[verifier].environment_mode = "separate"``, in a sandbox of its own given only
the artifacts (:mod:`~harness.trial.separate`). A verifier that cannot run or does not
finish is a ``verifier_error``.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from harness.errors import VerifierError
from harness.records.atomic import write_bytes_atomic
from harness.records.failpoints import kill_point
from harness.records.layout import (
    AGENT_LOG_FILENAME,
    AGENT_STDERR_LOG_FILENAME,
    ARTIFACTS_DIRNAME,
    VERIFIER_DIRNAME,
    VERIFIER_STDERR_FILENAME,
    VERIFIER_STDOUT_FILENAME,
    WORKSPACE_DIRNAME,
    WORKSPACE_MANIFEST_FILENAME,
)
from harness.trial.artifacts import collect_artifacts
from harness.trial.collect import Collected, run_collection
from harness.trial.env import grader_env
from harness.trial.grading import read_rewards, trial_reward
from harness.trial.separate import SeparateVerifier
from harness.trial.state import TrialState
from sandbox.backend import PhaseRequest, PhaseResult


class CollectAndGrade(TrialState):
    """The steps after the agent: collect, grade, artifacts."""

    def collect(self) -> None:
        """Copy out the agent's logs and the workspace (after the last step, its state)."""
        assert self.sandbox is not None
        paths = self.sandbox.paths
        self._copy(f"{paths.logs}/agent.stdout", self.step_evidence / AGENT_LOG_FILENAME)
        self._copy(f"{paths.logs}/agent.stderr", self.step_evidence / AGENT_STDERR_LOG_FILENAME)
        workspace = self.evidence / WORKSPACE_DIRNAME
        manifest = self.evidence / WORKSPACE_MANIFEST_FILENAME
        if workspace.exists():  # a multi-step trial keeps the state after its last step
            shutil.rmtree(workspace)
        manifest.unlink(missing_ok=True)
        mode = self.settings.evidence_mode
        if mode == "full":
            self._copy(paths.workspace, workspace)
            return
        caps = self.caps
        found, events = self.sandbox.snapshot_out(
            paths.workspace,
            store=self.settings.objects,
            seed=self.settings.seed_of(self.task, self.sandbox.spec.fixtures),
            links=workspace if mode == "diff" else None,
            max_file_bytes=caps.file_bytes,
            max_total_bytes=caps.total_bytes,
        )
        self.record_events(events)
        kill_point("evidence")  # the logs and the workspace's files are out, the manifest not
        # Compact: one line per file of the workspace adds up over thousands of files.
        write_bytes_atomic(manifest, json.dumps(found, separators=(",", ":")).encode())

    #: What the collect hooks and sidecar artifacts before this grading left.
    collected: Collected | None = None

    def run_collect_hooks(self) -> None:
        """Schema 1.4's collection before grading (:mod:`harness.trial.collect`)."""
        assert self.sandbox is not None
        self.collected = run_collection(
            self.sandbox,
            self.view,
            trial_id=self.plan.id,
            separate=self.view.verifier_mode == "separate",
            caps=self.caps,
            max_output_bytes=self.settings.max_output_bytes,
            step_index=self.step_index,
        )
        self.events.extend(self.collected.events)
        self.record_events(self.collected.evidence)

    def grade(self) -> None:
        """Run the verifier on the task (or step) and read its rewards."""
        self.run_collect_hooks()
        if self.view.verifier_mode == "separate":
            self.grade_separately()
            return
        sandbox = self.sandbox
        assert sandbox is not None
        paths = sandbox.paths
        # Tests arrive only now: every agent process is dead (the supervisor killed them).
        sandbox.reset_verifier_dir()
        with _merged(self.view.test_dirs) as tests:
            sandbox.put_dir(tests, paths.tests, agent_readable=False)
        timeout = self.view.verifier_timeout_sec
        root_kept = self._root_services_kept()
        if root_kept:
            self.root_log.before_verifier(sandbox)  # its services may change them meanwhile
        result = sandbox.run_phase(
            PhaseRequest(
                role="verifier",
                argv=["bash", f"{paths.tests}/test.sh"],
                env=grader_env(sandbox, self.view, self.plan.id),
                timeout_sec=timeout,
                max_output_bytes=self.settings.max_output_bytes,
                # Commands the tests run as the agent ($HARNESS_AGENT_EXEC) get its env.
                agent_env=self.agent_phase_env({"HARNESS_INSTRUCTION_FILE": paths.instruction}),
                confidential_env=tuple(self.view.verifier_env),
                step=self.step_index,
            )
        )
        self.verifier_posture = result.posture
        # Its verdict follows the agent's tampering; its own installs are not the next agent's,
        # but beside a root agent's kept services (Landlock leaves them the root) nobody can
        # tell whose a change is: it is the agent's.
        # (Kept at the agent phase's end counts: one may change the root during a collect
        # hook and exit before the verifier starts.)
        beside = root_kept or any(p.get("uid") == 0 for p in result.agent_processes_alive or [])
        self.root_log.after_verifier(sandbox, self.step_name, beside_agent=beside)
        self.clock.add("verifier", result.process_sec or result.duration_sec)
        self.clock.add("verifier_phase", result.duration_sec)
        self._phase_events("verifier", result)
        verifier = self.step_evidence / VERIFIER_DIRNAME
        self._copy(f"{paths.logs}/verifier.stdout", verifier / VERIFIER_STDOUT_FILENAME)
        self._copy(f"{paths.logs}/verifier.stderr", verifier / VERIFIER_STDERR_FILENAME)
        self._copy(paths.verifier, verifier)
        _raise_for(result, timeout)
        self.reward, self.rewards, events = read_rewards(sandbox)
        self.record_events(events)

    def _root_services_kept(self) -> bool:
        """This step's agent phase left root processes running (``agent_services = keep``)."""
        return any(
            e.get("type") == "agent_services_kept"
            and e.get("step") == self.step_name
            and any(isinstance(p, dict) and p.get("uid") == 0 for p in e.get("processes") or [])
            for e in self.events
        )

    def grade_separately(self) -> None:
        """Grade in a fresh container built from ``tests/``, given only the artifacts."""
        assert self.sandbox is not None
        verifier = SeparateVerifier(
            settings=self.settings,
            plan=self.plan,
            view=self.view,
            agent_sandbox=self.sandbox,
            evidence=self.step_evidence / VERIFIER_DIRNAME,
            caps=self.caps,
            collected=self.collected.files if self.collected is not None else None,
        )
        try:
            result = verifier.run()
        finally:
            self.record_events(verifier.events)
            self.events.extend(verifier.notes)
        self.verifier_posture = result.posture
        self.clock.add("verifier", result.process_sec or result.duration_sec)
        self.clock.add("verifier_phase", result.duration_sec)
        self._phase_events("verifier", result)
        _raise_for(result, self.view.verifier_timeout_sec)
        assert verifier.rewards is not None
        self.reward, self.rewards = trial_reward(verifier.rewards), verifier.rewards

    def artifacts(self) -> None:
        """Collect the artifacts of the task (or step) into its evidence."""
        assert self.sandbox is not None
        dest = self.step_evidence / ARTIFACTS_DIRNAME
        collected, self.collected = self.collected, None
        own = [artifact for artifact in self.view.artifacts if artifact.sidecar is None]
        events = collect_artifacts(
            self.sandbox,
            own,
            dest,
            self.caps,
            extra=(
                (lambda: collected.place(self.view.artifacts, dest))
                if collected is not None and collected.manifest
                else None
            ),
        )
        self.record_events(events)


def _raise_for(result: PhaseResult, timeout: float) -> None:
    """A verifier that could not run or did not finish is a ``verifier_error``."""
    if result.error is not None:
        raise VerifierError(
            f"verifier could not run: {result.error.get('type')}: {result.error.get('message')}"
        )
    if result.timed_out:
        raise VerifierError(f"verifier timed out after {timeout:g}s")


class _merged:
    """A temp dir holding the given dirs' files, later dirs winning (one dir: itself)."""

    def __init__(self, dirs: list[Path]) -> None:
        self.dirs = dirs
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> Path:
        if len(self.dirs) == 1:
            return self.dirs[0]
        self._tmp = tempfile.TemporaryDirectory(prefix="harness-tests-")
        top = Path(self._tmp.name) / "tests"
        top.mkdir()
        for source in self.dirs:
            shutil.copytree(source, top, dirs_exist_ok=True, symlinks=True)
        return top

    def __exit__(self, *exc: object) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()


__all__ = ["CollectAndGrade"]
