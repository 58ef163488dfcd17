"""A local phase's end, read from its own pid namespace (real supervisor, as root).

The supervisor lists what outlived a namespaced phase from the namespace's own ``/proc``
and kills the namespace through its init's pidfd, instead of scanning every process on the
host twice. These tests pin that: survivors carry the pids the phase itself saw, and
nothing of the phase is alive on the host once the result is in.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

import psutil
import pytest

from sandbox.backend import PhaseRequest, PhaseResult
from sandbox.environment import FIXED_PATH
from sandbox.local.sandbox import LocalSandbox

pytestmark = pytest.mark.root


def _alive_with(token: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] != psutil.STATUS_ZOMBIE and token in " ".join(
            proc.info["cmdline"] or []
        ):
            found.append(proc)
    return found


def _agent(sb: LocalSandbox, script: str, timeout: float) -> PhaseResult:
    request = PhaseRequest(
        role="agent", argv=["bash", "-c", script], env={"PATH": FIXED_PATH}, timeout_sec=timeout
    )
    return sb.run_phase(request)


def test_survivors_are_listed_with_the_pids_the_phase_saw(
    make_local_sandbox: Callable[..., LocalSandbox],
) -> None:
    sb = make_local_sandbox()
    token = f"1{secrets.randbelow(10**6)}.5"
    script = f"sleep {token} &\necho $! > pids\n( sleep {token}1 & echo $! >> pids ) \nexit 0\n"
    result = _agent(sb, script, 20)
    assert result.exit_code == 0, result
    seen_inside = {int(line) for line in (sb.fs / "workspace" / "pids").read_text().split()}
    listed = {p["pid"]: p for p in result.survivors}
    assert seen_inside <= set(listed), (seen_inside, result.survivors)
    assert all(pid > 2 for pid in listed)  # the namespace's init is 1, the program 2
    assert all(p["uid"] == sb.identity[0] for p in result.survivors)  # type: ignore[index]
    assert any(token in p["cmdline"] for p in result.survivors)
    assert _alive_with(token) == []  # dead before the result came back, not after


def test_a_phase_that_timed_out_is_killed_with_its_namespace(
    make_local_sandbox: Callable[..., LocalSandbox],
) -> None:
    sb = make_local_sandbox()
    token = f"1{secrets.randbelow(10**6)}.75"
    script = f"( trap '' TERM HUP INT; sleep {token} ) & sleep {token}\n"
    result = _agent(sb, script, 1)
    assert result.timed_out and result.exit_code is None
    assert any(token in p["cmdline"] for p in result.survivors), result.survivors
    assert _alive_with(token) == []
