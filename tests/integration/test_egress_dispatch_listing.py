"""A sweep reads the dispatch chain's rules even when the chain is gone, on the real tool.

``harness sandbox cleanup`` saw the dispatch chain, took the run lock, and meanwhile the
last other run's teardown had removed the chain: its read of the chain then failed the
cleanup. Debian 12's iptables-nft (1.8.9) words a missing chain as "chain `X' in table
`filter' is incompatible, use 'nft' tool", which had been mistaken for a race with a
writer and read again. The chain here has a name of its own, so the parallel suite's
runs never touch it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest
from support.docker import prerequisite_missing

from sandbox.docker import egress

pytestmark = pytest.mark.root


@pytest.fixture
def dispatch(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A dispatch chain name nobody else uses (not made: a test makes it if it needs it)."""
    if shutil.which("iptables") is None:
        prerequisite_missing("iptables")
    chain = f"HXT-{os.getpid()}"
    monkeypatch.setattr(egress, "DISPATCH", chain)
    yield chain
    for tool in egress._tools():
        egress._drop_chain(tool, chain)


def test_a_missing_dispatch_chain_has_no_rules_in_either_table(dispatch: str) -> None:
    listing = egress._ipt("iptables", "-S", dispatch)
    assert listing.returncode != 0, "the chain exists before the test made it (test is void)"
    for tool in egress._tools():
        assert egress._dispatch_rules(tool) == []


def test_a_present_dispatch_chain_gives_only_its_goto_rules(dispatch: str) -> None:
    egress._must("iptables", "-N", dispatch)
    # Rules that go to no trial chain (making one could race a parallel run's sweep).
    egress._must("iptables", "-A", dispatch, "-s", "192.0.2.7/32", "-j", "RETURN")
    egress._must("iptables", "-A", dispatch, *egress._comment("closed"), "-j", "DROP")
    assert egress._dispatch_rules("iptables") == []
    listing = egress._must("iptables", "-S", dispatch)
    assert "192.0.2.7" in listing and "closed" in listing
