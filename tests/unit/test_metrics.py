from __future__ import annotations

import itertools
import json
import math
import random
import statistics
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from harness.records import (
    AgentRef,
    SandboxRef,
    TaskRef,
    TrialError,
    TrialRecord,
    TrialStatus,
    Usage,
)
from harness.records.metrics import (
    _binomial,
    _multinomial,
    bootstrap_ci,
    bootstrap_cis,
    pass_at_k,
    pass_hat_k,
    summarize,
)

T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def rec(trial_id: str, task: str, reward: float | None, **overrides: Any) -> TrialRecord:
    status = overrides.pop("status", TrialStatus.COMPLETED)
    fields: dict[str, Any] = {
        "id": trial_id,
        "task": TaskRef(name=task, key=task, hash="h", path=f"tasks/{task}"),
        "agent": AgentRef(name="a"),
        "sandbox": SandboxRef(backend="local"),
        "status": status,
        "ok": status is TrialStatus.COMPLETED,
        "reward": reward,
        "started_at": T0,
        "finished_at": T0 + timedelta(seconds=10),
    }
    fields.update(overrides)
    return TrialRecord(**fields)


# ---------------------------------------------------------------------------------------------
# pass@k / pass^k
# ---------------------------------------------------------------------------------------------


def brute_pass_at_k(n: int, c: int, k: int) -> float:
    outcomes = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)


def brute_pass_hat_k(n: int, c: int, k: int) -> float:
    outcomes = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(all(outcomes[i] for i in s) for s in subsets) / len(subsets)


def test_pass_at_k_known_values() -> None:
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(5, 5, 1) == 1.0
    assert pass_at_k(5, 5, 5) == 1.0
    assert pass_at_k(5, 0, 1) == 0.0
    assert pass_at_k(5, 0, 5) == 0.0
    assert pass_at_k(10, 3, 8) == 1.0  # n - c < k
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(200, 10, 100) == pytest.approx(1 - math.comb(190, 100) / math.comb(200, 100))


@pytest.mark.parametrize("n", range(1, 9))
def test_pass_at_k_and_hat_k_match_brute_force(n: int) -> None:
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(n, c, k), abs=1e-12)
            assert pass_hat_k(n, c, k) == pytest.approx(brute_pass_hat_k(n, c, k), abs=1e-12)


def test_pass_hat_k_known_values() -> None:
    assert pass_hat_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_hat_k(5, 5, 5) == 1.0
    assert pass_hat_k(5, 0, 1) == 0.0
    assert pass_hat_k(4, 2, 2) == pytest.approx(1 / 6)
    assert pass_hat_k(10, 3, 4) == 0.0


def test_pass_at_k_large_n_is_stable() -> None:
    value = pass_at_k(10_000, 1, 1)
    assert value == pytest.approx(1e-4)
    assert 0.0 <= pass_at_k(10_000, 9_999, 2) <= 1.0


@pytest.mark.parametrize("fn", [pass_at_k, pass_hat_k])
@pytest.mark.parametrize(("n", "c", "k"), [(5, 2, 6), (5, 2, 0), (5, 6, 1), (5, -1, 1), (0, 0, 1)])
def test_invalid_arguments_raise(fn: Any, n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError):
        fn(n, c, k)


# ---------------------------------------------------------------------------------------------
# bootstrap
# ---------------------------------------------------------------------------------------------


def test_bootstrap_is_deterministic_and_contains_the_mean() -> None:
    values = [0.0, 0.2, 0.5, 0.9, 1.0, 1.0, 0.3, 0.7]
    first = bootstrap_ci(values, seed=7)
    assert first is not None
    assert bootstrap_ci(values, seed=7) == first
    lo, hi = first
    assert lo < statistics.fmean(values) < hi
    assert 0.0 <= lo <= hi <= 1.0
    assert bootstrap_ci(values, seed=8) != first


def test_bootstrap_level_widens_interval() -> None:
    values = [float(i % 5) for i in range(30)]
    narrow = bootstrap_ci(values, level=0.5)
    wide = bootstrap_ci(values, level=0.99)
    assert narrow is not None and wide is not None
    assert wide[0] <= narrow[0] and narrow[1] <= wide[1]


