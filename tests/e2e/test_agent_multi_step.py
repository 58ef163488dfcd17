"""An installed agent on a multi-step task: every step's CLI log is converted, in order.

The real CLI (fetched by the harness) runs once per step of a two-step task, each run told
that step's instruction and writing its own log: Claude Code's stream-json on its stdout
(kept as ``steps/<name>/agent.log``), mini-swe-agent's trajectory file (a step's own,
kept under ``agent-logs/mini-swe-agent/<name>/``). Its faux script, in the CLI's own tool
protocol, writes one file per step. Judged from outside: the record (both steps graded 1),
the trial's ``session.jsonl`` and transcript (each step's instruction as a user message,
followed by that step's tool calls and results), and the ATIF export (every tool call, in
order).
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pytest
from conftest import read_run_dir, run_cli
from support.installed_agents import BACKEND_PARAMS, FAUX_MODEL, files_holding, run_agent

#: Claude Code (its stdout is its log) on local and docker (runc): the step-by-step
#: collection is the harness's, not the runtime's; mini-swe-agent (a log file in HOME,
#: which each step would overwrite) on local.
PARAMS = [
    *(pytest.param(b.values[0], "claude-code", marks=b.marks, id=f"{b.id}-claude-code")
      for b in BACKEND_PARAMS[:2]),
    pytest.param("local", "mini-swe-agent", marks=BACKEND_PARAMS[0].marks,
                 id="local-mini-swe-agent"),
]  # fmt: skip
#: Per agent: the API its faux model speaks, its shell tool, and what ends its run.
CLIS: dict[str, tuple[str, str, dict[str, Any] | None]] = {
    "claude-code": ("anthropic-messages", "Bash", None),
    "mini-swe-agent": (
        "openai-chat",
        "bash",
        {
            "tool_calls": [
                {
                    "name": "bash",
                    "arguments": {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"},
                }
            ]
        },
    ),
}
STEPS = {
    "first": ("Create one.txt containing exactly 'one'.\n", "one.txt", "one"),
    "second": ("Now create two.txt containing exactly 'two'.\n", "two.txt", "two"),
}
TEST_SH = """#!/bin/sh
# reward 1 iff {name} holds exactly "{text}"
WS=${{HARNESS_WORKSPACE:-$PWD}}
VD=${{HARNESS_VERIFIER_DIR:-/logs/verifier}}
if [ -f "$WS/{name}" ] && [ ! -L "$WS/{name}" ] && [ "$(cat "$WS/{name}")" = "{text}" ]; then
    echo 1 > "$VD/reward.txt"
else
    echo 0 > "$VD/reward.txt"
fi
"""


def two_step_tasks(root: Path, cli: str) -> Path:
    """A two-step task whose faux model (in ``cli``'s protocol) solves each step."""
    api, tool, finish = CLIS[cli]
    tasks = root / "tasks"
    task = tasks / "two-steps"
    task.mkdir(parents=True)
    (task / "task.toml").write_text(
        '[task]\nname = "agents/two-steps"\n\n[agent]\ntimeout_sec = 600\n\n'
        "[verifier]\ntimeout_sec = 60\n\n[environment]\ncpus = 1\nmemory_mb = 1024\n\n"
        + "".join(f'[[steps]]\nname = "{name}"\nmin_reward = 1.0\n\n' for name in STEPS)
    )
    responses: list[dict[str, Any]] = []
    for name, (instruction, file, text) in STEPS.items():
        step = task / "steps" / name
        (step / "tests").mkdir(parents=True)
        (step / "instruction.md").write_text(instruction)
        (step / "tests" / "test.sh").write_text(TEST_SH.format(name=file, text=text))
        (step / "tests" / "test.sh").chmod(0o755)
        write = {
            "tool_calls": [{"name": tool, "arguments": {"command": f"printf '{text}' > {file}"}}]
        }
        responses += [write, finish or {"text": f"Created {file}."}]
    (tasks / "script.json").write_text(json.dumps({"responses": responses}))
    (tasks / "models.toml").write_text(
        f'[models."{FAUX_MODEL}"]\nscript = "script.json"\napi = "{api}"\n'
    )
    return tasks


@pytest.mark.parametrize(("backend", "cli"), PARAMS)
def test_each_steps_cli_log_is_converted_in_order(backend: str, cli: str, tmp_path: Path) -> None:
    _api, tool, finish = CLIS[cli]
    canary = "sk-ant-canary-" + secrets.token_hex(20)
    run_dir = run_agent(tmp_path, backend, cli, two_step_tasks(tmp_path, cli), canary)
    run = read_run_dir(run_dir)
    [record] = run.records
    assert record["status"] == "completed", record["errors"]
    assert [(s["name"], s["reward"]) for s in record["steps"]] == [("first", 1), ("second", 1)]
    assert record["reward"] == 1
    evidence = run.evidence(record)
    # Each step's CLI wrote its own log; both are kept as they were written.
    for name in STEPS:
        if cli == "claude-code":
            assert (evidence / "steps" / name / "agent.log").read_text().startswith('{"type":')
        else:
            assert (evidence / "agent-logs" / cli / name / "trajectory.json").is_file()
    per_step = [tool] * (2 if finish is not None else 1)  # a finish that is a tool call too

    # session.jsonl: one session line, then per step its instruction and what the CLI did.
    session = [json.loads(line) for line in (evidence / "session.jsonl").open()]
    assert session[0]["type"] == "session"
    assert [line["type"] for line in session].count("session") == 1
    instructions = [s[0] for s in STEPS.values()]
    users = [i for i, line in enumerate(session) if line.get("content") in instructions]
    assert [session[i]["content"] for i in users] == instructions
    assert all(session[i]["role"] == "user" for i in users)
    for number, (name, (_, file, _text)) in enumerate(STEPS.items()):
        end = users[number + 1] if number + 1 < len(users) else len(session)
        part = session[users[number] : end]
        calls = [c for line in part for c in line.get("tool_calls", [])]
        assert [c["name"] for c in calls] == per_step, (name, part)
        assert file in calls[0]["arguments"]["command"]
        assert any(line["type"] == "tool_result" for line in part), (name, part)

    transcript = [json.loads(line) for line in (evidence / "transcript.jsonl").open()]
    calls = [e for e in transcript if e["type"] == "tool_call"]
    assert [c["name"] for c in calls] == per_step * 2
    assert "one.txt" in json.dumps(calls[0]["arguments"])
    assert "two.txt" in json.dumps(calls[len(per_step)]["arguments"])

    exported = run_cli("export", "--format", "atif", run_dir, timeout=120)
    assert exported.code == 0, exported
    trajectory = json.loads((evidence / "agent" / "trajectory.json").read_text())
    users_steps = [s["message"] for s in trajectory["steps"] if s["source"] == "user"]
    assert [m for m in users_steps if m in instructions] == instructions
    tool_calls = [c for s in trajectory["steps"] for c in s.get("tool_calls") or []]
    assert [c["function_name"] for c in tool_calls] == per_step * 2
    assert "two.txt" in json.dumps(tool_calls[len(per_step)]["arguments"])
    assert files_holding(run_dir, canary.encode()) == []
