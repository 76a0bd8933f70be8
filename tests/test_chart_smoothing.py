"""The chart's smoothing, binning, window and marks: TensorBoard's EMA to the bit, a one-step
spike kept among a million points at 80 columns, zoom and pan binning the raw points again,
and spikes and NaN found by the rule docs/metrics.md states (pure, fast)."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddptui.chart.band import RankView
from ddptui.chart.downsample import bin_columns
from ddptui.chart.memo import ChartMemo
from ddptui.chart.rows import MARK, chart_rows, faint
from ddptui.chart.smooth import DEFAULT_WEIGHT, WEIGHTS, ema, step_weight
from ddptui.chart.view import ChartView, centred, panned, zoomed
from ddptui.insight.marks import WARMUP, MarkKind, find_marks
from ddptui.metrics.recognizers import NAN_COUNT, megatron


def tensorboard(ys: list[float], weight: float) -> list[float]:
    """TensorBoard's ``classicSmoothing`` (webapp/widgets/line_chart_v2/data_transformer.ts,
    tensorflow/tensorboard 412c86e), line for line: the reference the chart must equal."""
    if not math.isfinite(weight):
        weight = 0.0
    weight = max(0.0, min(weight, 1.0))
    initial = ys[0] if ys else None
    if all(y == initial for y in ys):
        return list(ys)
    last = 0.0 if ys else math.nan
    num_accum = 0
    out = []
    for y in ys:
        if not math.isfinite(y):
            out.append(y)
            continue
        last = last * weight + (1 - weight) * y
        num_accum += 1
        debias = 1 if weight == 1 else 1 - math.pow(weight, num_accum)
        out.append(last / debias)
    return out


def same(a: list[float], b: list[float]) -> bool:
    """Equal to the bit, NaN where NaN."""
    return len(a) == len(b) and all(x == y or (math.isnan(x) and math.isnan(y))
                                    for x, y in zip(a, b, strict=True))


def test_ema_is_tensorboards_on_its_own_cases() -> None:
    ys = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]
    assert DEFAULT_WEIGHT == 0.6
    got = ema(ys, 0.6)
    assert got[0] == pytest.approx(3.0)  # the debias: the first value is itself, not 0.4 of it
    assert got[1] == pytest.approx((0.6 * 0.4 * 3 + 0.4 * 1) / (1 - 0.36))
    assert same(got, tensorboard(ys, 0.6))
    assert ema(ys, 0.0) == ys
    assert ema([2.0, 2.0, 2.0], 0.9) == [2.0, 2.0, 2.0]  # constant: as it is (TB #786)
    assert ema(ys, 1.0) == [0.0] * len(ys)  # TensorBoard's, at the slider's end
    assert ema(ys, math.nan) == ys and same(ema(ys, 7.0), tensorboard(ys, 1.0))
    assert ema([], 0.6) == []
    # non-finite values pass through and neither move the mean nor count in the debias
    with_nan = [1.0, math.nan, 3.0, math.inf, 5.0]
    got = ema(with_nan, 0.6)
    assert math.isnan(got[1]) and got[3] == math.inf
    assert [got[0], got[2], got[4]] == ema([1.0, 3.0, 5.0], 0.6)
    assert same(got, tensorboard(with_nan, 0.6))
    nans = [math.nan, math.nan]  # NaN equals nothing: not "constant", passed through
    assert same(ema(nans, 0.6), nans)


@given(st.lists(st.one_of(st.floats(-1e6, 1e6), st.sampled_from([math.nan, math.inf])),
                max_size=300),
       st.sampled_from((*WEIGHTS, 0.42, 0.999999)))
def test_ema_equals_tensorboard_to_the_bit(ys: list[float], weight: float) -> None:
    assert same(ema(ys, weight), tensorboard(ys, weight))


def test_ema_of_a_long_series_settles_exactly() -> None:
    """Past the point where 1 - w**n rounds to 1 the division is skipped: still the bits
    TensorBoard's division gives."""
    rng = random.Random(3)
    ys = [rng.gauss(1.0, 0.3) for _ in range(20_000)]
    for w in (0.6, 0.99, 0.999):
        assert same(ema(ys, w), tensorboard(ys, w))


