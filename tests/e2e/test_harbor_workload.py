"""The image's own workload under attack-like conditions: it runs as the agent's own uid,
the agent leaves a background process behind, and the phase kill must take the agent's
process and spare the workload (the verifier still reaches it)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from support.docker import docker_client, require_image

pytestmark = pytest.mark.docker

DOCKERFILE = """\
FROM harness/base:bookworm
RUN useradd --uid 2345 svc && mkdir -p /srv && echo up > /srv/status
COPY entry.sh /entry.sh
RUN chmod 755 /entry.sh
USER svc
WORKDIR /app
ENTRYPOINT ["/entry.sh"]
"""
ENTRY = """\
#!/bin/sh
cd /srv && python3 -m http.server 8181 --bind 127.0.0.1 >/dev/null 2>&1 &
exec "$@"
"""
SOLVE = """\
#!/bin/bash
# A background process of the agent's, same uid as the workload: it must not survive.
setsid sleep 600 </dev/null >/dev/null 2>&1 &
echo started > /app/marker
"""
TEST = """\
#!/bin/bash
python3 - <<'PY'
import os, urllib.request
url = "http://127.0.0.1:8181/status"
up = urllib.request.urlopen(url, timeout=5).read().decode().strip()
sleepers = 0
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
    except OSError:
        continue
    sleepers += args[:2] == [b"sleep", b"600"]
print("up", up, "sleepers", sleepers)
ok = up == "up" and sleepers == 0
open("/logs/verifier/reward.txt", "w").write("1" if ok else "0")
PY
"""


def test_the_workload_survives_the_phase_kill_that_takes_the_agents_processes(
    e2e: Any, tmp_path: Path
) -> None:
    require_image(docker_client())
    task = tmp_path / "set" / "workload-uid"
    for rel, text in {
        "task.toml": '[agent]\nuser = "svc"\ntimeout_sec = 30\n[verifier]\ntimeout_sec = 30\n'
        "[environment.healthcheck]\ncommand = \"python3 -c 'import urllib.request; "
        'urllib.request.urlopen(\\"http://127.0.0.1:8181/status\\", timeout=2)\'"\n'
        "interval_sec = 0.5\nstart_period_sec = 10\nstart_interval_sec = 0.2\n",
        "instruction.md": "Start whatever you like.\n",
        "environment/Dockerfile": DOCKERFILE,
        "environment/entry.sh": ENTRY,
        "solution/solve.sh": SOLVE,
        "tests/test.sh": TEST,
    }.items():
        (task / rel).parent.mkdir(parents=True, exist_ok=True)
        (task / rel).write_text(text)
    out = tmp_path / "runs"
    result = e2e.run(
        "run",
        task,
        "--sandbox",
        "docker",
        "--agent",
        "oracle",
        "-o",
        out,
        "--display",
        "none",
        timeout=300,
    )
    (record,) = e2e.read_run(e2e.only_run_dir(out)).records
    assert result.code == 0 and record["reward"] == 1.0, (result, record)
    assert record["sandbox"]["workload"]["uid"] == record["sandbox"]["uid"] == 2345
    survivors = [e for e in record["events"] if e["type"] == "survivors"]
    assert survivors and all(p["uid"] == 2345 for p in survivors[0]["processes"]), survivors
    assert not any("http.server" in p["cmdline"] for e in survivors for p in e["processes"])
    # The task says nothing of its network: Harbor's default, public, recorded as not
    # declared, on the filtered network (as root, where the filter can be installed; else
    # the run gives it no-network and says so).
    filtered = os.geteuid() == 0
    network = {"mode": "public" if filtered else "no-network", "declared": False}
    assert record["posture"]["network"] == network == record["verifier_posture"]["network"]
    assert record["sandbox"]["network"] == ("hx-egress" if filtered else "none"), record["sandbox"]
