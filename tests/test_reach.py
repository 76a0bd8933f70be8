"""``map_at_once``: every item at once, each answer or failure typed and named by its item."""

from __future__ import annotations

import threading

import pytest

from ddptui.remote.reach import Done, Failed, answers, failures, map_at_once


def test_each_item_answers_or_fails_beside_the_others_in_order() -> None:
    def half(n: int) -> int:
        if n % 2:
            raise ValueError(f"{n} is odd")
        return n // 2

    got = map_at_once([4, 3, 8, 5], half)
    assert got[0] == Done(4, 2) and got[2] == Done(8, 4)
    assert [f.item for f in failures(got)] == [3, 5]
    assert [str(f.error) for f in failures(got)] == ["3 is odd", "5 is odd"]
    assert [(d.item, d.value) for d in answers(got)] == [(4, 2), (8, 4)]
    assert all(isinstance(r, Done | Failed) for r in got)
    assert map_at_once([], half) == []


def test_the_items_run_together_not_one_after_another() -> None:
    """Eight calls that each wait for all eight: one after another, the first would wait for
    ever (the barrier's timeout fails it, and so the test)."""
    barrier = threading.Barrier(8, timeout=20)
    got = map_at_once(list(range(8)), lambda i: barrier.wait() >= 0)
    assert failures(got) == [], failures(got)
    assert len(answers(got)) == 8


def test_an_exception_that_is_not_an_error_is_not_swallowed() -> None:
    """A KeyboardInterrupt or SystemExit in a call is the process's, not one item's failure."""
    def leave(_: int) -> None:
        raise SystemExit(3)

    with pytest.raises(SystemExit):
        map_at_once([1], leave)