def test_the_smoothing_keys_step_through_tensorboards_range() -> None:
    assert step_weight(0.6, 1) == 0.8 and step_weight(0.6, -1) == 0.3
    assert step_weight(WEIGHTS[-1], 1) == WEIGHTS[-1] and step_weight(0.0, -1) == 0.0
    assert step_weight(0.65, -1) == 0.6  # a weight between steps goes to the next one


def test_min_max_per_column_keeps_a_single_step_spike_in_a_million_points() -> None:
    n, columns = 1_000_000, 80
    xs = list(range(n))
    ys = [1.0 + 0.01 * ((i * 7919) % 13) for i in range(n)]
    for at in (0, 123_457, n - 1):
        spiky = list(ys)
        spiky[at] = 50.0
        bx, by = bin_columns(xs, spiky, 0, n - 1, columns)
        assert len(bx) <= 2 * columns and 50.0 in by and bx[by.index(50.0)] == at
        assert bx == sorted(bx)
    # and so does the whole chart: the spike is its top row, at its column
    spiky = list(ys)
    spiky[654_321] = 50.0
    drawn = chart_rows(ChartView(smoothing=0.0), [0],
                       lambda r, m: (xs, spiky) if m == "loss" else ([], []), 88, 20)
    assert drawn.rows[1][0][0].strip() == "50┤"
    top = "".join(text for text, _ in drawn.rows[1][1:])
    assert top.strip() != "" and len(top) == 80
    assert abs(top.index(top.strip()[0]) - round(0.654321 * 79)) <= 1


def test_columns_are_cut_by_step_so_a_window_bins_the_raw_points_again() -> None:
    xs = list(range(0, 100_000, 10))  # steps, not indexes
    ys = [float(i % 50) for i in range(len(xs))]
    ys[5_000] = 1e3  # step 50,000
    whole = bin_columns(xs, ys, 0, 99_990, 10)
    assert len(whole[0]) <= 20 and 1e3 in whole[1]
    zoom = bin_columns(xs, ys, 49_000, 51_000, 10)
    assert min(zoom[0]) >= 49_000 and max(zoom[0]) <= 51_000 and 1e3 in zoom[1]
    assert len(zoom[0]) == 20  # 201 points in the window, two a column
    # few points in the window (an evaluation's series): every one of them, none thinned
    evals = list(range(0, 100_000, 5_000))
    got = bin_columns(evals, [float(x) for x in evals], 0, 99_990, 10)
    assert got == (evals, [float(x) for x in evals])
    # steps that go back (a resumed run) are binned stretch by stretch, NaN left out
    back = bin_columns([0, 1, 2, 3, 1, 2, 3, 4], [1.0, 2.0, math.nan, 4.0, 5, 6, 7, 8], 0, 4, 80)
    assert back == ([0, 1, 3, 1, 2, 3, 4], [1.0, 2.0, 4.0, 5, 6, 7, 8])


def test_smoothed_line_over_the_raw_values_drawn_faint() -> None:
    xs = list(range(200))
    ys = [5.0 / (1 + i) + (0.5 if i % 2 else 0.0) for i in xs]
    drawn = chart_rows(ChartView(), [0], lambda r, m: (xs, ys) if m == "loss" else ([], []),
                       60, 14)
    assert ("smoothing 0.60 ", -2) in drawn.rows[0]
    codes = {code for row in drawn.rows[1:-2] for _, code in row[1:]}
    assert {0, faint(0)} <= codes
    raw = chart_rows(ChartView(smoothing=0.0), [0],
                     lambda r, m: (xs, ys) if m == "loss" else ([], []), 60, 14)
    assert ("raw ", -2) in raw.rows[0]
    assert faint(0) not in {code for row in raw.rows[1:-2] for _, code in row[1:]}


