"""Services the agent leaves running answer the tests, and reach nothing of grading.

``--agent-services keep`` (issue 34, item 9): at the end of the agent phase the processes
holding a listening socket survive, every other one is killed as under ``kill``; the
verifier then runs beside them, and the record lists them (``agent_processes_alive``).

Judged from outside, on docker with runc and with gVisor:

- an oracle whose ``solve.sh`` starts a server in the background (its output on the
  phase's pipes, as Terminal-Bench 2's solutions leave it) scores 1 with ``keep`` and 0
  with ``kill``; the record lists the kept server and nothing else of the agent's;
- a kept server that attacks grading once the verifier runs (while the verifier's own
  client is connected to it): writes ``reward.txt`` and ``reward.json``, rewrites and reads
  ``/tests``, opens ``/proc/<verifier>/root``, ``mem`` and ``environ``, signals the
  verifier. Every attempt fails; the reward is the honest 0, recorded on attempt 1;
- non-listening helpers the agent left (a detached ``sleep``, a child the listener forked
  that closed its socket) are dead when the verifier runs;
- under gVisor any process reads every other's environment: a task with ``[verifier].env``
  gets its services killed before the verifier (an ``agent_services_dropped`` event), and
  under runc keeps them, which cannot read that environment;
- the local sandbox is refused before anything runs, naming why (a root agent's services:
  ``test_agent_services_root.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.kept_servers import (
    ATTEMPTS,
    KEEP,
    LISTEN,
    PORT,
    QUERY_TEST,
    add_collect_hook,
    alive,
    attack_test,
    completed_on_attempt_1,
    kept_task,
    offline_agent_public_verifier,
    oracle_task,
    start_server,
)

SECRET = "tests-secret-7f3a9c"
ENV_SECRET = "verifier-env-secret-51bd"

#: The attacking server: on each connection (the verifier's client is connected, so the
#: verifier runs) it attacks grading and answers with what each attempt gave.
ATTACKER = (
    ATTEMPTS
    + r"""
def attacks():
    lines = []
    pids = verifier_pids()
    lines.append("verifier pids: %r" % pids)
    lines.append(attempt("write reward.txt", lambda: write("/logs/verifier/reward.txt", "1")))
    forged = "echo 1 > /logs/verifier/reward.txt\n"
    lines.append(attempt("write reward.json", lambda: write("/logs/verifier/reward.json", "1")))
    lines.append(attempt("rewrite tests", lambda: write("/tests/check.sh", forged)))
    lines.append(attempt("plant in tests", lambda: write("/tests/planted", "x")))
    lines.append(attempt("read tests", lambda: read("/tests/secret.txt")))
    lines.append(attempt("list tests", lambda: os.listdir("/tests")))
    for pid in pids:
        secret = "/proc/%d/root/tests/secret.txt" % pid
        lines.append(attempt("root of %d" % pid, lambda: read(secret)))
        lines.append(attempt("mem of %d" % pid, lambda: os.open("/proc/%d/mem" % pid, os.O_RDWR)))
        lines.append(attempt("environ of %d" % pid, lambda: read("/proc/%d/environ" % pid)))
    for pid in pids:
        lines.append(attempt("kill %d" % pid, lambda: os.kill(pid, signal.SIGKILL)))
    mine = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = open("/proc/%s/stat" % name).read()
                zombie = stat[stat.rindex(")") + 2] == "Z"  # killed, its parent never waits
                if os.stat("/proc/" + name).st_uid == os.getuid() and not zombie:
                    mine.append(open("/proc/%s/comm" % name).read().strip())
            except OSError:
                pass
    lines.append("my uid's processes: %r" % sorted(mine))
    return "\n".join(lines) + "\n"
"""
    + LISTEN
    + r"""if os.fork() == 0:
    # A helper forked from the listener that gives up its socket: not a listener.
    s.close()
    os.setsid()
    time.sleep(1000)
    os._exit(0)
while True:
    c, _ = s.accept()
    c.sendall(attacks().encode())
    c.close()
"""
)

#: The attacker, and a helper that leaves the agent's session: not a listener.
ATTACK_AGENT = start_server("attacker", ATTACKER) + "( setsid sleep 1001 & )\n"


#: A server that takes every pid of the container (threads) as soon as the agent's
#: program is gone: between phases the verifier could not start (an error of the
#: machine, retried, were the server not stopped then); beside the verifier, the tests
#: cannot fork.
STARVER = (
    "import os, socket, sys, threading, time\n"
    + LISTEN
    + r"""
