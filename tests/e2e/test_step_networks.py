"""Per-step network policies of a multi-step task on real docker, as an attack.

One trial of a three-step task, run by ``harness run --sandbox docker`` with the oracle
(each step's ``solution/solve.sh`` is that step's agent phase), under gVisor
(``--runtime runsc``: its ``runsc-net`` sibling), then again under runc with ``--network
none``:

- step ``one``: a ``no-network`` agent (the environment's) tries a "public-like" server
  (an address routed to a network namespace the test makes, tests/support/netns.py) and
  the host's own addresses; its ``public`` verifier (the step's own table) reaches it;
- step ``two``: a ``public`` agent reaches the public-like server and never the host (a
  listener on every host address), then leaves a process behind that keeps trying (it
  reached the server while its phase was public: the control), and that waits for step
  three's files to send a token of its own; its verifier is ``no-network`` again;
- step ``three``: an ``allowlist`` agent (only the public-like address, by its IP) reaches
  it through the trial's egress proxy, never directly; its verifier is ``no-network`` and
  tries everything too.

Judged from outside: what the servers received, the record's per-step policies, the
survivor and refusal events, and the run's one line naming the task's online steps. Run
again with ``--network none``: step two's and three's agents get no internet either (nor
the leftover), step one's verifier keeps its own, and the run prints no such line.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest
from conftest import read_run_dir, start_cli
from support.docker import docker_client, require_image, unavailable
from support.net import Listener, interface_ipv4, primary_addresses
from support.netns import PublicNet

pytestmark = [pytest.mark.docker, pytest.mark.root]

#: Connects to every ``host:port`` given (``GW``: the container's default gateway), sending
#: ``<token> <target>``; prints one JSON line.
PROBE = r"""
import json, socket, struct, sys, threading
token, targets, out = sys.argv[1], sys.argv[2:], {}
def gateway():
    for line in open("/proc/net/route").read().splitlines()[1:]:
        fields = line.split()
        if fields[1] == "00000000":
            return socket.inet_ntoa(struct.pack("<L", int(fields[2], 16)))
    return "0.0.0.0"
def attack(target):
    host, _, port = target.rpartition(":")
    host = gateway() if host == "GW" else host
    try:
        s = socket.create_connection((host, int(port)), timeout=3)
        s.sendall(("GET /%s HTTP/1.0\r\nX-Token: %s %s\r\n\r\n" % (token, token, target)).encode())
        try:
            s.settimeout(3); s.recv(200)
        except OSError:
            pass
        s.close()
        out[target] = "CONNECTED"
    except OSError as exc:
        out[target] = "%s: %s" % (type(exc).__name__, exc)
threads = [threading.Thread(target=attack, args=(t,)) for t in targets]
for t in threads: t.start()
for t in threads: t.join()
print("PROBE " + json.dumps(out))
"""

TASK_TOML = """[task]
name = "e2e/stepnet"
[agent]
timeout_sec = 90
[verifier]
timeout_sec = 90
[environment]
network_mode = "no-network"

[[steps]]
name = "one"
[steps.verifier]
network_mode = "public"

[[steps]]
name = "two"
[steps.agent]
network_mode = "public"

[[steps]]
name = "three"
[steps.agent]
network_mode = "allowlist"
allowed_hosts = ["{address}"]
"""

#: Every step's agent: probe, keep the result in the workspace for the step's verifier.
SOLVE = """#!/bin/bash
python3 "$HARNESS_WORKSPACE/probe.py" {token} {targets} > "$HARNESS_WORKSPACE/agent-{step}.txt"
"""

#: Step three's agent also asks for the public-like server through the proxy its phase's
#: environment names (HTTP_PROXY), as any tool honouring it would.
PROXIED = """get='import sys, urllib.request as u; print(u.urlopen(sys.argv[1], timeout=9).read())'
python3 -c "$get" http://{address}/{token} >> "$HARNESS_WORKSPACE/agent-three.txt" 2>&1 || true
"""

#: Step two's agent also leaves a process behind: it probes the public-like server while
#: the phase is public (LEFT2, the control that it ran), then waits for step three's files
#: and probes again (LEFT3: it must never get out).
LEAVE = """
cat > "$HARNESS_WORKSPACE/leftover.sh" <<'SH'
while :; do
  if [ -e "$HARNESS_WORKSPACE/step-three.marker" ]; then
    python3 "$HARNESS_WORKSPACE/probe.py" {late} {public} >> "$HARNESS_WORKSPACE/late.txt"
  else
    python3 "$HARNESS_WORKSPACE/probe.py" {early} {public} > "$HARNESS_WORKSPACE/early.txt"
  fi
  sleep 0.3
