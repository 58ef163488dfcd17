"""Red team: what the Landlock wall changes for an ordinary root agent whose services are kept.

``--agent-root allow --agent-services keep`` on runc walls every process of the agent phase
in a Landlock domain, not only the services kept. A root agent's usual setup work must still
run inside it (docs/security.md, "A root agent's kept services: the Landlock wall", names
what does not: a new entry directly in ``/``): add a user, write ``/etc``, build and install
a package with ``dpkg`` (its maintainer script as root), chown and chmod in the image, make
dirs below existing entries of ``/``, write its home and artifacts. Judged from outside: each
operation's outcome, as the agent saw it, reaches the verifier's evidence; the trial is
completed on attempt 1 with reward 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.kept_servers import AS_ROOT, kept_task, run_walled

#: Each operation prints ``NAME: ok`` or ``NAME: failed``.
OPS_AGENT = (
    AS_ROOT
    + r"""
out=/app/ops.txt
op() {
  name=$1; shift
  if "$@" >/dev/null 2>&1; then echo "$name: ok"; else echo "$name: failed"; fi >> "$out"
}
op useradd useradd -m rt2user
op write-etc sh -c 'echo x > /etc/rt2.conf'
op mkdir-usr-local mkdir -p /usr/local/share/rt2/deep
op chown-opt sh -c 'mkdir -p /opt/rt2 && chown rt2user /opt/rt2 && chmod 0750 /opt/rt2'
op home sh -c 'echo x > "$HOME/rt2" && echo x > /root/rt2'
op artifacts sh -c 'mkdir -p /logs/artifacts/rt2 && echo x > /logs/artifacts/rt2/f'
op agent-logs sh -c 'echo x > /logs/agent/rt2'
op var-lib sh -c 'mkdir -p /var/lib/rt2 && echo x > /var/lib/rt2/state'
op tmp sh -c 'echo x > /tmp/rt2 && mv /tmp/rt2 /var/tmp/rt2'
op cross-dir-rename sh -c 'echo x > /tmp/rt2b && mv /tmp/rt2b /usr/local/share/rt2/moved'
op hard-link ln /usr/local/share/rt2/moved /usr/local/share/rt2/linked
op build-deb sh -c '
  d=$(mktemp -d) && mkdir -p "$d/DEBIAN" "$d/usr/share/rt2pkg" &&
  printf "Package: rt2pkg\nVersion: 1.0\nArchitecture: all\n" > "$d/DEBIAN/control" &&
  printf "Maintainer: x <x@x>\nDescription: x\n" >> "$d/DEBIAN/control" &&
  printf "#!/bin/sh\necho post > /etc/rt2pkg.conf\n" > "$d/DEBIAN/postinst" &&
  chmod 0755 "$d/DEBIAN/postinst" &&
  echo data > "$d/usr/share/rt2pkg/data" && dpkg-deb --build "$d" /tmp/rt2pkg.deb'
op dpkg-install dpkg -i /tmp/rt2pkg.deb
op postinst-ran test -f /etc/rt2pkg.conf
op su-to-user su rt2user -s /bin/sh -c 'id -u'
op new-root-entry mkdir /rt2top
exit 0
"""
)

OPS_TEST = """
mkdir -p /logs/verifier
cp /app/ops.txt /logs/verifier/ops.txt
echo 1 > /logs/verifier/reward.txt
"""

#: Every operation but a new entry of ``/`` (the wall's documented difference).
EXPECTED = {
    "useradd": "ok",
    "write-etc": "ok",
    "mkdir-usr-local": "ok",
    "chown-opt": "ok",
    "home": "ok",
    "artifacts": "ok",
    "agent-logs": "ok",
    "var-lib": "ok",
    "tmp": "ok",
    "cross-dir-rename": "ok",
    "hard-link": "ok",
    "build-deb": "ok",
    "dpkg-install": "ok",
    "postinst-ran": "ok",
    "su-to-user": "ok",
    "new-root-entry": "failed",
}


@pytest.mark.docker
def test_a_walled_root_agent_still_does_its_setup_work(
    cli: Any, sec: Any, tmp_path: Path, docker_runtime: str | None
) -> None:
    task = kept_task(
        sec,
        tmp_path / "tasks",
        "keep-root-ops",
        attack=OPS_AGENT,
        test_sh=OPS_TEST,
        agent_timeout=60,
    )
    walled = run_walled(cli, task, docker_runtime)
    if walled is None:
        return  # gVisor: refused before anything ran
    run, record = walled
    ops = (run.evidence(record) / "verifier" / "ops.txt").read_text()
    seen = dict(line.split(": ", 1) for line in ops.splitlines() if ": " in line)
    assert seen == EXPECTED, ops
    assert record["reward"] == 1.0, str(run)
