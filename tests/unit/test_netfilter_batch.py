"""The ``iptables-restore`` input of a batch of rule commands (:mod:`sandbox.docker.netfilter`)."""

from __future__ import annotations

import pytest

from sandbox.docker.netfilter import restore_input
from sandbox.errors import SandboxError


def test_a_batch_is_one_commit_of_its_table_with_its_commands_in_order() -> None:
    text = restore_input([
        [":HXE-T1"],
        ["-A", "HXE-T1", "-d", "10.0.0.0/8", "-m", "comment", "--comment", "harness:x", "-j",
         "DROP"],
        ["-I", "DISPATCH", "1", "-s", "172.30.0.2/32", "-g", "HXE-T1"],
        ["-D", "HXE-T1", "-j", "DROP"],
    ])  # fmt: skip
    assert text.splitlines() == [
        "*mangle",
        ":HXE-T1 - [0:0]",
        "-A HXE-T1 -d 10.0.0.0/8 -m comment --comment harness:x -j DROP",
        "-I DISPATCH 1 -s 172.30.0.2/32 -g HXE-T1",
        "-D HXE-T1 -j DROP",
        "COMMIT",
    ]
    assert restore_input([["-A", "PREROUTING", "-j", "ACCEPT"]], "nat").startswith("*nat\n")


def test_an_argument_with_blanks_is_one_quoted_argument() -> None:
    text = restore_input([["-A", "C", "-j", "NFLOG", "--nflog-prefix", "HXE-T1 closed"]])
    assert '--nflog-prefix "HXE-T1 closed"' in text


@pytest.mark.parametrize("arg", ['a"b', "a\nCOMMIT", "a\\b", "", "it's"])
def test_an_argument_that_could_change_the_batch_is_refused(arg: str) -> None:
    with pytest.raises(SandboxError, match="cannot be batched"):
        restore_input([["-A", "C", "--comment", arg, "-j", "DROP"]])
