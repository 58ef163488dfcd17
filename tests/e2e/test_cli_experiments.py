"""End-to-end: ``harness trials``, ``aggregate``, ``--retry-failed`` and ``experiment`` on the
example tasks with the scripted (faux) models, as real subprocesses.

faux/demo solves all four example tasks; faux/without-docs gives up on sales-report and
anti-fake (reward 0); faux/with-docs reads the docs overlay and solves all four.
"""

from __future__ import annotations

import json
import statistics
import tomllib
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "tasks"
DOCS_LIFT = REPO / "examples" / "experiments" / "docs-lift.toml"
FAILING = {"harness-examples/anti-fake", "harness-examples/sales-report"}
RUN_ARGS = ("--agent", "builtin", "--display", "none", "-j", "2")


def _summary(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    assert isinstance(data, dict)
    return data


def _assert_statistics(summary: dict[str, Any]) -> None:
    """Every figure equals Python's statistics module on the per-run values listed."""
    runs = summary["runs"]
    groups = [("metrics", k) for k in summary["metrics"]] + [
        ("counts", k) for k in summary["counts"]
    ]
    groups += [("category_scores", k) for k in summary["category_scores"]]
    for group, name in groups:
        if group == "category_scores":
            values = [r["category_scores"][name] for r in runs if name in r["category_scores"]]
        else:
            values = [r[name] for r in runs if r[name] is not None]
        stats = summary[group][name]
        assert stats["n"] == len(values), (group, name)
        if not values:
            assert stats == {
                "n": 0,
                "mean": None,
                "median": None,
                "stdev": None,
                "min": None,
                "max": None,
            }
            continue
        assert stats["mean"] == statistics.mean(values), (group, name)
        assert stats["median"] == statistics.median(values), (group, name)
        expected_stdev = statistics.stdev(values) if len(values) >= 2 else None
        assert stats["stdev"] == expected_stdev, (group, name)
        assert (stats["min"], stats["max"]) == (min(values), max(values)), (group, name)


@pytest.fixture(scope="module")
def parents(tmp_path_factory: pytest.TempPathFactory, cli) -> dict[str, Any]:
    """Two separately produced trials parents: 3 runs of without-docs, 1 run of demo."""
    root = tmp_path_factory.mktemp("trials")
    three = cli(
        "trials",
        "3",
        EXAMPLES,
        *RUN_ARGS,
        "--model",
        "faux/without-docs",
        "--out-dir",
        root / "ci-a",
        timeout=180,
    )
    one = cli(
        "trials",
        "1",
        EXAMPLES,
        *RUN_ARGS,
        "--model",
        "faux/demo",
        "--out-dir",
        root / "ci-b",
        timeout=120,
    )
    return {"root": root, "three": three, "one": one}


def test_trials_3_summary_equals_the_statistics_module(parents: dict[str, Any]) -> None:
    result, parent = parents["three"], parents["root"] / "ci-a"
    assert result.code == 1, result  # failed trials: counts.failed.mean > 0
    summary = _summary(parent / "trials_summary.json")
    assert summary["n_trials"] == 3 and summary["model"] == "faux/without-docs"
    assert summary["harness_version"] and summary["agent"] == "builtin"
    assert [r["name"] for r in summary["runs"]] == ["trial-001", "trial-002", "trial-003"]
    for row in summary["runs"]:
        run = json.loads((Path(row["run_dir"]) / "summary.json").read_text())
        assert row["mean_reward"] == run["mean_reward"] == 0.5
        assert row["tokens"] == run["usage"]["total_tokens"]["total"]
        assert (row["trials"], row["graded"], row["failed"], row["errored"]) == (4, 4, 2, 0)
        assert {f["task"] for f in row["failures"]} == FAILING
    assert summary["counts"]["failed"]["mean"] == 2
    assert summary["metrics"]["cost_usd"]["n"] == 0  # faux models have no price: not a 0
    assert summary["category_scores"]["security"]["mean"] == 0.0
    _assert_statistics(summary)
    assert summary["metrics"]["median_trial_duration_s"]["stdev"] is not None
    assert "How to read the spread" in result.stdout and "stdev" in result.stdout
    assert "wrote " + str(parent / "trials_summary.json") in result.stdout


def test_trials_with_no_failure_exit_0_and_one_run_has_no_stdev(parents: dict[str, Any]) -> None:
    assert parents["one"].code == 0, parents["one"]
    summary = _summary(parents["root"] / "ci-b" / "trials_summary.json")
    assert summary["counts"]["failed"]["mean"] == 0
    assert summary["metrics"]["mean_reward"] == {
        "n": 1,
        "mean": 1.0,
        "median": 1.0,
        "stdev": None,
        "min": 1.0,
        "max": 1.0,
    }


def test_aggregate_of_two_parents_equals_the_summary_of_both_together(
    parents: dict[str, Any], cli
) -> None:
    root = parents["root"]
    apart = cli("aggregate", root / "ci-a", root / "ci-b", "--summary-out", root / "apart.json")
    together = cli("aggregate", root, "--summary-out", root / "together.json")
    assert apart.code == together.code == 1, apart
    separate, both = _summary(root / "apart.json"), _summary(root / "together.json")
    assert separate == both
    assert both["n_trials"] == 4
    a, b = (
        _summary(root / "ci-a" / "trials_summary.json"),
        _summary(root / "ci-b" / "trials_summary.json"),
    )
    strip = [{k: v for k, v in row.items() if k != "index"} for row in a["runs"] + b["runs"]]
    assert [{k: v for k, v in row.items() if k != "index"} for row in both["runs"]] == strip
    _assert_statistics(both)
    assert both["metrics"]["mean_reward"]["mean"] == statistics.mean([0.5, 0.5, 0.5, 1.0])
    [warning] = both["warnings"]
    assert "mix models" in warning and "must not be used for regression conclusions" in warning
    assert "warning: the runs mix models" in apart.stderr


def test_retry_failed_reruns_exactly_the_failed_trials_once(
    parents: dict[str, Any], cli, tmp_path: Path
) -> None:
    root = parents["root"]
    source = root / "ci-a" / "trials_summary.json"
    failed = {f["trial_id"] for row in _summary(source)["runs"] for f in row["failures"]}
    assert len(failed) == 2  # the same two trials failed in each of the 3 runs: deduplicated
    result = cli(
        "trials",
        "1",
        "--retry-failed",
        source,
        "--display",
        "none",
        "--out-dir",
        tmp_path / "retry",
        timeout=120,
    )
    assert result.code == 1, result  # they fail again: real failures, not flakes
    retry = _summary(tmp_path / "retry" / "trials_summary.json")
    [run] = retry["runs"]
    records = [
        json.loads(line)
        for line in (Path(run["run_dir"]) / "trials.jsonl").read_text().splitlines()
    ]
    assert {r["id"] for r in records} == failed and len(records) == 2
    assert {t["trial_id"] for t in retry["retry_of"]["trials"]} == failed
    config = tomllib.loads((Path(run["run_dir"]) / "config.toml").read_text())["run"]
    assert config["model"] == "faux/without-docs" and sorted(
        config["tasks"]["trial_ids"]
    ) == sorted(failed)
    assert "fails again" in result.stdout


def test_retry_failed_with_nothing_to_retry_exits_3(
    parents: dict[str, Any], cli, tmp_path: Path
) -> None:
    root = parents["root"]
    result = cli("trials", "1", "--retry-failed", root / "ci-b", "--display", "none")
    assert result.code == 3, result
    assert "no failed trial" in result.stderr and "nothing to retry" in result.stderr
    assert not any(p.name.startswith("retry--ci-b") for p in root.iterdir())
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli("trials", "1", "--retry-failed", empty).code == 3


@pytest.mark.parametrize(
    "args",
    [
        ("trials", "0", str(EXAMPLES)),
        ("trials", "51", str(EXAMPLES)),
        ("trials", "2", "--retry-failed", str(EXAMPLES)),
        ("trials", "2", str(EXAMPLES), "--agent", "nop", "--run-name", "x"),
    ],
)
def test_trials_usage_errors_exit_2(cli, args: tuple[str, ...], tmp_path: Path) -> None:
    result = cli(*args, "-o", tmp_path)
    assert result.code == 2, result
    assert not any(tmp_path.iterdir())


# ---------------------------------------------------------------------------- experiments


def test_docs_experiment_reports_the_lift_and_its_flags(cli, tmp_path: Path) -> None:
    out = tmp_path / "exp"
    result = cli("experiment", "-c", DOCS_LIFT, "--out-dir", out, "--display", "none", timeout=240)
    assert result.code == 0, result
    report = json.loads((out / "experiment_report.json").read_text())
    [comparison] = report["comparisons"]
    assert (comparison["control"], comparison["treatment"]) == ("without_docs", "with_docs")
    assert (comparison["eligible_pairs"], comparison["blocked_pairs"]) == (8, 0)
    headline = comparison["headline"]
    assert headline["published"] and headline["lift"] == 0.5
    assert (headline["control_pass_rate"], headline["treatment_pass_rate"]) == (0.5, 1.0)
    low, high = headline["ci"]
    assert low <= 0.5 <= high
    assert comparison["flags"] == ["treatment-saturated"]
    flags = {t["task"]: t["flags"] for t in comparison["tasks"]}
    assert flags["harness-examples/hello-file"] == [
        "no-lift",
        "control-saturated",
        "treatment-saturated",
    ]
    assert flags["harness-examples/anti-fake"] == ["treatment-saturated"]
    assert report["notes"] == []  # two repetitions: no stability warning
    text = (out / "experiment_report.txt").read_text()
    assert "Pass rate: +50.0 pp (with_docs 100.0%, without_docs 50.0%)" in text
    assert text in result.stdout and f"Artifacts: {out}" in result.stderr
    # The plan: odd repetitions run the control first, even ones the treatment first.
    plan = json.loads((out / "experiment_plan.json").read_text())
    assert [(p["repetition"], p["variant"]) for p in plan["plan"]] == [
        (1, "without_docs"),
        (1, "with_docs"),
        (2, "with_docs"),
        (2, "without_docs"),
    ]
    started = {}
    for p in plan["plan"]:
        lines = (out / "runs" / p["run_name"] / "trials.jsonl").read_text().splitlines()
        started[p["run_name"]] = min(json.loads(line)["started_at"] for line in lines)
    assert sorted(started, key=started.__getitem__) == [p["run_name"] for p in plan["plan"]]
    # The docs overlay reached the treatment's workspace, and a judge saw it read.
    for variant, read in (("with_docs", 1.0), ("without_docs", 0.0)):
        lines = (out / "runs" / f"rep-001--{variant}" / "trials.jsonl").read_text().splitlines()
        assert {json.loads(line)["rewards"]["read-docs"] for line in lines} == {read}


CRASHY = {
    "responses": [{"text": "done"}],
    "tasks": {
        "harness-examples/hello-file": [{"error": {"status": 500, "message": "model crashed"}}]
    },
}


def test_an_agent_crash_blocks_a_pair_and_withholds_the_headline(cli, tmp_path: Path) -> None:
    (tmp_path / "crashy.json").write_text(json.dumps(CRASHY))
    (tmp_path / "models.toml").write_text('[models."faux/crashy"]\nscript = "crashy.json"\n')
    experiment = tmp_path / "crash.toml"
    experiment.write_text(
        f'[experiment]\nname = "crash"\n\n[run]\ntasks.paths = ["{EXAMPLES}"]\n'
        'tasks.names = ["harness-examples/hello-file", "harness-examples/fix-bug"]\n'
        'agent.name = "builtin"\nmodels = ["models.toml"]\n\n'
        '[variants.control]\nmodel = "faux/demo"\n\n[variants.crashing]\nmodel = "faux/crashy"\n'
    )
    out = tmp_path / "exp"
    result = cli("experiment", "-c", experiment, "--out-dir", out, "--display", "none", timeout=120)
    assert result.code == 1, result
    report = json.loads((out / "experiment_report.json").read_text())
    [comparison] = report["comparisons"]
    assert (comparison["total_pairs"], comparison["blocked_pairs"]) == (2, 1)
    [blocked] = comparison["blocked"]
    assert blocked["task"] == "harness-examples/hello-file" and blocked["repetition"] == 1
    [reason] = blocked["reasons"]
    assert reason.startswith("crashing: errored (agent_error: Model call failed: HTTP 500")
    headline = comparison["headline"]
    assert not headline["published"] and headline["lift"] is None
    assert headline["reason"] == "withheld because pairs are blocked"
    assert not report["published"]
    assert report["notes"] == ["One repetition cannot establish stability."]
    assert "Pass rate: withheld because pairs are blocked" in result.stdout
    assert "One repetition cannot establish stability." in result.stdout
    assert "harness-examples/hello-file/-/run-1: crashing: errored" in result.stdout
    # The report can be made again from the dir alone.
    again = cli("experiment", "--report", out)
    assert again.code == 1 and json.loads((out / "experiment_report.json").read_text()) == report


def test_an_experiment_that_cannot_run_leaves_nothing(cli, tmp_path: Path) -> None:
    experiment = tmp_path / "bad.toml"
    experiment.write_text(
        f'[run]\ntasks.paths = ["{EXAMPLES}"]\nagent.name = "builtin"\n\n'
        '[variants.a]\nmodel = "faux/demo"\n\n[variants.b]\nmodel = "faux/missing"\n'
    )
    out = tmp_path / "exp"
    result = cli("experiment", "-c", experiment, "--out-dir", out)
    assert result.code == 2, result
    assert "Model not found: faux/missing" in result.stderr
    assert not out.exists()


def test_aggregate_of_several_dirs_needs_summary_out(parents: dict[str, Any], cli) -> None:
    root = parents["root"]
    before = (root / "ci-a" / "trials_summary.json").read_bytes()
    result = cli("aggregate", root / "ci-a", root / "ci-b")
    assert result.code == 2 and "--summary-out" in result.stderr
    assert (root / "ci-a" / "trials_summary.json").read_bytes() == before
