"""The gateway's fixes for real CLIs, judged with the real CLIs (issue 25, item 4).

``harness run`` with the pinned Claude Code and Codex, installed by the harness into its
cache (scripts/agents.sh), on a copy of examples/tasks/hello-file, each driven by a faux
script written in the CLI's own protocol:

- an exhausted script is a 410 the CLI does not retry: Claude Code stops at once (the
  number of model calls recorded says so, never the time taken);
- Codex's ``apply_patch`` is a freeform Responses ``custom`` tool under a known model
  name: a scripted ``custom`` call edits the file (reward 1), the script's turn matched
  to the request that offers the tool.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, only_run_dir, read_run_dir, run_cli

RUN_TIMEOUT = 900.0  # the first run fetches the CLI from npm
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+Hello, world!\n*** End Patch\n"


def _task_set(tmp_path: Path, script: dict[str, Any], api: str, upstream: str) -> Path:
    tasks = tmp_path / "tasks"
    shutil.copytree(EXAMPLES / "hello-file", tasks / "hello-file")
    (tasks / "script.json").write_text(json.dumps(script))
    (tasks / "models.toml").write_text(
        f'[models."faux/cli-script"]\nscript = "script.json"\napi = "{api}"\nmodel = "{upstream}"\n'
    )
    return tasks


def _run(tmp_path: Path, cli: str, tasks: Path) -> Path:
    out = tmp_path / "runs"
    result = run_cli(
        "run",
        tasks,
        "--agent",
        cli,
        "--model",
        "faux/cli-script",
        "--sandbox",
        "local",
        "-o",
        out,
        env={"HARNESS_PROVIDER": "", "HARNESS_MODEL": ""},
        timeout=RUN_TIMEOUT,
    )
    assert result.code in (0, 1), result
    assert "Traceback" not in result.stderr, result.stderr
    return only_run_dir(out)


def _model_calls(run_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    run = read_run_dir(run_dir)
    [record] = run.records
    evidence = run.evidence(record)
    lines = [json.loads(line) for line in (evidence / "model_calls.jsonl").open()]
    return record, lines


@pytest.mark.root
def test_claude_code_stops_at_once_on_an_exhausted_script(tmp_path: Path) -> None:
    # One scripted turn (a Bash call); the next call finds the script used up.
    turn = {"tool_calls": [{"name": "Bash", "arguments": {"command": "echo hi > seen.txt"}}]}
    tasks = _task_set(tmp_path, {"responses": [turn]}, "anthropic-messages", "claude-sonnet-4-5")
    record, lines = _model_calls(_run(tmp_path, "claude-code", tasks))
    calls = [line for line in lines if line["method"] == "POST"]
    # The turn, then the one 410. A 5xx (or 408/409/429) Claude Code retried ten times
    # over minutes; a 400 invalid_request_error it retries six times with features off.
    assert [(c["status"], c["outcome"]) for c in calls] == [(200, "ok"), (410, "error")], calls
    assert calls[-1]["faux"] == {"exhausted": True, "turns": 1}
    trial_id = calls[-1]["trial_id"]
    assert f"No more faux responses queued for trial {trial_id}" in calls[-1]["reason"]
    assert record["status"] == "agent_error" and record["reward"] == 0
    # The CLI's own last error, which names the trial and says what to do.
    assert "No more faux responses queued" in record["errors"][0]["message"]


@pytest.mark.root
def test_codex_applies_a_custom_apply_patch_call(tmp_path: Path) -> None:
    script = {
        # Only requests that offer apply_patch consume a turn.
        "when": {"tool": "apply_patch"},
        "responses": [
            {"tool_calls": [{"name": "apply_patch", "input": PATCH}]},
            {"text": "Created hello.txt."},
        ],
    }
    tasks = _task_set(tmp_path, script, "openai-responses", "gpt-5.5")
    record, lines = _model_calls(_run(tmp_path, "codex", tasks))
    assert record["status"] == "completed", record["errors"]
    assert record["reward"] == 1
    calls = [line for line in lines if line["method"] == "POST"]
    assert [c["faux"].get("turn") for c in calls] == [1, 2], calls
    # Codex offered apply_patch as a freeform tool and sent back the custom call's output.
    offered = {t.get("name"): t.get("type") for t in calls[0]["request"]["tools"]}
    assert offered["apply_patch"] == "custom"
    second = json.dumps(calls[1]["request"]["input"])
    assert "custom_tool_call_output" in second
