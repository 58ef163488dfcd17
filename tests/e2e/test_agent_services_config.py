"""End-to-end: ``sandbox.agent_services = "keep"`` from a config file, on runc and gVisor.

A Harbor-style task whose oracle serves a file with ``python3 -m http.server`` in the
background (its output left on the phase's pipes) and whose ``test.sh`` fetches it: the
run's ``config.toml`` keeps the option, the record lists the server, the reward is 1;
``--agent-services kill`` on the command line overrides the file, and the reward is 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.docker import docker_client, require_image

pytestmark = pytest.mark.docker

PORT = 8321
SOLVE = f"""#!/bin/bash
mkdir -p /app/site && echo "served by the agent" > /app/site/index.txt
cd /app/site && python3 -m http.server {PORT} &
until python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:{PORT}/')" 2>/dev/null
do sleep 0.1; done
"""
TEST_SH = f"""#!/bin/bash
python3 - <<'EOF'
import urllib.request
try:
    body = urllib.request.urlopen("http://127.0.0.1:{PORT}/index.txt", timeout=10).read()
    ok = body.strip() == b"served by the agent"
except OSError as exc:
    print("no answer:", repr(exc))
    ok = False
open("/logs/verifier/reward.txt", "w").write("1" if ok else "0")
EOF
"""


@pytest.mark.parametrize("runtime", ["runc", "runsc"])
def test_a_config_file_keeps_the_oracles_http_server_for_the_tests(
    e2e: Any, tmp_path: Path, runtime: str
) -> None:
    client = docker_client()
    require_image(client)
    if runtime not in (client.info().get("Runtimes") or {}):
        from support.docker import unavailable

        unavailable(f"runtime {runtime} is not registered (docker/start-engine.sh does it)")
    task = e2e.make_task(
        tmp_path / "tasks",
        "http-server",
        test_sh=TEST_SH,
        solve_sh=SOLVE,
        toml='[task]\nname = "e2e/http-server"\n\n[agent]\ntimeout_sec = 60\n',
    )
    config = tmp_path / "run.toml"
    config.write_text(
        f'[sandbox]\nbackend = "docker"\nruntime = "{runtime}"\nagent_services = "keep"\n'
    )
    out = tmp_path / "runs"
    result = e2e.run("run", task, "-c", config, "--agent", "oracle", "-o", out, timeout=300)
    assert result.code == 0, result
    run = e2e.read_run(e2e.only_run_dir(out))
    assert run.config["run"]["sandbox"]["agent_services"] == "keep"
    (record,) = run.records
    assert record["reward"] == 1.0 and record["attempt"] == 1, record
    alive = record["agent_processes_alive"]
    assert [p["listening"] for p in alive] == [[f"tcp:0.0.0.0:{PORT}"]], alive
    assert run.summary["agent_services"] == {"verdicts": 1}

    again = tmp_path / "again"
    result = e2e.run(
        "run",
        task,
        "-c",
        config,
        "--agent",
        "oracle",
        "--agent-services",
        "kill",
        "-o",
        again,
        timeout=300,
    )
    assert result.code in (0, 1), result
    run = e2e.read_run(e2e.only_run_dir(again))
    (record,) = run.records
    assert record["reward"] == 0.0 and "agent_processes_alive" not in record, record
    assert run.config["run"]["sandbox"]["agent_services"] == "kill"
