"""The agent phase: the agent run by the trial, one of two ways (:class:`AgentRunner`).

A sandbox agent's command runs under the supervisor as the agent user; a harness agent's
``run(context)`` runs in the harness under the agent timeout. Either way the phase is
timed, its failure recorded (timeout, signal, exit code, the agent's own message), the
trial's storage checked, and after the (last) agent phase the trial's model access ends.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from harness.agents.context import AgentContext
from harness.agents.failure import failure_fields, gave_up_on, one_line, recorded_error
from harness.agents.kinds import HarnessAgent, SandboxAgent
from harness.errors import AgentRunError, StorageLimitReached
from harness.records import TrialStatus
from harness.records.layout import AGENT_EXEC_LOG_FILENAME, MODEL_CALLS_FILENAME
from harness.tasks.networks import sandbox_step_networks
from harness.trial.settings import STORAGE_FULL_SLACK
from harness.trial.state import TrialState
from sandbox.backend import PhaseRequest, PhaseResult
from sandbox.errors import PostureCheckFailed, SupervisorError


class AgentPhase(TrialState):
    """Runs the agent (an :class:`~harness.agents.kinds.AgentRunner`)."""

    def execute(self) -> None:
        """Give the agent its instruction and what it needs, and have it run."""
        sandbox = self.sandbox
        assert sandbox is not None
        agent = self.settings.agent
        view = self.view
        sandbox.put_file(sandbox.paths.instruction, view.instruction.encode(), agent_readable=True)
        agent.prepare(view, sandbox)
        self._hold_model_calls_to_the_step()
        self.root_log.before_agent(sandbox)  # the bind-mounted name files, to compare after
        try:
            agent.run_by(self)
        finally:
            # Every agent phase (each step's): what it left in the image's root.
            self.root_log.after_agent(sandbox, self.step_name)

    def _hold_model_calls_to_the_step(self) -> None:
        """The gateway holds this step's model calls to the step's agent network policy."""
        gateway, access, index = self.settings.gateway, self.access, self.step_index
        if gateway is None or access is None or index is None:
            return  # a task without steps: the policy the access was opened with
        steps = [step.config for step in self.task.steps]
        tables = sandbox_step_networks(self.task.config, self.settings.network, steps)
        gateway.set_network(access.trial_id, tables[index]["agent"], self.step_name)

    def run_in_sandbox(self, agent: SandboxAgent) -> None:
        """Run a sandbox agent's command as the agent phase."""
        sandbox = self.sandbox
        assert sandbox is not None
        view = self.view
        command = agent.command(view, sandbox)
        env = self.agent_phase_env(
            {"HARNESS_INSTRUCTION_FILE": sandbox.paths.instruction, **command.env}
        )
        timeout = view.agent_timeout_sec
        access = self.access
        try:
            result = sandbox.run_phase(
                PhaseRequest(
                    role="agent",
                    argv=command.argv,
                    env=env,
                    stdin=command.stdin,
                    timeout_sec=timeout,
                    secret_env={
                        **self.settings.secret_env,
                        **(access.secret_env() if access else {}),
                    },
                    max_output_bytes=self.settings.max_output_bytes,
                    gateway_env=access.agent_env() if access else {},
                    entry=command.entry,
                    step=self.step_index,
                )
            )
        finally:
            if self.last_agent_phase:
                # The agent is dead: nothing may call the model from here on.
                self.revoke_model_access()
        # "agent" is the agent process's own lifetime; everything else is harness overhead.
        self.clock.add("agent", result.process_sec or result.duration_sec)
        self.clock.add("agent_phase", result.duration_sec)
        self.posture = result.posture
        self._phase_events("agent", result)
        self._check_storage()
        if result.error is not None:
            kind = result.error.get("type", "SupervisorError")
            message = result.error.get("message", "")
            exc_type = PostureCheckFailed if kind == "PostureError" else SupervisorError
            raise exc_type(f"{kind}: {message}")
        if result.timed_out:
            assert timeout is not None
            self.fail(
                TrialStatus.AGENT_TIMEOUT,
                TimeoutError(f"agent did not finish within {timeout:g}s and was killed"),
                "execute",
            )
        elif result.signal is not None:
            self.fail(
                TrialStatus.AGENT_ERROR,
                RuntimeError(f"agent was killed by signal {result.signal}"),
                "execute",
            )
        elif result.exit_code == 0 and agent.exit_0_after_a_failed_call_fails:
            self._check_gave_up(agent, result)
        elif result.exit_code not in (0, None):
            explained = agent.explain_failure(sandbox, result)
            stderr = one_line(self._agent_stderr())
            fields = failure_fields(
                result.exit_code,
                explained or stderr,
                self.evidence / MODEL_CALLS_FILENAME,
                also=[stderr],
            )
            self.fail(
                TrialStatus.AGENT_ERROR,
                AgentRunError(explained or f"agent exited with code {result.exit_code}", fields),
                "execute",
            )

    def _check_gave_up(self, agent: SandboxAgent, result: PhaseResult) -> None:
        """A CLI that exited 0 after its last model call failed ends ``agent_error``.

        It gave up on the provider's error (nothing the model said came after it), as one
        that exits non-zero does: the record says so with the same fields, the cause from
        the gateway's record of that call, the message from the CLI's log if it has one.
        """
        assert self.sandbox is not None
        model_calls = self.evidence / MODEL_CALLS_FILENAME
        call = gave_up_on(model_calls)
        if call is None:
            return
        recorded = recorded_error(call) or "no answer"
        status = call.get("status")
        failed = f"HTTP {status}: {recorded}" if status is not None else recorded
        explained = agent.explain_failure(self.sandbox, result)
        message = f"agent exited 0 after its last model call failed ({failed})"
        if explained:
            message += f": {explained}"
        fields = failure_fields(0, explained or failed, model_calls)
        self.fail(TrialStatus.AGENT_ERROR, AgentRunError(message, fields), "execute")

    def _agent_stderr(self) -> str | None:
        """The agent's stderr, as the supervisor kept it (None: absent or unreadable)."""
        assert self.sandbox is not None
        data, event = self.sandbox.read_file(
            f"{self.sandbox.paths.logs}/agent.stderr", max_bytes=16 << 20
        )
        return None if data is None or event is not None else data.decode("utf-8", "replace")

    @property
    def last_agent_phase(self) -> bool:
        """Whether the view running now is the trial's last (its model access then ends)."""
        views = self.task.steps
        return not views or self.view.step is None or self.view.step.index == len(views) - 1

    def _check_storage(self) -> None:
        """A trial that used all its storage says so: an event and an ``agent_error``."""
        assert self.sandbox is not None
        usage = self.sandbox.storage_usage()
        if usage is None:
            return
        used, limit = usage
        if limit - used >= STORAGE_FULL_SLACK:
            return
        self.events.append({"type": "storage_full", "used_bytes": used, "limit_bytes": limit})
        self.fail(
            TrialStatus.AGENT_ERROR,
            StorageLimitReached(
                f"the agent filled the trial's storage ({limit >> 20} MB, the task's "
                "storage_mb); writes past it failed with ENOSPC"
            ),
            "execute",
        )

    def run_in_harness(self, agent: HarnessAgent) -> None:
        """Run a trusted in-process agent under the agent timeout."""
        sandbox = self.sandbox
        assert sandbox is not None
        timeout = self.view.agent_timeout_sec
        env = self.agent_phase_env({"HARNESS_INSTRUCTION_FILE": sandbox.paths.instruction})
        gateway, access = self.settings.gateway, self.access
        chat = None
        if gateway is not None and access is not None:
            trial_id = access.trial_id

            def chat(path: str, body: dict[str, Any]) -> tuple[int, Any]:
                return gateway.call(trial_id, path, body)

        start = time.monotonic()
        context = AgentContext(
            self.view,
            sandbox,
            env=env,
            deadline=None if timeout is None else start + timeout,
            chat=chat,
            model=self.settings.model,
            log_path=self.evidence / AGENT_EXEC_LOG_FILENAME,
            max_output_bytes=self.settings.max_output_bytes,
        )
        failure: list[BaseException] = []

        def target() -> None:
            try:
                agent.run(context)
            except BaseException as exc:  # reported as the trial's agent error
                failure.append(exc)

        worker = threading.Thread(target=target, name=f"agent-{self.plan.id}", daemon=True)
        worker.start()
        worker.join(timeout)
        timed_out = worker.is_alive()
        if timed_out:
            context.expire()
            worker.join(30)  # a running exec ends by its own deadline
        if self.last_agent_phase:
            self.revoke_model_access()
        elapsed = time.monotonic() - start
        self.clock.add("agent", elapsed)
        self.clock.add("agent_phase", elapsed)
        if timed_out:
            assert timeout is not None
            self.fail(
                TrialStatus.AGENT_TIMEOUT,
                TimeoutError(f"agent did not finish within {timeout:g}s"),
                "execute",
            )
        elif failure:
            exc = failure[0]
            self.fail(
                TrialStatus.AGENT_ERROR, AgentRunError(f"{type(exc).__name__}: {exc}"), "execute"
            )

    def revoke_model_access(self) -> None:
        """End the trial's gateway access (idempotent) and take its usage totals."""
        if self.access is not None and self.settings.gateway is not None:
            usage = self.settings.gateway.revoke(self.access.trial_id)
            if usage is not None:
                self.model_usage = usage
            # Calls refused under the phase's network policy (hosted tools).
            self.events.extend(self.settings.gateway.network_events(self.access.trial_id))


__all__ = ["AgentPhase"]
