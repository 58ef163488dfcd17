"""The Landlock wall (sandbox.inside.landlock) on this machine's kernel: a forked child walls
itself in and is judged from outside (the parent)."""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path

from support.docker import prerequisite_missing

from sandbox.inside import confine, landlock


def test_rule_roots_split_the_entries_holding_a_denied_path(tmp_path: Path) -> None:
    for rel in ("opt/app", "opt/harness", "logs/agent", "logs/verifier", "usr"):
        (tmp_path / rel).mkdir(parents=True)
    (tmp_path / "file").write_text("x")
    roots = landlock.rule_roots(
        [str(tmp_path / "opt/harness"), str(tmp_path / "logs")],
        [str(tmp_path / "logs/agent"), str(tmp_path / "missing")],
        root=str(tmp_path),
    )
    assert roots == [
        str(tmp_path / "file"),
        str(tmp_path / "opt/app"),
        str(tmp_path / "usr"),
        str(tmp_path / "logs/agent"),
    ]


def test_handled_rights_follow_the_abi() -> None:
    assert landlock.handled_fs(1) == (1 << 13) - 1
    assert landlock.handled_fs(7) == (1 << 16) - 1


#: The root agent's capabilities (sandbox/docker/container.py's ROOT_AGENT_CAPS).
AGENT_CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID", "KILL"]


def _probe(walled: bool, denied: Path, granted: Path) -> list[str]:
    """In a child with the root agent's capabilities (walled in or not), try each access.

    The target is a sibling with the same uid and capabilities, outside any domain: the
    kernel's own checks let the child reach it, only the wall can keep it out.
    """
    # Ignored before the fork, so the target never dies of the probe's signal however
    # late it is scheduled; probed only once it has the same capabilities (a process with
    # more is out of reach whatever the wall).
    previous = signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    ready_read, ready_write = os.pipe()
    target = os.fork()
    if target == 0:  # pragma: no cover - the target
        confine.set_capabilities(confine.cap_mask(AGENT_CAPS))
        os.write(ready_write, b"1")
        while True:
            signal.pause()
    signal.signal(signal.SIGUSR1, previous)
    os.close(ready_write)
    os.read(ready_read, 1)
    os.close(ready_read)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        lines = []
        try:
            confine.set_capabilities(confine.cap_mask(AGENT_CAPS))
            if walled:
                landlock.wall({"deny": [str(denied)], "grant": []})
            proc = Path(f"/proc/{target}")
            for name, action in (
                ("read denied", lambda: (denied / "secret").read_text()),
                ("write denied", lambda: (denied / "new").write_text("")),
                ("write granted", lambda: (granted / "new").write_text("")),
                ("signal", lambda: os.kill(target, signal.SIGUSR1)),
                ("environ", lambda: (proc / "environ").read_bytes()),
                ("mem", lambda: os.close(os.open(proc / "mem", os.O_RDONLY))),
                ("root", lambda: os.listdir(proc / "root")),
            ):
                try:
                    action()
                    lines.append(f"{name}: ok")
                except OSError as exc:
                    lines.append(f"{name}: {errno.errorcode[exc.errno or 0]}")
        finally:
            os.write(write_end, "\n".join(lines).encode())
            os._exit(0)
    os.close(write_end)
    try:
        report = os.read(read_end, 65536).decode()
        os.waitpid(child, 0)
    finally:
        os.close(read_end)
        os.kill(target, signal.SIGKILL)
        os.waitpid(target, 0)
    return report.splitlines()


def test_a_walled_process_reaches_nothing_denied_nor_out_of_its_domain(tmp_path: Path) -> None:
    if landlock.abi() < landlock.MIN_ABI:
        prerequisite_missing(f"Landlock ABI >= {landlock.MIN_ABI} (Linux 6.12)")
    if os.geteuid() != 0:
        prerequisite_missing("root (the wall is measured with the root agent's capabilities)")
    denied = tmp_path / "denied"
    denied.mkdir()
    (denied / "secret").write_text("s")
    granted = tmp_path / "granted"
    granted.mkdir()
    assert _probe(False, denied, granted) == [
        "read denied: ok",
        "write denied: ok",
        "write granted: ok",
        "signal: ok",
        "environ: ok",
        "mem: ok",
        "root: ok",
    ]
    (denied / "new").unlink()
    (granted / "new").unlink()
    assert _probe(True, denied, granted) == [
        "read denied: EACCES",
        "write denied: EACCES",
        "write granted: ok",
        "signal: EPERM",
        "environ: EACCES",
        "mem: EACCES",
        "root: EACCES",
    ]
    assert not (denied / "new").exists() and (granted / "new").exists()
