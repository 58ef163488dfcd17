"""The real provider key never reaches a sandbox; the gateway refuses everything but models.

Attack: a ``command`` agent (untrusted code) searches everything it can reach for the real
key — its environment, every process's environ/cmdline, the whole filesystem — and asks
the gateway for another host, another path and another method, and tries the gateway
socket directly. Judged from outside: the run dir, the harness's output, ``docker
inspect`` and the memory of every process of the sandbox (read by the test as root while
the agent waits), the upstream server's request log, and ``model_calls.jsonl``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import read_run_dir, start_cli
from support.docker import docker_client, require_image
from support.key_canary import CANARY_PREFIX, Upstream, process_memory_has

import docker
from sandbox.options import DEFAULT_SANDBOX_UID

# Runs inside the sandbox as the agent. It never spells the prefix in one piece, so a
# search for the key cannot match this script itself.
PROBE = r"""#!/bin/bash
set -u
out="$HARNESS_WORKSPACE/probe"
mkdir -p "$out"
needle="sk-can""ary-"
env > "$out/env.txt"
for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do
    tr '\0' '\n' < "$f"
done > "$out/proc.txt" 2>/dev/null
# Everywhere a key could have been left for the agent (the whole root in a container).
places="$HOME $HARNESS_SESSION_DIR $(dirname "$HARNESS_WORKSPACE") /tmp /var/tmp /run /etc /opt"
if [ -d /trial ]; then
    places="/ --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev --exclude-dir=usr"
fi
# Every string that looks like a canary key, wherever it is (the test checks them all).
grep -rIhos $places -e "$needle[0-9a-f]*" > "$out/grep.txt" 2>/dev/null
python3 - "$out" <<'PY'
import json, os, socket, sys, urllib.request, urllib.error
out = sys.argv[1]
base = os.environ["OPENAI_BASE_URL"]
token = os.environ["OPENAI_API_KEY"]
port = int(base.split(":")[2].split("/")[0])
results = {"token_prefix": token[:4]}

