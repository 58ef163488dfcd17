"""Dataset metrics: declarations read as hostile input, Harbor's built-ins, a script's answer.

The declarations come from a registry (anyone's), the result from the dataset's own script:
every bad value is refused with a reason, never a crash, and never reaches a path outside
the registry's dir.
"""

from __future__ import annotations

import json
import math
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from harness.config import RunConfig
from harness.datasets.cache import TaskCache
from harness.datasets.lock import DatasetsLock, LockedTask, read_lock, write_lock
from harness.datasets.metrics import (
    MAX_METRICS,
    MAX_SCRIPT_BYTES,
    DeclaredMetric,
    LocalMetricPin,
    MetricPinError,
    builtin_value,
    cached_script,
    check_local_pin,
    local_dataset_metric,
    local_pin,
    parse_declared,
    script_digest,
    store_script,
    unique_names,
    unpinned_metric,
)
from harness.datasets.model import DatasetError
from harness.records import AgentRef, SandboxRef, TaskRef, TrialRecord, TrialStatus
from harness.runner.dataset_metrics import (
    MAX_RESULT_BYTES,
    MAX_RESULT_KEYS,
    MetricScriptError,
    compute,
    parse_result,
    reward_rows,
    rewards_jsonl,
)
from harness.runner.plan import plan_trials
from harness.tasks import Task
from harness.tasks.model import TaskConfig
from harness.trial import TrialPlan

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CONFIG = RunConfig(paths=["/t"], agent="nop")
SCRIPT = b"print('hi')\n"


# --------------------------------------------------------------------------- built-ins


def test_builtins_count_a_trial_without_a_reward_as_0() -> None:
    rows: list[dict[str, float] | None] = [{"reward": 1.0}, None, {"reward": 0.5}, None]
    assert builtin_value("mean", rows) == pytest.approx(0.375)
    assert builtin_value("sum", rows) == pytest.approx(1.5)
    assert builtin_value("min", rows) == 0.0
    assert builtin_value("max", rows) == 1.0


def test_builtins_aggregate_each_reward_key() -> None:
    rows: list[dict[str, float] | None] = [{"a": 1.0, "b": 0.0}, {"a": 0.0}, None]
    assert builtin_value("mean", rows) == {"a": pytest.approx(1 / 3), "b": 0.0}
    assert builtin_value("max", rows) == {"a": 1.0, "b": 0.0}


def test_builtins_over_nothing_or_only_ungraded() -> None:
    assert builtin_value("mean", []) is None
    assert builtin_value("mean", [None, None]) == 0.0
    assert builtin_value("sum", [{"reward": math.nan}]) == 0.0
    with pytest.raises(ValueError, match="unknown"):
        builtin_value("median", [None])


# --------------------------------------------------------------------------- declarations


def _parse(raw: object, base: Path | None) -> list[tuple[DeclaredMetric, bytes | None]]:
    return parse_declared(raw, dataset="d@1", where="registry r: d@1", base=base)


