"""Where the harness's host firewall rules live, and the one way they are run.

Every chain and rule of the harness (the egress filter's, :mod:`sandbox.docker.egress`,
and the compose host guard's, :mod:`sandbox.docker.hostguard`) lives in the ``mangle``
table, which the engine never rewrites. The engine owns ``filter``'s ``FORWARD`` and
re-arranges it every time it makes a network: it deletes its jump into ``DOCKER-USER``
and inserts it again on top, and inserts the new network's own ``ACCEPT`` rules above
any rule already there. Rules in ``DOCKER-USER`` judge nothing between the delete and
the insert, so a filtered container's packets met the engine's ``ACCEPT`` for its bridge
whenever any network was made on the host (a compose task's, another user's): hundreds of
a closed phase's datagrams got out in a test that made networks meanwhile. ``mangle``'s
``FORWARD`` and ``INPUT`` run before ``filter``'s, for every packet, whatever the engine
does to its own chains; a ``DROP`` there is final.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from sandbox.errors import SandboxError
from sandbox.host_tools import run_tool

#: The table of every harness chain and rule.
TABLE = "mangle"
#: Where releases before the move kept them: what a killed run of such a release left is
#: removed from there once no live run holds the filter.
LEGACY_TABLE = "filter"
_TIMEOUT_SEC = 30


def run(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``tool`` (``iptables`` or ``ip6tables``) on :data:`TABLE`, unless ``args`` name one.

    Args:
        tool: The command.
        args: Its arguments; a leading ``-t TABLE`` chooses another table (``nat``).
    """
    table = [] if args[:1] == ("-t",) else ["-t", TABLE]
    # -w: wait for the xtables lock (dockerd edits the tables too).
    return run_tool([tool, "-w", *table, *args], timeout=_TIMEOUT_SEC)


def _arg(text: str) -> str:
    """``text`` as one argument of an ``iptables-restore`` line (quoted if it has blanks)."""
    if not text or any(c in text for c in "\"'\n\r\\"):
        raise SandboxError(f"an iptables argument cannot be batched: {text!r}")
    return f'"{text}"' if any(c.isspace() for c in text) else text


def restore_input(commands: Sequence[Sequence[str]], table: str = TABLE) -> str:
    """The ``iptables-restore`` input applying ``commands`` to ``table`` in one commit (pure).

    Each command is one rule command as ``iptables`` takes it after ``-t TABLE``
    (``["-A", chain, ...]``, ``["-I", chain, "1", ...]``, ``["-D", chain, ...]``), or
    ``[":" + chain]``: the chain made, or emptied if it is there.
    """
    lines = [f"*{table}"]
    for command in commands:
        if len(command) == 1 and command[0].startswith(":"):
            lines.append(f"{_arg(command[0])} - [0:0]")
        else:
            lines.append(" ".join(_arg(part) for part in command))
    return "\n".join([*lines, "COMMIT", ""])


def restore(
    tool: str, commands: Sequence[Sequence[str]], table: str = TABLE
) -> subprocess.CompletedProcess[str]:
    """Apply ``commands`` (see :func:`restore_input`) with one ``TOOL-restore --noflush``.

    One process and one atomic commit instead of one ``tool`` call per rule: either
    every command holds afterwards or none does (a failed batch changes nothing).

    Args:
        tool: ``iptables`` or ``ip6tables``.
        commands: The rule commands, in order.
        table: Their table.
    """
    text = restore_input(commands, table)
    return run_tool([f"{tool}-restore", "-w", "--noflush"], input=text, timeout=_TIMEOUT_SEC)
