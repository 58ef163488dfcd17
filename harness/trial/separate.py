"""A verifier in its own container (``[verifier].environment_mode = "separate"``).

As Harbor does it: a fresh sandbox is built from the tests dir (the step's ``tests/``, else
the task's), whose image holds ``/tests/test.sh`` itself; it gets nothing of the agent's
but the declared artifacts (and the ``/logs/artifacts`` convention dir), copied out of the
agent's sandbox and into it through the same no-follow, size-capped evidence code. It is
hardened like every sandbox of its backend, graded like any verifier, and removed at once.
On a backend that builds no images (local), its tests dir is copied in instead.

An artifact declared under ``/tmp``, ``/var/tmp`` or ``/dev/shm`` reaches the verifier
there: the phase's fresh scratch dirs would hide anything uploaded before it, so those are
uploaded by the phase itself once the dirs are the verifier's
(``PhaseRequest.scratch_uploads``).
"""

from __future__ import annotations

import posixpath
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.records.layout import VERIFIER_STDERR_FILENAME, VERIFIER_STDOUT_FILENAME
from harness.tasks import Task
from harness.tasks.model import Artifact
from harness.tasks.networks import effective_networks
from harness.trial.artifacts import Caps, prune_excluded
from harness.trial.env import grader_env
from harness.trial.grading import read_rewards
from harness.trial.settings import TrialPlan, TrialSettings
from sandbox import scratch
from sandbox.backend import PhaseRequest, PhaseResult, Resources, Role, Sandbox, SandboxSpec
from sandbox.errors import EnvironmentStartError, SandboxError
from sandbox.inside.evidence import EvidenceEvent