def test_builtin_and_script_declarations_are_read(tmp_path: Path) -> None:
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "metric.py").write_bytes(SCRIPT)
    raw = [
        {"type": "mean"},
        {"type": "uv-script", "kwargs": {"script_path": "metrics/metric.py"}},
        {},
    ]
    found = _parse(raw, tmp_path)
    assert [(m.name, m.type, m.error) for m, _ in found] == [
        ("mean", "mean", None),
        ("uv-script", "uv-script", None),
        ("mean", "mean", None),
    ]
    metric, data = found[1]
    assert data == SCRIPT and metric.script_digest == script_digest(SCRIPT)
    assert metric.script_path == "metrics/metric.py" and metric.source == "script"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("mean", "not a list"),
        ([{"type": "mean"}] * (MAX_METRICS + 1), "more than"),
        (["mean"], "not an object"),
        ([{"type": "median"}], "not one of"),
        ([{"type": "mean", "name": "-rf"}], "short name"),
        ([{"type": "mean", "name": "x" * 200}], "short name"),
        ([{"type": "mean", "name": "a\nb"}], "short name"),
        ([{"type": "mean", "name": 3}], "not a string"),
        ([{"type": "mean", "kwargs": []}], "kwargs is not an object"),
        ([{"type": "uv-script"}], "names its script_path"),
        ([{"type": "uv-script", "kwargs": {"script_path": "../secret.py"}}], ".."),
        ([{"type": "uv-script", "kwargs": {"script_path": "/etc/passwd"}}], "relative"),
        ([{"type": "uv-script", "kwargs": {"script_path": "-x.py"}}], "-"),
        ([{"type": "uv-script", "kwargs": {"script_path": "none.py"}}], "missing"),
        ([{"type": "uv-script", "kwargs": {"script_path": "out.py"}}], "link"),
        ([{"type": "uv-script", "kwargs": {"script_path": "dir/in.py"}}], "link"),
        ([{"type": "uv-script", "kwargs": {"script_path": "big.py"}}], "more than"),
        ([{"type": "uv-script", "kwargs": {"script_path": "fifo.py"}}], "regular file"),
    ],
)
def test_a_hostile_declaration_is_kept_with_its_error(
    tmp_path: Path, raw: object, expected: str
) -> None:
    registry_dir = tmp_path / "registry"
    registry_dir.mkdir()
    secret = tmp_path / "secret.py"
    secret.write_text("SECRET")
    (registry_dir / "out.py").symlink_to(secret)
    (registry_dir / "dir").symlink_to(tmp_path)
    (tmp_path / "in.py").write_text("SECRET")
    (registry_dir / "big.py").write_bytes(b"#" * (MAX_SCRIPT_BYTES + 1))
    os.mkfifo(registry_dir / "fifo.py")
    found = _parse(raw, registry_dir)
    errors = [m.error for m, _ in found if m.error is not None]
    assert errors, found
    assert expected in errors[0]
    assert all(data is None for m, data in found if m.error is not None)


def test_a_url_registry_cannot_name_a_script_of_this_machine() -> None:
    raw = [{"type": "uv-script", "kwargs": {"script_path": "metric.py"}}]
    [(metric, data)] = _parse(raw, None)
    assert data is None and metric.error is not None and "URL" in metric.error


def test_names_are_unique_in_the_run() -> None:
    metrics = [
        DeclaredMetric(name="mean", type="mean", dataset="a@1"),
        DeclaredMetric(name="mean", type="mean", dataset="b@1"),
        DeclaredMetric(name="max", type="max", dataset="a@1"),
        DeclaredMetric(name="max", type="max", dataset="a@1"),
    ]
    names = [m.name for m in unique_names(metrics)]
    assert names == ["a@1:mean", "b@1:mean", "a@1:max", "a@1:max#2"]


def test_the_cache_keeps_a_script_by_digest_and_refuses_a_changed_one(tmp_path: Path) -> None:
    cache = TaskCache(tmp_path)
    digest = store_script(cache, SCRIPT)
    assert cached_script(cache, digest) == SCRIPT
    (tmp_path / "metrics" / f"{digest.removeprefix('sha256:')}.py").write_bytes(b"evil")
    assert cached_script(cache, digest) is None
    assert cached_script(cache, "sha256:../../etc/passwd") is None


def test_a_lock_pins_the_metrics_and_refuses_a_forged_one(tmp_path: Path) -> None:
    task = LockedTask(
        name="a",
        git_url="https://example.com/r.git",
        commit="a" * 40,
        content_hash="sha256:" + "0" * 64,
    )
    metric = DeclaredMetric(
        name="m", type="uv-script", dataset="d@1", script_digest=script_digest(SCRIPT),
        script_path="metric.py",
    )  # fmt: skip
    write_lock(DatasetsLock(datasets=["d@1"], tasks=[task], metrics=[metric]), tmp_path)
    assert read_lock(tmp_path).metrics == [metric]
    data = json.loads((tmp_path / "datasets.lock.json").read_text())
    for field, value in [
        ("script_path", "../x.py"),
        ("script_digest", "sha256:nope"),
        ("name", "--evil"),
        ("type", "python"),
    ]:
        forged = json.loads(json.dumps(data))
        forged["metrics"][0][field] = value
        (tmp_path / "datasets.lock.json").write_text(json.dumps(forged))
        with pytest.raises(DatasetError, match=r"metrics\[0\]"):
            read_lock(tmp_path)


