"""A compose network kept off the host by how the engine makes it (no host rules, no root).

The override compose is given, what is read back from the engine before any sidecar
starts, and what the record says. The attack itself, through the real CLI as a
docker-group user, on rootless docker and in the CI image, is
``tests/security/test_compose_without_root.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sandbox.docker.compose import INHIBIT_IPV4, RESET, ComposeProject, Tagged
from sandbox.docker.hostguard import HostGuardUnavailable
from sandbox.docker.netns_rules import sidecar_rules
from sandbox.docker.sdk import command
from sandbox.docker.sidecar_netns import JOINED_RESET

COMPOSE = "services:\n  kv:\n    image: harness/base:bookworm\n"


def _engine(attrs: dict[str, Any]) -> SimpleNamespace:
    """What the project reads of a docker SDK client: ``networks.get(name).attrs``."""
    return SimpleNamespace(networks=SimpleNamespace(get=lambda _name: SimpleNamespace(attrs=attrs)))


HELD: dict[str, Any] = {
    "Internal": True,
    "EnableIPv6": False,
    "Options": {INHIBIT_IPV4: "true", "com.docker.network.bridge.name": "hxc0"},
    "IPAM": {"Config": [{"Subnet": "172.29.0.0/16", "Gateway": "172.29.0.1"}]},
}


@pytest.fixture
def project(tmp_path: Path) -> Iterator[ComposeProject]:
    (tmp_path / "docker-compose.yaml").write_text(COMPOSE)
    made = ComposeProject(
        tmp_path / "docker-compose.yaml",
        trial_id="t.r0",
        labels={},
        allow_internet=True,
        main_image="harness/base:bookworm",
        build_timeout_sec=None,
        host_problem="the harness does not run as root",
        engine_guard=True,
        engine=_engine(HELD),
    )
    try:
        yield made
    finally:
        made.down()


def test_the_network_is_internal_hostless_and_the_sidecars_lose_net_raw(
    project: ComposeProject,
) -> None:
    override = project._override()
    network = override["networks"]["default"]
    # Internal even though the trial's phases have the internet: the sidecars get none.
    assert network["internal"] is True and network["enable_ipv6"] is False
    options = network["driver_opts"]
    assert isinstance(options, Tagged) and options.tag == "override"  # the file's go
    assert options.value[INHIBIT_IPV4] == "true"
    assert options.value["com.docker.network.bridge.name"] == project.bridge
    assert override["services"]["kv"]["cap_drop"] == ["NET_RAW"]
    assert project.guard is None and project.engine_guarded
    assert project.describe()["sidecar_internet"] is False


def test_what_the_engine_made_is_read_back_and_recorded(project: ComposeProject) -> None:
    assert project.describe()["host_guard"]["verified"] is False  # not read yet
    project._check_engine_network()
    assert project.subnets == (("172.29.0.0/16", "172.29.0.1"),)
    guard = project.describe()["host_guard"]
    assert guard["kind"] == "engine" and guard["verified"] is True, guard
    assert guard["subnets"] == ["172.29.0.0/16"] and guard["sidecar_caps_dropped"] == ["NET_RAW"]
    assert "host_exposed" not in project.describe()
    # Nothing said filtered before the sidecars started behind their read-back rules.
    assert guard["sidecars_filtered"] is False and guard["sidecar_rules"] is None, guard
    assert "residual" not in guard


def test_each_sidecar_joins_a_namespace_its_filter_closed_first(project: ComposeProject) -> None:
    services = project._override()["services"]
    sidecar, holder, rules = services["kv"], services["hxnet-kv"], services["hxrules-kv"]
    # The sidecar: in its holder's namespace, started only once the filter exited 0.
    assert sidecar["network_mode"] == "service:hxnet-kv"
    # Required: compose merges a file's ``required: false`` into the same dependency.
    assert sidecar["depends_on"] == {
        "hxrules-kv": {"condition": "service_completed_successfully", "required": True}
    }
    assert all(sidecar[key] is RESET for key in JOINED_RESET)
    # The holder: the sidecar's name on the network, no capability, never restarted.
    assert holder["networks"] == {"default": {"aliases": ["kv"]}}
    assert holder["cap_drop"] == ["ALL"] and "cap_add" not in holder
    assert holder["restart"] == "no" and holder["read_only"] is True
    # The filter: NET_ADMIN alone, in the holder's namespace; it fails closed until the
    # network is read back and the rules are made from it.
    assert rules["network_mode"] == "service:hxnet-kv" and rules["cap_add"] == ["NET_ADMIN"]
    assert rules["cap_drop"] == ["ALL"] and rules["command"] == ["false"]
    project._check_engine_network()
    project.sidecar_rules = sidecar_rules(project.subnets)
    command_line = project._override()["services"]["hxrules-kv"]["command"]
    assert command_line[:4] == ["python3", "-I", "-S", "-c"]
    assert "-A OUTPUT -d 172.29.255.255/32 -j DROP" in command_line[-1]
    assert project.describe()["host_guard"]["sidecar_rules"]["ipv4"] == list(
        project.sidecar_rules.v4
    )


def test_compose_takes_the_override_with_every_key_a_joined_namespace_refuses(
    tmp_path: Path,
) -> None:
    """A sidecar's names, links and resolvers go to its holder, as compose merges them."""
    (tmp_path / "docker-compose.yaml").write_text(
        "services:\n"
        "  kv:\n"
        "    image: harness/base:bookworm\n"
        "    hostname: kvhost\n"
        "    expose: ['8080']\n"
        "    dns: [9.9.9.9]\n"
        "    extra_hosts: ['db.local:10.1.2.3']\n"
        "    networks:\n"
        "      default:\n"
        "        aliases: [store]\n"
        "  web:\n"
        "    image: harness/base:bookworm\n"
        "    depends_on: [kv]\n"
        "    links: ['kv:cache']\n"
    )
    made = ComposeProject(
        tmp_path / "docker-compose.yaml",
        trial_id="t.r0",
        labels={},
        allow_internet=False,
        main_image="harness/base:bookworm",
        build_timeout_sec=None,
        host_problem="the harness does not run as root",
        engine_guard=True,
        engine=_engine(HELD),
    )
    try:
        data = command(made.client().compose.config, return_json=True)
    finally:
        made.down()
    services = data["services"]
    for name in ("kv", "web"):
        joined = services[name]
        assert joined["network_mode"] == f"service:hxnet-{name}", joined
        assert not {"networks", "links", "hostname", "dns", "extra_hosts", "expose"} & set(joined)
        assert joined["cap_drop"] == ["NET_RAW"]
        assert joined["depends_on"][f"hxrules-{name}"] == {
            "condition": "service_completed_successfully",
            "required": True,
        }, joined["depends_on"]
    assert "kv" in services["web"]["depends_on"]  # the file's own order is kept
    holder = services["hxnet-kv"]
    assert sorted(holder["networks"]["default"]["aliases"]) == ["cache", "kv", "store"]
    assert holder["hostname"] == "kvhost"
    assert "db.local" in str(holder["extra_hosts"])


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"Internal": False}, "internal"),
        ({"EnableIPv6": True}, "no IPv6"),
        ({"Options": {"com.docker.network.bridge.name": "hxc0"}}, INHIBIT_IPV4),
        ({"Options": {INHIBIT_IPV4: "false"}}, INHIBIT_IPV4),
        ({"IPAM": {"Config": [{"Subnet": "fd00::/64"}]}}, "an IPv4 subnet"),
    ],
)
def test_a_network_the_engine_did_not_make_so_refuses_the_task(
    project: ComposeProject, change: dict[str, Any], named: str
) -> None:
    project.engine = _engine({**HELD, **change})
    with pytest.raises(HostGuardUnavailable, match=named) as caught:
        project._check_engine_network()
    assert "could reach the engine's host" in str(caught.value)
    assert project.describe()["host_guard"]["verified"] is False


def test_allowing_host_access_takes_neither_guard(tmp_path: Path) -> None:
    (tmp_path / "docker-compose.yaml").write_text(COMPOSE)
    project = ComposeProject(
        tmp_path / "docker-compose.yaml",
        trial_id="t.r0",
        labels={},
        allow_internet=True,
        main_image="harness/base:bookworm",
        build_timeout_sec=None,
        host_problem="the harness does not run as root",
        allow_host_access=True,
        engine_guard=True,
        engine=_engine(HELD),
    )
    try:
        network = project._override()["networks"]["default"]
        assert "internal" not in network and INHIBIT_IPV4 not in network["driver_opts"].value
        record = project.describe()
        assert record["host_guard"] is None and record["sidecar_internet"] is True
        assert record["host_exposed"] == "the harness does not run as root"
    finally:
        project.down()