done
SH
setsid bash "$HARNESS_WORKSPACE/leftover.sh" </dev/null >/dev/null 2>&1 &
for i in $(seq 100); do  # until it probed once (public: reached; --network none: not)
  grep -q PROBE "$HARNESS_WORKSPACE/early.txt" 2>/dev/null && break
  sleep 0.2
done
"""

#: Every step's verifier: keep the agent's probe, probe itself, reward 1.
TEST = """#!/bin/bash
cp "$HARNESS_WORKSPACE/agent-{step}.txt" "$HARNESS_VERIFIER_DIR/agent-probe.txt"
python3 "$HARNESS_WORKSPACE/probe.py" {token} {targets} > "$HARNESS_VERIFIER_DIR/probe.txt"
echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"
"""


def make_task(root: Path, tokens: dict[str, str], targets: list[str], public: str) -> Path:
    task = root / "stepnet"
    (task / "workspace").mkdir(parents=True)
    address = public.rpartition(":")[0]
    (task / "task.toml").write_text(TASK_TOML.format(address=address))
    (task / "workspace" / "probe.py").write_text(PROBE)
    shown = " ".join(targets)
    for step in ("one", "two", "three"):
        base = task / "steps" / step
        for sub in ("solution", "tests", "workdir"):
            (base / sub).mkdir(parents=True)
        (base / "instruction.md").write_text(f"Step {step}.\n")
        solve = SOLVE.format(token=tokens[f"agent-{step}"], targets=shown, step=step)
        if step == "two":
            solve += LEAVE.format(late=tokens["late"], early=tokens["early"], public=public)
        if step == "three":
            solve += PROXIED.format(address=address, token=tokens["proxied"])
        (base / "solution" / "solve.sh").write_text(solve)
        test = TEST.format(token=tokens[f"verifier-{step}"], targets=shown, step=step)
        (base / "tests" / "test.sh").write_text(test)
        (base / "workdir" / f"step-{step}.marker").write_text(step + "\n")
    return task


def probe(path: Path) -> dict[str, str]:
    lines = [line for line in path.read_text().splitlines() if line.startswith("PROBE ")]
    assert lines, path.read_text()
    result: dict[str, str] = json.loads(lines[-1][len("PROBE ") :])
    return result


@pytest.mark.parametrize(
    ("network", "runtime"), [("task", "runsc"), ("none", "runc")], ids=["task-runsc", "none-runc"]
)
def test_each_step_gets_its_own_network_and_a_leftover_never_gets_the_next_ones(
    tmp_path: Path, network: str, runtime: str
) -> None:
    """``--network task``: the task's policies (under gVisor); ``--network none`` (under
    runc): no agent phase of any step gets the internet (step two's and three's included),
    the verifiers keep theirs."""
    online = network == "task"
    client = docker_client()
    require_image(client)
    runtimes = set(client.info().get("Runtimes") or {})
    if runtime == "runsc" and not {"runsc", "runsc-net"} <= runtimes:
        unavailable("runtimes runsc and runsc-net are not registered (docker/start-engine.sh)")
    names = [f"{r}-{s}" for r in ("agent", "verifier") for s in ("one", "two", "three")]
    extra = ["early", "late", "proxied"]
    tokens = {name: f"{name}-{secrets.token_hex(6)}" for name in [*names, *extra]}
    own = [interface_ipv4("docker0") or "172.17.0.1", primary_addresses()["ipv4"]]
    with Listener(ipv6=True) as host, PublicNet(tmp_path) as net:
        address = net.route()
        public = f"{address}:80"
        host_targets = [f"{a}:{host.port}" for a in ["GW", *own]]
        task = make_task(tmp_path / "tasks", tokens, [public, *host_targets], public)
        out = tmp_path / "runs"
        running = start_cli(
            "run", task, "--agent", "oracle", "--sandbox", "docker", "-o", out,
            "--run-name", "stepnet", "--display", "plain", "--network", network,
            *(["--runtime", runtime] if runtime != "runc" else []),
        )  # fmt: skip
        result = running.wait(900)
        seen = net.seen()
        host_got = b"\n".join(data for _kind, _peer, data in host.received).decode()
    output = result.stdout + result.stderr
    assert result.code == 0, output
    # The run's one line names the task and the steps whose agent gets the internet.
    line = (
        "the agent phase of 1 task(s) reaches the internet: e2e/stepnet (two: public; "
        f"three: allowlist: {address})"
    )
    assert (line in output) is online and ("reaches the internet" in output) is online, output
    run = read_run_dir(out / "stepnet")
    (record,) = run.records
    assert record["status"] == "completed" and record["reward"] == 1.0, record
    # From outside: only step one's verifier, step two's agent and its leftover while
    # that phase was public, and step three's agent through its proxy got out; nothing of
    # step one's agent, two's verifier, three's verifier, nor three's agent directly.
    reached = {name for name, token in tokens.items() if token in seen}
    expected = {"verifier-one", "agent-two", "early", "proxied"} if online else {"verifier-one"}
    assert reached == expected, (reached, seen)
    assert not [t for t in tokens.values() if t in host_got], f"the host was reached: {host_got}"
    # The probes' own view, kept by each step's verifier.
    evidence = run.evidence(record)
    for step in ("one", "two", "three"):
        verifier = evidence / "steps" / step / "verifier"
        agent_probe, verifier_probe = (
            probe(verifier / "agent-probe.txt"),
            probe(verifier / "probe.txt"),
        )
        assert (agent_probe[public] == "CONNECTED") is (online and step == "two"), agent_probe
        assert (verifier_probe[public] == "CONNECTED") is (step == "one"), (step, verifier_probe)
        for view in (agent_probe, verifier_probe):
            assert not [t for t in host_targets if view[t] == "CONNECTED"], (step, view)
    # The record: each step's phases' policies; the old fields are the first step's.
    modes = [
        (s["network"]["agent"]["mode"], s["network"]["verifier"]["mode"]) for s in record["steps"]
    ]
    two = "public" if online else "no-network"
    three = "allowlist" if online else "no-network"
    assert modes == [("no-network", "public"), (two, "no-network"), (three, "no-network")]
    assert record["posture"]["network"]["mode"] == "no-network", record["posture"]
    assert record["verifier_posture"]["network"]["mode"] == "public", record["verifier_posture"]
    assert [p["agent"]["mode"] for p in record["sandbox"]["step_policies"]] == [
        "no-network", two, three,
    ]  # fmt: skip
    if online:  # the allowlist step got the trial's proxy, and its raw attempts were dropped
        assert record["sandbox"]["egress_proxy"], record["sandbox"]
        three_refused = {
            e.get("refused") for e in record["events"]
            if e["type"] == "network_refused" and e.get("step") == "three"
            and e.get("phase") == "agent"
        }  # fmt: skip
        assert "allowlist" in three_refused, record["events"]
    # The leftover was alive when step two's agent phase ended, and was killed then.
    survivors = [e for e in record["events"] if e["type"] == "survivors"]
    assert [(e["phase"], e.get("step")) for e in survivors] == [("agent", "two")], survivors
    # The filter's refusals, named for their step: every phase tried something it may not
    # reach (step one's public verifier and step two's public agent, the host).
    refused = {
        (e.get("step"), e.get("phase")) for e in record["events"] if e["type"] == "network_refused"
    }
    every = {(s, r) for s in ("one", "two", "three") for r in ("agent", "verifier")}
    assert every <= refused, record["events"]
