"""Red team: a service the agent kept (``--agent-services keep``) gets the verifier's network.

The agent phase is ``no-network``; the verifier phase is ``public`` (a Terminal-Bench 2
test.sh that installs its tools). ``TrialNetwork.switch`` assumes every process of the
previous phase is dead when the next phase's network is set; a kept service is not, so once
it is continued beside the verifier it has the internet the agent phase was refused. It
fetches a public page and hands it back on the verifier's own connection (as it would
hand out what the tests sent it: hidden test inputs, to anyone on the internet).

Judged from outside: the agent phase itself reached nothing (its probe is in the
workspace), yet the run dir holds the page's content, which only the internet had.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.kept_servers import (
    KEEP,
    LISTEN,
    PORT,
    add_collect_hook,
    completed_on_attempt_1,
    kept_task,
    offline_agent_public_verifier,
    oracle_task,
    read_answer,
    start_server,
)

MIRROR = "http://deb.debian.org/debian/dists/bookworm/Release"
#: A line the Release file has, and no file of the harness or the task.
PAGE_MARK = "Origin: Debian"

SERVER = (
    r"""
import socket, sys, urllib.request

def fetch():
    try:
        with urllib.request.urlopen(sys.argv[2], timeout=10) as answer:
            return answer.read(400).decode("utf-8", "replace")
    except Exception as exc:
        return "no internet: %s" % type(exc).__name__
"""
    + LISTEN
    + r"""while True:
    c, _ = s.accept()
    c.sendall(fetch().encode())
    c.close()
"""
)

AGENT = f"""
python3 -c "
import urllib.request
try:
    urllib.request.urlopen('{MIRROR}', timeout=5); print('agent phase: REACHED')
except Exception as exc:
    print('agent phase: no internet', type(exc).__name__)
" > /app/agent_probe.txt 2>&1
{start_server("server", SERVER, MIRROR)}"""

TEST = (
    "echo 0 > /logs/verifier/reward.txt\n"
    + read_answer("/logs/verifier/from_service.txt")
    + "exit 0\n"
)


@pytest.mark.docker
def test_a_kept_service_never_gets_more_network_than_the_agent_phase(
    cli: Any, sec: Any, tmp_path: Path
) -> None:
    task = kept_task(sec, tmp_path / "tasks", "rt-keep-net", attack=AGENT, test_sh=TEST)
    offline_agent_public_verifier(task)
    run = cli.run([task], extra=KEEP, timeout=300)
    record = completed_on_attempt_1(run)
    evidence = run.evidence(record)
    probe = (evidence / "workspace" / "agent_probe.txt").read_text()
    assert "agent phase: no internet" in probe, probe  # the agent phase was closed
    # Fixed by dropping the services before a wider verifier: none alive beside it.
    assert record.get("agent_processes_alive") == [], record
    got = (evidence / "verifier" / "from_service.txt").read_text()
    # The break: the agent's own process fetched a page from the internet during grading.
    assert PAGE_MARK not in got, got
    assert sec.files_containing(run.run_dir, PAGE_MARK) == [], "the internet reached the agent"


#: A kept server that, once the verifier runs, fills the container's memory with many small
#: processes (each smaller than the supervisor), so the kernel's OOM killer picks someone
#: else than its biggest: the supervisor or the verifier.
HOG = (
    "import os, socket, sys, time\n"
    + LISTEN
    + r"""for _ in range(2):  # the agent's own readiness probe, then the verifier's client
    c, _ = s.accept()
    c.sendall(b"hello\n")
    c.close()
for _ in range(200):
    if os.fork() == 0:
        try:
            block = bytearray(6 << 20)
            for i in range(0, len(block), 4096):
                block[i] = 1
        except MemoryError:
            pass
        time.sleep(1000)
        os._exit(0)
time.sleep(1000)
"""
)

HOG_AGENT = start_server("hog", HOG)

#: Honest verdict 0 (no answer.txt); the tests talk to the service, then take their time.
HOG_TEST = f"""
echo 0 > /logs/verifier/reward.txt
python3 -c "import socket; socket.create_connection(('127.0.0.1', {PORT})).recv(10)"
for i in $(seq 1 40); do python3 -c "x = bytearray(30 << 20)" ; sleep 0.2; done
test -f /app/answer.txt && echo 1 > /logs/verifier/reward.txt
exit 0
"""


@pytest.mark.docker
def test_a_kept_service_filling_memory_leaves_its_trial_graded_on_attempt_1(
    cli: Any, sec: Any, tmp_path: Path
) -> None:
    task = kept_task(
        sec,
        tmp_path / "tasks",
        "rt-keep-oom",
        attack=HOG_AGENT,
        test_sh=HOG_TEST,
        verifier_timeout=120,
    )
    run = cli.run([task], extra=KEEP, timeout=400)
    assert len(run.records) == 1, str(run)
    record = run.records[0]
    assert record["attempt"] == 1 and record.get("previous_attempts") == [], str(run)
    assert record["status"] in ("completed", "verifier_error"), str(run)
    assert record["reward"] in (0.0, None), str(run)


@pytest.mark.docker
def test_a_main_collect_hook_leaves_the_kept_services_to_the_tests(
    cli: Any, sec: Any, tmp_path: Path
) -> None:
    """Schema 1.4's main hook is a verifier-role phase: the services must outlive it."""
    task = oracle_task(sec, tmp_path / "tasks", "rt-keep-hook")
    add_collect_hook(task, "true")
    run = cli.run([task], agent="oracle", extra=KEEP, timeout=300)
    record = completed_on_attempt_1(run)
    assert record["reward"] == 1.0, str(run)
