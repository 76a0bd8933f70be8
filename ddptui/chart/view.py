"""What the chart is asked for (:class:`ChartView`) and what it answers (:class:`Drawn`), and
the step window's zoom and pan.

Both travel between the dashboard and its engine (:mod:`ddptui.engine.calls`), pickled, so
they are plain frozen data. Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ddptui.chart.band import Band, RankView
from ddptui.chart.smooth import DEFAULT_WEIGHT
from ddptui.insight.marks import Mark

#: A chart's row: runs of text, each with its style code (see ``ddptui.chart.rows``).
Run = tuple[str, int]
#: The smallest window a zoom makes, in steps.
MIN_SPAN = 4.0


@dataclass(frozen=True, slots=True)
class ChartView:
    """The chart as the user set it: which series, how drawn, which steps."""

    metric: str = "loss"
    log_y: bool = False
    smoothing: float = DEFAULT_WEIGHT
    """TensorBoard's EMA weight (:mod:`ddptui.chart.smooth`); 0 draws the raw values."""
    window: tuple[float, float] | None = None
    """The steps shown, first and last; None: every step there is."""
    ranks: RankView = RankView.BAND
    """A series several ranks report: their median and min-max band, or each rank's line
    (:mod:`ddptui.chart.band`)."""


@dataclass(frozen=True, slots=True)
class Drawn:
    """A chart built: its rows, and what the dashboard keeps of it for its keys."""

    rows: list[list[Run]]
    plotted: dict[int, int] = field(default_factory=dict)
    """The points drawn per rank (tests wait on it)."""
    extent: tuple[float, float] | None = None
    """The first and last step of the metric's series, over every rank: where a zoom is
    taken from and a pan stops."""
    marks: tuple[Mark, ...] = ()
    """Every rank's spikes and NaN in the metric, in step order (not only the window's)."""
    band: Band | None = None
    """The ranks' median and min-max band as drawn; None: each rank drew its own line
    (the view asks it, or one rank reports the series)."""
    flagged: tuple[int, ...] = ()
    """The ranks the insight judge found diverging in the metric, drawn out over the rest."""


def zoomed(view: ChartView, extent: tuple[float, float] | None, factor: float
           ) -> ChartView:
    """``view`` with its window ``factor`` times as wide (below 1: zoomed in), about its
    middle; a window as wide as the series or wider is no window (every step)."""
    if extent is None:
        return view
    lo, hi = view.window or extent
    middle, half = (lo + hi) / 2, max(MIN_SPAN, (hi - lo) * factor) / 2
    if 2 * half >= extent[1] - extent[0]:
        return replace(view, window=None)
    return replace(view, window=_inside((middle - half, middle + half), extent))


def panned(view: ChartView, extent: tuple[float, float] | None, fraction: float
           ) -> ChartView:
    """``view``'s window moved by ``fraction`` of its width (negative: toward step 0),
    stopping at the series' ends."""
    if extent is None or view.window is None:
        return view
    lo, hi = view.window
    shift = (hi - lo) * fraction
    return replace(view, window=_inside((lo + shift, hi + shift), extent))


def centred(view: ChartView, extent: tuple[float, float] | None, step: float) -> ChartView:
    """``view`` with ``step`` in the middle of its window (a tenth of the series wide when
    it had none)."""
    if extent is None:
        return view
    lo, hi = view.window or (step, step + max(MIN_SPAN, (extent[1] - extent[0]) / 10))
    half = (hi - lo) / 2
    return replace(view, window=_inside((step - half, step + half), extent))


def _inside(window: tuple[float, float], extent: tuple[float, float]) -> tuple[float, float]:
    lo, hi = window
    if lo < extent[0]:
        lo, hi = extent[0], hi + extent[0] - lo
    if hi > extent[1]:
        lo, hi = max(extent[0], lo - (hi - extent[1])), extent[1]
    return lo, hi
