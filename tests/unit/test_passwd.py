"""Our own ``/etc/passwd`` parse (sandbox/inside/passwd.py): links, FIFOs, sizes, lines."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox.inside import passwd
from sandbox.inside.home_seed import SKEL, source_home
from sandbox.inside.supervisor import op_whois

GOOD = (
    "# a comment\n"
    "root:x:0:0:root:/root:/bin/bash\n"
    "\n"
    "+nisuser:::::::\n"
    "broken:x:1000\n"
    "neg:x:-1:5:n:/neg:/bin/sh\n"
    "big:x:99999999999:5:b:/big:/bin/sh\n"
    "agent:x:1000:1000:Agent,,,:/home/agent:/bin/sh\r\n"
    "agent:x:1001:1001:second:/home/second:/bin/sh\n"
    "twin:x:1000:7:twin:/home/twin:/bin/sh\n"
)


def test_lines_are_parsed_as_the_files_service_does(tmp_path: Path) -> None:
    path = tmp_path / "passwd"
    path.write_text(GOOD)
    assert passwd.lookup(0, str(path)) == passwd.Entry("root", 0, 0, "/root")
    # The first entry for a name or a uid wins; \r\n lines are read like \n ones.
    assert passwd.lookup("agent", str(path)) == passwd.Entry("agent", 1000, 1000, "/home/agent")
    assert passwd.lookup(1000, str(path)) == passwd.Entry("agent", 1000, 1000, "/home/agent")
    assert passwd.lookup("twin", str(path)) == passwd.Entry("twin", 1000, 7, "/home/twin")
    # Comments, NIS lines, short lines and ids that are no uid are skipped.
    for name in ("+nisuser", "broken", "neg", "big", "nobody"):
        assert passwd.lookup(name, str(path)) is None, name
    assert passwd.lookup(1001, str(path)) == passwd.Entry("agent", 1001, 1001, "/home/second")
    assert passwd.lookup(5, str(tmp_path / "missing")) is None


def test_a_link_a_fifo_or_a_huge_file_is_refused_never_followed_or_waited_on(
    tmp_path: Path,
) -> None:
    real = tmp_path / "real"
    real.write_text(GOOD)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(passwd.PasswdError):
        passwd.lookup(0, str(link))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(passwd.PasswdError, match="not a regular file"):
        passwd.lookup(0, str(fifo))  # O_NONBLOCK: no writer, no wait
    huge = tmp_path / "huge"
    with huge.open("w") as out:
        out.write(GOOD)
        out.write("x" * passwd.MAX_BYTES)
    with pytest.raises(passwd.PasswdError, match="larger than"):
        passwd.lookup(0, str(huge))


def test_whois_and_the_seed_source_read_etc_passwd_themselves() -> None:
    """The supervisor's users are this host's /etc/passwd, parsed by passwd.py."""
    root = passwd.lookup(0)
    assert root is not None and root.name == "root"
    assert op_whois({"name": "root"}) == {"uid": 0, "gid": root.gid, "home": root.home}
    assert op_whois({"name": "0"})["home"] == root.home
    unknown = next(u for u in range(61000, 62000) if passwd.lookup(u) is None)
    assert op_whois({"name": str(unknown)}) == {"uid": unknown, "gid": unknown, "home": None}
    with pytest.raises(ValueError, match="does not exist"):
        op_whois({"name": "no-such-user-anywhere"})
    skel = os.path.realpath(SKEL) if os.path.isdir(SKEL) else None
    assert source_home(unknown, []) == skel
