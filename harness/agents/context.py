"""What a trusted in-process agent (``python:module:Class``) gets: exec and chat.

The agent's code runs in the harness process (it is trusted, like Harbor's external
agents), but everything it does to the task happens in the sandbox as the agent user, one
supervised phase per ``exec``, and every model call goes through the trial's gateway.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import AgentTimeout, ModelCallError
from harness.tasks import Task
from sandbox.backend import PhaseRequest, Sandbox


@dataclass(frozen=True)
class ExecResult:
    """One command's outcome in the sandbox."""

    exit_code: int | None
    signal: int | None
    timed_out: bool
    stdout: str
    stderr: str
    output_truncated: bool


class AgentContext:
    """The sandbox and the model, as a trusted agent sees them."""

    def __init__(
        self,
        task: Task,
        sandbox: Sandbox,
        *,
        env: Mapping[str, str],
        deadline: float | None,
        chat: Callable[[str, dict[str, Any]], tuple[int, Any]] | None,
        model: str | None,
        log_path: Path,
        max_output_bytes: int = 1 << 20,
    ) -> None:
        self.task = task
        self.sandbox = sandbox
        self.model = model
        self._env = dict(env)
        self._deadline = deadline
        self._chat = chat
        self._log_path = log_path
        self._max_output = max_output_bytes
        self._expired = threading.Event()
        self.exec_count = 0

    @property
    def instruction(self) -> str:
        """The task's instruction."""
        return self.task.instruction

    @property
    def workspace(self) -> str:
        """The working directory inside the sandbox."""
        return self.sandbox.paths.workspace

    def expire(self) -> None:
        """The agent's time is up (called by the trial)."""
        self._expired.set()

    def _remaining(self) -> float | None:
        if self._expired.is_set():
            raise AgentTimeout("the agent's time is up")
        if self._deadline is None:
            return None
        left = self._deadline - time.monotonic()
        if left <= 0:
            self._expired.set()
            raise AgentTimeout("the agent's time is up")
        return left

    def exec(
        self,
        command: str | Sequence[str],
        *,
        timeout_sec: float | None = None,
        stdin: str | None = None,
    ) -> ExecResult:
        """Run a command in the sandbox as the agent user (a shell line, or an argv).

        Every process it starts is killed when it returns. Raises ``AgentTimeout`` once
        the agent's time is up.
        """
        left = self._remaining()
        limit = timeout_sec if left is None else min(timeout_sec or left, left)
        argv = ["bash", "-c", command] if isinstance(command, str) else list(command)
        result = self.sandbox.run_phase(
            PhaseRequest(
                role="agent",
                argv=argv,
                env=self._env,
                stdin=stdin,
                timeout_sec=limit,
                max_output_bytes=self._max_output,
                # A step's agent gets its step's network.
                step=self.task.step.index if self.task.step is not None else None,
            )
        )
        logs = self.sandbox.paths.logs
        out, _ = self.sandbox.read_file(f"{logs}/agent.stdout", max_bytes=self._max_output)
        err, _ = self.sandbox.read_file(f"{logs}/agent.stderr", max_bytes=self._max_output)
        self.exec_count += 1
        outcome = ExecResult(
            exit_code=result.exit_code,
            signal=result.signal,
            timed_out=result.timed_out,
            stdout=(out or b"").decode("utf-8", "replace"),
            stderr=(err or b"").decode("utf-8", "replace"),
            output_truncated=result.output_truncated,
        )
        with self._log_path.open("a") as fh:
            entry = {"argv": argv, "exit_code": outcome.exit_code, "timed_out": outcome.timed_out}
            fh.write(json.dumps(entry) + "\n")
        if result.error is not None:
            raise RuntimeError(
                f"exec failed: {result.error.get('type')}: {result.error.get('message')}"
            )
        return outcome

    def chat(self, body: dict[str, Any], *, path: str = "/v1/chat/completions") -> Any:
        """One model call through the trial's gateway (recorded, budgeted)."""
        self._remaining()
        if self._chat is None:
            raise RuntimeError("no model selected for this run (use --model)")
        status, answer = self._chat(path, body)
        if status >= 400:
            raise ModelCallError(status, answer)
        return answer
