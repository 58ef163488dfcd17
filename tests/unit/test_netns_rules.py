"""A trial's in-namespace rules: one pure function of its plan and its namespace's facts."""

from __future__ import annotations

import pytest

from sandbox.docker.netns_rules import (
    CHAINS,
    EMBEDDED_DNS,
    PHASE_RULE,
    NetFacts,
    NetPlan,
    SidecarRules,
    parse_counters,
    ruleset,
    sidecar_rules,
    switch_args,
)
from sandbox.network_policy import NetworkPolicy

PUBLIC = NetworkPolicy("public")
CLOSED = NetworkPolicy("no-network")
FACTS = NetFacts(
    gateway="172.17.0.1",
    subnets=("172.17.0.0/16",),
    host_addresses=("203.0.113.7", "10.0.0.5", "fe80::1", "not-an-address"),
    resolvers=("10.255.255.53",),
    cluster=("198.51.100.9",),
)


def _rules(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("-A ")]


def test_the_namespace_starts_closed_with_drop_policies_and_loopback() -> None:
    v4, v6 = ruleset(NetPlan({("agent", None): PUBLIC}), FACTS)
    assert ":OUTPUT DROP [0:0]" in v4 and ":INPUT DROP [0:0]" in v4
    output = [r for r in _rules(v4) if r.startswith("-A OUTPUT")]
    assert output[0] == "-A OUTPUT -o lo -j ACCEPT"
    # No state accepted on the way out: a flow an earlier phase opened is judged again.
    assert "ESTABLISHED" not in "\n".join(output)
    assert output[PHASE_RULE - 1] == f"-A OUTPUT -j {CHAINS['no-network']}"
    assert len(output) == PHASE_RULE
    # IPv6: loopback only, in every phase.
    assert [r for r in _rules(v6) if r.startswith("-A OUTPUT")][-1].endswith("-j REJECT")
    assert v4.endswith("COMMIT\n") and v6.endswith("COMMIT\n")


def test_public_refuses_the_host_its_subnet_private_ranges_and_metadata_then_accepts() -> None:
    v4, _ = ruleset(NetPlan({("agent", None): PUBLIC}), FACTS)
    public = [r for r in _rules(v4) if r.startswith(f"-A {CHAINS['public']} ")]
    assert public[-1] == f"-A {CHAINS['public']} -j ACCEPT"
    text = "\n".join(public)
    for dest, reason in [
        ("172.17.0.1/32", "gateway"),
        ("203.0.113.7/32", "host"),
        ("10.0.0.5/32", "host"),
        ("172.17.0.0/16", "host-subnet"),
        ("169.254.169.254/32", "metadata"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "cgnat"),
        ("198.51.100.9/32", "cluster"),
    ]:
        assert f'-d {dest} -p tcp -m comment --comment "hx:{reason}"' in text, dest
        assert f'-d {dest} -m comment --comment "hx:{reason}" -j REJECT' in text, dest
    # Only IPv4 reaches the v4 rules; nonsense is dropped, never written.
    assert "fe80" not in v4 and "not-an-address" not in v4
    # DNS to the namespace's own resolver comes before the private range that holds it,
    # the cluster before anything that accepts.
    first_private = next(i for i, r in enumerate(public) if "hx:private" in r)
    dns = [i for i, r in enumerate(public) if "--dport 53 -j ACCEPT" in r]
    assert len(dns) == 2 and max(dns) < first_private
    assert "-d 10.255.255.53/32 -p udp --dport 53" in text
    assert next(i for i, r in enumerate(public) if "hx:cluster" in r) < min(dns)


def test_a_trial_without_a_public_phase_gets_no_public_chain() -> None:
    v4, _ = ruleset(NetPlan({("agent", None): CLOSED, ("verifier", None): CLOSED}), FACTS)
    assert CHAINS["public"] not in v4
    assert "ACCEPT" not in "\n".join(r for r in _rules(v4) if CHAINS["no-network"] in r)


def test_the_plan_names_each_phases_chain_and_refuses_what_it_cannot_serve() -> None:
    plan = NetPlan({("agent", 1): PUBLIC, ("agent", 2): CLOSED, ("verifier", None): PUBLIC})
    assert plan.chain("agent", 1) == CHAINS["public"]
    assert plan.chain("agent", 2) == CHAINS["no-network"]
    assert plan.chain("verifier", 2) == CHAINS["public"]  # the role's default
    assert plan.chain("judge") == CHAINS["no-network"]  # unknown: closed


