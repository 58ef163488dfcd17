"""Paired experiments: the plan's order, pair blocking, the headline, flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config import ConfigError
from harness.experiments.design import load_design, plan_runs
from harness.experiments.pairing import Observation, compare, flaky_keys

C, T = "without_docs", "with_docs"


def obs(
    task: str, variant: str, rep: int, reward: float | None, status: str = "completed", **kw
) -> Observation:
    return Observation(
        task=task, model="-", repetition=rep, variant=variant, status=status, reward=reward, **kw
    )


def keys(tasks: list[str], reps: int) -> list[tuple[str, str, int]]:
    return [(t, "-", r) for t in tasks for r in range(1, reps + 1)]


def run_compare(observations: list[Observation], tasks: list[str], reps: int = 1):
    return compare(observations, control=C, treatment=T, keys=keys(tasks, reps), threshold=1.0)


def test_lift_is_the_difference_of_pass_rates_with_a_bootstrap_ci() -> None:
    observations = [
        obs("a", C, 1, 1.0),
        obs("a", T, 1, 1.0),
        obs("b", C, 1, 0.0),
        obs("b", T, 1, 1.0),
        obs("c", C, 1, 0.0),
        obs("c", T, 1, 0.5),
    ]
    result = run_compare(observations, ["a", "b", "c"])
    h = result.headline
    assert h.published and result.blocked_pairs == 0 and result.eligible_pairs == 3
    assert (h.control_pass_rate, h.treatment_pass_rate) == (1 / 3, 2 / 3)
    assert h.lift == pytest.approx(1 / 3)
    assert h.ci is not None and h.ci[0] <= h.lift <= h.ci[1]
    assert h.mean_reward_delta == pytest.approx(0.5)
    assert result.flags == []
    by_task = {t.task: t for t in result.tasks}
    assert by_task["a"].flags == ["no-lift", "control-saturated", "treatment-saturated"]
    assert by_task["b"].delta == 1.0 and by_task["b"].flags == ["treatment-saturated"]


@pytest.mark.parametrize(
    ("control", "treatment", "flags"),
    [
        ([1.0, 0.0], [1.0, 0.0], ["no-lift"]),
        ([1.0, 1.0], [0.0, 1.0], ["negative-delta", "control-saturated"]),
        ([0.0, 0.0], [1.0, 1.0], ["treatment-saturated"]),
        ([1.0, 1.0], [1.0, 1.0], ["no-lift", "control-saturated", "treatment-saturated"]),
    ],
)
def test_overall_flags(control: list[float], treatment: list[float], flags: list[str]) -> None:
    observations = [obs(t, C, 1, r) for t, r in zip("ab", control, strict=True)]
    observations += [obs(t, T, 1, r) for t, r in zip("ab", treatment, strict=True)]
    assert run_compare(observations, ["a", "b"]).flags == flags


@pytest.mark.parametrize(
    ("side", "reason"),
    [
        ([], "with_docs: expected 1 observation, found 0"),
        ([obs("a", T, 1, 1.0), obs("a", T, 1, 1.0)], "with_docs: expected 1 observation, found 2"),
        ([obs("a", T, 1, None, status="cancelled")], "with_docs: skipped (cancelled)"),
        (
            [obs("a", T, 1, 0.0, status="agent_error", error="Model call failed: HTTP 500")],
            "with_docs: errored (agent_error: Model call failed: HTTP 500)",
        ),
        ([obs("a", T, 1, None)], "with_docs: ungraded"),
    ],
)
def test_a_blocked_pair_withholds_the_headline(side: list[Observation], reason: str) -> None:
    observations = [obs("a", C, 1, 1.0), obs("b", C, 1, 0.0), obs("b", T, 1, 1.0), *side]
    result = run_compare(observations, ["a", "b"])
    assert result.blocked_pairs == 1 and result.eligible_pairs == 1
    assert [(b.task, b.repetition, b.reasons) for b in result.blocked] == [("a", 1, [reason])]
    h = result.headline
    assert not h.published and h.reason == "withheld because pairs are blocked"
    assert (h.lift, h.control_pass_rate, h.treatment_pass_rate, h.ci) == (None, None, None, None)
    assert result.flags == []


def test_both_sides_blocked_give_two_reasons_and_no_pairs_is_unavailable() -> None:
    result = run_compare([], ["a"])
    assert result.blocked[0].reasons == [
        "without_docs: expected 1 observation, found 0",
        "with_docs: expected 1 observation, found 0",
    ]
    empty = run_compare([], [])
    assert not empty.headline.published and empty.headline.reason == "unavailable: no eligible pair"


def test_flaky_is_flagged_even_without_a_headline() -> None:
    observations = [
        obs("a", C, 1, 1.0),
        obs("a", T, 1, 1.0),
        obs("a", C, 2, 0.0),
        obs("a", T, 2, 1.0),
        obs("b", C, 1, 1.0),
        obs("b", T, 1, 0.0, status="agent_error"),
        obs("b", C, 2, 1.0),
        obs("b", T, 2, 1.0),
    ]
    assert flaky_keys(observations, 1.0) == {("a", "-", C)}
    result = run_compare(observations, ["a", "b"], reps=2)
    assert not result.headline.published
    assert result.flags == ["flaky"]
    assert {t.task: t.flags for t in result.tasks}["a"] == ["treatment-saturated", "flaky"]


def test_paired_metrics_use_pairs_where_both_sides_measured() -> None:
    observations = [
        obs("a", C, 1, 1.0, metrics={"total_tokens": 100, "cost_usd": None}),
        obs("a", T, 1, 1.0, metrics={"total_tokens": 160, "cost_usd": 0.5}),
        obs("b", C, 1, 1.0, metrics={"total_tokens": None}),
        obs("b", T, 1, 1.0, metrics={"total_tokens": 10}),
    ]
    metrics = run_compare(observations, ["a", "b"]).paired_metrics
    tokens = metrics["total_tokens"]
    assert (tokens.pairs, tokens.control_mean, tokens.treatment_mean, tokens.mean_delta) == (
        1,
        100,
        160,
        60,
    )
    assert metrics["cost_usd"].pairs == 0 and metrics["cost_usd"].mean_delta is None


def _experiment(tmp_path: Path, variants: str, extra: str = "") -> Path:
    tasks = tmp_path / "tasks"
    tasks.mkdir(exist_ok=True)
    path = tmp_path / "exp.toml"
    path.write_text(
        f'[experiment]\nruns_per_variant = 2\n{extra}\n[run]\ntasks.paths = ["tasks"]\n{variants}'
    )
    return path


def test_the_plan_alternates_which_side_runs_first(tmp_path: Path) -> None:
    design = load_design(
        _experiment(
            tmp_path,
            '[variants.a]\nagent.name = "nop"\n[variants.b]\nagent.name = "oracle"\n'
            '[variants.c]\nagent.name = "nop"\n',
            'control = "b"\n',
        )
    )
    assert (design.control, design.treatments) == ("b", ["a", "c"])
    order = [(p.repetition, p.variant) for p in plan_runs(design)]
    assert order == [(1, "b"), (1, "a"), (1, "c"), (2, "c"), (2, "a"), (2, "b")]
    assert plan_runs(design)[0].run_name == "rep-001--b"


@pytest.mark.parametrize(
    ("variants", "extra", "message"),
    [
        ('[variants.a]\nagent.name = "nop"\n', "", "at least two"),
        ("[variants.a]\nrollouts = 3\n[variants.b]\n", "", "decided by the experiment"),
        ("[variants.a]\n[variants.b]\noverlay.bogus = 1\n", "", "variants.b.overlay"),
        ("[variants.a]\n[variants.b]\n", 'control = "zzz"\n', "no variant named zzz"),
        (
            '[variants.a]\nmodel = "faux/x"\n[variants.b]\n',
            'models = ["faux/y"]\n',
            "models decides",
        ),
        ("[variants.a]\nagent.bogus = 1\n[variants.b]\n", "", "unknown config key"),
    ],
)
def test_bad_designs_are_config_errors(
    tmp_path: Path, variants: str, extra: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_design(_experiment(tmp_path, variants, extra))