def test_bootstrap_degenerate_inputs() -> None:
    assert bootstrap_ci([]) is None
    assert bootstrap_ci([0.4]) is None
    assert bootstrap_ci([0.5, 0.5, 0.5]) == (0.5, 0.5)
    with pytest.raises(ValueError):
        bootstrap_ci([1.0, 2.0], level=1.0)
    with pytest.raises(ValueError):
        bootstrap_ci([1.0, 2.0], resamples=0)


# ---------------------------------------------------------------------------------------------
# summarize
# ---------------------------------------------------------------------------------------------


def test_summarize_counts_statuses_graded_and_rates() -> None:
    records = [
        rec("a1", "A", 1.0),
        rec("a2", "A", 0.0),
        rec("a3", "A", 1.0),
        rec("b1", "B", 0.5),
        rec(
            "b2",
            "B",
            None,
            status=TrialStatus.AGENT_TIMEOUT,
            errors=[TrialError(type="AgentTimeout", message="m", phase="execute")],
        ),
        rec("b3", "B", 1.0),
        rec("c1", "C", None, status=TrialStatus.ENVIRONMENT_ERROR),
        rec("c2", "C", None, status=TrialStatus.ENVIRONMENT_ERROR),
    ]
    s = summarize(records)
    assert s.trials == 8
    assert s.graded == 5
    assert s.ok == 5
    assert s.tasks == 3
    assert s.errors_by_status == {"agent_timeout": 1, "environment_error": 2}
    # The headline counts every trial, an ungraded one as reward 0, a failure.
    assert s.mean_reward == pytest.approx(3.5 / 8)
    assert s.success_rate == pytest.approx(3 / 8)
    assert s.threshold == 1.0

    # pass@k over every task (A: n=3,c=2; B: n=3,c=1; C: n=2,c=0), k up to min n = 2.
    assert s.pass_k_tasks == 3
    assert set(s.pass_at_k) == {"1", "2"}
    assert s.pass_at_k["1"] == pytest.approx((2 / 3 + 1 / 3 + 0) / 3)
    assert s.pass_at_k["2"] == pytest.approx(
        (pass_at_k(3, 2, 2) + pass_at_k(3, 1, 2) + pass_at_k(2, 0, 2)) / 3
    )
    assert s.pass_hat_k["2"] == pytest.approx((pass_hat_k(3, 2, 2) + 0 + 0) / 3)

    # The graded-only figures, beside them (A: n=3,c=2; B: n=2,c=1).
    g = s.graded_only
    assert (g.n, g.tasks) == (5, 2)
    assert g.mean_reward == pytest.approx(3.5 / 5)
    assert g.success_rate == pytest.approx(3 / 5)
    assert g.pass_at_k["1"] == pytest.approx((2 / 3 + 1 / 2) / 2)
    assert g.pass_at_k["2"] == pytest.approx((pass_at_k(3, 2, 2) + pass_at_k(2, 1, 2)) / 2)
    assert g.pass_hat_k["2"] == pytest.approx((pass_hat_k(3, 2, 2) + pass_hat_k(2, 1, 2)) / 2)
    assert s.ungraded.trials == 3
    assert s.ungraded.by_status == {"agent_timeout": 1, "environment_error": 2}
    assert s.ungraded.by_error == {"AgentTimeout": 1}

    a, b, c = s.per_task["A"], s.per_task["B"], s.per_task["C"]
    assert (a.trials, a.graded, a.successes, a.ungraded) == (3, 3, 2, 0)
    assert a.mean_reward == pytest.approx(2 / 3) and a.graded_mean_reward == pytest.approx(2 / 3)
    assert a.variance == pytest.approx(statistics.variance([1.0, 0.0, 1.0]))
    assert (b.trials, b.graded, b.successes, b.ungraded) == (3, 2, 1, 1)
    assert b.mean_reward == pytest.approx(0.5) and b.graded_mean_reward == pytest.approx(0.75)
    assert b.variance == pytest.approx(statistics.variance([0.5, 0.0, 1.0]))
    assert (c.trials, c.graded, c.successes, c.ungraded) == (2, 0, 0, 2)
    assert (c.mean_reward, c.variance, c.graded_mean_reward) == (0.0, 0.0, None)

    assert s.ci["mean_reward"] is not None
    lo, hi = s.ci["mean_reward"]
    assert lo <= statistics.fmean([2 / 3, 0.5, 0.0]) <= hi
    graded_ci = s.graded_only.ci["mean_reward"]
    assert graded_ci is not None
    assert graded_ci[0] <= statistics.fmean([2 / 3, 0.75]) <= graded_ci[1]


