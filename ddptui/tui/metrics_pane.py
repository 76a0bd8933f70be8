"""Per-rank metric curves against step, drawn in braille, downsampled to the width.

The app calls :meth:`MetricsPane.draw` at most twice a second and only while the pane is on
screen; the chart keeps how many points it drew per rank so tests can wait on it. (plotext
was tried first: one build of a 80x46 chart took 100-250 ms on the event loop.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.segment import Segment
from rich.style import Style
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget

from ddptui.tui.braille import plot, tick_label
from ddptui.tui.downsample import downsample

#: The metrics `c` cycles through, in order; others the run reports follow them.
PREFERRED = ("loss", "eval_loss", "samples_per_s", "tokens_per_s", "step_time_s", "grad_norm",
             "lr")
#: Standard ANSI colours, so series stay apart in a 16-colour terminal too.
COLOURS = ("cyan", "magenta", "yellow", "green", "blue", "red", "bright_cyan",
           "bright_magenta", "bright_yellow", "bright_green", "bright_blue", "bright_red")
Y_LABEL = 7
_STYLES = tuple(Style(color=c) for c in COLOURS)
_DIM = Style(dim=True)
_BOLD = Style(bold=True)

SeriesFn = Callable[[int, str], tuple[list[int], list[float]]]


def metric_cycle(available: Sequence[str]) -> list[str]:
    ordered = [m for m in PREFERRED if m in available]
    return ordered + sorted(m for m in available if m not in PREFERRED) or ["loss"]


class MetricsPane(Widget):
    metric: reactive[str] = reactive("loss", init=False)
    log_scale: reactive[bool] = reactive(False, init=False)

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.plotted: dict[int, int] = {}
        self.dirty = True
        self._rows: list[Strip] = []

    def watch_metric(self) -> None:
        self.dirty = True

    def watch_log_scale(self) -> None:
        self.dirty = True

    def on_resize(self) -> None:
        self.dirty = True

    def render_line(self, y: int) -> Strip:
        rows = self._rows
        if y >= len(rows):
            return Strip.blank(self.content_size.width)
        return rows[y]

    def draw(self, ranks: Sequence[int], series: SeriesFn) -> None:
        """Compute and show the chart now (tests, and callers already off the loop)."""
        self.show(*self.compute(ranks, series))

    def compute(self, ranks: Sequence[int], series: SeriesFn
                ) -> tuple[list[Strip], dict[int, int]]:
        """The chart's strips: safe to call from a thread (reads only the store and sizes)."""
        width, height = self.content_size
        return chart_strips(self.metric, self.log_scale, ranks, series, width, height)

    def show(self, rows: list[Strip], plotted: dict[int, int]) -> None:
        width = self.content_size.width  # cut and measured once here, not on every paint
        self._rows = [row.crop_extend(0, width, None) for row in rows]
        self.plotted = plotted
        self.dirty = False
        self.refresh()


def chart_strips(metric: str, log_y: bool, ranks: Sequence[int], series: SeriesFn,
                 width: int, height: int) -> tuple[list[Strip], dict[int, int]]:
    """Strips built directly from segments (no Text to re-measure on every paint), and how
    many points each rank got."""
    plot_w, plot_h = max(1, width - Y_LABEL - 1), max(1, height - 3)
    names: list[int] = []
    data: list[tuple[list[float], list[float]]] = []
    for rank in ranks:
        xs, ys = series(rank, metric)
        if xs:
            names.append(rank)
            # a bucket per cell keeps its min and max: the cell's two dot columns
            data.append(downsample(xs, ys, plot_w))  # type: ignore[arg-type]
    plotted = {r: len(d[0]) for r, d in zip(names, data, strict=True)}
    title = [Segment(f"{metric}{' (log)' if log_y else ''} by step ", _BOLD)]
    for i, rank in enumerate(names):
        title.append(Segment(f"r{rank} ", _STYLES[i % len(_STYLES)]))
    rows = [Strip(title)]
    frame = plot(data, plot_w, plot_h, log_y=log_y)
    if frame is None:
        rows.append(Strip([Segment(f"{'':{Y_LABEL}} no points yet", _DIM)]))
        return rows, plotted
    y0, y1 = frame.y_range
    label_rows = {0: y1, plot_h - 1: y0, (plot_h - 1) // 2: (y0 + y1) / 2}
    for r, row in enumerate(frame.rows):
        label = tick_label(label_rows[r], log_y) if r in label_rows else ""
        segs = [Segment(f"{label:>{Y_LABEL}}" + ("┤" if r in label_rows else "│"), _DIM)]
        run_owner, run_start = row[0][1], 0
        for c in range(1, len(row) + 1):
            owner = row[c][1] if c < len(row) else -2
            if owner != run_owner:
                text = "".join(ch for ch, _ in row[run_start:c])
                style = _STYLES[run_owner % len(_STYLES)] if run_owner >= 0 else None
                segs.append(Segment(text, style))
                run_owner, run_start = owner, c
        rows.append(Strip(segs))
    x0, x1 = frame.x_range
    rows.append(Strip([Segment(f"{'':{Y_LABEL}}└{'─' * plot_w}", _DIM)]))
    left, right = f"{x0:.6g}", f"{x1:.6g}"
    gap = max(1, plot_w - len(left) - len(right))
    rows.append(Strip([Segment(f"{'':{Y_LABEL}} {left}{' ' * gap}{right}", _DIM)]))
    return rows, plotted
