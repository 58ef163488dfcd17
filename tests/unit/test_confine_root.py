"""A root agent's confinement (:func:`sandbox.inside.confine.confine_root`), read back from /proc.

The child of a root process confines itself as a root agent, then execs a root program:
what that program holds (its /proc/self/status, seen from outside by the parent) is the
mask and nothing more, even though it is uid 0, and the filter is on.
"""

from __future__ import annotations

import json
import os

import pytest

from sandbox.inside import confine

KEEP = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID", "KILL"]


def _in_child(spec: dict[str, object]) -> tuple[dict[str, object], dict[str, str]]:
    """Confine a forked child as ``spec`` says; return its posture and its exec'd status."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read)
            posture = confine.confine({"user": {"uid": 0, "gid": 0}, "root_agent": spec})
            os.write(write, (json.dumps({"posture": posture}) + "\n").encode())
            os.dup2(write, 1)
            os.execv("/bin/cat", ["cat", "/proc/self/status"])
        except BaseException as exc:  # noqa: B036 - report anything, then die
            os.write(write, (json.dumps({"error": repr(exc)}) + "\n").encode())
        os._exit(127)
    os.close(write)
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.close(read)
    os.waitpid(pid, 0)
    first, _, rest = data.decode().partition("\n")
    message = json.loads(first)
    assert "posture" in message, message
    status = dict(
        (k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in rest.splitlines())
    )
    return message["posture"], status


@pytest.mark.root
def test_a_root_agent_keeps_only_its_capabilities_across_exec() -> None:
    posture, status = _in_child({"caps": KEEP})
    mask = sum(1 << confine.CAP_NUMBERS[name] for name in KEEP)
    assert posture["root_agent"] is True and posture["dropped"] is False
    assert sorted(posture["kept_caps"]) == sorted(KEEP)
    # The exec'd root program: uid 0, nothing beyond the mask, no_new_privs, filtered.
    assert status["Uid"].split() == ["0", "0", "0", "0"]
    for name in ("CapPrm", "CapEff", "CapBnd"):
        assert int(status[name], 16) == mask, (name, status[name])
    assert int(status["CapInh"], 16) == 0 and int(status.get("CapAmb", "0"), 16) == 0
    assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2"


@pytest.mark.root
def test_a_root_agent_may_not_ask_for_sys_admin() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            confine.confine({"user": {"uid": 0, "gid": 0}, "root_agent": {"caps": ["SYS_ADMIN"]}})
            os.write(write, b"confined")
        except confine.PostureError as exc:
            os.write(write, str(exc).encode())
        os._exit(0)
    os.close(write)
    answer = os.read(read, 4096).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert "may not keep capability SYS_ADMIN" in answer