def test_summarize_threshold() -> None:
    records = [rec("1", "A", 0.6), rec("2", "A", 0.4), rec("3", "B", 0.9)]
    assert summarize(records).success_rate == 0.0
    s = summarize(records, threshold=0.5)
    assert s.success_rate == pytest.approx(2 / 3)
    assert s.threshold == 0.5
    assert s.pass_at_k == {"1": pytest.approx((0.5 + 1.0) / 2)}


def test_summarize_only_latest_record_per_id_counts() -> None:
    records = [
        rec("x", "A", None, status=TrialStatus.AGENT_ERROR, attempt=1),
        rec("y", "A", 0.0),
        rec("x", "A", 1.0, attempt=2),
    ]
    s = summarize(records)
    assert s.trials == 2
    assert s.errors_by_status == {}
    assert s.graded == 2
    assert s.mean_reward == pytest.approx(0.5)


def test_missing_usage_is_never_counted_as_zero() -> None:
    records = [
        rec("1", "A", 1.0, usage=Usage(cost_usd=None, input_tokens=100)),
        rec("2", "A", 1.0, usage=Usage(cost_usd=0.5, input_tokens=0)),
    ]
    s = summarize(records)
    cost = s.usage["cost_usd"]
    assert (cost.total, cost.measured, cost.of) == (0.5, 1, 2)
    tokens = s.usage["input_tokens"]
    assert (tokens.total, tokens.measured, tokens.of) == (100, 2, 2)
    out = s.usage["output_tokens"]
    assert (out.total, out.measured, out.of) == (None, 0, 2)
    assert set(s.usage) >= {"input_tokens", "output_tokens", "total_tokens", "cost_usd"}


def test_duration_prefers_total_timing() -> None:
    records = [
        rec("1", "A", 1.0, timings={"total": 4.0, "execute": 3.0}),
        rec("2", "A", 1.0, timings={"execute": 3.0}),  # falls back to 10 s wall clock
    ]
    s = summarize(records)
    assert s.duration_sec.total == pytest.approx(14.0)
    assert s.duration_sec.mean == pytest.approx(7.0)


def test_summarize_empty_and_all_errors() -> None:
    empty = summarize([])
    assert empty.trials == 0 and empty.graded == 0
    assert empty.mean_reward is None and empty.success_rate is None
    assert empty.pass_at_k == {} and empty.pass_hat_k == {}
    assert empty.ci["mean_reward"] is None
    assert empty.duration_sec.total is None and empty.duration_sec.mean is None
    assert empty.usage["cost_usd"].total is None and empty.usage["cost_usd"].of == 0

    errs = summarize([rec("1", "A", None, status=TrialStatus.CANCELLED)])
    assert errs.errors_by_status == {"cancelled": 1}
    assert errs.graded == 0 and errs.ok == 0
    # Not graded is a failure of the headline; the graded-only figures have nothing.
    assert errs.mean_reward == 0.0 and errs.success_rate == 0.0
    assert errs.pass_at_k == {"1": 0.0} and errs.pass_hat_k == {"1": 0.0}
    assert errs.graded_only.mean_reward is None and errs.graded_only.pass_at_k == {}
    assert errs.ungraded.by_status == {"cancelled": 1}


def test_nan_reward_is_not_graded() -> None:
    s = summarize([rec("1", "A", float("nan")), rec("2", "A", 1.0)])
    assert s.graded == 1
    assert s.mean_reward == 0.5  # the NaN trial counts 0
    assert s.graded_only.mean_reward == 1.0
    assert s.ungraded.by_status == {"completed": 1}


