"""Ranks as one curve (ddptui/chart/band.py): per column the ranks' median over their min-max
band, NaN left out, one rank drawn as it always was, each rank smoothed before the median;
the rank the insight judge names drawn out over the rest, in both views, from the store's
judge and not from a rule of the chart's own."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable

from replay import T0, node_events

from ddptui.chart.band import RankView, column_of, rank_band
from ddptui.chart.braille import HALF_TONE, plot
from ddptui.chart.rows import BAND, FLAGGED, MEDIAN, chart_rows, store_chart
from ddptui.chart.smooth import ema
from ddptui.chart.view import ChartView
from ddptui.events import NodeState, NodeStatus, RunStatus
from ddptui.store.store import Store
from ddptui.tui.compare import compare_chart
from ddptui.tui.overlay import Overlay

Points = tuple[list[int | float], list[float]]


def test_each_column_has_the_ranks_median_and_their_lowest_and_highest_point() -> None:
    # 4 columns of steps 0-8 (each 2 steps wide); rank 2 has a NaN at step 1, and nothing
    # past step 3
    ranks = [([0, 1, 2, 3, 6], [1.0, 3.0, 5.0, 5.0, 2.0]),
             ([0, 1, 2, 3, 6], [2.0, 2.0, 6.0, 8.0, 4.0]),
             ([0, 1, 2, 3], [10.0, math.nan, 7.0, 7.0])]
    band = rank_band(ranks, 0, 8, 4)
    # column 0: rank means 2, 2, 10; column 1: 5, 7, 7; column 3: 2, 4 (column 2: nobody)
    assert band.medians == [2.0, 7.0, 3.0]
    assert band.lows == [1.0, 5.0, 2.0]
    assert band.highs == [10.0, 8.0, 4.0]
    # where the points are, not the columns' middles (a NaN's step left out too)
    assert band.steps == [0.4, 2.5, 6.0]


def test_a_column_of_nan_only_is_a_gap_and_points_outside_the_window_are_left_out() -> None:
    band = rank_band([([0, 5, 10], [math.nan, 1.0, 99.0]), ([0, 5], [math.inf, 3.0])], 1, 9, 3)
    assert (band.steps, band.lows, band.medians, band.highs) == ([5.0], [1.0], [2.0], [3.0])
    assert rank_band([], 0, 1, 10).steps == []


def test_columns_are_cut_as_the_binning_cuts_them() -> None:
    assert [column_of(x, 0, 10, 5) for x in (0, 1.99, 2, 9.99, 10)] == [0, 0, 1, 4, 4]
    assert column_of(3, 3, 3, 5) == 0


def test_a_fill_is_a_half_tone_and_a_line_through_it_shows_its_own_dots() -> None:
    fill = (0, [0.0, 10.0], [0.0, 0.0], [10.0, 10.0])
    frame = plot([([], []), ([0, 10], [5.0, 5.0])], 6, 4, fills=[fill])
    assert frame is not None
    # the fill spans the whole plot, joined between its two ends; the line crosses one row
    line = [r for r, row in enumerate(frame.rows) if {o for _, o in row} == {1}]
    assert len(line) == 1 and all(ch != HALF_TONE for ch, _ in frame.rows[line[0]])
    assert all(cell == (HALF_TONE, 0) for r, row in enumerate(frame.rows) if r != line[0]
               for cell in row)


def _curves(n: int = 4, steps: int = 60) -> dict[int, Points]:
    """``n`` ranks of a falling loss, each a little off the others."""
    return {r: (list(range(steps)), [3.0 / (1 + s / 10) + 0.1 * ((s * (r + 3)) % 5)
                                     for s in range(steps)]) for r in range(n)}


def _series(curves: dict[int, Points]) -> Callable[[int, str], Points]:
    def series(rank: int, name: str) -> Points:
        return curves.get(rank, ([], [])) if name == "loss" else ([], [])
    return series


def test_the_median_is_of_each_ranks_smoothed_values() -> None:
    """Fewer steps than columns: each column holds one step of each rank, so the median is
    that of the ranks' own smoothed values there, not the smoothing of their median."""
    curves = _curves(steps=30)
    curves[2] = (curves[2][0], [v * (3 if s % 2 else 1) for s, v in enumerate(curves[2][1])])
    drawn = chart_rows(ChartView(smoothing=0.6), [0, 1, 2, 3], _series(curves), 80, 20)
    assert drawn.band is not None and drawn.band.steps == [float(s) for s in range(30)]
    smoothed = [ema(curves[r][1], 0.6) for r in range(4)]
    want = [statistics.median(s[i] for s in smoothed) for i in range(30)]
    assert drawn.band.medians == want
    assert drawn.band.lows == [min(s[i] for s in smoothed) for i in range(30)]
    median_first = ema([statistics.median(curves[r][1][i] for r in range(4))
                        for i in range(30)], 0.6)
    assert drawn.band.medians != median_first  # the other order would draw another line
    raw = chart_rows(ChartView(smoothing=0.0), [0, 1, 2, 3], _series(curves), 80, 20)
    assert raw.band is not None
    assert raw.band.highs == [max(curves[r][1][i] for r in range(4)) for i in range(30)]


