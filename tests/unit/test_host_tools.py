"""Host tools run apart: a terminal's Ctrl-C reaches the harness, never the tool it runs.

A Ctrl-C sends SIGINT to the terminal's whole foreground process group. The test starts a
process standing in for the harness (it counts SIGINT as the harness does) in a group of its
own, lets it run a host tool, and sends SIGINT to that group as a terminal would: the tool
run by :func:`sandbox.host_tools.run_tool` finishes, while the control (the same tool by a
plain ``subprocess.run``) is killed mid-way, which is how an ``iptables`` rule half installed
became a trial's environment error before the run knew it was interrupted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from python_on_whales.exceptions import DockerException

from harness.records import TrialStatus
from harness.trial.failures import FAILURE_STATUS, failure_status
from sandbox.docker.sdk import CommandError, command
from sandbox.errors import HostToolInterrupted
from sandbox.host_tools import failure_detail, interrupted, run_tool

ROOT = Path(__file__).resolve().parents[2]

HARNESS_LIKE = textwrap.dedent(
    """
    import signal, subprocess, sys
    from sandbox.host_tools import run_tool

    signal.signal(signal.SIGINT, lambda *_: None)  # counted, as the harness's handler does
    argv = ["sh", "-c", "echo started; sleep 1.5; echo finished"]
    if sys.argv[1] == "apart":
        done = run_tool(argv)
    else:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
    print(done.returncode, done.stdout.split(), flush=True)
    """
)


def _interrupted(mode: str) -> str:
    proc = subprocess.Popen(
        [sys.executable, "-c", HARNESS_LIKE, mode],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        start_new_session=True,  # its own group, as a terminal's foreground job
    )
    try:
        deadline = time.monotonic() + 10
        # The tool is running once the shell exists among the group's processes.
        while not _group_has_child(proc.pid):
            assert time.monotonic() < deadline, "the tool never started"
            time.sleep(0.05)
        time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return out.strip()


def _group_has_child(pid: int) -> bool:
    children = Path(f"/proc/{pid}/task/{pid}/children")
    try:
        return bool(children.read_text().split())
    except OSError:
        return False


def test_a_tool_run_apart_finishes_when_the_terminal_interrupts() -> None:
    assert _interrupted("apart") == "0 ['started', 'finished']"


def test_control_a_tool_in_the_harness_group_dies_of_the_interrupt() -> None:
    assert _interrupted("group") == f"{-signal.SIGINT} ['started']"


@pytest.mark.parametrize(
    ("returncode", "stderr", "stdout", "expected"),
    [
        (1, "iptables: Bad rule.\n", "", "iptables: Bad rule."),
        (2, "", "only stdout\n", "only stdout"),
        (-signal.SIGINT, "", "", "killed by SIGINT"),
        (4, "", "", "exit 4"),
    ],
)
def test_failure_detail_is_never_empty(
    returncode: int, stderr: str, stdout: str, expected: str
) -> None:
    done = subprocess.CompletedProcess(["tool"], returncode, stdout=stdout, stderr=stderr)
    assert failure_detail(done) == expected


def test_a_tool_that_died_of_an_interrupt_is_never_read_as_a_failed_command() -> None:
    # The instant before the tool leaves the group: it dies of the pending signal at once.
    with pytest.raises(HostToolInterrupted, match="killed by SIGINT"):
        run_tool(["sh", "-c", "kill -INT $$; sleep 5"])
    with pytest.raises(HostToolInterrupted, match="killed by SIGTERM"):
        run_tool(["sh", "-c", "kill -TERM $$; sleep 5"], check=True)
    # Any other death or exit stays the command's own result.
    assert run_tool(["sh", "-c", "kill -KILL $$"]).returncode == -signal.SIGKILL
    assert run_tool(["sh", "-c", "exit 3"]).returncode == 3
    with pytest.raises(subprocess.CalledProcessError):
        run_tool(["sh", "-c", "exit 3"], check=True)


@pytest.mark.parametrize("phase", sorted(FAILURE_STATUS))
def test_a_trial_whose_host_tool_was_interrupted_is_cancelled_in_every_phase(phase: str) -> None:
    assert failure_status(phase, HostToolInterrupted("iptables")) is TrialStatus.CANCELLED


@pytest.mark.parametrize(
    ("returncode", "expected"),
    [(-signal.SIGINT, True), (-signal.SIGTERM, True), (130, True), (143, True),
     (-signal.SIGKILL, False), (137, False), (1, False), (0, False), (2, False)],
)  # fmt: skip
def test_an_interrupted_exit_is_told_from_a_failure(returncode: int, expected: bool) -> None:
    assert interrupted(returncode) is expected


def test_a_compose_command_the_interrupt_stopped_is_no_command_error() -> None:
    def compose_up(code: int) -> None:
        raise DockerException(["docker", "compose", "up", "-d"], code, b"", b"canceled\n")

    with pytest.raises(HostToolInterrupted, match="docker compose up was interrupted"):
        command(compose_up, 130)
    with pytest.raises(CommandError):
        command(compose_up, 1)
