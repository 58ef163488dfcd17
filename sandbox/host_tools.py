"""The host's own tools a trial needs (``iptables``, ``mount``, ``mkfs``, ``cp``), run apart.

A terminal's Ctrl-C goes to its whole foreground process group. A tool the harness started
in that group would die of it at once, while the harness is still on its way to noticing the
interruption, and the trial would record the tool's death (an ``iptables`` rule half
installed, a copy cut short) as an environment error before the run knows it was
interrupted. So every host tool runs in a session of its own: the interruption reaches the
harness only, which stops the trials and cleans up in its fixed order.

One instant remains: a signal sent to the group after the tool was forked but before it left
the group is pending in it, and kills it as it starts. A tool that died of an interrupt
signal is therefore never read as a failed command: :func:`run_tool` raises
:class:`~sandbox.errors.HostToolInterrupted`, which a trial records as ``cancelled``.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Sequence

from sandbox.errors import HostToolInterrupted

#: The signals a terminal or a service manager sends to a whole process group to stop it.
INTERRUPTS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT})


def run_tool(
    argv: Sequence[str],
    *,
    timeout: float | None = None,
    check: bool = False,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a host tool to the end in its own session; its output is captured as text.

    Args:
        argv: The command and its arguments (never through a shell).
        timeout: Seconds before the tool is killed (``subprocess.TimeoutExpired``).
        check: Raise ``subprocess.CalledProcessError`` on a non-zero exit.
        input: Written to the tool's stdin (None: stdin is ``/dev/null``).

    Returns:
        The finished process, its stdout and stderr as text.

    Raises:
        HostToolInterrupted: The tool died of an interrupt signal (:data:`INTERRUPTS`).
    """
    done = subprocess.run(
        list(argv),
        stdin=subprocess.DEVNULL if input is None else None,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        start_new_session=True,
    )
    if done.returncode < 0 and interrupted(done.returncode):
        raise HostToolInterrupted(
            f"{argv[0]} was interrupted ({failure_detail(done)}): the run is being stopped"
        )
    if check:
        done.check_returncode()
    return done


def interrupted(returncode: int) -> bool:
    """Whether a tool's exit status says an interrupt stopped it.

    Killed by one of :data:`INTERRUPTS` (a negative status), or exited ``128 + signal`` as
    a tool that catches the signal does (the docker CLI and compose exit 130 on Ctrl-C).
    """
    code = -returncode if returncode < 0 else returncode - 128
    return code in INTERRUPTS


def failure_detail(done: subprocess.CompletedProcess[str]) -> str:
    """What a failed tool said, or how it ended when it said nothing (never empty)."""
    said = (done.stderr or done.stdout or "").strip()
    if said:
        return said
    if done.returncode < 0:
        try:
            name = signal.Signals(-done.returncode).name
        except ValueError:
            name = f"signal {-done.returncode}"
        return f"killed by {name}"
    return f"exit {done.returncode}"


__all__ = ["INTERRUPTS", "failure_detail", "interrupted", "run_tool"]