def test_an_allowlist_phase_reaches_loopback_alone_where_its_proxy_is_forwarded() -> None:
    plan = NetPlan({
        ("agent", None): NetworkPolicy("allowlist", ("example.com",)),
        ("verifier", None): NetworkPolicy("public"),
    })  # fmt: skip
    assert plan.chain("agent") == CHAINS["allowlist"]
    v4, _v6 = ruleset(plan, FACTS)
    rules = [r for r in _rules(v4) if r.startswith(f"-A {CHAINS['allowlist']} ")]
    # Nothing but a counted rejection: the proxy is on the namespace's loopback, which
    # OUTPUT accepts before any phase's chain.
    assert rules and all("-j REJECT" in r and "hx:allowlist" in r for r in rules), rules
    assert not any("-d " in r or "--dport" in r for r in rules), rules
    assert "-A OUTPUT -o lo -j ACCEPT" in _rules(v4)
    assert switch_args(CHAINS["allowlist"])[-1] == "HXN-allowlist"


def test_a_switch_replaces_one_rule_and_takes_only_phase_chains() -> None:
    assert switch_args(CHAINS["public"]) == ["-w", "-R", "OUTPUT", "2", "-j", "HXN-public"]
    with pytest.raises(ValueError):
        switch_args("ACCEPT")


def test_counters_are_read_by_reason() -> None:
    def row(packets: int, target: str, dest: str, tail: str) -> str:
        return f"{packets:8} {packets * 60:8} {target:10} 6    --  *  *  0.0.0.0/0  {dest}  {tail}"

    listing = "\n".join(
        [
            "Chain HXN-public (0 references)",
            "    pkts      bytes target     prot opt in     out     source    destination",
            row(2, "REJECT", "172.17.0.1", "/* hx:gateway */ reject-with tcp-reset"),
            row(1, "REJECT", "172.17.0.1", "/* hx:gateway */ reject-with icmp-port-unreachable"),
            row(0, "REJECT", "10.0.0.0/8", "/* hx:private */ reject-with tcp-reset"),
            row(9, "ACCEPT", "0.0.0.0/0", ""),
        ]
    )
    assert parse_counters(listing) == {"gateway": 3}


PROJECT = NetFacts(
    gateway="172.17.0.1",
    subnets=("172.17.0.0/16", "172.23.0.0/16"),
    cluster=("198.51.100.9",),
    peers=("172.23.0.0/16",),
    peer_gateways=("172.23.0.1",),
)


@pytest.mark.parametrize("mode", ["no-network", "allowlist", "public"])
def test_a_compose_projects_sidecars_are_reached_in_every_phase_and_its_gateway_never(
    mode: str,
) -> None:
    v4, v6 = ruleset(NetPlan({("agent", None): NetworkPolicy(mode)}), PROJECT)
    chain = [r for r in _rules(v4) if r.startswith(f"-A {CHAINS[mode]} ")]
    accept = chain.index(f"-A {CHAINS[mode]} -d 172.23.0.0/16 -j ACCEPT")
    gateway = [i for i, r in enumerate(chain) if "-d 172.23.0.1/32" in r]
    # The gateway (no one holds it) is refused, by TCP reset and by ICMP, before the
    # subnet is accepted; the subnet before whatever the phase refuses.
    assert len(gateway) == 2 and max(gateway) < accept
    assert all('"hx:gateway" -j REJECT' in chain[i] for i in gateway)
    refusals = [i for i, r in enumerate(chain) if "REJECT" in r and i not in gateway]
    if mode == "public":
        cluster = [i for i, r in enumerate(chain) if "hx:cluster" in r]
        assert cluster and max(cluster) < min(gateway)  # the cluster before any accept
        refusals = [i for i in refusals if i not in cluster]
        # The host's other subnet is still refused after the project's is accepted.
        assert any("-d 172.17.0.0/16" in chain[i] for i in refusals)
    assert refusals and min(refusals) > accept
    # What a sidecar opens reaches the trial; nothing claiming the gateway does.
    inputs = [r for r in _rules(v4) if r.startswith("-A INPUT")]
    assert inputs.index("-A INPUT -s 172.23.0.1/32 -j DROP") < inputs.index(
        "-A INPUT -s 172.23.0.0/16 -j ACCEPT"
    )
    # The sidecars' subnet never opens IPv6.
    assert "172.23" not in v6


def test_without_a_project_no_chain_accepts_a_subnet() -> None:
    v4, _ = ruleset(NetPlan({("agent", None): PUBLIC, ("verifier", None): CLOSED}), FACTS)
    assert not [r for r in _rules(v4) if r.endswith("/16 -j ACCEPT")]


