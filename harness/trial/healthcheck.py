"""``[environment.healthcheck]`` (and a step's): wait until the environment is ready.

Docker ``HEALTHCHECK`` semantics, as Harbor runs them: the command runs again and again;
during ``start_period_sec`` failures do not count (the next try comes after
``start_interval_sec``); after it, ``retries`` consecutive failures fail the trial (an
``environment_error`` whose message holds the command's last output). Each try is a
supervised phase confined like the verifier (the verifier's user, a fresh HOME, none of
the agent's environment), never the agent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

from harness.tasks.model import Healthcheck
from sandbox.backend import PhaseRequest, PhaseResult, Sandbox
from sandbox.errors import EnvironmentStartError

#: How much of the last try's output a failure message keeps.
OUTPUT_TAIL = 2000


class HealthcheckFailed(EnvironmentStartError):
    """The healthcheck did not pass; the message holds the last try's output."""


def _tail(sandbox: Sandbox, name: str) -> str:
    text = []
    for stream in ("stdout", "stderr"):
        data, _event = sandbox.read_file(f"{sandbox.paths.logs}/{name}.{stream}", max_bytes=1 << 20)
        if data:
            text.append(data.decode("utf-8", "replace"))
    joined = "\n".join(part.rstrip() for part in text if part.strip())
    return joined[-OUTPUT_TAIL:] if joined else "(no output)"


def _describe(result: PhaseResult, timeout: float) -> str:
    if result.error is not None:
        return f"could not run: {result.error.get('type')}: {result.error.get('message')}"
    if result.timed_out:
        return f"timed out after {timeout:g}s"
    if result.signal is not None:
        return f"killed by signal {result.signal}"
    return f"exit code {result.exit_code}"


def wait_healthy(
    sandbox: Sandbox,
    check: Healthcheck,
    env: Mapping[str, str],
    *,
    cancel: threading.Event,
    name: str = "healthcheck",
    max_output_bytes: int = 1 << 20,
    clock: Callable[[], float] = time.monotonic,
    step: int | None = None,
) -> int:
    """Run ``check`` until it passes.

    Args:
        sandbox: The started sandbox.
        check: The healthcheck.
        env: The environment of each try (the verifier's).
        cancel: Set when the run is interrupted: the wait ends at once.
        name: Name of the tries' output files in the logs dir.
        max_output_bytes: Output kept per try.
        clock: Monotonic time (tests pass a fake).
        step: The index of the step it checks (its tries get the step's network), or None.

    Returns:
        How many tries it took.

    Raises:
        HealthcheckFailed: ``retries`` consecutive failures after the start period.
    """
    start_period_end = clock() + check.start_period_sec
    failures = 0
    tries = 0
    while True:
        in_start_period = clock() < start_period_end
        tries += 1
        result = sandbox.run_phase(
            PhaseRequest(
                role="verifier",
                argv=["bash", "-c", check.command],
                env=dict(env),
                timeout_sec=check.timeout_sec,
                max_output_bytes=max_output_bytes,
                log_name=name,
                shared_tmp=True,
                step=step,
            )
        )
        ok = result.error is None and not result.timed_out and result.exit_code == 0
        if ok:
            return tries
        if not in_start_period:
            failures += 1
            if failures >= check.retries:
                raise HealthcheckFailed(
                    f"healthcheck {check.command!r} failed {failures} time(s) in a row "
                    f"(last: {_describe(result, check.timeout_sec)}); last output:\n"
                    f"{_tail(sandbox, name)}"
                )
        pause = check.start_interval_sec if in_start_period else check.interval_sec
        if cancel.wait(pause):
            raise HealthcheckFailed("run interrupted while waiting for the healthcheck")
