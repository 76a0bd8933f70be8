"""The metrics chart as plain rows of text runs, built wherever the series are.

A chart of 16 ranks is 10 ms of Python at a few hundred points a series, 40 ms at 20,000,
all of it holding the interpreter. The dashboard's own replica has the series, but there
that time is taken from the keys; so the engine, which has them too, builds the chart
(``EngineClient.chart``) and the dashboard only turns the runs into strips. Nothing here
imports Textual, which the engine does not load.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from ddptui.chart.band import RankView, rank_band
from ddptui.chart.braille import Fill, plot, tick_label
from ddptui.chart.downsample import bin_columns
from ddptui.chart.memo import ChartMemo, Followed
from ddptui.chart.view import ChartView, Drawn, Run
from ddptui.insight.judge import Kind
from ddptui.insight.marks import Mark, MarkKind
from ddptui.metrics.recognizers import LABELS, NAN_COUNT

if TYPE_CHECKING:
    from ddptui.store.store import Store


Y_LABEL = 7
#: A run's style: a series index (0 and up, the widget picks its colour), or one of these;
#: :func:`faint` of an index is that series' colour, faint (its raw values under the
#: smoothed line).
PLAIN, DIM, BOLD, MARK = -1, -2, -3, -4
#: The ranks' median line, their min-max band, a diverging rank's line and its raw values.
MEDIAN, BAND, FLAGGED, FLAGGED_FAINT = -5, -6, -7, -8
FAINT = -16
#: What the axis shows under a mark's column.
MARK_CHARS = {MarkKind.NAN: "×", MarkKind.SPIKE: "▲"}

SeriesFn = Callable[[int, str], tuple[list[int | float], list[float]]]
Series = tuple[list[float], list[float]]


def faint(index: int) -> int:
    """The style of series ``index``'s raw values drawn beside its smoothed line."""
    return FAINT - index


#: What a series' step counts, as the chart's title says it.
STEP_WORDS = {"step": "by step", "epoch": "by epoch", "count": "by count: lines had no step"}


def chart_title(metric: str, log_y: bool, source: tuple[str, str] | None) -> str:
    """``loss by step (Hugging Face Trainer)``: the series, what x counts, who read it."""
    recognizer, kind = source or ("ddptui", "step")
    label = LABELS.get(recognizer, recognizer)
    said = "" if recognizer == "ddptui" else f" ({label})"
    return f"{metric}{' (log)' if log_y else ''} {STEP_WORDS.get(kind, 'by step')}{said} "


def view_words(view: ChartView) -> str:
    """``smoothing 0.60, steps 100-400 ``: how the view is set, for the title."""
    said = [f"smoothing {view.smoothing:.2f}" if view.smoothing > 0 else "raw"]
    if view.window is not None:
        said.append(f"steps {view.window[0]:.6g}-{view.window[1]:.6g}")
    return ", ".join(said) + " "


