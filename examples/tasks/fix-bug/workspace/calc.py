"""Small statistics helpers used by the reporting scripts."""


def mean(values):
    """Return the arithmetic mean of a non-empty sequence of numbers."""
    if not values:
        raise ValueError("mean() of an empty sequence")
    return sum(values) / len(values)


def median(values):
    """Return the median of a non-empty sequence of numbers.

    For an even number of values the median is the mean of the two middle ones.
    """
    if not values:
        raise ValueError("median() of an empty sequence")
    values.sort()
    middle = len(values) // 2
    return values[middle]


def value_range(values):
    """Return max(values) - min(values) for a non-empty sequence of numbers."""
    if not values:
        raise ValueError("value_range() of an empty sequence")
    return max(values) - min(values)