def test_a_lock_pins_a_local_sets_metric_py_and_refuses_a_forged_pin(tmp_path: Path) -> None:
    (tmp_path / "set" / "t").mkdir(parents=True)
    (tmp_path / "set" / "t" / "task.toml").write_text("")
    (tmp_path / "set" / "metric.py").write_bytes(SCRIPT)
    found = local_dataset_metric(tmp_path / "set")
    assert found is not None
    pin = local_pin(tmp_path / "set", found[0])
    assert pin == LocalMetricPin(
        task_set=str(tmp_path / "set"), script_digest=script_digest(SCRIPT)
    )
    write_lock(DatasetsLock(local_metrics=[pin]), tmp_path)
    assert read_lock(tmp_path).local_metrics == [pin]
    data = json.loads((tmp_path / "datasets.lock.json").read_text())
    for field, value in [
        ("script_path", "../metric.py"),
        ("script_path", "/etc/passwd"),
        ("script_path", "other.py"),
        ("task_set", "set"),
        ("task_set", f"{tmp_path}/set/../x"),
        ("task_set", f"{tmp_path}/set\n"),
        ("script_digest", "sha256:nope"),
    ]:
        forged = json.loads(json.dumps(data))
        forged["local_metrics"][0][field] = value
        (tmp_path / "datasets.lock.json").write_text(json.dumps(forged))
        with pytest.raises(DatasetError, match=rf"local_metrics\[0\]\.{field}"):
            read_lock(tmp_path)


def test_a_local_metric_py_other_than_its_pin_is_refused_saying_how_to_fix_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "set").mkdir()
    (tmp_path / "set" / "metric.py").write_bytes(SCRIPT)
    found = local_dataset_metric(tmp_path / "set")
    assert found is not None
    pin = local_pin(tmp_path / "set", found[0])
    check_local_pin(tmp_path / "set", found[0], pin, where="L", fix="start a new run")
    (tmp_path / "set" / "metric.py").write_bytes(b"print('other')\n")
    changed = local_dataset_metric(tmp_path / "set")
    assert changed is not None
    with pytest.raises(MetricPinError, match="put that metric.py back, or start a new run"):
        check_local_pin(tmp_path / "set", changed[0], pin, where="L", fix="start a new run")
    with pytest.raises(MetricPinError, match="has no metric.py any more"):
        check_local_pin(tmp_path / "set", None, pin, where="L", fix="start a new run")
    assert "pinned no metric.py" in str(unpinned_metric(found[0], "L").error)


# --------------------------------------------------------------------------- a script's answer


def test_a_good_result_is_read() -> None:
    assert parse_result(b'{"accuracy": 0.5, "n": 3}') == {"accuracy": 0.5, "n": 3.0}


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (None, "no metric.json"),
        (b"x" * (MAX_RESULT_BYTES + 1), "larger than"),
        (b"garbage", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2]", "not an object"),
        (b'{"a": NaN}', "finite"),
        (b'{"a": Infinity}', "finite"),
        (b'{"a": 1e999}', "finite"),
        (b'{"a": "1.0"}', "not a number"),
        (b'{"a": true}', "not a number"),
        (b'{"a": null}', "not a number"),
        (b'{"a": {"b": 1}}', "not a number"),
        (b'{"../x": 1}', "short name"),
        (json.dumps({f"k{i}": i for i in range(MAX_RESULT_KEYS + 1)}).encode(), "keys"),
    ],
)
def test_a_bad_result_is_a_metric_error(data: bytes | None, expected: str) -> None:
    with pytest.raises(MetricScriptError, match=expected):
        parse_result(data)


# --------------------------------------------------------------------------- over the run


def _tasks(*names: str) -> list[Task]:
    return [
        Task(
            name=n, key=n, hash=f"h-{n}", path=Path(f"/t/{n}"), config=TaskConfig(), instruction=""
        )
        for n in names
    ]