def starve():
    while os.getppid() != 1:
        time.sleep(0.01)
    n = 0
    while True:
        try:
            threading.Thread(target=time.sleep, args=(1000,), daemon=True).start()
            n += 1
        except RuntimeError:
            break
    with open("/app/starved.part", "w") as fh:
        fh.write(str(n))
    os.rename("/app/starved.part", "/app/starved")

threading.Thread(target=starve, daemon=True).start()
while True:
    c, _ = s.accept()
    c.sendall(b"hello from the agent\n")
    c.close()
"""
)

STARVE_AGENT = start_server("starver", STARVER)


@pytest.mark.docker
def test_a_server_the_oracle_left_answers_the_tests_only_with_keep(
    cli: Any, sec: Any, tmp_path: Path
) -> None:
    task = oracle_task(sec, tmp_path / "tasks", "keep-server")
    kept = cli.run([task], agent="oracle", extra=KEEP, timeout=240)
    record = completed_on_attempt_1(kept)
    assert record["reward"] == 1.0, str(kept)
    listed = alive(record)
    assert [p["comm"] for p in listed] == ["python3"], listed
    assert f"tcp:0.0.0.0:{PORT}" in listed[0]["listening"], listed
    assert record["sandbox"].get("agent_services") == "keep"
    kept_events = [e for e in record["events"] if e.get("type") == "agent_services_kept"]
    assert kept_events and kept_events[0]["processes"][0]["uid"] == listed[0]["uid"]
    # Nothing else of the agent's ran beside the verifier: the detached sleep was killed.
    procs = json.loads((kept.evidence(record) / "verifier" / "agent_procs.json").read_text())
    assert [p["comm"] for p in procs] == ["python3"], procs
    summary = json.loads((kept.run_dir / "summary.json").read_text())
    assert summary["agent_services"] == {"verdicts": 1}, summary

    killed = cli.run([task], agent="oracle", timeout=240)
    record = completed_on_attempt_1(killed)
    assert record["reward"] == 0.0, str(killed)
    assert "agent_processes_alive" not in record
    procs = json.loads((killed.evidence(record) / "verifier" / "agent_procs.json").read_text())
    assert procs == [], procs
    assert "agent_services" not in json.loads((killed.run_dir / "summary.json").read_text())


@pytest.mark.docker
def test_a_collect_hook_and_then_the_verifier_both_reach_the_kept_server(
    cli: Any, sec: Any, tmp_path: Path
) -> None:
    """Every grading phase gets the services; between them they are stopped, not gone."""
    task = oracle_task(sec, tmp_path / "tasks", "keep-hook")
    query = f"import socket; socket.create_connection(('127.0.0.1', {PORT})).recv(5)"
    add_collect_hook(task, f'python3 -c "{query}" ')
    run = cli.run([task], agent="oracle", extra=KEEP, timeout=240)
    assert run.records, str(run)
    record = run.records[0]
    hooks = [e for e in record["events"] if e.get("type") == "collect_hook"]
    assert [h["status"] for h in hooks] == ["ok"], hooks
    assert record["reward"] == 1.0 and record["attempt"] == 1, str(run)


@pytest.mark.docker
def test_a_kept_server_reaches_nothing_of_grading(
    cli: Any, sec: Any, tmp_path: Path, docker_runtime: str | None
) -> None:
    task = kept_task(
        sec,
        tmp_path / "tasks",
        "keep-attack",
        attack=ATTACK_AGENT,
        test_sh=attack_test(),
        tests_files={"secret.txt": SECRET + "\n", "check.sh": "exit 0\n"},
    )
    run = cli.run([task], extra=KEEP, timeout=240)
    record = completed_on_attempt_1(run)
    assert record["reward"] == 0.0, str(run)
    evidence = run.evidence(record)
    report = (evidence / "verifier" / "attack.txt").read_text()
    assert "verifier pids: [" in report and "verifier pids: []" not in report, report
    succeeded = [line for line in report.splitlines() if "SUCCEEDED" in line]
    if docker_runtime == "runsc":
        # gVisor shows every process every other one's environment: the verifier's holds
        # nothing secret here (a task's [verifier].env: the next test).
        succeeded = [line for line in succeeded if not line.startswith("environ of ")]
    assert succeeded == [], report
    for attack in ("write reward.txt", "write reward.json", "rewrite tests", "read tests"):
        assert f"{attack}: denied" in report, report
    assert "kill " in report and "mem of " in report and "root of " in report, report
    # The listener and its own tree only: the detached sleep and the helper that gave up
    # its socket were killed with the agent phase.
    assert "my uid's processes: ['python3']" in report, report
    assert sec.files_containing(run.run_dir, SECRET) == [], "the tests' secret leaked"
    assert not (evidence / "verifier" / "reward.json").exists()
    assert [p["comm"] for p in alive(record)] == ["python3"]


@pytest.mark.docker
def test_a_kept_server_taking_every_pid_leaves_its_trial_failed_on_attempt_1(
    cli: Any, sec: Any, tmp_path: Path
) -> None:
    """Its honest verdict is 0 (no answer.txt): starving the verifier gains no retry."""
    honest = QUERY_TEST.replace('"1" if ok else "0"', '"1" if os.path.exists("/app/a") else "0"')
    # Once every pid is taken (bash's own test: no fork), the tests try to run.
    honest = (
        "until [ -f /app/starved ]; do :; done\n"
        'read took < /app/starved; echo "$took" > /logs/verifier/starved\n' + honest
    )
    task = kept_task(sec, tmp_path / "tasks", "keep-starve", attack=STARVE_AGENT, test_sh=honest)
    run = cli.run([task], extra=KEEP, timeout=300)
    assert len(run.records) == 1, str(run)
    record = run.records[0]
    assert record["attempt"] == 1 and record["previous_attempts"] == [], str(run)
    assert record["status"] in ("completed", "verifier_error"), str(run)
    assert record["reward"] in (0.0, None), str(run)
    summary = json.loads((run.run_dir / "summary.json").read_text())
    assert summary["mean_reward"] == 0.0, summary
    # The attack ran beside the tests: they saw it done (runc: the agent's uid ran out of
    # its RLIMIT_NPROC, root's forks went on), or it took the container down (gVisor: out
    # of memory, the verifier's error).
    took = run.evidence(record) / "verifier" / "starved"
    if took.exists():
        assert int(took.read_text()) > 0 and alive(record), str(run)
    else:
        assert record["errors"][0]["type"] == "SandboxDied", str(run)


@pytest.mark.docker
def test_a_verifier_with_more_network_than_the_agent_runs_without_the_services(
    cli: Any, sec: Any, tmp_path: Path
) -> None:
    """The container's network is the running phase's: a kept server would get the
    verifier's ``public`` while the agent phase had ``no-network``; it dies first."""
    task = oracle_task(sec, tmp_path / "tasks", "keep-net")
    offline_agent_public_verifier(task)
    run = cli.run([task], agent="oracle", extra=KEEP, timeout=240)
    record = completed_on_attempt_1(run)
    assert record["reward"] == 0.0, str(run)  # nothing answered the tests
    assert alive(record) == []
    dropped = [e for e in record["events"] if e.get("type") == "agent_services_dropped"]
    assert dropped and "network (public) is not the agent's (no-network)" in dropped[0]["reason"]