class SeparateVerifier:
    """One grading pass in a fresh verifier sandbox.

    After :meth:`run`, ``rewards`` holds the rewards (when the verifier produced them),
    ``events`` the evidence events and ``notes`` what the transfer did (record events).
    """

    def __init__(
        self,
        *,
        settings: TrialSettings,
        plan: TrialPlan,
        view: Task,
        agent_sandbox: Sandbox,
        evidence: Path,
        caps: Caps,
        collected: Mapping[int, Path] | None = None,
    ) -> None:
        """One pass; ``collected`` holds the sidecar artifacts' host copies.

        By index in ``view.artifacts`` (:mod:`harness.trial.collect`); a sidecar artifact
        without one is missing.
        """
        self.collected = dict(collected or {})
        self.settings = settings
        self.plan = plan
        self.view = view
        self.agent = agent_sandbox
        self.evidence = evidence
        self.caps = caps
        self.rewards: dict[str, float] | None = None
        self.events: list[EvidenceEvent] = []
        self.notes: list[dict[str, Any]] = []
        #: What the verifier phase uploads into its fresh scratch dirs (host dir, dest).
        self.scratch_uploads: list[tuple[Path, str]] = []

    def spec(self) -> SandboxSpec:
        """The verifier sandbox: its own ``[environment]``, the tests dir as build context."""
        view = self.view
        env = view.config.verifier_environment(view.step.config if view.step else None)
        context = view.verifier_context
        dockerfile = context / "Dockerfile"
        # The container runs verifier phases only: the agent role gets nothing.
        verifier = effective_networks(
            view.config, self.settings.network, view.step.config if view.step else None
        )["verifier"]
        return SandboxSpec(
            trial_id=f"{self.plan.id}-verifier",
            resources=Resources(cpus=env.cpus, memory_mb=env.memory_mb, storage_mb=env.storage_mb),
            allow_internet=verifier.internet,
            networks={"verifier": verifier},
            image=env.docker_image,
            dockerfile=dockerfile if dockerfile.is_file() else None,
            task_name=f"{view.name}-verifier",
            workdir=env.workdir,
            verifier_user=view.verifier_user,
            protected_paths=(view.path, *self.settings.protected_paths),
            labels={
                "org.harness.trial": self.plan.id,
                "org.harness.task": view.key,
                "org.harness.role": "verifier",
            },
            os=env.os,
            gpus=env.gpus,
            gpu_types=tuple(env.gpu_types) if env.gpu_types is not None else None,
            build_timeout_sec=env.build_timeout_sec,
            image_tests=True,
        )

    def run(self) -> PhaseResult:
        """Build and start the verifier sandbox, hand it the artifacts, grade, remove it.

        Raises:
            SandboxError: the verifier sandbox could not be made or used.
            VerifierError: the rewards could not be read.
        """
        sandbox = self.settings.make_sandbox(self.spec())
        self.settings.track(sandbox, running=True)
        try:
            try:
                sandbox.start()
            except SandboxError as exc:
                raise type(exc)(f"separate verifier: {exc}") from None
            with tempfile.TemporaryDirectory(prefix="harness-scratch-inputs-") as held:
                self.transfer(sandbox, hold=Path(held))
                if not sandbox.builds_images:
                    sandbox.put_dir(
                        self.view.verifier_context, sandbox.paths.tests, agent_readable=False
                    )
                result = self._grade(sandbox)
        finally:
            self.settings.track(sandbox, running=False)
            self.notes.extend(sandbox.network_events())
            sandbox.stop()
        return result

    def _grade(self, sandbox: Sandbox) -> PhaseResult:
        paths = sandbox.paths
        sandbox.reset_verifier_dir()
        result = sandbox.run_phase(
            PhaseRequest(
                role="verifier",
                argv=["bash", f"{paths.tests}/test.sh"],
                env=grader_env(sandbox, self.view, self.plan.id),
                timeout_sec=self.view.verifier_timeout_sec,
                max_output_bytes=self.settings.max_output_bytes,
                confidential_env=tuple(self.view.verifier_env),
                scratch_uploads=tuple(self.scratch_uploads),
            )
        )
        for source, name in (
            (f"{paths.logs}/verifier.stdout", VERIFIER_STDOUT_FILENAME),
            (f"{paths.logs}/verifier.stderr", VERIFIER_STDERR_FILENAME),
            (paths.verifier, ""),
        ):
            self._copy_out(sandbox, source, self.evidence / name if name else self.evidence)
        if result.error is None and not result.timed_out:
            _reward, self.rewards, events = read_rewards(sandbox)
            self.events += events
        return result

    def _copy_out(self, sandbox: Sandbox, source: str, dest: Path) -> Path:
        self.events += sandbox.copy_out(
            source, dest, max_file_bytes=self.caps.file_bytes, max_total_bytes=self.caps.total_bytes
        )
        return dest

    def transfer(self, target: Sandbox, owner: Role = "verifier", hold: Path | None = None) -> None:
        """Copy the declared artifacts (and the convention dir) from the agent's sandbox.

        ``owner`` (``verifier`` or ``agent``) owns the copies in ``target``: an episode's
        isolated judge, an agent, gets them this way too. ``hold``: a host dir that outlives
        the verifier phase, where an artifact bound for a scratch dir waits for it
        (:attr:`scratch_uploads`); without it, those are uploaded at once.
        """
        moves: list[tuple[str, str, list[str], Artifact | None]] = []
        if self.agent.paths.artifacts and target.paths.artifacts:
            moves.append((self.agent.paths.artifacts, target.paths.artifacts, [], None))
        for declared in self.view.artifacts:
            dest = self._target_path(declared, target)
            moves.append((declared.source, dest, declared.exclude, declared))
        with tempfile.TemporaryDirectory(prefix="harness-transfer-") as tmp:
            for index, (source, dest, exclude, artifact) in enumerate(moves):
                parent, _, name = dest.rstrip("/").rpartition("/")
                later = hold is not None and _in_scratch(dest)
                staged = (hold if hold is not None and later else Path(tmp)) / str(index)
                note: dict[str, Any] = {"type": f"{owner}_input", "source": source, "dest": dest}
                if artifact is not None and artifact.sidecar is not None:
                    note["service"] = artifact.sidecar
                try:
                    if artifact is not None and artifact.sidecar is not None:
                        copied = self._from_sidecar(artifact, staged / (name or "root"))
                    else:
                        copied = self._copy_out(self.agent, source, staged / (name or "root"))
                    prune_excluded(copied, exclude)
                    if not copied.exists():
                        note["status"] = "missing"
                        self.notes.append(note)
                        continue
                    # a file: its staging dir goes into the target's parent dir
                    src, into = (copied, dest) if copied.is_dir() else (staged, parent or "/")
                    if later:  # into the verifier's fresh scratch dir, by its phase
                        self.scratch_uploads.append((src, into))
                        note["when"] = "verifier_phase"
                    else:
                        target.upload(src, into, owner=owner)
                    note["status"] = "ok"
                except SandboxError as exc:
                    note.update(status="failed", detail=str(exc))
                self.notes.append(note)
        failed = [n for n in self.notes if n.get("status") == "failed"]
        if failed and len(failed) == len(moves) and moves and self.view.artifacts:
            raise EnvironmentStartError(
                "separate verifier: no artifact could be copied in: "
                + "; ".join(f"{n['source']}: {n.get('detail')}" for n in failed)
            )

    def _from_sidecar(self, artifact: Artifact, dest: Path) -> Path:
        """The host copy of a sidecar artifact (collected before grading), staged at ``dest``."""
        index = next(i for i, a in enumerate(self.view.artifacts) if a is artifact)
        copy = self.collected.get(index)
        if copy is not None and copy.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            if copy.is_dir():
                shutil.copytree(copy, dest, symlinks=True)
            else:
                shutil.copyfile(copy, dest, follow_symlinks=False)
        return dest

    def _target_path(self, artifact: Artifact, target: Sandbox) -> str:
        """Where an artifact goes: its own path, the workspace mapped to the target's."""
        source = artifact.source.rstrip("/") or "/"
        workspace = self.agent.paths.workspace.rstrip("/")
        if source == workspace or source.startswith(workspace + "/"):
            return target.paths.workspace.rstrip("/") + source[len(workspace) :]
        return source


def _in_scratch(dest: str) -> bool:
    """Whether an in-sandbox path is in a dir a verifier phase gets fresh."""
    normal = posixpath.normpath(dest)
    return any(normal == d or normal.startswith(d + "/") for d in scratch.IN_SANDBOX)
