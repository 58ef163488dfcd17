"""Which limits a docker trial's record says held: the engine's word and the container's."""

from __future__ import annotations

from sandbox.docker.limits import applied, enforced, engine_gaps, gap_line

ROOTFUL = {"CgroupDriver": "cgroupfs", "MemoryLimit": True, "CpuCfsQuota": True, "PidsLimit": True}
# What Debian's rootless dockerd on a cgroup v1 host answers.
ROOTLESS_V1 = {
    "CgroupDriver": "none",
    "MemoryLimit": False,
    "CpuCfsQuota": False,
    "PidsLimit": False,
}
HELD = {"Memory": 512 << 20, "NanoCpus": 1_500_000_000, "PidsLimit": 256}


def test_an_engine_without_a_cgroup_driver_enforces_nothing_whatever_it_holds() -> None:
    gaps = engine_gaps(ROOTLESS_V1)
    assert set(gaps) == {"memory_mb", "cpus", "pids"}
    assert "CgroupDriver: none" in gaps["memory_mb"]
    # The container's configuration may still carry the values: they are not limits.
    assert enforced(ROOTLESS_V1, HELD, memory_mb=512, cpus=1.5, pids=256) == {
        "memory_mb": False,
        "cpus": False,
        "pids": False,
    }
    # A driver named none whatever the flags say.
    assert set(engine_gaps({**ROOTFUL, "CgroupDriver": "none"})) == {"memory_mb", "cpus", "pids"}


def test_a_kernel_without_one_controller_loses_just_that_limit() -> None:
    info = {**ROOTFUL, "PidsLimit": False}
    assert list(engine_gaps(info)) == ["pids"]
    assert enforced(info, HELD, memory_mb=512, cpus=1.5, pids=256) == {
        "memory_mb": True,
        "cpus": True,
        "pids": False,
    }
    # An engine that does not say (an older API) is judged by the container alone.
    assert engine_gaps({"CgroupDriver": "systemd"}) == {}


def test_a_limit_the_engine_dropped_from_the_container_is_not_held() -> None:
    dropped = {**HELD, "Memory": 0}
    assert applied(dropped, memory_mb=512, cpus=1.5, pids=256)["memory_mb"] is False
    other = {**HELD, "NanoCpus": 1_000_000_000}
    assert applied(other, memory_mb=512, cpus=1.5, pids=256)["cpus"] is False
    assert applied({}, memory_mb=512, cpus=1.5, pids=256) == {
        "memory_mb": False,
        "cpus": False,
        "pids": False,
    }
    assert enforced(ROOTFUL, HELD, memory_mb=512, cpus=1.5, pids=256) == {
        "memory_mb": True,
        "cpus": True,
        "pids": True,
    }


def test_the_run_line_names_the_limits_why_and_the_way_out() -> None:
    gaps = engine_gaps(ROOTLESS_V1)
    warned = gap_line(gaps, required=False)
    assert warned.startswith("the engine does not enforce memory_mb, cpus, pids: it has no")
    assert warned.count("CgroupDriver: none") == 1  # one reason said once
    assert "sandbox.require_limits = true" in warned
    refused = gap_line(gaps, required=True)
    assert "refuses the run" in refused and "cgroup v2" in refused
