"""Making the sandbox ready for an agent: prepare, reset and, per step, stage.

- prepare: the sandbox's spec (resources, image, users, compose file, MCP servers), the
  trial's model-gateway access;
- reset: the sandbox started, the task's healthcheck waited on, its skills copied in;
- stage (each step of a multi-step task): nothing of the last grading left, the step's
  ``workdir/`` uploaded and its ``setup.sh`` run as the agent, the step's healthcheck.
"""

from __future__ import annotations

from harness.records.layout import (
    BUILD_LOG_FILENAME,
    MODEL_CALLS_FILENAME,
    SETUP_LOG_FILENAME,
    SETUP_STDERR_LOG_FILENAME,
)
from harness.tasks.networks import sandbox_networks, sandbox_step_networks
from harness.trial.env import grader_env, image_env_record
from harness.trial.healthcheck import wait_healthy
from harness.trial.state import TrialState
from sandbox.backend import PhaseRequest, PhaseResult, Resources, SandboxSpec
from sandbox.errors import PermanentStartError, SandboxError
from sandbox.seeding import Fixture, collect_fixture_dir


class StepSetupFailed(SandboxError):
    """A step's ``workdir/setup.sh`` failed: the step's agent never ran."""


class Staging(TrialState):
    """The steps that make the sandbox ready for the agent."""

    def prepare(self) -> SandboxSpec:
        """The sandbox's spec; opens the trial's model access when the agent uses one."""
        fixtures: dict[str, Fixture] = {}
        if self.task.workspace_dir is not None:
            fixtures = collect_fixture_dir(self.task.workspace_dir)
        env_cfg = self.task.config.environment
        steps = [step.config for step in self.task.steps]
        networks = sandbox_networks(self.task.config, self.settings.network, steps)
        # Each step's phases get their own (a phase names its step: PhaseRequest.step).
        per_step = sandbox_step_networks(self.task.config, self.settings.network, steps)
        every = [*networks.values(), *(p for table in per_step for p in table.values())]
        gateway, agent = self.settings.gateway, self.settings.agent
        if gateway is not None and agent.model_use != "none":
            # Calls are held to the agent phase's policy (hosted tools); a step's is set
            # as the step's agent phase starts (AgentPhase.execute).
            self.access = gateway.open_trial(
                self.plan.id,
                self.task.name,
                self.evidence / MODEL_CALLS_FILENAME,
                network=networks["agent"],
            )
        # Only a sandboxed agent gets the socket; a trusted in-process agent calls directly.
        socket = None if self.access is None else agent.gateway_socket(self.access.socket_path)
        return SandboxSpec(
            gateway_socket=socket,
            trial_id=self.plan.id,
            fixtures=fixtures,
            resources=Resources(
                cpus=env_cfg.cpus, memory_mb=env_cfg.memory_mb, storage_mb=env_cfg.storage_mb
            ),
            allow_internet=any(policy.internet for policy in every),
            networks=networks,
            step_networks=per_step,
            image=env_cfg.docker_image,
            dockerfile=self.task.dockerfile,
            task_name=self.task.name,
            workdir=env_cfg.workdir,
            agent_user=self.task.views()[0].agent_user,
            verifier_user=self.task.config.verifier.user,
            protected_paths=(self.task.path, *self.settings.protected_paths),
            expose=self.settings.expose,
            agent_mounts=agent.sandbox_mounts(),
            labels={"org.harness.trial": self.plan.id, "org.harness.task": self.task.key},
            upcoming=self._upcoming(),
            os=env_cfg.os,
            gpus=env_cfg.gpus,
            gpu_types=tuple(env_cfg.gpu_types) if env_cfg.gpu_types is not None else None,
            build_timeout_sec=env_cfg.build_timeout_sec,
            compose_file=self.task.compose_file,
            workload_env=dict(env_cfg.env),
            mcp_servers=tuple(server.name for server in env_cfg.mcp_servers),
        )

    def _upcoming(self) -> int:
        """Trials still to start after this one: the run's, or else this task's rollouts."""
        if self.settings.trials_left is not None:
            return self.settings.trials_left.start_one()
        return max(0, self.settings.rollouts - 1 - self.plan.rollout)

    def build(self) -> None:
        """Build (or pull) the sandbox's image; a build's log goes to ``build.log``.

        A failed build's log is kept too: it is the evidence of why the trial failed.
        """
        sandbox = self.sandbox
        assert sandbox is not None
        try:
            log = sandbox.build_image()
        except Exception as exc:
            failed_log = getattr(exc, "build_log", None)
            if isinstance(failed_log, str) and failed_log:
                self._write_build_log(failed_log)
            raise
        if log:
            self._write_build_log(log)

    def _write_build_log(self, log: str) -> None:
        self.evidence.mkdir(parents=True, exist_ok=True)
        (self.evidence / BUILD_LOG_FILENAME).write_text(log, encoding="utf-8", errors="replace")

    def reset(self) -> None:
        """Start the sandbox, wait for the healthcheck, copy the skills in."""
        sandbox = self.sandbox
        assert sandbox is not None
        sandbox.start()
        self.sandbox_info = sandbox.describe()
        applied = image_env_record(sandbox)
        if applied is not None:
            self.sandbox_info["image_env"] = applied
        check = self.task.config.environment.healthcheck
        if check is not None:
            with self.clock.phase("healthcheck"):
                wait_healthy(
                    sandbox,
                    check,
                    grader_env(sandbox, self.task, self.plan.id),
                    cancel=self.settings.cancel,
                )
            self.root_log.after_grader(sandbox)  # the healthcheck's changes are not the agent's
        skills = self.task.config.environment.skills_dir
        if skills is not None:
            caps = self.caps
            try:
                events = sandbox.copy_within(
                    skills,
                    f"{sandbox.paths.home}/skills",
                    max_file_bytes=caps.file_bytes,
                    max_total_bytes=caps.total_bytes,
                )
            except SandboxError as exc:
                raise PermanentStartError(
                    f"[environment].skills_dir = {skills!r}: {exc} (it names a directory of "
                    "the task's image)"
                ) from None
            self.record_events(events)

    def stage(self) -> None:
        """A step's own files: nothing of the last step's grading, its workdir, its setup."""
        sandbox = self.sandbox
        assert sandbox is not None
        step = self.view.step
        assert step is not None
        paths = sandbox.paths
        for path in (paths.tests, paths.solution):
            sandbox.reset_dir(path)
        sandbox.reset_verifier_dir()
        if step.workdir_dir is not None:
            sandbox.upload(step.workdir_dir, paths.workspace, owner="agent")
        if step.setup_script is not None:
            result = sandbox.run_phase(
                PhaseRequest(
                    role="agent",
                    argv=["bash", f"{paths.workspace}/setup.sh"],
                    env=self.agent_phase_env({}),
                    timeout_sec=self.view.agent_timeout_sec,
                    max_output_bytes=self.settings.max_output_bytes,
                    log_name="setup",
                    step=self.step_index,
                )
            )
            self._phase_events("setup", result)
            if result.error is not None or result.timed_out or result.exit_code != 0:
                kept = self.step_evidence
                self._copy(f"{paths.logs}/setup.stdout", kept / SETUP_LOG_FILENAME)
                self._copy(f"{paths.logs}/setup.stderr", kept / SETUP_STDERR_LOG_FILENAME)
                raise StepSetupFailed(
                    f"step {step.name}: setup.sh failed ({_how(result)}); see setup.log"
                )
        if self.view.healthcheck is not None:
            wait_healthy(
                sandbox,
                self.view.healthcheck,
                grader_env(sandbox, self.view, self.plan.id),
                cancel=self.settings.cancel,
                name=f"healthcheck-{step.name}",
                step=self.step_index,
            )


def _how(result: PhaseResult) -> str:
    if result.error is not None:
        return f"{result.error.get('type')}: {result.error.get('message')}"
    if result.timed_out:
        return "timed out"
    if result.signal is not None:
        return f"killed by signal {result.signal}"
    return f"exit code {result.exit_code}"


__all__ = ["StepSetupFailed", "Staging"]