def test_summary_dump_is_json_serialisable() -> None:
    records = [rec(f"{t}{i}", t, float(i % 2)) for t in "ABC" for i in range(3)]
    records.append(rec("err", "C", None, status=TrialStatus.VERIFIER_ERROR))
    dumped = summarize(records).model_dump(mode="json")
    text = json.dumps(dumped, allow_nan=False)
    again = json.loads(text)
    assert again["errors_by_status"] == {"verifier_error": 1}
    assert isinstance(again["ci"]["mean_reward"], list) and len(again["ci"]["mean_reward"]) == 2
    assert again["per_task"]["A"]["trials"] == 3
    assert set(again["pass_at_k"]) == {"1", "2", "3"}


def test_summarize_is_deterministic() -> None:
    records = [rec(f"{t}{i}", t, (i * 0.37 + ord(t)) % 1) for t in "ABCDE" for i in range(4)]
    assert summarize(records) == summarize(records)


# --------------------------------------------------------------------------- bootstrap sampling


@pytest.mark.parametrize(("n", "p"), [(7, 0.3), (40, 0.1), (200, 0.25), (5000, 0.5), (300, 0.9)])
def test_binomial_draws_have_the_right_moments(n: int, p: float) -> None:
    rng = random.Random(1)
    draws = [_binomial(n, p, rng) for _ in range(20000)]
    assert all(0 <= d <= n for d in draws)
    mean, var = statistics.fmean(draws), statistics.pvariance(draws)
    sd_of_mean = math.sqrt(n * p * (1 - p) / len(draws))
    assert abs(mean - n * p) < 5 * sd_of_mean, (mean, n * p)
    assert var == pytest.approx(n * p * (1 - p), rel=0.08)


def test_binomial_edges() -> None:
    rng = random.Random(0)
    assert _binomial(0, 0.5, rng) == 0
    assert _binomial(10, 0.0, rng) == 0
    assert _binomial(10, 1.0, rng) == 10
    counts = _multinomial(1000, [5, 0, 3, 2], rng)
    assert sum(counts) == 1000 and counts[1] == 0


def test_grouped_and_direct_bootstrap_agree() -> None:
    """Few distinct per-task rows take the multinomial path; it must match plain resampling."""
    grouped = [0.0, 0.2, 0.4, 1.0] * 200  # 800 tasks, 4 distinct values: multinomial draws
    jitter = [v + i * 1e-9 for i, v in enumerate(grouped)]  # all distinct: direct draws
    a = bootstrap_cis({"m": grouped, "s": [1.0 - v for v in grouped]}, resamples=4000, seed=3)
    b = bootstrap_cis({"m": jitter}, resamples=4000, seed=4)
    assert a["m"] is not None and b["m"] is not None and a["s"] is not None
    assert a["m"][0] == pytest.approx(b["m"][0], abs=0.006)
    assert a["m"][1] == pytest.approx(b["m"][1], abs=0.006)
    # One shared draw: the complement's interval mirrors the column's exactly.
    assert a["s"][0] == pytest.approx(1.0 - a["m"][1]) and a["s"][1] == pytest.approx(
        1.0 - a["m"][0]
    )
    with pytest.raises(ValueError, match="differ in length"):
        bootstrap_cis({"a": [1.0, 2.0], "b": [1.0]})


def test_the_plan_is_the_denominator_a_vanished_trial_never_raises_the_mean() -> None:
    records = [
        rec("a", "t", 1.0),
        rec("b", "t", 1.0),
        rec("c", "t", None, status=TrialStatus.INTERNAL_ERROR, ok=False),
    ]
    summary = summarize(records, planned=4)  # one planned trial has no record at all
    assert summary.mean_reward == 0.5 and summary.success_rate == 0.5
    assert summary.graded_only.mean_reward == 1.0
    assert (summary.planned, summary.recorded, summary.unrecorded) == (4, 3, 1)
    assert summary.mean_reward_planned == 0.5 and summary.success_rate_planned == 0.5
    assert summary.ungraded.trials == 2
    assert summary.ungraded.by_status == {"internal_error": 1, "unrecorded": 1}
    assert summary.errors_by_status == {"internal_error": 1}
    unplanned = summarize(records)
    assert unplanned.planned is None and unplanned.mean_reward_planned is None


