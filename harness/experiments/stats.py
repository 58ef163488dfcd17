"""Descriptive statistics of per-run values, exactly as Python's ``statistics`` computes them.

``{n, mean, median, stdev, min, max}`` of the values that are real numbers: ``None`` (a
metric a run did not measure) is left out silently, anything else that is not a finite
number is left out with a warning (it exposes a record or summary that changed shape), and
``n`` counts the values that contributed. ``stdev`` is the sample standard deviation
(``statistics.stdev``) and is None below two values; every figure is None when ``n`` is 0.
Nothing is rounded: a summary's figures equal ``statistics.mean``/``median``/``stdev`` of
the per-run values it lists.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = ["Stats", "describe", "numbers_of"]


class Stats(BaseModel):
    """One metric across runs.

    Attributes:
        n: How many runs contributed a number.
        mean: ``statistics.mean`` of those numbers.
        median: ``statistics.median``.
        stdev: ``statistics.stdev`` (sample, n - 1); None with fewer than 2 numbers.
        min: The smallest.
        max: The largest.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    n: int
    mean: float | None = None
    median: float | None = None
    stdev: float | None = None
    min: float | None = None
    max: float | None = None


def numbers_of(
    values: Iterable[Any], *, name: str, warn: Callable[[str], None]
) -> list[int | float]:
    """The values that are finite real numbers (booleans are not), in order.

    Args:
        values: Per-run values.
        name: The metric, for warnings.
        warn: Called once per value left out that is neither None nor a number.
    """
    numbers: list[int | float] = []
    for value in values:
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            warn(f"{name}: left out a non-numeric value {value!r}")
            continue
        if not math.isfinite(value):
            warn(f"{name}: left out a non-finite value {value!r}")
            continue
        numbers.append(value)
    return numbers


def describe(values: Iterable[Any], *, name: str, warn: Callable[[str], None]) -> Stats:
    """``{n, mean, median, stdev, min, max}`` of the numbers among ``values``."""
    numbers = numbers_of(values, name=name, warn=warn)
    if not numbers:
        return Stats(n=0)
    return Stats(
        n=len(numbers),
        mean=statistics.mean(numbers),
        median=statistics.median(numbers),
        stdev=statistics.stdev(numbers) if len(numbers) >= 2 else None,
        min=min(numbers),
        max=max(numbers),
    )
