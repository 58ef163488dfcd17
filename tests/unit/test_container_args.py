"""The trial container's create arguments, flag by flag, without an engine (container.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from docker.types import Mount

from sandbox.backend import Resources, SandboxSpec
from sandbox.docker.container import (
    AGENT_SPACES_MB,
    ARTIFACTS_DIR,
    GATEWAY_MOUNT,
    INODE_COST,
    NEUTRAL_LOADER_ENV,
    SUPERVISOR_CAPS,
    SUPERVISOR_ENV,
    ContainerSite,
    agent_spaces_mb,
    charged_mb,
    create_args,
    inodes,
)
from sandbox.docker.runtime import PYTHON_MOUNT, SUPERVISOR_MOUNT
from sandbox.verifier_tools import TOOLS_MOUNT

WORKSPACE = Mount("/app", "trial-ws", type="volume")


def _site(**overrides: Any) -> ContainerSite:
    values: dict[str, Any] = {
        "image": "harness/task:abc",
        "name": "harness-run-t1",
        "labels": {"harness.managed": "1"},
        "command": ["/opt/harness-python/bin/python3", "/opt/harness/supervisor.pyc"],
        "workdir": "/app",
        "network": "none",
        "supervisor_dir": "/tmp/harness-supervisor-x",
        "python_volume": "harness-python-x",
        "tools_dir": "/tmp/harness-tools-x/tools",
        "storage_mounts": (WORKSPACE,),
    }
    values.update(overrides)
    return ContainerSite(**values)


def _args(spec: SandboxSpec | None = None, **site: Any) -> dict[str, Any]:
    return create_args(spec or SandboxSpec(trial_id="t1"), _site(**site))


def _mounts(args: dict[str, Any]) -> dict[str, Mount]:
    return {m["Target"]: m for m in args["mounts"]}


def test_every_capability_is_dropped_but_the_supervisors_own() -> None:
    args = _args()
    assert args["cap_drop"] == ["ALL"]
    assert args["cap_add"] == SUPERVISOR_CAPS
    assert "SYS_ADMIN" not in args["cap_add"] and "NET_RAW" not in args["cap_add"]


def test_no_new_privileges_and_the_engines_default_seccomp_profile() -> None:
    opts = _args()["security_opt"]
    assert opts == ["no-new-privileges"]
    assert not any(opt.startswith("seccomp") for opt in opts)  # never unconfined
    assert not any(opt.startswith("apparmor") for opt in opts)


def test_read_only_root_supervisor_as_pid_1_as_root_with_no_environment() -> None:
    args = _args()
    assert args["read_only"] is True  # unless the backend capped a writable layer
    assert _args(writable_root=True)["read_only"] is False
    assert _args(writable_root=True)["security_opt"] == ["no-new-privileges"]
    assert args["init"] is False
    assert args["entrypoint"] == []
    assert args["user"] == "0:0"
    # The image's ENV reaches pid 1 all the same: its loader variables are emptied.
    # The supervisor's interpreter takes no locale and no OpenSSL config from the root.
    assert args["environment"] == {**NEUTRAL_LOADER_ENV, **SUPERVISOR_ENV}
    assert {"LD_PRELOAD", "LD_AUDIT"} <= set(NEUTRAL_LOADER_ENV)
    assert not any(NEUTRAL_LOADER_ENV.values())
    assert SUPERVISOR_ENV["LC_ALL"] == "C" and SUPERVISOR_ENV["OPENSSL_CONF"] == "/dev/null"
    assert SUPERVISOR_ENV["LOCPATH"].startswith("/opt/harness/")  # read-only, never made
    assert args["stdin_open"] is True and args["tty"] is False
    # The engine's log of the channel stays small (on the trial's fs with a writable root).
    log = args["log_config"]
    assert log["Type"] == "json-file" and log["Config"] == {"max-size": "1m", "max-file": "1"}
    assert args["hostname"] == "sandbox"


def test_limits_follow_the_tasks_resources() -> None:
    spec = SandboxSpec(
        trial_id="t1", resources=Resources(cpus=1.5, memory_mb=768, pids=99, nofile=321)
    )
    args = _args(spec)
    assert args["pids_limit"] == 99
    assert args["mem_limit"] == "768m"
    assert args["memswap_limit"] == "768m"  # no swap beyond the memory limit
    assert args["nano_cpus"] == 1_500_000_000
    ulimits = {u["Name"]: (u["Soft"], u["Hard"]) for u in args["ulimits"]}
    assert ulimits == {"core": (0, 0), "nofile": (321, 321)}


def test_tmpfs_dirs_are_nosuid_nodev_and_only_scratch_is_exec() -> None:
    tmpfs = _args()["tmpfs"]
    assert set(tmpfs) == {
        "/run",
        "/trial",
        "/logs",
        "/logs/artifacts",
        "/tests",
        "/solution",
        "/tmp",
        "/var/tmp",
        # Without host storage the agent's own dirs get spaces of their own too.
        "/trial/home",
        "/trial/session",
        "/dev/shm",
    }
    for options in tmpfs.values():
        assert "nosuid" in options and "nodev" in options
        # An empty file costs kernel memory: every tmpfs caps its inodes too.
        assert ",nr_inodes=" in options
    assert "noexec" in tmpfs["/run"] and "noexec" in tmpfs["/logs"]
    # The agent's artifacts have a space of their own: never the verifier's /logs.
    assert "noexec" in tmpfs["/logs/artifacts"]
    assert tmpfs["/tests"].endswith("mode=700") and tmpfs["/solution"].endswith("mode=700")
    assert "mode=1777" in tmpfs["/tmp"] and "mode=1777" in tmpfs["/dev/shm"]


def _size_and_inodes(options: str) -> tuple[int, int]:
    fields = dict(f.split("=", 1) for f in options.split(",") if "=" in f)
    assert fields["size"].endswith("m")
    return int(fields["size"][:-1]), int(fields["nr_inodes"])


@pytest.mark.parametrize("memory_mb", [64, 256, 512, 2048, 16384])
@pytest.mark.parametrize("host_storage", [False, True])
def test_what_an_agent_can_hold_in_memory_backed_space_is_at_most_half_of_memory_mb(
    memory_mb: int, host_storage: bool
) -> None:
    spec = SandboxSpec(trial_id="t1", resources=Resources(memory_mb=memory_mb))
    tmpfs = _args(spec, host_storage=host_storage)["tmpfs"]
    agent = agent_spaces_mb(memory_mb=memory_mb, host_storage=host_storage)
    assert ARTIFACTS_DIR in agent
    held = 0
    for path in agent:
        size_mb, nr_inodes = _size_and_inodes(tmpfs[path])
        assert nr_inodes == inodes(size_mb)
        held += (size_mb << 20) + nr_inodes * INODE_COST
    assert held <= max(memory_mb << 19, len(agent) * charged_mb(1) << 20)
    if memory_mb >= 16384:  # room for all: the full sizes
        assert all(_size_and_inodes(tmpfs[p])[0] == AGENT_SPACES_MB[p] for p in agent)


def test_host_storage_takes_tmp_off_tmpfs_and_image_tests_bring_their_own_tests() -> None:
    tmpfs = _args(SandboxSpec(trial_id="t1", image_tests=True), host_storage=True)["tmpfs"]
    assert "/tmp" not in tmpfs and "/var/tmp" not in tmpfs
    assert "/trial/home" not in tmpfs and "/trial/session" not in tmpfs  # on the trial's fs
    assert "/tests" not in tmpfs
    assert "/logs" in tmpfs and "/trial" in tmpfs


@pytest.mark.parametrize("network", ["none", "bridge", "harness-compose-t1_default"])
def test_network_is_what_the_backend_chose(network: str) -> None:
    args = _args(network=network, extra_hosts={"db": "10.0.0.2"} if "compose" in network else None)
    assert args["network_mode"] == network
    assert args["extra_hosts"] == ({"db": "10.0.0.2"} if "compose" in network else None)


@pytest.mark.parametrize("runtime", [None, "runsc"])
def test_runtime_is_the_engines_or_gvisor(runtime: str | None) -> None:
    assert _args(engine_runtime=runtime)["runtime"] == runtime


def test_harness_mounts_are_read_only_and_the_workspace_is_the_trials(tmp_path: Path) -> None:
    socket = tmp_path / "gw" / "model.sock"
    cache = tmp_path / "agent-cache"
    spec = SandboxSpec(trial_id="t1", gateway_socket=socket, agent_mounts={"/opt/agent": cache})
    mounts = _mounts(_args(spec))
    assert mounts["/app"] == WORKSPACE and not mounts["/app"]["ReadOnly"]
    assert mounts[SUPERVISOR_MOUNT]["Source"] == "/tmp/harness-supervisor-x"
    assert mounts[PYTHON_MOUNT]["Type"] == "volume"
    assert mounts[TOOLS_MOUNT]["Source"] == "/tmp/harness-tools-x/tools"
    assert mounts[GATEWAY_MOUNT]["Source"] == str(socket.parent)
    assert mounts["/opt/agent"]["Source"] == str(cache)
    for target in (SUPERVISOR_MOUNT, PYTHON_MOUNT, TOOLS_MOUNT, GATEWAY_MOUNT, "/opt/agent"):
        assert mounts[target]["ReadOnly"] is True


def test_no_gateway_no_agent_mounts_no_gpus_by_default() -> None:
    args = _args()
    assert set(_mounts(args)) == {"/app", SUPERVISOR_MOUNT, PYTHON_MOUNT, TOOLS_MOUNT}
    assert args["device_requests"] == []


def test_gpus_are_requested_only_when_the_task_asks() -> None:
    requests = _args(SandboxSpec(trial_id="t1", gpus=2))["device_requests"]
    assert len(requests) == 1 and requests[0]["Count"] == 2


def test_image_name_labels_and_command_pass_through() -> None:
    args = _args()
    assert args["image"] == "harness/task:abc"
    assert args["name"] == "harness-run-t1"
    assert args["labels"] == {"harness.managed": "1"}
    assert args["command"][-1] == "/opt/harness/supervisor.pyc"
    assert args["working_dir"] == "/app"


def test_a_shared_memory_segment_dies_with_its_last_process() -> None:
    # kernel.shm_rmid_forced: no System V segment of the agent's outlives its processes.
    for network in ("none", "bridge"):
        assert _args(network=network)["sysctls"]["kernel.shm_rmid_forced"] == "1"


def test_an_engine_that_refuses_inode_caps_gets_byte_caps_alone() -> None:
    from sandbox.docker.container import tmpfs_dirs
    from sandbox.docker.tmpfs_caps import is_docker

    capped = tmpfs_dirs(image_tests=False, host_storage=False, memory_mb=512)
    plain = tmpfs_dirs(image_tests=False, host_storage=False, memory_mb=512, inode_caps=False)
    assert set(capped) == set(plain)
    for path, options in plain.items():
        assert "nr_inodes" not in options and "size=" in options, path
        assert "nr_inodes=" in capped[path], path
        assert options == ",".join(o for o in capped[path].split(",") if "nr_inodes" not in o)
    assert is_docker({"Components": [{"Name": "Engine"}, {"Name": "containerd"}]})
    assert not is_docker({"Components": [{"Name": "Podman Engine"}]})
    assert not is_docker({})