def call(method, path, body=None, headers=None):
    req = urllib.request.Request(base.rsplit("/v1", 1)[0] + path, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": "Bearer " + token,
                                          "Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()

body = {"model": "whatever", "messages": [{"role": "user", "content": "hi"}]}
results["ok"] = call("POST", "/v1/chat/completions", body)
results["other_host"] = call("POST", "/v1/chat/completions", body, {"Host": "api.openai.com"})
results["other_path"] = call("POST", "/v1/files", body)
results["other_method"] = call("DELETE", "/v1/chat/completions")
raw = socket.create_connection(("127.0.0.1", port))
raw.sendall(b"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\nAuthorization: Bearer "
            + token.encode() + b"\r\n\r\n")
results["absolute"] = raw.recv(200).decode(errors="replace").split("\r\n")[0]
raw.close()
sockets = []
for root in ("/opt/harness-gateway", "/run/harness/gateway"):
    try:
        sockets.append([root, os.listdir(root)])
    except OSError as exc:
        sockets.append([root, type(exc).__name__])
results["socket_dirs"] = sockets
json.dump(results, open(os.path.join(out, "requests.json"), "w"))
PY
touch "$out/ready"
sleep "${PROBE_SLEEP:-4}"
"""


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.close()


def _sandbox_pids(backend: str, client: Any, label: str) -> list[int]:
    if backend == "docker":
        pids = []
        for container in client.containers.list(filters={"label": f"org.harness.run={label}"}):
            try:
                rows = container.top(ps_args="-eo pid").get("Processes") or []
            except docker.errors.APIError:  # it stopped since it was listed
                continue
            pids.extend(int(row[0]) for row in rows)
        return pids
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        uid = int(re.search(r"^Uid:\s+(\d+)", status, re.M).group(1))  # type: ignore[union-attr]
        if uid >= DEFAULT_SANDBOX_UID or b"supervisor.pyc" in cmdline:
            pids.append(int(entry.name))
    return pids


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_real_key_never_reaches_the_sandbox(
    backend: str, tmp_path: Path, upstream: Upstream
) -> None:
    client = None
    if backend == "docker":
        client = docker_client()
        require_image(client)
    canary = CANARY_PREFIX + secrets.token_hex(24)
    task = tmp_path / "tasks" / "probe"
    (task / "tests").mkdir(parents=True)
    (task / "workspace").mkdir()
    (task / "task.toml").write_text('[task]\nname = "secrecy/probe"\n[agent]\ntimeout_sec = 120\n')
    (task / "instruction.md").write_text("probe\n")
    (task / "workspace" / "probe.sh").write_text(PROBE)
    (task / "tests" / "test.sh").write_text(
        '#!/bin/bash\necho 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
    )
    if backend == "docker":
        (task / "environment").mkdir()
        (task / "environment" / "Dockerfile").write_text("FROM harness/base:bookworm\n")
    catalog = tmp_path / "models.toml"
    catalog.write_text(
        '[models."openai/canary-model"]\n'
        'model = "upstream-name"\n'
        f'base_url = "http://127.0.0.1:{upstream.port}/v1"\n'
        "input_price = 1.0\noutput_price = 2.0\n"
    )
    out = tmp_path / "runs"
    running = start_cli(
        "run",
        task,
        "--agent",
        "command",
        "--agent-cmd",
        "bash {workspace}/probe.sh",
        "--model",
        "openai/canary-model",
        "--models",
        catalog,
        "--sandbox",
        backend,
        "-o",
        out,
        "--json",
        env={"OPENAI_API_KEY": canary, "HARNESS_PROVIDER": "", "HARNESS_MODEL": ""},
    )
    # While the agent waits after its probe, look at the live sandbox from outside.
    needle = canary.encode()
    scanned = inspections = 0
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and running.proc.poll() is None:
        found = [p for p in out.glob("*") if p.is_dir()]
        label = found[0].name if found else None
        if label is not None:
            pids = _sandbox_pids(backend, client, label)
            for pid in pids:
                assert not process_memory_has(pid, needle), f"real key in memory of pid {pid}"
            scanned += len(pids)
            if backend == "docker" and client is not None:
                # sparse: listing must not inspect (a container removed meanwhile fails it).
                for container in client.containers.list(
                    all=True, sparse=True, filters={"label": f"org.harness.run={label}"}
                ):
                    try:
                        inspected = json.dumps(client.api.inspect_container(container.id))
                    except docker.errors.NotFound:  # removed since it was listed
                        continue
                    assert canary not in inspected
                    inspections += 1
        time.sleep(0.5)
    result = running.wait(timeout=120)
    assert result.code == 0, str(result)
    assert scanned > 0, "no sandbox process was ever scanned"
    assert backend != "docker" or inspections > 0, "the container was never inspected"
    assert canary not in result.stdout + result.stderr

    run = read_run_dir(Path(json.loads(result.stdout)["run_dir"]))
    # No file the run wrote holds the key.
    for path in run.path.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert needle not in path.read_bytes(), f"real key in {path}"
    evidence = run.evidence(run.records[0])
    probe = evidence / "workspace" / "probe"
    assert (probe / "env.txt").is_file() and (probe / "proc.txt").stat().st_size > 0
    assert canary not in (probe / "grep.txt").read_text()  # on no reachable file
    assert canary not in (probe / "proc.txt").read_text()  # in no process's environ/argv
    env_lines = (probe / "env.txt").read_text().splitlines()
    token_line = next(line for line in env_lines if line.startswith("OPENAI_API_KEY="))
    token = token_line.split("=", 1)[1]
    assert token.startswith("hgw-") and token != canary

    requests = json.loads((probe / "requests.json").read_text())
    assert requests["ok"][0] == 200
    assert requests["other_host"][0] == 403
    assert requests["other_path"][0] == 404
    assert requests["other_method"][0] == 405
    assert requests["absolute"].split(" ")[1] == "400"
    for root, listing in requests["socket_dirs"]:
        assert listing in ("PermissionError", "FileNotFoundError"), (root, listing)

    # The upstream saw exactly one call: the real key, the catalog's model name, no token.
    assert len(upstream.requests) == 1
    seen = upstream.requests[0]
    assert seen["headers"].get("authorization") == f"Bearer {canary}"
    assert seen["body"]["model"] == "upstream-name"
    assert token not in json.dumps(seen)

    calls = [json.loads(line) for line in (evidence / "model_calls.jsonl").read_text().splitlines()]
    outcomes = [(c["outcome"], c["status"]) for c in calls]
    assert outcomes[0] == ("ok", 200)
    assert calls[0]["requested_model"] == "whatever" and calls[0]["usage"]["input_tokens"] == 7
    assert calls[0]["cost_usd"] == pytest.approx((7 * 1.0 + 3 * 2.0) / 1e6)
    refused = [c for c in calls if c["outcome"] == "refused"]
    reasons = " | ".join(c["reason"] for c in refused)
    assert len(refused) == 4, reasons
    assert "host 'api.openai.com'" in reasons and "/v1/files" in reasons
    assert "DELETE" in reasons and "proxy-style" in reasons
    record = run.records[0]
    assert record["usage"]["calls"] == 1 and record["usage"]["refused_calls"] == 4
    assert record["agent"]["model"] == "openai/canary-model"
    if backend == "docker" and client is not None:
        leftovers = client.containers.list(
            all=True, filters={"label": f"org.harness.run={run.path.name}"}
        )
        assert leftovers == []
    if os.geteuid() == 0:  # every trial's socket dir is gone with its token
        assert not list(Path("/run/harness/gateway").glob(f"*/t-*/{run.path.name}"))
