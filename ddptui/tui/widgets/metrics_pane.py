"""Per-rank metric curves against step, drawn in braille, downsampled to the width.

The app has the chart built (``ddptui.chart.rows``) at most twice a second and only while the pane
is on screen, by the engine when there is one; the pane colours the runs it gets and keeps how
many points it drew per rank, so tests can wait on it. A past run chosen to compare with
(:attr:`MetricsPane.overlay`) is drawn dimmed beneath, its id in the title. (plotext was
tried first: one build of a 80x46 chart took 100-250 ms on the event loop.)

Its keys (:data:`CHART_KEYS`) change the view (:class:`ddptui.chart.view.ChartView`):
TensorBoard's smoothing weight, the steps' window (zoom and pan bin the raw points again),
``b`` the ranks' median and min-max band or each rank's line (:mod:`ddptui.chart.band`), and
``!`` goes from one spike or NaN to the next. :class:`ChartKeys` holds the actions that only
pass a key on to the pane, for the screen that binds them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.message import Message
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget

from ddptui.chart.memo import ChartMemo
from ddptui.chart.rows import BAND, BOLD, DIM, FAINT, FLAGGED, FLAGGED_FAINT, MARK, MEDIAN, PLAIN
from ddptui.chart.smooth import step_weight
from ddptui.chart.view import ChartView, Drawn, Run, centred, panned, zoomed
from ddptui.insight.marks import Mark
from ddptui.tui.overlay import Overlay

#: The metrics `c` cycles through, in order; others the run reports follow them.
PREFERRED = ("loss", "eval_loss", "samples_per_s", "tokens_per_s", "step_time_s", "grad_norm",
             "lr")
#: Standard ANSI colours, so series stay apart in a 16-colour terminal too.
COLOURS = ("cyan", "magenta", "yellow", "green", "blue", "red", "bright_cyan",
           "bright_magenta", "bright_yellow", "bright_green", "bright_blue", "bright_red")
_SERIES = tuple(Style(color=c) for c in COLOURS)
_FAINT = tuple(Style(color=c, dim=True) for c in COLOURS)
_STYLES: dict[int, Style | None] = {
    PLAIN: None, DIM: Style(dim=True), BOLD: Style(bold=True),
    MARK: Style(color="red", bold=True), MEDIAN: Style(color="cyan", bold=True),
    BAND: Style(color="cyan", dim=True), FLAGGED: Style(color="bright_red", bold=True),
    FLAGGED_FAINT: Style(color="red", dim=True)}
#: The chart's keys, bound on the dashboard's screen (``screen.``: they work wherever the
#: focus is); the help lists them under the chart.
CHART_KEYS = [
    Binding("minus", "smoothing(-1)", "Chart: less smoothing (TensorBoard's EMA weight)",
            show=False),
    Binding("plus,equals_sign", "smoothing(1)", "Chart: more smoothing", show=False),
    Binding("z", "zoom(0.5)", "Chart: zoom in on the steps", show=False),
    Binding("Z", "zoom(2)", "Chart: zoom out", show=False),
    Binding("less_than_sign", "pan(-0.25)", "Chart: earlier steps", show=False),
    Binding("greater_than_sign", "pan(0.25)", "Chart: later steps", show=False),
    Binding("0", "zoom(0)", "Chart: every step", show=False),
    Binding("b", "rank_view", "Chart: the ranks' median and min–max band, or each rank's line",
            show=False),
    Binding("exclamation_mark", "next_mark", "Next spike or NaN: in the chart and the log",
            show=False),
]
#: A compared chart's keys (``ddptui.tui.compare``), bound beside the chart's.
COMPARE_KEYS = [
    Binding("A", "compare_view('align')", "Align by step/samples/tokens/time", show=False),
    Binding("D", "compare_view('difference')", "The difference A − B on/off", show=False),
]


def metric_cycle(available: Sequence[str]) -> list[str]:
    ordered = [m for m in PREFERRED if m in available]
    return ordered + sorted(m for m in available if m not in PREFERRED) or ["loss"]


class MetricsPane(Widget):
    view: reactive[ChartView] = reactive(ChartView(), init=False)
    """The series shown and how: smoothing, log scale, the steps' window."""
    overlay: reactive[Overlay | None] = reactive(None, init=False, always_update=True)
    """A past run's series, drawn dimmed under those of the same name; None: none."""

    class ViewChanged(Message):
        """The view changed: the screen has the chart drawn again now."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.plotted: dict[int, int] = {}
        self.dirty = True
        self._rows: list[Strip] = []
        self.drawn = Drawn([])
        """The last chart shown: its steps' extent and marks, for the keys."""
        self.memo = ChartMemo()
        """What the charts built in the dashboard (a store shown alone) keep between redraws;
        the engine keeps its own for a run's."""
        self._mark = -1  # the mark ``!`` went to last

    def watch_view(self) -> None:
        self.dirty = True
        self.post_message(self.ViewChanged())

    def watch_overlay(self) -> None:
        self.dirty = True

    @property
    def metric(self) -> str:
        return self.view.metric

    @property
    def log_scale(self) -> bool:
        return self.view.log_y

    @property
    def compared(self) -> str | None:
        """The id of the run drawn beneath, if any."""
        return self.overlay.run_id if self.overlay is not None else None

    @property
    def text(self) -> str:
        """What the pane shows, as plain text (tests and the tmux test read it)."""
        return "\n".join(row.text for row in self._rows)

    def next_metric(self, available: Sequence[str]) -> None:
        """The next metric of ``available``, over every step."""
        names = metric_cycle(available)
        i = names.index(self.metric) + 1 if self.metric in names else 0
        self.view = replace(self.view, metric=names[i % len(names)], window=None)
        self._mark = -1

    def toggle_log_scale(self) -> None:
        self.view = replace(self.view, log_y=not self.view.log_y)

    def step_smoothing(self, step: int) -> None:
        self.view = replace(self.view, smoothing=step_weight(self.view.smoothing, step))

    def zoom(self, factor: float) -> None:
        """The window ``factor`` times as wide, about its middle; 0: every step."""
        if factor <= 0:
            self.view = replace(self.view, window=None)
            return
        self.view = zoomed(self.view, self.drawn.extent, factor)

    def pan(self, fraction: float) -> None:
        self.view = panned(self.view, self.drawn.extent, fraction)

    def next_rank_view(self) -> None:
        self.view = replace(self.view, ranks=self.view.ranks.next())

    def next_mark(self) -> Mark | None:
        """The next spike or NaN after the last one gone to (the first again after the
        last), centred in the window; None when the chart has none."""
        marks = self.drawn.marks
        if not marks:
            self.notify("No spike or NaN in this chart.", timeout=3)
            return None
        self._mark = (self._mark + 1) % len(marks)
        mark = marks[self._mark]
        self.view = centred(self.view, self.drawn.extent, mark.step)
        return mark

    def on_resize(self) -> None:
        self.dirty = True

    def render_line(self, y: int) -> Strip:
        rows = self._rows
        if y >= len(rows):
            return Strip.blank(self.content_size.width)
        return rows[y]

    def show(self, rows: list[Strip], drawn: Drawn) -> None:
        width = self.content_size.width  # cut and measured once here, not on every paint
        self._rows = [row.crop_extend(0, width, None) for row in rows]
        self.plotted = drawn.plotted
        self.drawn = drawn
        self.dirty = False
        self.refresh()


class ChartKeys:
    """The chart's key actions that go straight to the pane, for the screen binding
    :data:`CHART_KEYS` (which has the pane as ``chart``)."""

    @property
    def chart(self) -> MetricsPane:
        raise NotImplementedError

    def action_toggle_log_scale(self) -> None:
        self.chart.toggle_log_scale()

    def action_smoothing(self, step: int) -> None:
        self.chart.step_smoothing(step)

    def action_zoom(self, factor: float) -> None:
        self.chart.zoom(factor)

    def action_pan(self, fraction: float) -> None:
        self.chart.pan(fraction)

    def action_rank_view(self) -> None:
        self.chart.next_rank_view()


def _style(code: int) -> Style | None:
    if code >= 0:
        return _SERIES[code % len(_SERIES)]
    if code <= FAINT:
        return _FAINT[(FAINT - code) % len(_FAINT)]
    return _STYLES[code]


def strips(rows: list[list[Run]]) -> list[Strip]:
    """Strips built directly from segments (no Text to re-measure on every paint)."""
    return [Strip([Segment(text, _style(code)) for text, code in row]) for row in rows]