def _record(plan: TrialPlan, status: str, **fields: Any) -> TrialRecord:
    return TrialRecord(
        id=plan.id,
        task=TaskRef(name=plan.task.name, key=plan.task.key, hash=plan.task.hash, path="/t"),
        agent=AgentRef(name="nop"),
        sandbox=SandboxRef(backend="local"),
        rollout=plan.rollout,
        status=TrialStatus(status),
        ok=status == "completed",
        started_at=T0,
        finished_at=T0,
        **fields,
    )


def test_every_planned_trial_of_the_dataset_is_a_row_in_plan_order() -> None:
    plans = plan_trials(_tasks("a", "b", "c"), rollouts=2)
    a1, b1, c1, a2, _b2, _c2 = plans
    records = [
        _record(a1, "completed", reward=1.0, rewards={"reward": 1.0, "x": 0.5}),
        _record(a2, "verifier_error"),
        _record(b1, "completed", reward=0.0),
        _record(c1, "completed", reward=1.0),
    ]
    rows = reward_rows(records, plans, lambda key: key in ("a", "b"))
    assert rows == [{"reward": 1.0, "x": 0.5}, {"reward": 0.0}, None, None]
    assert rewards_jsonl(rows) == b'{"reward": 1.0, "x": 0.5}\n{"reward": 0.0}\nnull\nnull\n'


def test_compute_records_each_metric_and_which_trials_it_saw(tmp_path: Path) -> None:
    plans = plan_trials(_tasks("a", "b"), rollouts=2)
    records = [_record(plans[0], "completed", reward=1.0), _record(plans[2], "agent_error")]
    lock = DatasetsLock(
        metrics=[
            DeclaredMetric(name="mean", type="mean", dataset="d@1"),
            DeclaredMetric(name="bad", type="mean", dataset="d@1", error="refused: why"),
            DeclaredMetric(
                name="gone", type="uv-script", dataset="d@1", script_digest=script_digest(b"x")
            ),
        ]
    )
    out = compute(
        lock.metrics,
        records,
        plans,
        task_datasets={"a": "d@1", "b": "d@1"},
        config=CONFIG,
        run_name="r",
        cache=TaskCache(tmp_path),
    )
    assert out["mean"] == {
        "type": "mean",
        "source": "builtin",
        "dataset": "d@1",
        "value": 0.25,
        "trials_counted": 4,
        "graded": 1,
        "ungraded": 3,
        "error": None,
    }
    assert out["bad"]["value"] is None and out["bad"]["error"] == "refused: why"
    assert (
        out["gone"]["source"] == "script" and "not in this machine's cache" in out["gone"]["error"]
    )
    assert compute([], records, plans, task_datasets={}, config=CONFIG, run_name="r") == {}


def test_an_interrupted_run_runs_no_script_but_computes_its_builtins(tmp_path: Path) -> None:
    cache = TaskCache(tmp_path)
    digest = store_script(cache, SCRIPT)
    plans = plan_trials(_tasks("a"), rollouts=1)
    lock = DatasetsLock(
        metrics=[
            DeclaredMetric(name="mean", type="mean", dataset="d@1"),
            DeclaredMetric(name="s", type="uv-script", dataset="d@1", script_digest=digest),
        ]
    )
    out = compute(
        lock.metrics,
        [_record(plans[0], "completed", reward=1.0)],
        plans,
        task_datasets={"a": "d@1"},
        config=CONFIG,
        run_name="r",
        cache=cache,
        run_scripts=False,
    )
    assert out["mean"]["value"] == 1.0
    assert out["s"]["value"] is None and "interrupted" in out["s"]["error"]


def test_the_end_of_run_table_shows_each_metric_over_its_trials() -> None:
    from harness.cli.display import dataset_metric_rows
    from harness.records.metrics import Summary, summarize

    summary = summarize([], planned=2).model_dump()
    summary["dataset_metrics"] = {
        "mean": {"value": 0.5, "trials_counted": 2, "graded": 1, "error": None},
        "s": {"value": {"a": 1.0}, "trials_counted": 2, "graded": 1, "error": None},
        "bad": {"value": None, "trials_counted": 2, "graded": 1, "error": "[red]x"},
    }
    rows = dataset_metric_rows(Summary.model_validate(summary))
    assert rows == [
        ("mean", "0.500 (2 trials, 1 graded)"),
        ("s", "a=1.000 (2 trials, 1 graded)"),
        ("bad", "- (2 trials, 1 graded); error: [red]x"),
    ]


