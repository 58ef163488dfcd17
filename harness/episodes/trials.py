"""An episode agent's trial: today's trial lifecycle with hooks for several agents.

:class:`EpisodeTrial` is a :class:`~harness.trial.Trial` whose execute phase
an env may drive (a conversation's turns), and after whose artifacts an env may run more in
the same, still living sandbox (a shared judge) while every agent process of it is dead.
:class:`JudgeTrial` runs a judge agent: in the solver's sandbox (``shared``) on the socket
handed over to it, or in a fresh sandbox given only the solver's artifacts (``isolated``).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from typing_extensions import override

from harness.errors import AgentRunError, EnvError
from harness.gateway import Gateway
from harness.records import TrialStatus
from harness.records.layout import MODEL_CALLS_FILENAME
from harness.trial import Trial
from harness.trial.env import judge_env
from harness.trial.separate import SeparateVerifier
from harness.trial.settings import TrialPlan, TrialSettings
from sandbox.backend import Resources, SandboxSpec
from sandbox.cleanup import CleanupStep
from sandbox.errors import SandboxError

#: The judge's verdict, under its own fresh dir in the home of the sandbox's agent user.
VERDICT_DIR = "judge"
VERDICT_FILE = "verdict.json"
#: The judge's own HOME, inside that fresh dir (never the solver's home).
JUDGE_HOME = "home"


class EpisodeTrial(Trial):
    """A trial of one episode agent (its own plan id, token, sandbox and evidence dir).

    Args:
        drive: Runs the execute phase instead of the agent's single run (turns).
        after: Runs after the artifacts, the sandbox still up, the agent dead.
    """

    def __init__(
        self,
        plan: TrialPlan,
        settings: TrialSettings,
        attempt: int,
        *,
        drive: Callable[[EpisodeTrial], None] | None = None,
        after: Callable[[EpisodeTrial], None] | None = None,
        keep_access: bool = False,
    ) -> None:
        super().__init__(plan, settings, attempt)
        self.drive = drive
        self.after = after
        #: False while more agent phases follow (turns; a judge handed the socket).
        self.final_phase = not keep_access
        #: An exception of the env's own code (``after``/``drive``): the episode's error.
        self.env_error: BaseException | None = None
        self.info: dict[str, Any] = {}
        self.metrics: dict[str, float] = {}
        #: Agent phases run by :meth:`agent_turn` so far.
        self.turns = 0

    @property
    @override
    def last_agent_phase(self) -> bool:
        return self.final_phase and super().last_agent_phase

    @override
    def execute(self) -> None:
        if self.drive is None:
            super().execute()
            return
        try:
            self.drive(self)
        except (SandboxError, OSError, AgentRunError):
            raise
        except Exception as exc:
            self.env_error = exc
            raise

    def agent_turn(self, instruction: str, *, last: bool) -> str | None:
        """One agent phase with ``instruction``; its reply, or None when the agent failed.

        The reply is the file ``$HARNESS_REPLY_FILE``, else its last message in
        ``session.jsonl``.
        """
        sandbox = self.sandbox
        assert sandbox is not None
        self.turns += 1
        reply_path = self._reply_path()
        self.final_phase = last
        sandbox.put_file(sandbox.paths.instruction, instruction.encode(), agent_readable=True)
        agent = self.settings.agent
        agent.prepare(self.view, sandbox)
        errors = len(self.errors)
        agent.run_by(self)
        if len(self.errors) > errors:
            return None
        data, _event = sandbox.read_file(reply_path, max_bytes=1 << 20)
        if data:
            return data.decode("utf-8", "replace").strip()
        return self._last_message()

    def _reply_path(self) -> str:
        """This turn's reply file: a new name each turn, so no earlier reply is read."""
        assert self.sandbox is not None
        return f"{self.sandbox.paths.session}/reply-{self.turns}.txt"

    @override
    def agent_phase_env(self, extra: dict[str, str]) -> dict[str, str]:
        if self.turns:
            extra = {"HARNESS_REPLY_FILE": self._reply_path(), **extra}
        return super().agent_phase_env(extra)

    def _last_message(self) -> str | None:
        sandbox = self.sandbox
        assert sandbox is not None
        data, _event = sandbox.read_file(
            f"{sandbox.paths.session}/session.jsonl", max_bytes=self.caps.file_bytes
        )
        if data is None:
            return None
        text = None
        for line in data.decode("utf-8", "replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("role") == "assistant" and event.get("content"):
                text = str(event["content"])
        return text

    @override
    def artifacts(self) -> None:
        super().artifacts()
        if self.after is not None:
            try:
                self.after(self)
            except Exception as exc:  # the env's code: the episode's error, not the agent's
                self.env_error = exc

    @override
    def dispose(self) -> None:
        self.final_phase = True
        super().dispose()


class JudgeTrial(EpisodeTrial):
    """A judge agent's trial, in the solver's sandbox or in a fresh one.

    Args:
        solver: The solver's trial, its sandbox still up and every process of it dead.
        mode: ``shared`` or ``isolated``.
        instruction: The judge's prompt (the rubric is in it: no solver ever runs again).
    """

    def __init__(
        self,
        plan: TrialPlan,
        settings: TrialSettings,
        attempt: int,
        *,
        solver: EpisodeTrial,
        mode: str,
        instruction: str,
    ) -> None:
        super().__init__(plan, settings, attempt)
        self.solver = solver
        self.mode = mode
        self.instruction = instruction
        self.verdict: dict[str, Any] | None = None

    def run_phases(self) -> None:
        """Open (or share) the judge's sandbox, run the judge once, read its verdict."""
        try:
            with self.clock.phase("prepare"):
                self.enter("prepare")
                self._open()
            with self.clock.phase("reset"):
                self.enter("reset")
                self._seed()
        except Exception as exc:
            self.fail_in(self.phase, exc)
            return
        try:
            with self.clock.phase("execute"):
                self.enter("execute")
                self.agent_turn(self.instruction, last=True)
        except Exception as exc:  # the trial's table: harness.trial.failures
            if self.fail_in("execute", exc) is TrialStatus.ENVIRONMENT_ERROR:
                return
        try:
            with self.clock.phase("collect"):
                self.enter("collect")
                self.collect()
        except Exception as exc:  # what the agent's tree caused is not retried
            self.copy_failed(exc, "collect")
        try:
            with self.clock.phase("grade"):
                self._read_verdict()
        except Exception as exc:
            self.fail(TrialStatus.ENVIRONMENT_ERROR, exc, "collect")

    def _open(self) -> None:
        gateway, agent = self.settings.gateway, self.settings.agent
        name = f"{self.task.name}@judge"
        record = self.evidence / MODEL_CALLS_FILENAME
        if self.mode == "shared":
            # The solver is dead: its token dies, the judge gets its own on the same socket.
            solver_access = self.solver.access
            if gateway is not None and solver_access is not None and agent.model_use != "none":
                if not isinstance(gateway, Gateway):  # a relay: episodes run on --executor local
                    raise EnvError("a shared judge needs the harness process's own gateway")
                self.access = gateway.hand_over(solver_access.trial_id, self.plan.id, name, record)
            self.sandbox = self.solver.sandbox
            assert self.sandbox is not None
            # A user of its own: nothing the judge keeps private is the solver's uid's.
            self.sandbox.new_agent_user()
            self.sandbox_info = self.sandbox.describe()
            return
        if gateway is not None and agent.model_use != "none":
            self.access = gateway.open_trial(self.plan.id, name, record)
        socket = None if self.access is None else agent.gateway_socket(self.access.socket_path)
        env_cfg = self.task.config.environment
        spec = SandboxSpec(
            trial_id=self.plan.id,
            gateway_socket=socket,
            resources=Resources(cpus=env_cfg.cpus, memory_mb=env_cfg.memory_mb),
            image=env_cfg.docker_image,
            dockerfile=self.task.dockerfile,
            task_name=f"{self.task.name}-judge",
            workdir=env_cfg.workdir,
            protected_paths=(self.task.path, *self.settings.protected_paths),
            expose=self.settings.expose,
            labels={
                "org.harness.trial": self.plan.id,
                "org.harness.task": self.task.key,
                "org.harness.role": "judge",
            },
        )
        self.sandbox = self.settings.make_sandbox(spec)
        self.settings.track(self.sandbox, running=True)

    def _seed(self) -> None:
        """Make the judge's sandbox ready.

        Isolated: start the fresh sandbox, give it the solver's artifacts. Both: a fresh
        verdict dir the judge owns (nothing the solver planted survives).
        """
        sandbox = self.sandbox
        assert sandbox is not None
        if self.mode != "shared":
            sandbox.start()
            self.sandbox_info = sandbox.describe()
            assert self.solver.sandbox is not None
            transfer = SeparateVerifier(
                settings=self.settings,
                plan=self.plan,
                view=self.task,
                agent_sandbox=self.solver.sandbox,
                evidence=self.evidence,
                caps=self.caps,
            )
            try:
                transfer.transfer(sandbox, owner="agent")
            finally:
                self.record_events(transfer.events)
                self.events.extend(transfer.notes)
        verdict_dir = f"{sandbox.paths.home}/{VERDICT_DIR}"
        # Removed without following anything the solver planted, then made afresh by the
        # root supervisor for the judge's own user (the solver's uid has no process left).
        sandbox.reset_dir(verdict_dir)
        with tempfile.TemporaryDirectory(prefix="harness-judge-") as fresh:
            (Path(fresh) / JUDGE_HOME / "tmp").mkdir(parents=True)
            (Path(fresh) / JUDGE_HOME / "tmp" / ".keep").write_bytes(b"")
            sandbox.upload(Path(fresh), verdict_dir, owner="agent")

    @override
    def agent_phase_env(self, extra: dict[str, str]) -> dict[str, str]:
        assert self.sandbox is not None
        judge_dir = f"{self.sandbox.paths.home}/{VERDICT_DIR}"
        return super().agent_phase_env(
            {
                **judge_env(f"{judge_dir}/{JUDGE_HOME}"),
                "HARNESS_VERDICT_FILE": f"{judge_dir}/{VERDICT_FILE}",
                **extra,
            }
        )

    def _read_verdict(self) -> None:
        sandbox = self.sandbox
        assert sandbox is not None
        path = f"{sandbox.paths.home}/{VERDICT_DIR}/{VERDICT_FILE}"
        data, event = sandbox.read_file(path, max_bytes=1 << 20)
        if event is not None:
            self.record_events([event])
        if data is None:
            if self.status is TrialStatus.COMPLETED:
                self.fail(
                    TrialStatus.AGENT_ERROR,
                    AgentRunError(f"the judge wrote no verdict to $HARNESS_VERDICT_FILE ({path})"),
                    "grade",
                )
            return
        (self.evidence / VERDICT_FILE).write_bytes(data)
        try:
            verdict = json.loads(data)
            score = float(verdict["score"])
            if not 0.0 <= score <= 1.0:
                raise ValueError("score must be within 0..1")
        except (ValueError, KeyError, TypeError) as exc:
            self.fail(
                TrialStatus.AGENT_ERROR,
                AgentRunError(f'the judge\'s verdict is not {{"score": 0..1, ...}}: {exc}'),
                "grade",
            )
            return
        self.verdict = verdict
        self.info["verdict"] = verdict
        self.reward, self.rewards = score, {"judge": score}

    def judge(self) -> None:
        """Nothing: the task's judges score the solver's graded trial, not this verdict."""

    @override
    def cleanup_steps(self) -> list[CleanupStep]:
        steps = super().cleanup_steps()
        if self.mode == "shared":  # the solver's sandbox: the solver's trial removes it
            return [step for step in steps if step.name != "remove_root"]
        return steps


__all__ = ["EpisodeTrial", "JudgeTrial", "VERDICT_FILE"]
