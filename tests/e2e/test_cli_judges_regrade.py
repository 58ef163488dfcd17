"""End-to-end: judges (``[[verifier.judges]]`` and ``--judge``), ``harness regrade`` and the
report's experiment comparisons, on a copy of the example tasks with faux models."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
HELLO = "harness-examples/hello-file"
TASK_JUDGES = """
[[verifier.judges]]
type = "tool-call"
name = "wrote-hello"
tool = "write"
arguments = { path = "hello.txt", content = "Hello, world!\\n" }

[[verifier.judges]]
type = "structured-output"
name = "answer-fields"
expected = { greeting = "Hello, world!" }
"""
BAD_JUDGE = {"responses": [{"text": "It looks fine to me."}]}


@pytest.fixture
def examples(tmp_path: Path) -> Path:
    """A copy of examples/ (tasks and faux scripts) to change; hello-file gets task judges."""
    root = tmp_path / "examples"
    shutil.copytree(REPO / "examples" / "tasks", root / "tasks")
    shutil.copytree(REPO / "examples" / "faux", root / "faux")
    toml = root / "tasks" / "hello-file" / "task.toml"
    toml.write_text(toml.read_text() + TASK_JUDGES)
    (root / "judge-models.toml").write_text('[models."faux/bad-judge"]\nscript = "bad.json"\n')
    (root / "bad.json").write_text(json.dumps(BAD_JUDGE))
    return root


def run_builtin(cli: Any, examples: Path, out: Path, *extra: Any, **kwargs: Any) -> Any:
    """``harness run`` of the example tasks with the builtin agent on the faux demo model."""
    return cli(
        "run", examples / "tasks", "--agent", "builtin", "--model", "faux/demo", "-o", out,
        *extra, **kwargs,
    )  # fmt: skip


def records(run_dir: Path) -> dict[str, dict[str, Any]]:
    lines = (run_dir / "trials.jsonl").read_text().splitlines()
    return {r["task"]["key"]: r for r in map(json.loads, lines)}


def only_run(parent: Path) -> Path:
    [run] = [p for p in parent.iterdir() if p.is_dir()]
    return run


def test_task_and_run_judges_score_into_rewards(cli, examples: Path, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    result = run_builtin(
        cli,
        examples,
        out,
        "--display",
        "none",
        "--judge",
        '{type = "llm", name = "quality", model = "faux/judge", rubric = "Said what it did?"}',
        "--judge",
        '{"type": "tool-call", "name": "listed", "tool": "ls", "threshold": null}',
        timeout=120,
    )
    assert result.code == 0, result
    run = only_run(out)
    by_task = records(run)
    hello = by_task[HELLO]
    assert hello["status"] == "completed" and hello["reward"] == 1.0
    assert hello["rewards"] == {
        "reward": 1.0,
        "wrote-hello": 1.0,
        "answer-fields": 0.0,
        "quality": 1.0,
        "listed": 0.0,
    }
    assert hello["judges"]["answer-fields"]["reason"] == "final answer holds no JSON object"
    assert hello["judges"]["quality"]["reasoning"].startswith("The final answer says")
    sales = by_task["harness-examples/sales-report"]
    assert sales["rewards"]["quality"] == 0.5 and "wrote-hello" not in sales["rewards"]
    fix = by_task["harness-examples/fix-bug"]
    assert fix["rewards"]["listed"] == 1.0  # it listed the workspace first
    quality = json.loads((run / "trials" / hello["id"] / "judges" / "quality.json").read_text())
    assert "Said what it did?" in quality["prompt"]["messages"][1]["content"]
    assert quality["answer"].startswith('{"score": 1.0')
    calls = (run / "trials" / hello["id"] / "judges" / "quality.model_calls.jsonl").read_text()
    assert len(calls.splitlines()) == 1


def test_malformed_judge_output_is_a_verifier_error(cli, examples: Path, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    result = run_builtin(
        cli,
        examples,
        out,
        "--task-name",
        HELLO,
        "--models",
        examples / "judge-models.toml",
        "--display",
        "none",
        "--judge",
        '{type = "llm", name = "quality", model = "faux/bad-judge", rubric = "ok?"}',
        timeout=120,
    )
    assert result.code == 1, result
    hello = records(only_run(out))[HELLO]
    assert hello["status"] == "verifier_error" and hello["reward"] is None
    assert hello["rewards"]["reward"] == 1.0 and hello["rewards"]["wrote-hello"] == 1.0
    [error] = hello["errors"]
    assert error["type"] == "JudgeError" and error["phase"] == "judge"
    assert error["message"] == (
        "llm judge 'quality': malformed answer: it holds no JSON object: 'It looks fine to me.'"
    )


def test_a_gate_and_a_bad_judge_table(cli, examples: Path, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    gated = run_builtin(
        cli,
        examples,
        out,
        "--task-name",
        HELLO,
        "--display",
        "none",
        "--judge",
        '{type = "tool-call", name = "ran-shell", tool = "shell", threshold = 1}',
        timeout=120,
    )
    assert gated.code == 0, gated  # a low score is data, even from a gate
    hello = records(only_run(out))[HELLO]
    assert hello["reward"] == 0.0 and hello["rewards"]["reward"] == 1.0
    assert hello["judges"]["ran-shell"]["passed"] is False
    fine = cli("tasks", "check", examples / "tasks")  # judges are a known task key
    assert fine.code == 0 and "verifier.judges" not in fine.stderr, fine
    toml = examples / "tasks" / "hello-file" / "task.toml"
    toml.write_text(
        toml.read_text() + '\n[[verifier.judges]]\ntype = "tool-call"\nname = "reward"\n'
    )
    bad = run_builtin(
        cli,
        examples,
        tmp_path / "none",
    )
    assert bad.code == 2 and "verifier's main reward" in bad.stderr and "task.toml" in bad.stderr
    assert not (tmp_path / "none").exists()
    check = cli("tasks", "check", examples / "tasks")
    assert check.code == 2 and "verifier's main reward" in check.stderr


def test_regrade_grades_saved_evidence_again_into_a_new_run(
    cli, examples: Path, tmp_path: Path
) -> None:
    out = tmp_path / "runs"
    toml = examples / "tasks" / "hello-file" / "task.toml"
    original = toml.read_text()
    toml.write_text(
        original.replace('EXPECTED_TEXT = "Hello, world!"', 'EXPECTED_TEXT = "Hello, World!"')
    )
    first = run_builtin(
        cli,
        examples,
        out,
        "--run-name",
        "source",
        "--display",
        "none",
        timeout=120,
    )
    assert first.code == 0, first
    source = out / "source"
    assert records(source)[HELLO]["reward"] == 0.0  # the test expected the wrong text
    toml.write_text(original)  # fix the test, then grade the same work again
    result = cli(
        "regrade",
        source,
        "--run-name",
        "fixed",
        "--display",
        "none",
        "--judge",
        '{type = "tool-call", name = "read-back", tool = "read"}',
        timeout=120,
    )
    assert result.code == 0, result
    again = out / "fixed"
    by_task = records(again)
    hello = by_task[HELLO]
    assert hello["reward"] == 1.0 and hello["agent"] == {
        "name": "replay",
        "model": None,
        "source": str(source),
    }
    assert hello["rewards"]["read-back"] == 1.0 and hello["rewards"]["wrote-hello"] == 1.0
    assert hello["usage"]["calls"] is None  # no model was called again
    assert hello["verifier_posture"] is not None  # graded in the sandbox, as the grader
    assert {k: r["reward"] for k, r in by_task.items()} == {
        k: (1.0 if k == HELLO else r["reward"]) for k, r in records(source).items()
    }
    regrade = json.loads((again / "regrade.json").read_text())
    assert regrade["source"] == str(source)
    [change] = [t for t in regrade["trials"] if t["task"] == HELLO]
    assert (
        change["task_changed"]
        and change["before"]["reward"] == 0.0
        and change["after"]["reward"] == 1.0
    )
    assert "regraded 4 trial(s)" in result.stdout and "completed 0 -> completed 1" in result.stdout
    # The saved workspace is what was graded: the agent's edit of calc.py is there.
    fix_id = by_task["harness-examples/fix-bug"]["id"]
    calc = (again / "trials" / fix_id / "workspace" / "calc.py").read_text()
    assert "ordered = sorted(values)" in calc


def _index(html: Path) -> dict[str, Any]:
    match = re.search(
        r'<script type="application/json" id="harness-index">(.*?)</script>', html.read_text(), re.S
    )
    assert match is not None
    data = json.loads(match.group(1))
    assert isinstance(data, dict)
    return data


def test_report_shows_experiment_and_trials_summaries(cli, tmp_path: Path) -> None:
    examples = REPO / "examples" / "tasks"
    trials = cli(
        "trials",
        "2",
        examples,
        "--task-name",
        HELLO,
        "--agent",
        "builtin",
        "--model",
        "faux/demo",
        "--out-dir",
        tmp_path / "t",
        "--display",
        "none",
        timeout=120,
    )
    assert trials.code == 0, trials
    experiment = tmp_path / "e.toml"
    experiment.write_text(
        f'[run]\ntasks.paths = ["{examples}"]\n'
        f'tasks.names = ["{HELLO}", "harness-examples/anti-fake"]\n'
        'agent.name = "builtin"\n[variants.without]\nmodel = "faux/without-docs"\n'
        '[variants.with]\nmodel = "faux/demo"\n'
    )
    exp = cli(
        "experiment",
        "-c",
        experiment,
        "--out-dir",
        tmp_path / "e",
        "--display",
        "none",
        timeout=120,
    )
    assert exp.code == 0, exp
    made = cli("report", tmp_path / "t", tmp_path / "e", "-o", tmp_path / "r.html")
    assert made.code == 0, made
    index = _index(tmp_path / "r.html")
    assert [r["name"] for r in index["runs"]] == [
        "trial-001",
        "trial-002",
        "rep-001--with",
        "rep-001--without",
    ]
    kinds = {c["kind"]: c for c in index["comparisons"]}
    spread = kinds["trials"]
    assert spread["sides"] == ["trial-001", "trial-002"] and spread["run_index"] == [0, 1]
    assert any(
        n.startswith("mean reward: mean 1.0000 ± stdev 0.0000 (n=2") for n in spread["notes"]
    )
    paired = kinds["experiment"]
    assert paired["sides"] == ["without", "with"] and paired["summary"]["mean_delta"] == 0.5
    assert paired["metrics"][0] == {
        "name": "pass rate",
        "values": [0.5, 1.0],
        "delta": 0.5,
        "format": "percent",
    }
    assert "One repetition cannot establish stability." in paired["notes"]


FAKER = (
    "python3 -c \"open('calc.py', 'w').write(chr(10).join(['import os', 'print(1)', "
    "'os._exit(0)', '']))\""
)


@pytest.mark.docker
def test_regrade_in_docker_grades_untrusted_evidence_in_the_sandbox(cli, tmp_path: Path) -> None:
    from support.docker import docker_client, require_image

    require_image(docker_client())
    out = tmp_path / "runs"
    source = out / "faker"
    first = cli(
        "run",
        REPO / "examples" / "tasks",
        "--task-name",
        "harness-examples/fix-bug",
        "--agent",
        "command",
        "--agent-cmd",
        FAKER,
        "-o",
        out,
        "--run-name",
        "faker",
        "--display",
        "none",
        timeout=120,
    )
    assert first.code == 0, first
    assert records(source)["harness-examples/fix-bug"]["reward"] == 0.0
    result = cli(
        "regrade",
        source,
        "--sandbox",
        "docker",
        "--run-name",
        "in-docker",
        "--display",
        "none",
        timeout=300,
    )
    assert result.code == 0, result
    record = records(out / "in-docker")["harness-examples/fix-bug"]
    assert record["sandbox"]["backend"] == "docker"
    assert record["reward"] == 0.0  # the exit-0 faker is replayed, and still fools nobody
    assert record["verifier_posture"] is not None
    saved = out / "in-docker" / "trials" / record["id"] / "workspace" / "calc.py"
    assert "os._exit(0)" in saved.read_text()