def chart_rows(view: ChartView, ranks: Sequence[int], series: SeriesFn, width: int,
               height: int, source: tuple[str, str] | None = None,
               past: Sequence[Series] = (), memo: ChartMemo | None = None,
               diverging: Mapping[int, float] | None = None) -> Drawn:
    """The chart's rows (a title, the diverging ranks' line, the plot with its y labels,
    the x axis with the marks under it, the marks' list when there are any), how many raw
    points each rank got, the steps the series span and their marks. ``past``: a past run's
    series of the same name, drawn dimmed beneath. Each rank's raw values are binned by
    column over the window (:func:`ddptui.chart.downsample.bin_columns`); smoothed, they are
    drawn faint and the smoothed line over them (:mod:`ddptui.chart.smooth`). Several ranks
    in the band view: their median over their min-max band (:mod:`ddptui.chart.band`).
    ``diverging``: the ranks the insight judge found leaving the others in this series, with
    the step since when; each is drawn over the rest in its own style, in either view.
    ``memo``: what the last redraw computed of the same series (:mod:`ddptui.chart.memo`),
    else computed here whole."""
    plot_w = max(1, width - Y_LABEL - 1)
    memo = memo or ChartMemo()
    with memo.lock:
        names, binned, past_layers, extent, marks = _binned(view, ranks, series, plot_w,
                                                            past, memo)
    plotted = {r: len(raw[0]) for r, (raw, _) in zip(names, binned, strict=True)}
    flagged = {r: since for r, since in (diverging or {}).items() if r in names}
    banded = view.ranks is RankView.BAND and len(names) > 1
    title: list[Run] = [(chart_title(view.metric, view.log_y, source), BOLD),
                        (view_words(view), DIM)]
    if banded:
        title += [(f"{view.ranks.words} ({len(names)}) ", MEDIAN)]
    else:
        title += [(f"r{rank} ", FLAGGED if rank in flagged else i)
                  for i, rank in enumerate(names)]
        title += [] if len(names) < 2 else [(f"{view.ranks.words} ", DIM)]
    if past_layers:
        title.append(("past run", DIM))
    rows = [title]
    if flagged:
        rows.append([(" · ".join(f"rank {r} diverges from the other ranks since step {s:g}"
                                 for r, s in sorted(flagged.items())), FLAGGED)])
    window = view.window or extent
    if window is None:
        rows.append([(f"{'':{Y_LABEL}} no points yet", DIM)])
        return Drawn(rows)
    lo, hi = window
    layers, styles = list(past_layers), [DIM] * len(past_layers)
    fills: list[Fill] = []
    band = None
    if banded:
        band = rank_band([drawn for _, drawn in binned], lo, hi, plot_w)
        fills.append((len(layers), band.steps, band.lows, band.highs))
        layers += [([], []), (band.steps, band.medians)]
        styles += [BAND, MEDIAN]
    ranked = list(enumerate(zip(names, binned, strict=True)))
    for i, (rank, (raw, drawn)) in sorted(ranked, key=lambda e: e[1][0] in flagged):
        if banded and rank not in flagged:
            continue  # drawn over the rest: the loop takes the flagged ranks last
        own, under = (FLAGGED, FLAGGED_FAINT) if rank in flagged else (i, faint(i))
        if view.smoothing > 0:
            layers.append(raw)
            styles.append(under)
        layers.append(drawn)
        styles.append(own)
    plot_h = max(1, height - len(rows) - 2 - (1 if marks else 0))
    frame = plot(layers, plot_w, plot_h, log_y=view.log_y, x_range=window, fills=fills)
    done = Drawn(rows, plotted, extent, tuple(marks), band, tuple(sorted(flagged)))
    if frame is None:
        rows.append([(f"{'':{Y_LABEL}} no points in these steps", DIM)])
        return done
    y0, y1 = frame.y_range
    label_rows = {0: y1, plot_h - 1: y0, (plot_h - 1) // 2: (y0 + y1) / 2}
    for r, cells in enumerate(frame.rows):
        label = tick_label(label_rows[r], view.log_y) if r in label_rows else ""
        runs: list[Run] = [(f"{label:>{Y_LABEL}}" + ("┤" if r in label_rows else "│"), DIM)]
        owner, start = cells[0][1], 0
        for c in range(1, len(cells) + 1):
            next_owner = cells[c][1] if c < len(cells) else -2
            if next_owner != owner:
                runs.append(("".join(ch for ch, _ in cells[start:c]),
                             styles[owner] if owner >= 0 else PLAIN))
                owner, start = next_owner, c
        rows.append(runs)
    rows.append(_axis(marks, lo, hi, plot_w))
    left, right = f"{lo:.6g}", f"{hi:.6g}"
    gap = max(1, plot_w - len(left) - len(right))
    rows.append([(f"{'':{Y_LABEL}} {left}{' ' * gap}{right}", DIM)])
    if marks:
        rows.append(_mark_list(marks, width))
    return done


def _binned(view: ChartView, ranks: Sequence[int], series: SeriesFn, plot_w: int,
            past: Sequence[Series], memo: ChartMemo
            ) -> tuple[list[int], list[tuple[Series, Series]], list[Series],
                       tuple[float, float] | None, list[Mark]]:
    """The ranks that have points, each one's raw and drawn (smoothed, or raw again)
    values binned by column over the window, the past run's binned, the steps the ranks'
    series span, and their marks."""
    names: list[int] = []
    found: list[tuple[list[int | float], list[float], Followed]] = []
    marks: list[Mark] = []
    for rank in ranks:
        xs, ys = series(rank, view.metric)
        if xs:
            names.append(rank)
            followed = memo.follow(rank, view.metric, xs, ys, view.smoothing)
            found.append((xs, ys, followed))
            counts = series(rank, NAN_COUNT) if view.metric != NAN_COUNT else ([], [])
            marks += followed.marks.with_counts(counts)
    marks.sort(key=lambda m: m.step)
    spans = [(xs[0], xs[-1]) if not f.backs else (min(xs), max(xs)) for xs, _, f in found]
    spans += [(min(xs), max(xs)) for xs, _ in past if xs]  # the axis spans both runs
    if not spans:
        return names, [], [], None, marks
    first, end = min(a for a, _ in spans), max(b for _, b in spans)
    extent = (first, end) if end > first else (first, first + 1)
    lo, hi = view.window or extent
    # a bin per cell column keeps its min and max: the cell's two dot columns
    past_layers = [bin_columns(xs, ys, lo, hi, plot_w) for xs, ys in past if xs]
    binned: list[tuple[Series, Series]] = []
    for xs, ys, f in found:
        raw = bin_columns(xs, ys, lo, hi, plot_w, f.raw, f.backs)
        smoothed = f.smoothed(ys) if view.smoothing > 0 else ys
        drawn = raw if smoothed is ys else bin_columns(xs, smoothed, lo, hi, plot_w,
                                                       f.smooth, f.backs)
        binned.append((raw, drawn))
    return names, binned, past_layers, extent, marks


def _axis(marks: Sequence[Mark], lo: float, hi: float, plot_w: int) -> list[Run]:
    """The x axis, with each mark of the window under its column."""
    cells = ["─"] * plot_w
    scale = (plot_w - 1) / (hi - lo)
    for m in marks:
        if lo <= m.step <= hi:
            c = round((m.step - lo) * scale)
            if cells[c] != MARK_CHARS[MarkKind.NAN]:  # a NaN outranks a spike
                cells[c] = MARK_CHARS[m.kind]
    runs: list[Run] = [(f"{'':{Y_LABEL}}└", DIM)]
    for ch in cells:
        style = DIM if ch == "─" else MARK
        if runs[-1][1] == style:
            runs[-1] = (runs[-1][0] + ch, style)
        else:
            runs.append((ch, style))
    return runs


def _mark_list(marks: Sequence[Mark], width: int) -> list[Run]:
    """One line, cut to ``width``: how many marks, and the first ones (``!`` goes from one
    to the next)."""
    head = f"{len(marks)} mark{'s' if len(marks) > 1 else ''} (! next): "
    said = " · ".join(m.text for m in marks[:4]) + (" · ..." if len(marks) > 4 else "")
    return [(head, MARK), (said[:max(0, width - len(head))], PLAIN)]


def store_chart(store: Store, view: ChartView, width: int, height: int,
                past: Sequence[Series] = (), memo: ChartMemo | None = None) -> Drawn:
    """The chart of every rank ``store`` knows: the engine's, or the dashboard's replica's."""
    ranks = [r.rank for r in store.rank_views()]
    return chart_rows(view, ranks, store.series, width, height,
                      store.series_source.get(view.metric), past, memo,
                      diverging(store, view.metric))


def diverging(store: Store, metric: str) -> dict[int, float]:
    """The ranks the store's judge found diverging in ``metric``, with the step since when:
    the chart draws out what the judge said, by no rule of its own."""
    return {f.rank: f.step for f in store.insight().findings
            if f.kind is Kind.DIVERGES and f.name == metric}