def test_a_local_task_sets_metric_py_is_its_dataset_metric(tmp_path: Path) -> None:
    (tmp_path / "set" / "t").mkdir(parents=True)
    (tmp_path / "set" / "t" / "task.toml").write_text("")
    assert local_dataset_metric(tmp_path / "set") is None
    assert local_dataset_metric(tmp_path / "set" / "t") is None
    (tmp_path / "set" / "metric.py").write_bytes(SCRIPT)
    (tmp_path / "set" / "t" / "metric.py").write_bytes(SCRIPT)
    assert local_dataset_metric(tmp_path / "set" / "t") is None  # a task dir's is its own file
    found = local_dataset_metric(tmp_path / "set")
    assert found is not None
    metric, data = found
    assert (metric.name, metric.type, metric.dataset, data) == (
        "uv-script",
        "uv-script",
        "set@local",
        SCRIPT,
    )
    (tmp_path / "set" / "metric.py").unlink()
    (tmp_path / "set" / "metric.py").symlink_to(tmp_path / "set" / "t" / "metric.py")
    found = local_dataset_metric(tmp_path / "set")
    assert found is not None and found[1] is None
    assert found[0].error is not None and "link" in found[0].error


def test_harness_trials_takes_only_finite_numbers_from_a_forged_summary(tmp_path: Path) -> None:
    from harness.experiments.runs import MAX_DATASET_VALUES, RunRow, dataset_metric_values
    from harness.experiments.trials import summarize_rows

    forged = {
        "mean": {"value": 0.5},
        "acc": {"value": {"accuracy": 1, "bad": "x", "flag": True}},
        "nan": {"value": None, "error": "metric.json: a is not a finite number"},
        "weird": "not an object",
        **{f"m{i}": {"value": i} for i in range(100)},
    }
    (tmp_path / "summary.json").write_text(json.dumps({"dataset_metrics": forged}))
    values = dataset_metric_values(tmp_path)
    assert len(values) == MAX_DATASET_VALUES
    assert values["mean"] == 0.5 and values["acc.accuracy"] == 1.0
    assert "acc.bad" not in values and "acc.flag" not in values and "nan" not in values

    def row(index: int, metrics: dict[str, float]) -> RunRow:
        return RunRow.model_construct(
            index=index, run_dir="/r", name="r", created_at=None, model=None, agent="nop",
            harness_version=None, taskset_digest="d", threshold=1.0, trials=1, graded=1,
            failed=0, errored=0, mean_reward=1.0, success_rate=1.0, pass_at_1=1.0,
            median_trial_duration_s=None, tokens=None, cost_usd=None, category_scores={},
            failures=[], dataset_metrics=metrics, interrupted=False, tampered=0, ungraded=0,
            graded_mean_reward=None, graded_success_rate=None, graded_pass_at_1=None,
        )  # fmt: skip

    summary = summarize_rows([row(1, {"mean": 0.5}), row(2, {"mean": 1.0, "acc.accuracy": 1.0})])
    assert summary.dataset_metrics["mean"].mean == 0.75 and summary.dataset_metrics["mean"].n == 2
    assert summary.dataset_metrics["acc.accuracy"].n == 1


def test_without_root_the_local_sandbox_runs_no_metric_script(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from harness.runner import dataset_metrics

    def boom(*_args: object) -> None:
        raise AssertionError("no backend may be opened")

    monkeypatch.setattr(dataset_metrics, "is_root", lambda: False)
    monkeypatch.setattr(dataset_metrics, "open_backend", boom)
    config = RunConfig(paths=["/t"], agent="nop", sandbox="local")
    with pytest.raises(MetricScriptError, match="not a security boundary"):
        dataset_metrics.run_script(config, "r", SCRIPT, [None])
