"""Ranks as one curve: per screen column, the median across ranks and their min-max band.

Sixteen ranks drawn as sixteen lines are a knot; what a reader wants is where the ranks
agree and how far apart they are, and which one leaves the others (the insight judge names
it, :mod:`ddptui.insight.divergence`; the chart draws its own line over the band). Each rank's
points are those the chart already binned by column (:func:`ddptui.chart.downsample.
bin_columns`: a column's lowest and highest point of the rank, or all of its points when it
has no more than two a column), smoothed first when smoothing is on. In each column:

* a rank's value is the mean of its binned points there;
* the median is the median of those values over the ranks that have points in the column;
* the band spans the lowest and the highest binned point of any rank in the column (so a
  spike of one rank still widens it, as it shows in that rank's own line).

A column no rank has a finite point in is left out (a gap). Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


class RankView(StrEnum):
    """How a series several ranks report is drawn; ``b`` steps through them."""

    BAND = "band"
    """The median across ranks over their min-max band."""
    EACH = "each"
    """Every rank's own line."""

    @property
    def words(self) -> str:
        """What the chart's title says of it."""
        return "ranks: median, min–max band" if self is RankView.BAND else "ranks: each"

    def next(self) -> RankView:
        return RankView.EACH if self is RankView.BAND else RankView.BAND


@dataclass(frozen=True, slots=True)
class Band:
    """One value per column that some rank has points in: the mean step of its points (so a
    series with fewer points than columns keeps its steps), the ranks' lowest point, their
    median value and their highest point."""

    steps: list[float]
    lows: list[float]
    medians: list[float]
    highs: list[float]


def column_of(x: float, lo: float, hi: float, columns: int) -> int:
    """The column ``x`` falls in, of ``columns`` equal spans of ``lo``..``hi`` (the last one
    holding ``hi``): the columns :func:`~ddptui.chart.downsample.bin_columns` cuts."""
    if hi <= lo:
        return 0
    return min(columns - 1, max(0, int((x - lo) / (hi - lo) * columns)))


def rank_band(ranks: Sequence[tuple[Sequence[float], Sequence[float]]], lo: float, hi: float,
              columns: int) -> Band:
    """The band of ``ranks`` (each rank's binned steps and values) over ``columns`` columns
    of the steps ``lo``..``hi``; non-finite values and points outside are left out."""
    columns = max(1, columns)
    lows = [math.inf] * columns
    highs = [-math.inf] * columns
    values: list[list[float]] = [[] for _ in range(columns)]
    steps = [0.0] * columns
    points = [0] * columns
    for xs, ys in ranks:
        sums = [0.0] * columns
        counts = [0] * columns
        for x, y in zip(xs, ys, strict=False):
            if not lo <= x <= hi or y - y != 0.0:  # outside, or NaN or an infinity
                continue
            c = column_of(x, lo, hi, columns)
            steps[c] += x
            points[c] += 1
            sums[c] += y
            counts[c] += 1
            lows[c] = min(lows[c], y)
            highs[c] = max(highs[c], y)
        for c, n in enumerate(counts):
            if n:
                values[c].append(sums[c] / n)
    out = Band([], [], [], [])
    for c, vs in enumerate(values):
        if vs:
            out.steps.append(steps[c] / points[c])
            out.lows.append(lows[c])
            out.medians.append(statistics.median(vs))
            out.highs.append(highs[c])
    return out
