"""The metrics chart as plain rows of text runs, built wherever the series are.

A chart of 16 ranks is 10 ms of Python at a few hundred points a series, 40 ms at 20,000,
all of it holding the interpreter. The dashboard's own replica has the series, but there
that time is taken from the keys; so the engine, which has them too, builds the chart
(``EngineClient.chart``) and the dashboard only turns the runs into strips. Nothing here
imports Textual, which the engine does not load.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ddptui.chart.braille import plot, tick_label
from ddptui.chart.downsample import downsample
from ddptui.metrics.recognizers import LABELS

if TYPE_CHECKING:
    from ddptui.store.store import Store

Y_LABEL = 7
#: A run's style: a series index (0 and up, the widget picks its colour), or one of these.
PLAIN, DIM, BOLD = -1, -2, -3

Run = tuple[str, int]
SeriesFn = Callable[[int, str], tuple[list[int | float], list[float]]]


#: What a series' step counts, as the chart's title says it.
STEP_WORDS = {"step": "by step", "epoch": "by epoch", "count": "by count: lines had no step"}


def chart_title(metric: str, log_y: bool, source: tuple[str, str] | None) -> str:
    """``loss by step (Hugging Face Trainer)``: the series, what x counts, who read it."""
    recognizer, kind = source or ("ddptui", "step")
    label = LABELS.get(recognizer, recognizer)
    said = "" if recognizer == "ddptui" else f" ({label})"
    return f"{metric}{' (log)' if log_y else ''} {STEP_WORDS.get(kind, 'by step')}{said} "


def chart_rows(metric: str, log_y: bool, ranks: Sequence[int], series: SeriesFn,
               width: int, height: int, source: tuple[str, str] | None = None,
               past: Sequence[tuple[list[float], list[float]]] = ()
               ) -> tuple[list[list[Run]], dict[int, int]]:
    """The chart's rows (a title, the plot with its y labels, the x axis) and how many
    points each rank got; ``past``: a past run's series of the same name, drawn dimmed
    beneath."""
    plot_w, plot_h = max(1, width - Y_LABEL - 1), max(1, height - 3)
    names: list[int] = []
    data: list[tuple[list[float], list[float]]] = []
    for rank in ranks:
        xs, ys = series(rank, metric)
        if xs:
            names.append(rank)
            # a bucket per cell keeps its min and max: the cell's two dot columns
            data.append(downsample(xs, ys, plot_w))
    plotted = {r: len(d[0]) for r, d in zip(names, data, strict=True)}
    title: list[Run] = [(chart_title(metric, log_y, source), BOLD)]
    title += [(f"r{rank} ", i) for i, rank in enumerate(names)]
    old = [downsample(xs, ys, plot_w) for xs, ys in past if xs]
    if old:
        title.append(("past run", DIM))
    rows = [title]
    frame = plot(old + data, plot_w, plot_h, log_y=log_y)
    if frame is None:
        rows.append([(f"{'':{Y_LABEL}} no points yet", DIM)])
        return rows, plotted
    y0, y1 = frame.y_range
    label_rows = {0: y1, plot_h - 1: y0, (plot_h - 1) // 2: (y0 + y1) / 2}
    for r, cells in enumerate(frame.rows):
        label = tick_label(label_rows[r], log_y) if r in label_rows else ""
        runs: list[Run] = [(f"{label:>{Y_LABEL}}" + ("┤" if r in label_rows else "│"), DIM)]
        owner, start = cells[0][1], 0
        for c in range(1, len(cells) + 1):
            next_owner = cells[c][1] if c < len(cells) else -2
            if next_owner != owner:
                style = owner - len(old) if owner >= len(old) else DIM if owner >= 0 else PLAIN
                runs.append(("".join(ch for ch, _ in cells[start:c]), style))
                owner, start = next_owner, c
        rows.append(runs)
    x0, x1 = frame.x_range
    rows.append([(f"{'':{Y_LABEL}}└{'─' * plot_w}", DIM)])
    left, right = f"{x0:.6g}", f"{x1:.6g}"
    gap = max(1, plot_w - len(left) - len(right))
    rows.append([(f"{'':{Y_LABEL}} {left}{' ' * gap}{right}", DIM)])
    return rows, plotted


def store_chart(store: Store, metric: str, log_y: bool, width: int, height: int,
                past: Sequence[tuple[list[float], list[float]]] = ()
                ) -> tuple[list[list[Run]], dict[int, int]]:
    """The chart of every rank ``store`` knows: the engine's, or the dashboard's replica's."""
    ranks = [r.rank for r in store.rank_views()]
    return chart_rows(metric, log_y, ranks, store.series, width, height,
                      store.series_source.get(metric), past)