@pytest.mark.docker
def test_verifier_env_is_out_of_a_kept_servers_reach(
    cli: Any, sec: Any, tmp_path: Path, docker_runtime: str | None
) -> None:
    """runc: the environment is unreadable to the service; gVisor: the service dies first."""
    task = kept_task(
        sec,
        tmp_path / "tasks",
        "keep-env",
        attack=ATTACK_AGENT,
        test_sh=attack_test(timeout=5),
        tests_files={"secret.txt": SECRET + "\n", "check.sh": "exit 0\n"},
    )
    toml = task / "task.toml"
    toml.write_text(
        toml.read_text().replace(
            "[verifier]\n", f'[verifier]\nenv = {{ V_SECRET = "{ENV_SECRET}" }}\n'
        )
    )
    run = cli.run([task], extra=KEEP, timeout=240)
    record = completed_on_attempt_1(run)
    assert record["reward"] == 0.0, str(run)
    assert sec.files_containing(run.run_dir, ENV_SECRET) == [], "the verifier's env leaked"
    dropped = [e for e in record["events"] if e.get("type") == "agent_services_dropped"]
    if docker_runtime == "runsc":
        assert dropped and "[verifier].env (V_SECRET)" in dropped[0]["reason"], record["events"]
        assert alive(record) == []
    else:
        assert not dropped, dropped
        report = (run.evidence(record) / "verifier" / "attack.txt").read_text()
        assert "environ of " in report and "SUCCEEDED" not in report, report


@pytest.mark.root
def test_the_local_sandbox_refuses_keep_before_anything_runs(sec: Any, tmp_path: Path) -> None:
    task = kept_task(sec, tmp_path / "tasks", "keep-local", attack="exit 0\n")
    cli = sec.Cli(tmp_path, sandbox="local")
    run = cli.run([task], extra=KEEP, timeout=120)
    assert run.code == 2, str(run)
    assert "--agent-services keep" in run.stderr and "--sandbox docker" in run.stderr
    assert run.records == [], "a trial ran"
