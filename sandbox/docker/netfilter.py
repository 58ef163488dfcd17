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
