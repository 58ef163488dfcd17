"""``processes.stop_all``: a process tree that keeps forking is stopped whole, with real processes.

A spinning tree that forks a new child whenever one exits (a fork bomb bounded to 40
processes) is found by a real ``/proc`` scan of its descendants; after ``stop_all`` none of them
runs (each is in state ``T``), and a scan a moment later finds no process it did not stop.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from sandbox.inside import processes

#: A tree three levels deep under the first process (1 + 3 + 9 + 27 = 40 processes), each
#: spinning and forking a new child whenever one of its own exits.
BOMB = r"""
import os, time
depth, mine = 0, 0
while True:
    if depth < 3 and mine < 3:
        try:
            pid = os.fork()
        except OSError:
            pid = -1
        if pid == 0:
            depth, mine = depth + 1, 0
            continue
        if pid > 0:
            mine += 1
    try:
        if os.waitpid(-1, os.WNOHANG)[0]:
            mine -= 1
    except ChildProcessError:
        pass
    time.sleep(0.001)
"""


@pytest.fixture()
def bomb() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", BOMB], start_new_session=True)
    try:
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _tree(root: int) -> set[int]:
    entries = processes.live_entries()
    return processes.descendants(root, entries) | {root}


def _states(pids: set[int]) -> dict[int, str]:
    found = {}
    for pid in pids:
        entry = processes.stat_entry(str(pid))
        if entry is not None:
            found[pid] = entry["state"]
    return found


def test_a_forking_tree_is_stopped_whole(bomb: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while len(_tree(bomb.pid)) < 20:  # the tree has grown
        assert time.monotonic() < deadline, "the tree never grew"
        time.sleep(0.05)
    stopped = processes.stop_all(lambda: _tree(bomb.pid), _tree(bomb.pid))
    time.sleep(0.2)  # anything still running would fork meanwhile
    tree = _tree(bomb.pid)
    states = _states(tree)
    assert stopped >= len(tree) >= 20
    running = {pid: state for pid, state in states.items() if state not in ("T", "t")}
    assert not running, running
    assert _tree(bomb.pid) == tree, "the stopped tree still grew"
