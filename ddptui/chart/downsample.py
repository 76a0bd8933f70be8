"""Shrinking series to what a widget can show: charts get width points, sparklines width cells."""

from __future__ import annotations

from collections.abc import Sequence

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


def sparkline(values: Sequence[float], width: int) -> str:
    """The last values as block characters, one cell per bucket mean."""
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
