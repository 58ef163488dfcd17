"""Hidden unit tests for fix-bug; run by test.sh with the workspace as argv[1]."""

import sys
import unittest

sys.path.insert(0, sys.argv[1])
import calc  # noqa: E402


class MedianTest(unittest.TestCase):
    """median() must be correct and must not modify its argument."""

    def test_odd(self):
        """Odd lengths give the middle value of the sorted data."""
        self.assertEqual(calc.median([3, 1, 2]), 2)
        self.assertEqual(calc.median([7]), 7)
        self.assertEqual(calc.median([9, -4, 0, 12, 5]), 5)

    def test_even(self):
        """Even lengths give the mean of the two middle values."""
        self.assertEqual(calc.median([4, 1, 3, 2]), 2.5)
        self.assertEqual(calc.median([10, 20]), 15)
        self.assertEqual(calc.median([-8, 6, -2, 100, 1, 3]), 2)
        self.assertAlmostEqual(calc.median([0.5, 0.25, 1.0, 2.0]), 0.75)

    def test_does_not_mutate(self):
        """The caller's list keeps its order."""
        xs = [5, 3, 9, 1]
        calc.median(xs)
        self.assertEqual(xs, [5, 3, 9, 1])

    def test_tuple(self):
        """Tuples (which have no .sort()) work."""
        self.assertEqual(calc.median((8, 2, 6)), 6)
        self.assertEqual(calc.median((8, 2, 6, 4)), 5)

    def test_empty(self):
        """An empty sequence raises ValueError."""
        with self.assertRaises(ValueError):
            calc.median([])


class OthersStillWorkTest(unittest.TestCase):
    """The functions that were not broken stay correct."""

    def test_mean(self):
        """mean() is the arithmetic mean."""
        self.assertEqual(calc.mean([1, 2, 3, 4]), 2.5)
        with self.assertRaises(ValueError):
            calc.mean([])

    def test_value_range(self):
        """value_range() is max - min."""
        self.assertEqual(calc.value_range([3, -2, 10]), 12)
        with self.assertRaises(ValueError):
            calc.value_range([])


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]], verbosity=2)