def test_zoom_pan_and_centre_stay_inside_the_series() -> None:
    extent = (0.0, 1000.0)
    view = zoomed(ChartView(), extent, 0.5)
    assert view.window == (250.0, 750.0)
    assert panned(view, extent, 0.25).window == (375.0, 875.0)
    assert panned(view, extent, 10).window == (500.0, 1000.0)  # stops at the last step
    assert panned(view, extent, -10).window == (0.0, 500.0)
    assert zoomed(view, extent, 2).window is None  # as wide as the series: no window
    assert centred(ChartView(), extent, 990.0).window == (900.0, 1000.0)
    assert zoomed(ChartView(), None, 0.5) == ChartView()  # nothing drawn yet: nothing to do
    assert zoomed(view, extent, 1e-9).window == (498.0, 502.0)  # four steps at the least


def test_spikes_and_non_finite_values_are_marked_by_the_stated_rule() -> None:
    rng = random.Random(1)
    xs = list(range(300))
    ys = [2.0 * math.exp(-i / 100) + rng.uniform(-0.02, 0.02) for i in xs]  # falling fast
    assert find_marks(0, xs, ys) == []  # a loss falling is no spike, nor is its noise
    ys[150] = 3 * ys[150]
    ys[200] = math.nan
    ys[250] = math.inf
    ys[5] = 100.0  # inside the warm-up: too early to judge
    marks = find_marks(3, xs, ys)
    assert [(m.kind, m.step) for m in marks] == [
        (MarkKind.SPIKE, 150), (MarkKind.NAN, 200), (MarkKind.NAN, 250)]
    assert marks[0].level is not None and marks[0].level < ys[150] / 2
    assert marks[0].text.startswith("spike r3 step 150: ") and "(level " in marks[0].text
    assert WARMUP > 5


def test_megatrons_nan_iterations_count_as_nan() -> None:
    line = (" [2024-10-01 12:00:09.456789] iteration       20/   10000 | consumed samples: "
            "1280 | lm loss: 9.123456E+00 | loss scale: 1.0 | number of skipped iterations: "
            "  1 | number of nan iterations:   2 |")
    reading = megatron(line)
    assert reading is not None and reading.values[NAN_COUNT] == 2.0
    clean = megatron(line.replace("nan iterations:   2", "nan iterations:   0"))
    assert clean is not None and NAN_COUNT not in clean.values  # no series of zeros
    marks = find_marks(0, [10, 20, 30], [9.5, 9.1, 8.9], ([20], [2.0]))
    assert [(m.kind, m.step) for m in marks] == [(MarkKind.NAN, 20)]
    assert "2 nan iterations (Megatron-LM)" in marks[0].text


def test_marks_are_under_the_axis_and_listed() -> None:
    xs = list(range(100))
    ys = [1.0] * 100
    ys[30], ys[60] = 1.0, math.nan
    ys[0] = 1.1
    ys[80] = 9.0

    def series(rank: int, name: str) -> tuple[list[int], list[float]]:
        return (xs, ys) if name == "loss" else ([], [])

    drawn = chart_rows(ChartView(), [0], series, 100, 14)
    assert [(m.kind, m.step) for m in drawn.marks] == [(MarkKind.NAN, 60),
                                                       (MarkKind.SPIKE, 80)]
    axis = "".join(text for text, _ in drawn.rows[-3])
    assert axis.count("×") == 1 and axis.count("▲") == 1
    assert axis.index("×") < axis.index("▲")
    assert drawn.rows[-1][0] == ("2 marks (! next): ", MARK)
    assert drawn.rows[-1][1][0].startswith("NaN r0 step 60: nan · spike r0 step 80: 9")
    assert drawn.extent == (0, 99)
    # a window that leaves a mark out still lists it (the list is the series')
    window = chart_rows(ChartView(window=(0, 50)), [0], series, 100, 14)
    axis = "".join(text for text, _ in window.rows[-3])
    assert "×" not in axis and "▲" not in axis and len(window.marks) == 2


