"""When the warm pool makes containers ahead: only for a shape that repeats (no engine)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable

from sandbox.docker.warm import MAX_SPARES, WarmPool, spares_for


class Maker:
    """Stands in for starting a container: counts what was made, by shape."""

    def __init__(self) -> None:
        self.made: list[str] = []
        self.disposed: list[tuple[str, int]] = []
        self._lock = threading.Lock()
        self._ids = itertools.count()

    def make_for(self, shape: str) -> Callable[[], tuple[str, int]]:
        def make() -> tuple[str, int]:
            with self._lock:
                self.made.append(shape)
                return shape, next(self._ids)

        return make

    def dispose(self, warm: tuple[str, int]) -> None:
        with self._lock:
            self.disposed.append(warm)


def _run(shapes: str, spares: int = 1) -> tuple[Maker, list[tuple[str, int] | None]]:
    maker = Maker()
    pool: WarmPool[tuple[str, int]] = WarmPool(spares, maker.dispose)
    taken = []
    for i, shape in enumerate(shapes):
        got = pool.take(shape, maker.make_for(shape), lambda _w: True, upcoming=len(shapes) - i - 1)
        assert got is None or got[0] == shape  # a warm container only ever serves its shape
        taken.append(got)
        pool._maker.submit(lambda: None).result()  # let the spare be made before the next
    assert pool.drain() == []
    return maker, taken


def test_interleaved_shapes_make_nothing_ahead() -> None:
    """Tasks with images of their own, interleaved: nothing is made just to be thrown away."""
    maker, taken = _run("ABCABCABC")
    assert maker.made == [] and taken == [None] * 9


def test_one_shape_is_served_warm_from_the_second_trial_on() -> None:
    maker, taken = _run("AAAAA")
    assert taken[:2] == [None, None]
    assert all(t is not None for t in taken[2:])
    ids = [t[1] for t in taken if t is not None]
    assert len(set(ids)) == len(ids)  # each warm container serves one trial
    assert maker.made == ["A"] * 3  # none made for after the last trial
    assert maker.disposed == []


def test_tasks_sharing_a_shape_share_warm_containers_and_a_change_wastes_at_most_one() -> None:
    maker, taken = _run("AAAABBBB")
    assert sum(t is not None for t in taken) == 4  # A's last two, B's last two
    assert [d[0] for d in maker.disposed] == ["A"]  # the one A made before B came


def test_a_run_makes_one_container_more_than_its_j_ahead_and_never_more_than_four() -> None:
    """At ``-j 1`` two are made at once: a trial never waits for the whole of one make."""
    assert [spares_for(j) for j in (1, 2, 3, 4, 8)] == [2, 3, 4, 4, 4]
    assert spares_for(64) == MAX_SPARES


def test_settle_waits_for_finished_trials_removals_but_not_for_untaken_spares() -> None:
    """A make short of disk room waits for trials' removals, never for a spare's discard.

    A finished trial holds its share of the disk until its removal is done; a make that
    found no room asks again after :meth:`WarmPool.settle`. A discarded spare's removal
    waits for that spare's own make, so waiting for it could wait for itself.
    """
    pool: WarmPool[str] = WarmPool(1, lambda _w: None)
    assert pool.settle() is False  # nothing queued: nothing to wait for
    release, removed = threading.Event(), threading.Event()

    def removal() -> None:
        release.wait(10)
        removed.set()

    pool.later(removal)
    settled: list[bool] = []
    waiter = threading.Thread(target=lambda: settled.append(pool.settle()))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and not removed.is_set()  # still waiting for the removal
    release.set()
    waiter.join(10)
    assert settled == [True] and removed.is_set()

    # A spare of another shape, evicted while its make is still running: its discard
    # is queued, and settle() returns without it.
    making = threading.Event()
    finish = threading.Event()

    def slow_make() -> str:
        making.set()
        finish.wait(10)
        return "A"

    pool.take("A", slow_make, lambda _w: True, upcoming=2)
    pool.take("A", slow_make, lambda _w: True, upcoming=2)  # repeats: one made ahead
    assert making.wait(10)
    pool.take("B", lambda: "B", lambda _w: True, upcoming=2)
    pool.take("B", lambda: "B", lambda _w: True, upcoming=2)  # repeats: evicts A's spare
    done = threading.Thread(target=pool.settle)
    done.start()
    done.join(5)
    assert not done.is_alive()  # it did not wait for A's discard
    finish.set()
    assert pool.drain() == []
