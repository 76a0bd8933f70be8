"""Per-rank metric curves against step, drawn in braille, downsampled to the width.

The app has the chart built (``ddptui.chart.rows``) at most twice a second and only while the pane
is on screen, by the engine when there is one; the pane colours the runs it gets and keeps how
many points it drew per rank, so tests can wait on it. A past run chosen to compare with
(:attr:`MetricsPane.overlay`) is drawn dimmed beneath, its id in the title. (plotext was
tried first: one build of a 80x46 chart took 100-250 ms on the event loop.)
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.segment import Segment
from rich.style import Style
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget

from ddptui.chart.rows import BOLD, DIM, PLAIN, Run
from ddptui.tui.overlay import Overlay

#: The metrics `c` cycles through, in order; others the run reports follow them.
PREFERRED = ("loss", "eval_loss", "samples_per_s", "tokens_per_s", "step_time_s", "grad_norm",
             "lr")
#: Standard ANSI colours, so series stay apart in a 16-colour terminal too.
COLOURS = ("cyan", "magenta", "yellow", "green", "blue", "red", "bright_cyan",
           "bright_magenta", "bright_yellow", "bright_green", "bright_blue", "bright_red")
_SERIES = tuple(Style(color=c) for c in COLOURS)
_STYLES: dict[int, Style | None] = {PLAIN: None, DIM: Style(dim=True), BOLD: Style(bold=True)}


def metric_cycle(available: Sequence[str]) -> list[str]:
    ordered = [m for m in PREFERRED if m in available]
    return ordered + sorted(m for m in available if m not in PREFERRED) or ["loss"]


class MetricsPane(Widget):
    metric: reactive[str] = reactive("loss", init=False)
    log_scale: reactive[bool] = reactive(False, init=False)
    overlay: reactive[Overlay | None] = reactive(None, init=False, always_update=True)
    """A past run's series, drawn dimmed under those of the same name; None: none."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.plotted: dict[int, int] = {}
        self.dirty = True
        self._rows: list[Strip] = []

    def watch_metric(self) -> None:
        self.dirty = True

    def watch_log_scale(self) -> None:
        self.dirty = True

    def watch_overlay(self) -> None:
        self.dirty = True

    @property
    def compared(self) -> str | None:
        """The id of the run drawn beneath, if any."""
        return self.overlay.run_id if self.overlay is not None else None

    @property
    def text(self) -> str:
        """What the pane shows, as plain text (tests and the tmux test read it)."""
        return "\n".join(row.text for row in self._rows)

    def on_resize(self) -> None:
        self.dirty = True

    def render_line(self, y: int) -> Strip:
        rows = self._rows
        if y >= len(rows):
            return Strip.blank(self.content_size.width)
        return rows[y]

    def show(self, rows: list[Strip], plotted: dict[int, int]) -> None:
        width = self.content_size.width  # cut and measured once here, not on every paint
        self._rows = [row.crop_extend(0, width, None) for row in rows]
        self.plotted = plotted
        self.dirty = False
        self.refresh()


def strips(rows: list[list[Run]]) -> list[Strip]:
    """Strips built directly from segments (no Text to re-measure on every paint)."""
    return [Strip([Segment(text, _STYLES[code] if code < 0 else _SERIES[code % len(_SERIES)])
                   for text, code in row]) for row in rows]
