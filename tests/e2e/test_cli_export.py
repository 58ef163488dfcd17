"""End-to-end: ``harness export --format atif RUN_DIR`` on a synthetic run dir.

The run dir is built the way a run leaves it (``trials.jsonl`` written by ``TrialStore``,
evidence under ``trials/<id>/``), and the installed console script runs as a subprocess.
The output is checked as plain JSON, independently of the exporter's own pydantic models.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from harness.records import AgentRef, SandboxRef, TaskRef, TrialRecord, TrialStatus, TrialStore

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 11, 30, 5, 20, 7, tzinfo=UTC)
AGENT_ONLY = ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics")


def harness_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    script = REPO / ".venv" / "bin" / "harness"
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "harness"]
    return subprocess.run(
        [*argv, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"},
        cwd=REPO,
    )


def stamp(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def record(trial_id: str, task: Path, agent: AgentRef, **overrides: Any) -> TrialRecord:
    fields: dict[str, Any] = {
        "id": trial_id,
        "task": TaskRef(name="e2e/hello", key="e2e/hello", hash="h", path=str(task)),
        "agent": agent,
        "sandbox": SandboxRef(backend="local"),
        "status": TrialStatus.COMPLETED,
        "ok": True,
        "reward": 1.0,
        "rewards": {"reward": 1.0},
        "versions": {"harness": "0.1.0"},
        "started_at": T0,
        "finished_at": T0 + timedelta(seconds=4),
        "evidence_dir": f"trials/{trial_id}",
    }
    fields.update(overrides)
    return TrialRecord(**fields)


def jsonl(path: Path, lines: list[dict[str, Any]], tail: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + tail)


def build_run(root: Path) -> Path:
    task = root / "tasks" / "hello"
    task.mkdir(parents=True)
    (task / "instruction.md").write_text("Write hello.txt.\n")
    run = root / "runs" / "tasks--faux-demo--builtin--deadbeef"
    store = TrialStore(run)
    builtin = AgentRef(name="builtin", model="faux/demo")
    store.append(record("hello__b1", task, builtin, status=TrialStatus.AGENT_ERROR, ok=False))
    store.append(record("hello__oracle", task, AgentRef(name="oracle")))
    store.append(record("hello__b1", task, builtin, attempt=2))

    session = [
        {"type": "session", "version": 1, "agent": "builtin", "api": "openai-chat",
         "model": "faux/demo", "tools": ["write", "shell"], "max_turns": 30,
         "timestamp": stamp(1)},
        {"type": "message", "role": "system", "content": "You are an agent.",
         "timestamp": stamp(1.1)},
        {"type": "message", "role": "user", "content": "Write hello.txt.\n",
         "timestamp": stamp(1.2)},
        {"type": "message", "role": "assistant", "content": "",
         "tool_calls": [
             {"id": "call_1", "name": "write", "arguments": {"path": "hello.txt", "content": "hi"}},
             {"id": "call_2", "name": "shell", "arguments": {"command": "false"}}],
         "stop_reason": "tool_use", "usage": {"input_tokens": 50, "output_tokens": 20},
         "timestamp": stamp(2)},
        {"type": "tool_result", "tool_call_id": "call_1", "name": "write",
         "content": "wrote 2 bytes", "is_error": False, "duration_ms": 0.3,
         "timestamp": stamp(2.1)},
        {"type": "tool_result", "tool_call_id": "call_2", "name": "shell",
         "content": "exit 1", "is_error": True, "duration_ms": 4.0, "timestamp": stamp(2.2)},
        {"type": "message", "role": "assistant", "content": "Wrote hello.txt.",
         "stop_reason": "stop", "usage": {"input_tokens": 90, "output_tokens": 6},
         "timestamp": stamp(3)},
        {"type": "end", "ok": True, "error": None, "turns": 2, "timestamp": stamp(3.1)},
    ]  # fmt: skip
    evidence = run / "trials" / "hello__b1"
    # A malformed middle line must not stop the export.
    lines = [json.dumps(line) for line in session]
    lines.insert(4, "{this is not json")
    evidence.mkdir(parents=True)
    (evidence / "session.jsonl").write_text("\n".join(lines) + "\n")
    calls = [
        {"seq": n, "trial_id": "hello__b1", "started_at": stamp(start), "latency_ms": 10.0,
         "method": "POST", "path": "/v1/chat/completions", "api": "openai-chat",
         "provider": "faux", "model": "demo", "requested_model": "demo", "status": 200,
         "outcome": "ok", "reason": None, "stream": False, "request": {}, "response": {},
         "usage": usage, "cost_usd": None}
        for n, start, usage in (
            (1, 1.3, {"input_tokens": 52, "output_tokens": 21, "cached_tokens": None}),
            (2, 2.3, {"input_tokens": 93, "output_tokens": 6, "cached_tokens": None}),
        )
    ]  # fmt: skip
    jsonl(evidence / "model_calls.jsonl", calls, tail='{"seq": 3, "trial')  # torn tail
    return run


def check_trajectory(data: dict[str, Any], trial_id: str, run_name: str) -> None:
    assert data["schema_version"] == "ATIF-v1.7"
    assert data["trajectory_id"] == trial_id
    assert data["session_id"] == run_name
    assert data["agent"]["name"] and data["agent"]["version"] == "0.1.0"
    steps = data["steps"]
    assert [step["step_id"] for step in steps] == list(range(1, len(steps) + 1))
    for step in steps:
        assert isinstance(step["message"], str)
        datetime.fromisoformat(step["timestamp"])
        if step["source"] != "agent":
            present = [name for name in AGENT_ONLY if name in step]
            assert not present, f"step {step['step_id']} ({step['source']}) has {present}"
            assert "llm_call_count" not in step
        call_ids = [call["tool_call_id"] for call in step.get("tool_calls", [])]
        assert len(call_ids) == len(set(call_ids))
        for result in step.get("observation", {}).get("results", []):
            assert result.get("source_call_id") in call_ids
    assert data["final_metrics"]["total_steps"] == len(steps)


def test_export_atif_writes_valid_trajectories(tmp_path: Path) -> None:
    run = build_run(tmp_path)
    result = harness_cli("export", "--format", "atif", run)
    assert result.returncode == 0, result
    assert "wrote 2 atif trajectories" in result.stdout

    builtin_path = run / "trials" / "hello__b1" / "agent" / "trajectory.json"
    oracle_path = run / "trials" / "hello__oracle" / "agent" / "trajectory.json"
    builtin = json.loads(builtin_path.read_text())
    oracle = json.loads(oracle_path.read_text())
    check_trajectory(builtin, "hello__b1", run.name)
    check_trajectory(oracle, "hello__oracle", run.name)

    # The built-in agent's session: system, user, then one agent step per assistant message.
    steps = builtin["steps"]
    assert [s["source"] for s in steps] == ["system", "user", "agent", "agent"]
    tool_step = steps[2]
    assert [c["function_name"] for c in tool_step["tool_calls"]] == ["write", "shell"]
    results = tool_step["observation"]["results"]
    assert [(r["source_call_id"], r["content"]) for r in results] == [
        ("call_1", "wrote 2 bytes"),
        ("call_2", "exit 1"),
    ]
    assert results[1]["extra"]["is_error"] is True
    assert tool_step["metrics"] == {"prompt_tokens": 50, "completion_tokens": 20}
    assert tool_step["model_name"] == "faux/demo" and tool_step["llm_call_count"] == 1
    assert steps[3]["message"] == "Wrote hello.txt."
    # Gateway numbers (model_calls.jsonl) are authoritative; unknown cost and cache are left out.
    assert builtin["final_metrics"] == {
        "total_prompt_tokens": 145,
        "total_completion_tokens": 27,
        "total_steps": 4,
        "extra": {"usage_source": "model_calls.jsonl", "model_calls": 2},
    }
    assert builtin["extra"]["attempt"] == 2  # the latest record of the retried trial
    assert builtin["extra"]["status"] == "completed"
    assert "session.jsonl: 1 malformed line(s) skipped (line 5)." in builtin["notes"]
    assert "model_calls.jsonl: torn last line 3 ignored." in builtin["notes"]

    # The oracle keeps no session: the instruction is the only step, and the notes say why.
    assert oracle["steps"] == [
        {"step_id": 1, "timestamp": stamp(0), "source": "user", "message": "Write hello.txt.\n"}
    ]
    assert "No session.jsonl" in oracle["notes"]


def test_export_to_output_dir(tmp_path: Path) -> None:
    run = build_run(tmp_path)
    out = tmp_path / "exported"
    result = harness_cli("export", run, "-o", out)
    assert result.returncode == 0, result
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.json")) == [
        "hello__b1/trajectory.json",
        "hello__oracle/trajectory.json",
    ]
    assert not (run / "trials" / "hello__b1" / "agent").exists()


@pytest.mark.parametrize(
    ("make_args", "needle"),
    [
        (lambda run, tmp: ["export", "--format", "parquet", run], "supported: atif"),
        (lambda run, tmp: ["export", tmp / "nope"], "is not a run directory"),
        (lambda run, tmp: ["export", run / "trials"], "has no trials.jsonl"),
    ],
)
def test_export_errors_exit_2(tmp_path: Path, make_args: Any, needle: str) -> None:
    run = build_run(tmp_path)
    result = harness_cli(*make_args(run, tmp_path))
    assert result.returncode == 2, result
    assert needle in result.stderr
    assert result.stderr.startswith("error:")
    assert not list(run.rglob("trajectory.json"))
