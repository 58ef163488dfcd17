"""Trials statistics: exactly Python's ``statistics`` on the per-run values, null-aware."""

from __future__ import annotations

import statistics

import pytest

from harness.experiments.runs import find_run_dirs
from harness.experiments.stats import Stats, describe
from harness.experiments.trials import aggregate


def _describe(values: list[object]) -> tuple[Stats, list[str]]:
    warnings: list[str] = []
    return describe(values, name="m", warn=warnings.append), warnings


@pytest.mark.parametrize(
    "values",
    [
        [0.1, 0.2, 0.7],
        [1, 2, 3, 4],
        [0.3333333333333333, 0.6666666666666666, 1.0, 0.0, 0.25],
        [12345, 11509, 13001],
    ],
)
def test_figures_equal_the_statistics_module(values: list[float]) -> None:
    stats, warnings = _describe(list(values))
    assert warnings == []
    assert stats.n == len(values)
    assert stats.mean == statistics.mean(values)
    assert stats.median == statistics.median(values)
    assert stats.stdev == statistics.stdev(values)
    assert (stats.min, stats.max) == (min(values), max(values))


def test_one_value_has_no_stdev_and_none_has_no_figure() -> None:
    one, _ = _describe([0.5])
    assert (one.n, one.mean, one.median, one.stdev) == (1, 0.5, 0.5, None)
    empty, _ = _describe([None, None])
    assert empty == Stats(n=0)
    assert (empty.mean, empty.median, empty.stdev, empty.min, empty.max) == (None,) * 5


def test_null_is_left_out_silently_and_n_counts_contributors() -> None:
    stats, warnings = _describe([1.0, None, 3.0])
    assert (stats.n, stats.mean, stats.stdev) == (2, 2.0, statistics.stdev([1.0, 3.0]))
    assert warnings == []


def test_non_numbers_are_left_out_with_a_warning() -> None:
    stats, warnings = _describe([1.0, True, "0.5", float("nan"), 2.0])
    assert (stats.n, stats.mean) == (2, 1.5)
    assert len(warnings) == 3
    assert "True" in warnings[0] and "'0.5'" in warnings[1] and "nan" in warnings[2]


def test_aggregate_without_run_dirs_is_a_usage_error(tmp_path) -> None:
    (tmp_path / "empty").mkdir()
    assert find_run_dirs([tmp_path]) == []
    with pytest.raises(Exception, match="no run dir"):
        aggregate([tmp_path])
