"""A trial floods its model gateway, through the real CLI, on local, docker and gVisor.

The gateway runs in the harness process; an agent reaches it through the supervisor's
forwarder on ``127.0.0.1:<port>`` inside the sandbox. The agent here (the ``command`` agent
running the task's instruction.md, a python script) opens 64 connections at once, each
sending a 15 MiB body, then announces a 64 GiB one. Judged from outside: the harness
process's ``VmRSS`` sampled from the host's ``/proc/<pid>/status`` for the whole run, the
trial's record and ``model_calls.jsonl``, and a second trial of the same run, whose model
call must still be answered.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

FLOOD = r"""
python3 - <<'PY'
import json, os, socket, threading
from urllib.parse import urlparse

url = urlparse(os.environ["OPENAI_BASE_URL"])
token = os.environ["OPENAI_API_KEY"]
part = b"z" * (1 << 20)
seen = []

def head(length):
    return (
        "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
        "authorization: Bearer %s\r\ncontent-type: application/json\r\n"
        "content-length: %d\r\n\r\n" % (token, length)
    ).encode()

def flood():
    try:
        s = socket.create_connection((url.hostname, url.port), timeout=120)
    except OSError as exc:
        seen.append("connect:" + type(exc).__name__)
        return
    try:
        s.sendall(head(15 << 20))
        for _ in range(15):
            s.sendall(part)
    except OSError:
        pass
    try:
        seen.append(s.recv(64).split(b"\r\n")[0].decode("latin-1"))
    except OSError as exc:
        seen.append("recv:" + type(exc).__name__)
    s.close()

threads = [threading.Thread(target=flood) for _ in range(64)]
for t in threads:
    t.start()
for t in threads:
    t.join()
s = socket.create_connection((url.hostname, url.port), timeout=120)
s.sendall(head(64 << 30))
seen.append("huge:" + s.recv(64).split(b"\r\n")[0].decode("latin-1"))
with open(os.path.join(os.environ["HARNESS_WORKSPACE"], "flood.json"), "w") as fh:
    json.dump(seen, fh)
PY
"""

CALL = r"""
python3 - <<'PY'
import json, os, urllib.request

request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps({"model": "x", "messages": [{"role": "user", "content": "hi"}]}).encode(),
    headers={"authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
             "content-type": "application/json"},
)
with urllib.request.urlopen(request, timeout=120) as answer:
    status = answer.status
with open(os.path.join(os.environ["HARNESS_WORKSPACE"], "call.json"), "w") as fh:
    json.dump(status, fh)
PY
"""


#: The verifier shows what the agent saw (its stdout is kept in the trial's evidence).
SHOW = 'cat "$HARNESS_WORKSPACE/%s.json"; echo; echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n'


def _shown(run: Any, record: dict[str, Any]) -> Any:
    stdout = (run.evidence(record) / "verifier" / "test-stdout.txt").read_text()
    return json.loads(stdout.splitlines()[0])


def _rss_kb(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    line = next((x for x in text.splitlines() if x.startswith("VmRSS:")), "VmRSS: 0 kB")
    return int(line.split()[1])


def _calls(path: Path) -> list[dict[str, Any]]:
    raw = path.read_bytes().decode("utf-8")  # strict: the record is valid UTF-8
    return [json.loads(line) for line in raw.splitlines()]


def test_a_trial_flooding_its_gateway_keeps_the_harness_bounded_and_the_other_served(
    backend: str, any_cli: Any, sec: Any, tmp_path: Path
) -> None:
    flood_name, call_name = sec.unique("gw-flood"), sec.unique("gw-call")
    tasks = tmp_path / "tasks"
    flood = sec.write_task(
        tasks, flood_name, attack=FLOOD, test_sh=SHOW % "flood", agent_timeout=240
    )
    call = sec.write_task(tasks, call_name, attack=CALL, test_sh=SHOW % "call", agent_timeout=240)
    assert flood.parent == call.parent == tasks
    # A task set may name faux models: the one call of the second trial is answered by it.
    (tasks / "models.toml").write_text('[models."faux/flood"]\nscript = "flood.json"\n')
    (tasks / "flood.json").write_text(json.dumps({"responses": [{"text": "done"}]}))
    # The cap comes from the run config ([gateway], here through --set).
    extra = ["--model", "faux/flood", "--set", "gateway.max_connections=16"]
    proc = any_cli.start([tasks], jobs=2, extra=extra)
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, _rss_kb(proc.pid))
            stop.wait(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        run = any_cli.finish(proc, timeout=600)
    finally:
        stop.set()
        sampler.join()
    assert run.code in (0, 1), run
    # Unbounded, the gateway held the 64 bodies at once: 960 MiB more in the harness.
    assert 0 < peak < 600 * 1024, f"the harness peaked at {peak / 1024:.0f} MB\n{run}"

    flooded = run.by_task(flood_name)
    seen = _shown(run, flooded)
    lines = _calls(run.evidence(flooded) / "model_calls.jsonl")
    assert len(seen) == 65, seen
    assert seen[-1].startswith("huge:HTTP/1.1 413"), seen
    assert all(line["outcome"] == "refused" for line in lines), lines
    reasons = " ".join(line["reason"] for line in lines)
    assert "gateway.max_request_mb" in reasons
    assert "the cap (gateway.max_connections) is 16" in reasons
    expected = ("gateway.max_connections", "gateway.max_memory_mb", "gateway.max_request_mb",
                "request body is not a JSON object")  # fmt: skip
    assert all(any(e in line["reason"] for e in expected) for line in lines), lines
    assert flooded["status"] == "completed", flooded

    served = run.by_task(call_name)
    assert _shown(run, served) == 200
    [answered] = _calls(run.evidence(served) / "model_calls.jsonl")
    assert answered["outcome"] == "ok" and answered["status"] == 200
