"""Trial cgroup names and the parsing of this host's cgroup tables (sandbox/local/cgroups.py)."""

from __future__ import annotations

import pytest

from sandbox.local import cgroups


@pytest.mark.parametrize("run", ["plain", "with@at", "a/b c", "x" * 300])
def test_a_name_gives_back_its_run(run: str) -> None:
    """The sweep finds a run's cgroups by name: the label round-trips, whatever the run."""
    name = cgroups.cgroup_name(run)
    assert name.startswith(cgroups.NAME_PREFIX) and "/" not in name and len(name) < 255
    assert cgroups.run_of(name) == cgroups._label(run)


def test_a_prefix_of_a_run_is_not_that_run() -> None:
    """Run ``a`` never sweeps run ``a@b``'s cgroups (or the other way round)."""
    assert cgroups.run_of(cgroups.cgroup_name("a@b")) != "a"
    assert cgroups.run_of(cgroups.cgroup_name("a")) != "a@b"
    assert cgroups.run_of("docker") is None and cgroups.run_of("harness-trial@") is None


MOUNTINFO = """\
30 24 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
32 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
33 30 0:29 /outer /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
34 30 0:30 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
"""
SELF = """\
4:pids:/
3:memory:/outer/me
2:cpu,cpuacct:/
0::/
"""


def test_the_tables_of_a_hybrid_host() -> None:
    """Co-mounted controllers share a dir; a mount of a subtree is found below its root."""
    mounts = cgroups._mounts(MOUNTINFO)
    assert [m[0] for m in mounts] == ["cgroup2", "cgroup", "cgroup", "cgroup"]
    member = cgroups._memberships(SELF)
    assert member["cpu"] == member["cpuacct"] == "/" and member[""] == "/"
    root, point = mounts[2][1], mounts[2][2]
    assert cgroups._below(point, root, member["memory"]) == "/sys/fs/cgroup/memory/me"
    assert cgroups._below("/sys/fs/cgroup/pids", "/", "/") == "/sys/fs/cgroup/pids/"