def test_several_ranks_draw_a_band_and_each_rank_on_the_key() -> None:
    series = _series(_curves())
    banded = chart_rows(ChartView(), [0, 1, 2, 3], series, 80, 20)
    codes = {code for row in banded.rows[1:] for _, code in row}
    assert banded.band is not None and {BAND, MEDIAN} <= codes and not codes & {0, 1, 2, 3}
    assert "ranks: median, min–max band (4)" in "".join(t for t, _ in banded.rows[0])
    assert sum(t.count(HALF_TONE) for row in banded.rows for t, _ in row) > 10
    each = chart_rows(ChartView(ranks=RankView.EACH), [0, 1, 2, 3], series, 80, 20)
    codes = {code for row in each.rows[1:] for _, code in row}
    assert each.band is None and {0, 1, 2, 3} <= codes and BAND not in codes
    assert [t for t, _ in each.rows[0][2:]] == ["r0 ", "r1 ", "r2 ", "r3 ", "ranks: each "]
    assert banded.plotted == each.plotted  # the points each rank gave, either way


def test_a_series_one_rank_reports_is_drawn_as_it_always_was() -> None:
    curves = _curves(n=1)
    series = _series(curves)
    for smoothing in (0.0, 0.6):
        band = chart_rows(ChartView(smoothing=smoothing), [0, 1, 2], series, 60, 16)
        each = chart_rows(ChartView(smoothing=smoothing, ranks=RankView.EACH), [0, 1, 2],
                          series, 60, 16)
        assert band.band is None and band.rows == each.rows
        assert "ranks:" not in "".join(t for t, _ in band.rows[0])


def test_a_diverging_rank_is_drawn_out_and_named_in_both_views() -> None:
    curves = _curves()
    xs, ys = curves[3]
    curves[3] = (xs, [y + (0.5 + 0.03 * (s - 40) if s >= 40 else 0)
                      for s, y in zip(xs, ys, strict=True)])
    for view in (ChartView(), ChartView(ranks=RankView.EACH), ChartView(smoothing=0)):
        drawn = chart_rows(view, [0, 1, 2, 3], _series(curves), 80, 20,
                           diverging={3: 40.0, 7: 12.0})  # rank 7 reports no loss
        assert drawn.flagged == (3,)
        assert drawn.rows[1] == [("rank 3 diverges from the other ranks since step 40",
                                  FLAGGED)]
        plot_codes = [code for row in drawn.rows[2:] for _, code in row]
        assert FLAGGED in plot_codes
        if view.ranks is RankView.EACH:
            assert ("r3 ", FLAGGED) in drawn.rows[0] and 3 not in plot_codes
    quiet = chart_rows(ChartView(), [0, 1, 2, 3], _series(curves), 80, 20)
    assert quiet.flagged == () and FLAGGED not in {c for row in quiet.rows for _, c in row}


def test_the_flag_is_the_stores_judge_finding_on_the_series_shown() -> None:
    store = Store()
    store.set_run(run_id="drift", status=RunStatus.RUNNING, started_at=T0, world_size=4)
    store.add_node("a", 0)
    store.apply([NodeState("a", NodeStatus.RUNNING, T0, pid=4100)])
    lines = []
    for step in range(80):
        for rank in range(4):
            loss = 4.0 / (1 + step / 20) + 0.01 * ((step + rank) % 3)
            if rank == 3 and step >= 40:
                loss += 0.5 + 0.03 * (step - 40)
            text = json.dumps({"v": 1, "kind": "metric", "rank": rank, "step": step,
                               "loss": loss, "lr": 0.1})
            lines.append(f"[ddptui {rank} {rank}] @ddptui {text}")
    store.apply(node_events("a", lines))
    said = [f for f in store.insight().findings if f.kind.value == "diverges"]
    assert [(f.rank, f.name) for f in said] == [(3, "loss")]
    drawn = store_chart(store, ChartView(), 80, 20)
    assert drawn.flagged == (3,) and drawn.band is not None
    since = f"{said[0].step:g}"
    assert drawn.rows[1][0][0] == f"rank 3 diverges from the other ranks since step {since}"
    assert store_chart(store, ChartView(metric="lr"), 80, 20).flagged == ()
    compared = compare_chart(store, Overlay("old", {"loss": [([0, 79], [4.0, 1.0])]}),
                             ChartView(), 80, 20)  # a past run drawn beneath: still named
    assert compared.flagged == (3,) and "vs old" in "".join(t for t, _ in compared.rows[0])
