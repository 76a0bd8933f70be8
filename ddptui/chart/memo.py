"""What a chart computed of each rank's series, kept for its next redraw.

A redraw comes every half second while a series grows at its end. Smoothing, looking for
spikes and indexing each block's extremes are passes over every point (a million points:
some hundreds of milliseconds of Python); with this memo a redraw makes them over the new
points only, and bins by column from the blocks' extremes. A series is taken as grown when
its first point and the last point seen are where they were; when the store's bounded series
let its oldest points go, the memo finds the last point seen again (steps in order) and
drops as many from its front; anything else (a value replaced, a run resumed from an earlier
step) is computed again from the start. The smoothing then runs over every point the chart
saw, the oldest gone included, where TensorBoard's runs over the points it holds: the same
values once the dropped ones weigh nothing (``w ** n`` below a float's precision).

Pure: no I/O, no clock; a lock held through a whole chart's build, since the engine answers
each chart call on a thread of its own.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field

from ddptui.chart.downsample import Extremes, descents
from ddptui.chart.smooth import Ema, constant
from ddptui.insight.marks import MarkFinder


@dataclass(slots=True)
class Followed:
    """One rank's series of one metric, as far as the chart has seen it."""

    rank: int
    count: int = 0
    first: tuple[float, float] = (0.0, 0.0)
    last: tuple[float, float] = (0.0, 0.0)
    marks: MarkFinder = field(init=False)
    raw: Extremes = field(default_factory=Extremes)
    backs: list[int] = field(default_factory=list)
    ema: Ema | None = None
    smooth: Extremes = field(default_factory=Extremes)

    def __post_init__(self) -> None:
        self.marks = MarkFinder(self.rank)

    def grown(self, xs: Sequence[float], ys: Sequence[float]) -> bool:
        """``xs``, ``ys`` are what was seen and more (its front cut as a bounded series
        cuts it); the memo is brought to where they start."""
        n = self.count
        if not n or len(xs) < 1:
            return False
        if len(xs) >= n and (xs[0], ys[0]) == self.first and (xs[n - 1], ys[n - 1]) == self.last:
            return True
        if xs[0] <= self.first[0] or self.backs:
            return False
        k = bisect_left(xs, self.last[0])
        if k >= len(xs) or k >= n - 1 or (xs[k], ys[k]) != self.last:
            return False
        dropped = n - 1 - k
        self.count, self.first = k + 1, (xs[0], ys[0])
        self.marks.marks = [m for m in self.marks.marks if m.step >= xs[0]]
        self.raw, self.smooth = Extremes(), Extremes()  # their blocks start at index 0
        if self.ema is not None:
            del self.ema.values[:dropped]
        return True

    def catch_up(self, xs: Sequence[float], ys: Sequence[float], weight: float) -> None:
        n = self.count
        if n < len(xs):
            self.backs += descents(xs, max(1, n))
            self.marks.extend(xs[n:], ys[n:])
            self.count, self.last = len(xs), (xs[-1], ys[-1])
            if n == 0:
                self.first = (xs[0], ys[0])
        self.raw.extend(ys)
        if weight <= 0:
            return
        ema = self.ema
        if ema is None or ema.weight != weight:
            ema = self.ema = Ema(weight)
            self.smooth = Extremes()
        ema.extend(ys[len(ema.values):])
        self.smooth.extend(ema.values)

    def smoothed(self, ys: Sequence[float]) -> Sequence[float]:
        """The series smoothed (as it is when it is constant: TensorBoard's rule)."""
        if self.ema is None or constant(ys):
            return ys
        return self.ema.values


class ChartMemo:
    """The series of the metric drawn last, per rank; another metric starts it afresh."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        """Held while a chart is built from the memo (``ddptui.chart.rows.chart_rows``)."""
        self._metric = ""
        self._series: dict[int, Followed] = {}

    def follow(self, rank: int, metric: str, xs: Sequence[float], ys: Sequence[float],
               weight: float) -> Followed:
        """Rank ``rank``'s series of ``metric`` (``xs``, ``ys``: every point it has now),
        brought up to date: its marks, its smoothing at ``weight``, its blocks' extremes.
        Call it holding :attr:`lock`."""
        if metric != self._metric:
            self._metric, self._series = metric, {}
        followed = self._series.get(rank)
        if followed is None or not followed.grown(xs, ys):
            followed = self._series[rank] = Followed(rank)
        followed.catch_up(xs, ys, weight)
        return followed
