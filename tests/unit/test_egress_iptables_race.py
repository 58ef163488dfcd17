"""iptables-nft's answer to a chain made or deleted while it read is tried again.

Listing a chain while another process creates or deletes it makes iptables-nft fail with
"chain `X' in table `filter' is incompatible, use 'nft' tool" (``-w`` does not order
nft's commands): 277 of 800 listings here, against a loop that made and deleted the
chain. A ``harness sandbox cleanup`` failed on it in a parallel run. The stand-in tool
below answers so a set number of times, then as iptables does: a real process on PATH,
as the real race cannot be timed.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sandbox.docker import egress
from sandbox.errors import SandboxError

RACED = (
    "iptables v1.8.9 (nf_tables): chain `HARNESS-EGRESS' in table `filter' is incompatible, "
    "use 'nft' tool."
)
MISSING = "iptables: No chain/target/match by that name."


@pytest.fixture
def iptables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in ``iptables`` first on PATH: it fails raced ``$RACES`` times, then lists."""
    tool = tmp_path / "bin" / "iptables"
    tool.parent.mkdir()
    calls = tmp_path / "calls"
    (tmp_path / "raced").write_text(RACED + "\n")
    (tmp_path / "missing").write_text(MISSING + "\n")
    tool.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {calls}\n'
        f'if [ "$RACES" = never ]; then cat {tmp_path}/missing >&2; exit 1; fi\n'
        f'if [ "$(wc -l < {calls})" -le "$RACES" ]; then cat {tmp_path}/raced >&2; exit 4; fi\n'
        'echo "-N HARNESS-EGRESS"\n'
    )
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tool.parent}:{Path('/usr/bin')}:{Path('/bin')}")
    monkeypatch.setattr(time, "sleep", lambda _s: None)
    return calls


def test_a_listing_that_raced_a_change_is_read_again(
    iptables: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RACES", "3")
    result = egress._ipt("iptables", "-S", egress.DISPATCH)
    assert result.returncode == 0 and result.stdout == "-N HARNESS-EGRESS\n"
    assert iptables.read_text().splitlines() == ["-w -S HARNESS-EGRESS"] * 4


def test_a_race_that_never_ends_is_the_tools_answer(
    iptables: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RACES", "1000")
    with pytest.raises(SandboxError, match="is incompatible"):
        egress._must("iptables", "-S", egress.DISPATCH)
    assert len(iptables.read_text().splitlines()) == egress._RACE_TRIES


def test_any_other_failure_is_not_tried_again(
    iptables: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RACES", "never")
    result = egress._ipt("iptables", "-S", egress.DISPATCH)
    assert result.returncode == 1 and "No chain" in result.stderr
    assert len(iptables.read_text().splitlines()) == 1