def test_the_engines_resolver_is_never_asked_on_a_project_network() -> None:
    facts = NetFacts(
        gateway="172.17.0.1",
        peers=("172.23.0.0/16",),
        peer_gateways=("172.23.0.1",),
        embedded_dns_to="127.0.0.1",
    )
    plan = NetPlan({("agent", None): NetworkPolicy("allowlist"), ("verifier", None): PUBLIC})
    v4, _ = ruleset(plan, facts)
    filter_part, nat_part = v4.split("*nat\n")
    # Its port 53 goes to the trial's relay, by UDP and TCP; the engine's own redirects go.
    nat = _rules(nat_part)
    assert nat == [
        f"-A OUTPUT -d {EMBEDDED_DNS}/32 -p {proto} --dport 53 -j DNAT "
        "--to-destination 127.0.0.1:53"
        for proto in ("udp", "tcp")
    ]
    assert nat_part.rstrip().endswith("COMMIT")
    # Loopback is accepted except the engine's resolver, whose other ports every phase's
    # chain refuses first; the phase's rule keeps its number.
    output = [r for r in _rules(filter_part) if r.startswith("-A OUTPUT")]
    assert output[0] == f"-A OUTPUT -o lo ! -d {EMBEDDED_DNS}/32 -j ACCEPT"
    assert output[PHASE_RULE - 1] == f"-A OUTPUT -j {CHAINS['no-network']}"
    for mode in ("no-network", "allowlist", "public"):
        chain = [r for r in _rules(filter_part) if r.startswith(f"-A {CHAINS[mode]} ")]
        assert all('"hx:engine-dns" -j REJECT' in r for r in chain[:2]), chain[:2]
        assert all(f"-d {EMBEDDED_DNS}/32" in r for r in chain[:2]), chain[:2]


def test_without_a_project_there_is_no_nat_table() -> None:
    v4, _ = ruleset(NetPlan({("agent", None): PUBLIC}), FACTS)
    assert "*nat" not in v4 and EMBEDDED_DNS not in v4


def test_a_sidecar_sends_to_its_peers_unicast_and_its_loopback_only() -> None:
    rules = sidecar_rules([("172.23.0.0/16", "172.23.0.1"), ("fd00::/64", None)])
    assert rules.v4[:3] == ("-P INPUT ACCEPT", "-P FORWARD DROP", "-P OUTPUT DROP")
    accept = rules.v4.index("-A OUTPUT -d 172.23.0.0/16 -j ACCEPT")
    # Broadcasts, multicast groups, the gateway and the subnet's own network and broadcast
    # addresses are dropped before the subnet is accepted; the rest by the policy.
    for refused in (
        "-A OUTPUT -m addrtype --dst-type BROADCAST -j DROP",
        "-A OUTPUT -d 224.0.0.0/4 -j DROP",
        "-A OUTPUT -d 172.23.0.0/32 -j DROP",
        "-A OUTPUT -d 172.23.0.1/32 -j DROP",
        "-A OUTPUT -d 172.23.255.255/32 -j DROP",
    ):
        assert rules.v4.index(refused) < accept
    assert [r for r in rules.v4 if r.endswith("-j ACCEPT")] == [
        "-A OUTPUT -o lo -j ACCEPT",
        "-A OUTPUT -d 172.23.0.0/16 -j ACCEPT",
    ]
    # IPv6: loopback only, both ways; no IPv6 subnet is ever accepted.
    assert rules.v6 == (
        "-P INPUT DROP",
        "-P FORWARD DROP",
        "-P OUTPUT DROP",
        "-A INPUT -i lo -j ACCEPT",
        "-A OUTPUT -o lo -j ACCEPT",
    )


def test_a_sidecars_rules_are_restored_as_the_lines_they_are_read_back_as() -> None:
    rules = sidecar_rules([("10.9.0.0/24", "10.9.0.1")])
    restore = SidecarRules.restore(rules.v4).splitlines()
    assert restore[0] == "*filter" and restore[-1] == "COMMIT"
    assert restore[1:4] == [":INPUT ACCEPT [0:0]", ":FORWARD DROP [0:0]", ":OUTPUT DROP [0:0]"]
    assert restore[4:-1] == [r for r in rules.v4 if r.startswith("-A ")]
    # Without a gateway its address is not guessed; the subnet's edges are still dropped.
    bare = sidecar_rules([("10.9.0.0/24", None)])
    assert "-A OUTPUT -d 10.9.0.1/32 -j DROP" not in bare.v4
    assert "-A OUTPUT -d 10.9.0.255/32 -j DROP" in bare.v4
