"""Shrinking series to what a widget can show: charts get width points, sparklines width cells.

A chart keeps the lowest and the highest point of each screen column (M4's idea: Jugel et
al., "M4: A Visualization-Oriented Time Series Data Aggregation", VLDB 2014), so a one-step
spike among a million points is still drawn, where sampling (TensorBoard's reservoir,
W&B's buckets) drops it. Columns are cut by step, over the steps shown, so a zoom or a pan
bins the raw points again; a series with no more points shown than two a column (an
evaluation's) is drawn whole.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from itertools import compress, count, islice
from operator import gt

BLOCKS = "▁▂▃▄▅▆▇█"


def downsample(
    xs: Sequence[float], ys: Sequence[float], buckets: int
) -> tuple[list[float], list[float]]:
    """At most ``2 * buckets + 2`` points; each bucket keeps its min and its max, so spikes
    survive, and the first and last points stay, so the x axis spans the whole series."""
    n = len(ys)
    if buckets <= 0 or n <= 2 * buckets:
        return list(xs), list(ys)
    out_x: list[float] = []
    out_y: list[float] = []
    for b in range(buckets):
        lo = b * n // buckets
        hi = (b + 1) * n // buckets
        if hi <= lo:
            continue
        seg = ys[lo:hi]  # slices, min, max and index run in C: this is called per redraw
        picks = {lo + seg.index(min(seg)), lo + seg.index(max(seg))}
        if b == 0:
            picks.add(0)
        if b == buckets - 1:
            picks.add(n - 1)
        for i in sorted(picks):
            out_x.append(xs[i])
            out_y.append(ys[i])
    return out_x, out_y


#: Points per block of an :class:`Extremes` index.
BLOCK = 256


class Extremes:
    """Where the lowest and the highest finite value of each block of :data:`BLOCK` points
    is, kept as a series grows: a column's min and max over any stretch of points is then a
    min and a max over its whole blocks' and two short slices, not over every point."""

    def __init__(self) -> None:
        self.size = 0  # points in whole blocks indexed so far
        self._lows: list[float] = []  # per block; inf (-inf) when it holds no finite value
        self._highs: list[float] = []
        self._low_at: list[int] = []
        self._high_at: list[int] = []

    def extend(self, ys: Sequence[float]) -> None:
        """Index the whole blocks of ``ys`` (the series so far) not indexed yet."""
        while self.size + BLOCK <= len(ys):
            a = self.size
            found = _extremes(ys, a, a + BLOCK)
            lo, hi = found or (-1, -1)
            self._lows.append(ys[lo] if found else math.inf)
            self._highs.append(ys[hi] if found else -math.inf)
            self._low_at.append(lo)
            self._high_at.append(hi)
            self.size = a + BLOCK

    def pick(self, ys: Sequence[float], a: int, b: int) -> tuple[int, int] | None:
        """The indexes of the lowest and the highest finite value of ``ys[a:b]``; None when
        it holds none."""
        first, last = -(-a // BLOCK), min(b, self.size) // BLOCK
        if first >= last:
            return _extremes(ys, a, b)
        lows, highs = self._lows[first:last], self._highs[first:last]
        low, high = min(lows), max(highs)
        picks = [] if low == math.inf else [(self._low_at[first + lows.index(low)],
                                             self._high_at[first + highs.index(high)])]
        picks += [p for p in (_extremes(ys, a, first * BLOCK), _extremes(ys, last * BLOCK, b))
                  if p is not None]
        if not picks:
            return None
        return (min((p[0] for p in picks), key=ys.__getitem__),
                max((p[1] for p in picks), key=ys.__getitem__))


def _extremes(ys: Sequence[float], a: int, b: int) -> tuple[int, int] | None:
    """The indexes of the first lowest and first highest finite value of ``ys[a:b]``."""
    seg = ys[a:b]  # slices, sum, min, max and index run in C
    if not seg:
        return None
    if not math.isfinite(sum(seg)):  # a NaN or an infinity inside (or a sum too big)
        finite = [y for y in seg if y - y == 0.0]
        if not finite:
            return None
        return a + seg.index(min(finite)), a + seg.index(max(finite))
    return a + seg.index(min(seg)), a + seg.index(max(seg))


def descents(xs: Sequence[float], start: int = 1) -> list[int]:
    """Where the steps go back (``xs[i] < xs[i - 1]``, from ``i = start``): a run resumed
    from an earlier checkpoint."""
    tail = xs[start - 1:]  # a slice, not islice: islice walks to its start one by one
    return list(compress(count(start), map(gt, tail, islice(tail, 1, None))))


def bin_columns(xs: Sequence[float], ys: Sequence[float], x0: float, x1: float,
                columns: int, extremes: Extremes | None = None,
                backs: Sequence[int] | None = None) -> tuple[list[float], list[float]]:
    """The points with ``x0 <= x <= x1``, and of each of ``columns`` equal spans of that
    range only the lowest and the highest (in step order), when there are more than two a
    column; non-finite values are left out (the chart marks them apart). Steps that go back
    (``backs``, else found here) start a new stretch, binned on its own. ``extremes``: the
    series' index, kept from the last redraw (else built here, one pass over the points)."""
    if extremes is None:
        extremes = Extremes()
        extremes.extend(ys)
    if backs is None:
        backs = descents(xs)
    out_x: list[float] = []
    out_y: list[float] = []
    for lo, hi in zip([0, *backs], [*backs, len(xs)], strict=True):
        first, last = bisect_left(xs, x0, lo, hi), bisect_right(xs, x1, lo, hi)
        if last - first <= 2 * max(1, columns):
            for i in range(first, last):
                if ys[i] - ys[i] == 0.0:
                    out_x.append(xs[i])
                    out_y.append(ys[i])
            continue
        span = (x1 - x0) / columns
        start = first
        for c in range(1, columns + 1):
            end = last if c == columns else bisect_left(xs, x0 + c * span, start, last)
            found = extremes.pick(ys, start, end) if end > start else None
            if found is not None:
                for k in sorted(set(found)):
                    out_x.append(xs[k])
                    out_y.append(ys[k])
            start = max(start, end)
    return out_x, out_y


def sparkline(values: Sequence[float], width: int) -> str:
    """The last values as block characters, one cell per bucket mean."""
    values = [v for v in values if v - v == 0.0]  # a NaN or an infinity has no height
    if width <= 0 or not values:
        return ""
    n = len(values)
    if n > width:
        means = []
        for b in range(width):
            lo = b * n // width
            hi = max(lo + 1, (b + 1) * n // width)
            seg = values[lo:hi]
            means.append(sum(seg) / len(seg))
    else:
        means = list(values)
    lo_v, hi_v = min(means), max(means)
    span = hi_v - lo_v
    if span <= 0:
        return BLOCKS[0] * len(means)
    top = len(BLOCKS) - 1
    return "".join(BLOCKS[round((v - lo_v) / span * top)] for v in means)