def test_a_sparkline_leaves_non_finite_values_out() -> None:
    from ddptui.chart.downsample import sparkline

    assert sparkline([1.0, math.nan, 2.0, math.inf], 8) == "▁█"
    assert sparkline([math.nan], 8) == ""


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 700), st.booleans(), st.sampled_from(WEIGHTS[:4]),
                          st.integers(0, 2)), min_size=1, max_size=8),
       st.integers(0, 2**32))
def test_a_redraw_from_the_memo_is_the_chart_computed_afresh(
        growth: list[tuple[int, bool, float, int]], seed: int) -> None:
    """A series grown at its end (a step's value replaced now and then, a NaN or a spike
    here and there), the smoothing changed between redraws, one rank or a band of several
    with one drawn out: the memo's chart is the one computed from nothing, row for row, mark
    for mark."""
    rnd = random.Random(seed)
    xs: list[int | float] = []
    ys: list[float] = []
    memo = ChartMemo()
    for new, replace_last, weight, zoom in growth:
        for _ in range(new):
            xs.append(len(xs))
            y = 1.0 + rnd.random() * 0.1
            ys.append(rnd.choice([y, y, y, y, y * 8, math.nan]) if rnd.random() < 0.05 else y)
        if replace_last:
            ys[-1] = rnd.random()
        view = ChartView(smoothing=weight,
                         window=None if not zoom else (len(xs) / 4, len(xs) / 4 * (1 + zoom)),
                         ranks=rnd.choice(list(RankView)))

        def fn(rank: int, name: str) -> tuple[list[int | float], list[float]]:
            if name != "loss":
                return [], []
            return list(xs), [y * (1 + rank / 4) for y in ys]  # rank 0: the series itself

        ranks = [0, 1, 2][:1 + seed % 3]  # one rank alone, or a band of two or three
        kept, fresh = (chart_rows(view, ranks, fn, 60, 16, memo=memo, diverging={1: 3.0}),
                       chart_rows(view, ranks, fn, 60, 16, diverging={1: 3.0}))
        assert (kept.rows, kept.plotted, kept.extent, kept.band) == (
            fresh.rows, fresh.plotted, fresh.extent, fresh.band)
        assert [m.text for m in kept.marks] == [m.text for m in fresh.marks]


def test_a_bounded_series_dropping_its_oldest_points_keeps_its_history() -> None:
    """The store's series keep their newest points: the memo finds the last point it saw,
    drops as many from its front, and goes on; its smoothing and marks are those of every
    point it saw (TensorBoard's over the points it holds: the same once the dropped weigh
    nothing)."""
    rng = random.Random(5)
    history = [1.0 + rng.random() * 0.1 for _ in range(3_000)]
    history[2_500] = 9.0
    memo = ChartMemo()
    window = 1_000
    for end in (1_200, 2_000, 2_900):  # each window holds the last point seen before
        xs, ys = list(range(end - window, end)), history[end - window:end]
        followed = memo.follow(0, "loss", xs, ys, 0.6)
        assert followed.count == window
    smoothed = followed.smoothed(ys)
    seen = history[200:2_900]  # from the first point the memo saw
    assert same(list(smoothed), ema(seen, 0.6)[-window:])
    assert same(list(smoothed)[200:], ema(ys, 0.6)[200:])  # the dropped weigh nothing there
    assert [(m.kind, m.step) for m in followed.marks.marks] == [
        (m.kind, m.step + 200) for m in find_marks(0, list(range(2_700)), seen)
        if m.step + 200 >= 1_900] == [(MarkKind.SPIKE, 2_500)]