def test_an_agent_that_makes_its_failures_ungraded_never_scores_higher() -> None:
    """The coin-flip agent of the finding: 5 of 8 graded (all 1.0), 3 verifiers sabotaged."""
    records = [rec(f"t{i}", "t", 1.0) for i in range(5)] + [
        rec(f"t{i}", "t", None, status=TrialStatus.VERIFIER_ERROR) for i in range(5, 8)
    ]
    honest = [rec(f"t{i}", "t", 1.0 if i < 5 else 0.0) for i in range(8)]
    sabotaged, failed = summarize(records, planned=8), summarize(honest, planned=8)
    for summary in (sabotaged, failed):
        assert summary.mean_reward == pytest.approx(0.625)
        assert summary.success_rate == pytest.approx(0.625)
        assert summary.pass_at_k["1"] == pytest.approx(0.625)
        assert summary.pass_hat_k["8"] == 0.0
    assert sabotaged.pass_at_k == failed.pass_at_k and sabotaged.pass_hat_k == failed.pass_hat_k
    assert sabotaged.graded_only.mean_reward == 1.0
    assert sabotaged.graded_only.pass_at_k["1"] == 1.0
    assert sabotaged.ungraded.by_status == {"verifier_error": 3}


@pytest.mark.parametrize("seed", range(5))
def test_headline_pass_k_counts_ungraded_attempts_as_failures(seed: int) -> None:
    rng = random.Random(seed)
    records, expected = [], []
    for task in "ABCD":
        outcomes = [rng.choice([1.0, 0.0, None]) for _ in range(5)]
        for i, reward in enumerate(outcomes):
            status = TrialStatus.COMPLETED if reward is not None else TrialStatus.VERIFIER_ERROR
            records.append(rec(f"{task}{i}", task, reward, status=status))
        expected.append(outcomes)
    s = summarize(records, planned=20)
    for k in range(1, 6):
        want = statistics.fmean(
            brute_pass_at_k(5, sum(1 for r in o if r == 1.0), k) for o in expected
        )
        assert s.pass_at_k[str(k)] == pytest.approx(want, abs=1e-12)
        want_hat = statistics.fmean(
            brute_pass_hat_k(5, sum(1 for r in o if r == 1.0), k) for o in expected
        )
        assert s.pass_hat_k[str(k)] == pytest.approx(want_hat, abs=1e-12)
    task_means = [sum(r or 0.0 for r in o) / 5 for o in expected]
    ci = s.ci["mean_reward"]
    assert ci is not None and ci[0] <= statistics.fmean(task_means) <= ci[1]
    assert s.mean_reward == pytest.approx(statistics.fmean(task_means))


def test_the_plan_per_task_counts_a_task_without_any_record() -> None:
    records = [rec("a0", "A", 1.0), rec("a1", "A", 1.0)]
    s = summarize(records, planned_tasks={"A": 2, "B": 2})
    assert (s.planned, s.recorded, s.unrecorded, s.tasks) == (4, 2, 2, 2)
    assert s.mean_reward == 0.5 and s.pass_at_k == {"1": 0.5, "2": 0.5}
    assert s.pass_k_tasks == 2
    b = s.per_task["B"]
    assert (b.trials, b.planned, b.ungraded, b.mean_reward) == (0, 2, 2, 0.0)
    assert s.per_task["A"].planned == 2
    assert s.ungraded.by_status == {"unrecorded": 2}
    assert s.graded_only.pass_at_k == {"1": 1.0, "2": 1.0}
    ci = s.ci["mean_reward"]
    assert ci is not None and ci[0] == 0.0 and ci[1] == 1.0


def test_a_forged_huge_plan_costs_no_more_than_the_records() -> None:
    """``harness.load_run`` takes the plan from an untrusted ``summary.json``."""
    records = [rec("a0", "A", 1.0), rec("a1", "A", 0.0)]
    s = summarize(records, planned_tasks={"A": 10**15, "B": 10**15})
    assert set(s.pass_at_k) == {"1", "2"}  # k stops at the most trials a task recorded
    assert s.mean_reward == pytest.approx(1 / (2 * 10**15))
    assert s.per_task["A"].variance is not None
