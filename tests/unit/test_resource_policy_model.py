"""Harbor 0.22's enforcement policies: what each backend is asked for, and what is recorded.

``limit`` caps, ``request`` reserves, ``guarantee`` does both, ``ignore`` neither; the
record says ``true`` for a cap that held, ``"request"`` for a reservation alone, ``false``
for nothing (and nothing at all on an engine without a cgroup driver).
"""

from __future__ import annotations

import pytest

from harness.config.model import SandboxConfig
from sandbox.docker.container import cpu_args, cpu_shares, memory_args
from sandbox.docker.limits import enforced
from sandbox.local.cgroups import Limits, TrialCgroup, cpu_weight

ROOTFUL = {"CgroupDriver": "cgroupfs", "MemoryLimit": True, "CpuCfsQuota": True, "PidsLimit": True}
ROOTLESS_V1 = {"CgroupDriver": "none"}


@pytest.mark.parametrize(
    ("policy", "cpu", "memory"),
    [
        ("limit", {"nano_cpus": 1_500_000_000}, {"mem_limit": "512m", "memswap_limit": "512m"}),
        ("request", {"cpu_shares": 1536}, {"mem_reservation": "512m"}),
        (
            "guarantee",
            {"nano_cpus": 1_500_000_000, "cpu_shares": 1536},
            {"mem_limit": "512m", "memswap_limit": "512m", "mem_reservation": "512m"},
        ),
        ("ignore", {}, {}),
    ],
)
def test_each_policy_asks_docker_for_its_cap_or_reservation(
    policy: str, cpu: dict[str, object], memory: dict[str, object]
) -> None:
    assert cpu_args(policy, 1.5) == cpu
    assert memory_args(policy, 512) == memory


def _host_config(policy_cpu: str, policy_memory: str) -> dict[str, int]:
    """What the engine's HostConfig holds for the arguments above."""
    config: dict[str, int] = {"PidsLimit": 256}
    args = {**cpu_args(policy_cpu, 1.5), **memory_args(policy_memory, 512)}
    if "nano_cpus" in args:
        config["NanoCpus"] = int(args["nano_cpus"])
    if "cpu_shares" in args:
        config["CpuShares"] = int(args["cpu_shares"])
    if "mem_limit" in args:
        config["Memory"] = 512 << 20
    if "mem_reservation" in args:
        config["MemoryReservation"] = 512 << 20
    return config


@pytest.mark.parametrize(
    ("policy", "recorded"),
    [("limit", True), ("request", "request"), ("guarantee", True), ("ignore", False)],
)
def test_the_record_says_what_held(policy: str, recorded: object) -> None:
    held = enforced(
        ROOTFUL,
        _host_config(policy, policy),
        memory_mb=512,
        cpus=1.5,
        pids=256,
        policies={"cpus": policy, "memory_mb": policy},
        shares=cpu_shares(1.5),
    )
    assert held == {"memory_mb": recorded, "cpus": recorded, "pids": True}


def test_an_engine_without_a_cgroup_driver_holds_no_reservation_either() -> None:
    held = enforced(
        ROOTLESS_V1,
        _host_config("request", "guarantee"),
        memory_mb=512,
        cpus=1.5,
        pids=256,
        policies={"cpus": "request", "memory_mb": "guarantee"},
        shares=cpu_shares(1.5),
    )
    assert held == {"memory_mb": False, "cpus": False, "pids": False}


def test_a_reservation_the_engine_dropped_is_not_recorded() -> None:
    config = _host_config("request", "request")
    config.pop("MemoryReservation")
    held = enforced(
        ROOTFUL,
        config,
        memory_mb=512,
        cpus=1.5,
        pids=256,
        policies={"cpus": "request", "memory_mb": "request"},
        shares=cpu_shares(1.5),
    )
    assert held["memory_mb"] is False and held["cpus"] == "request"


def test_the_local_cgroup_records_its_policy() -> None:
    limits = Limits(memory_mb=512, cpus=2, pids=64, cpu_policy="request", memory_policy="ignore")
    described = TrialCgroup("v2", {"unified": "/nonexistent/x"}, limits).describe()
    assert described["policy"] == {"cpus": "request", "memory_mb": "ignore"}
    assert described["enforced"] == {"cpus": "request", "memory_mb": False, "pids": True}
    assert cpu_weight(2) == 200 and cpu_weight(1000) == 10_000


def test_the_config_takes_only_the_four_policies() -> None:
    assert SandboxConfig(cpu_policy="guarantee").cpu_policy == "guarantee"
    with pytest.raises(ValueError):
        SandboxConfig.model_validate({"memory_policy": "auto"})
