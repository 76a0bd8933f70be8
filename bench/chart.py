"""A chart redraw of a million points: its cost against the dashboard's frame budget, and the
one-step spike it keeps where sampling loses it.

One command: ``python bench/chart.py`` (no cluster, no root). One rank's series of
``--points`` points (1,000,000 by default) with a single-step spike, drawn as the engine
draws the chart (``ddptui.chart.rows.chart_rows``) at ``--columns`` plot columns (80), in
the same run:

* ddptui, the first redraw: TensorBoard's EMA at 0.6 over every point, every point looked
  at for spikes and NaN, each block's extremes indexed, and min and max per column of the
  raw and the smoothed values (the chart as the dashboard first asks for it, or after the
  smoothing changed);
* ddptui, the next redraws, as a growing series gets them every half second: the same
  chart after ``--new`` more points (1,000), with the memo the engine keeps
  (``ddptui.chart.memo``): the passes made over the new points only, the columns binned
  from the blocks' extremes;
* the same, raw (no smoothing), and zoomed to a tenth of the steps (binned again from the
  raw points);
* the baseline: the same braille plot fed every point, unbinned (a chart that does not
  downsample).

The frame budget is the dashboard's tick: it reads the store and shows what changed 15 times
a second (``ddptui.tui.app.DRAIN_HZ``), 66.7 ms. Target: a redraw of the growing series,
smoothed, within one tick, the median of ``--rounds``; the first redraw is printed beside
it. The series are handed to the chart as they are; the copy of a million points a store's
``series`` would make is printed apart (the store keeps 20,000 points a series, so it never
copies a million). The chart is built in the engine's process, off the
dashboard's loop, and asked for at most twice a second; a redraw within one tick never
holds a chart back behind the next. The spike is looked for in the drawing, at its column
in the top row, and in what a reservoir of 1,000 samples keeps (TensorBoard's default for
scalars, ``--samples_per_plugin``), which is the sampling the binning replaces.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ddptui.chart.braille import plot
from ddptui.chart.memo import ChartMemo
from ddptui.chart.rows import Y_LABEL, chart_rows
from ddptui.chart.view import ChartView, Drawn
from ddptui.tui.app import DRAIN_HZ

BUDGET_S = 1 / DRAIN_HZ
RESERVOIR = 1_000


def series(n: int, spike_at: int) -> tuple[list[int], list[float]]:
    rng = random.Random(7)
    ys = [2.0 / (1 + i / (n / 20)) + rng.uniform(0.0, 0.05) for i in range(n)]
    ys[spike_at] = 10.0
    return list(range(n)), ys


def timed(fn: Callable[[], object], rounds: int) -> float:
    took = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        took.append(time.perf_counter() - t0)
    return statistics.median(took)


def reservoir_keeps(ys: list[float], spike_at: int, k: int, seed: int) -> bool:
    """Algorithm R, as TensorBoard's reservoir keeps a tag's points: is the spike kept?"""
    rng = random.Random(seed)
    kept = list(range(min(k, len(ys))))
    for i in range(k, len(ys)):
        j = rng.randint(0, i)
        if j < k:
            kept[j] = i
    return spike_at in kept


def spike_drawn(drawn: Drawn, column: int) -> bool:
    """The top row of the plot has a dot at the spike's column (or beside it)."""
    top = "".join(text for text, _ in drawn.rows[1][1:])
    return any(top[c].strip() for c in range(max(0, column - 1), min(len(top), column + 2)))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--points", type=int, default=1_000_000)
    p.add_argument("--columns", type=int, default=80)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--new", type=int, default=1_000)
    args = p.parse_args()
    n, cols = args.points, args.columns
    spike_at = n * 2 // 3 + 1
    xs, ys = series(n, spike_at)
    shown: list[tuple[list[int | float], list[float]]] = [(list(xs), ys)]

    def of(rank: int, name: str) -> tuple[list[int | float], list[float]]:
        return shown[0] if name == "loss" else ([], [])

    def grown(view: ChartView) -> list[float]:
        """Redraws of the series grown by --new points since the memo's last."""
        took: list[float] = []
        for _ in range(args.rounds):
            memo = ChartMemo()
            shown[0] = (list(xs[:-args.new]), ys[:-args.new])
            chart_rows(view, [0], of, width, height, memo=memo)
            shown[0][0].extend(xs[-args.new:])  # grown where it is, as the store's series
            shown[0][1].extend(ys[-args.new:])
            t0 = time.perf_counter()
            chart_rows(view, [0], of, width, height, memo=memo)
            took.append(time.perf_counter() - t0)
        return took

    width, height = cols + Y_LABEL + 1, 24
    raw_view, smooth_view = ChartView(smoothing=0.0), ChartView()
    zoom_view = ChartView(window=(spike_at - n / 20, spike_at + n / 20))
    drawn = chart_rows(smooth_view, [0], of, width, height)
    column = round(spike_at / (n - 1) * (cols - 1))
    took = {"ddptui, first redraw (smoothed)":
            timed(lambda: chart_rows(smooth_view, [0], of, width, height), args.rounds)}
    for name, view in (("ddptui, next redraw (smoothed)", smooth_view),
                       ("ddptui, next redraw (raw)", raw_view),
                       ("ddptui, next redraw (zoomed)", zoom_view)):
        took[name] = statistics.median(grown(view))
    took["(a copy of the million points)"] = timed(lambda: (list(xs), list(ys)), args.rounds)
    took["baseline: every point plotted"] = timed(
        lambda: plot([(xs, ys)], cols, height - 3), args.rounds)
    base = took["baseline: every point plotted"]
    print(f"{n:,} points, {cols} columns, median of {args.rounds}; frame budget "
          f"{BUDGET_S * 1000:.1f} ms (the dashboard's tick, {DRAIN_HZ} Hz)")
    for name, s in took.items():
        print(f"  {name:<34} {s * 1000:8.1f} ms  {s / BUDGET_S:5.2f}x budget  "
              f"{s / base:5.2f}x baseline")
    kept = sum(reservoir_keeps(ys, spike_at, RESERVOIR, seed) for seed in range(20))
    shown = spike_drawn(drawn, column)
    print(f"  the spike at step {spike_at:,}: drawn by ddptui: {'yes' if shown else 'NO'}; "
          f"kept by a reservoir of {RESERVOIR:,}: {kept} of 20 tries")
    met = took["ddptui, next redraw (smoothed)"] <= BUDGET_S and shown
    print(f"  target: the next redraw, smoothed, within one tick and the spike drawn: "
          f"{'met' if met else 'MISSED'}")
    print("all targets met" if met else "some target missed")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
