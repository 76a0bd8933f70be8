"""The chart compared with a past run: both runs on one axis, or the difference A − B.

The shown run is A, the past run under it B. Both are aligned by :mod:`ddptui.metrics.align`
(the same core as ``ddptui logs --metrics --csv --compare``), then drawn by the chart's own
builder: B's curves dimmed beneath A's, or the one curve A − B (A's lowest rank with the
series minus B's, B interpolated at A's x). The store keeps no time per point, so aligned by
time, A's points are read back from its ``metrics.jsonl`` (:class:`~ddptui.tui.overlay.
OwnRecords`). Nothing here imports Textual: the screen calls :func:`compare_chart` in its
chart worker and :func:`changed` on the keys.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Literal

from ddptui.chart.rows import DIM, STEP_WORDS, chart_rows, diverging
from ddptui.chart.view import ChartView, Drawn, Run
from ddptui.metrics.align import (
    AXIS_LABEL,
    COUNTERS,
    ORDER,
    SHORT,
    Axis,
    RunTracks,
    Track,
    align,
    common,
    difference,
    first_curve,
)
from ddptui.tui.overlay import Overlay, label_past

if TYPE_CHECKING:
    from ddptui.store.store import Store


def store_tracks(store: Store, names: set[str]) -> RunTracks:
    """The shown run's series ``names`` as the store keeps them: steps and values, no times."""
    info = store.run_info()
    tracks: dict[str, dict[int, Track]] = {}
    for rank in (r.rank for r in store.rank_views()):
        for name in names:
            steps, values = store.series(rank, name)
            if steps:
                tracks.setdefault(name, {})[rank] = Track([float(s) for s in steps], values)
    return RunTracks(info.run_id or "shown", tracks, info.started_at)


def shown_tracks(store: Store, overlay: Overlay, metric: str) -> RunTracks:
    """A's points: from the store, but aligned by time from its recorded file."""
    if overlay.axis is Axis.TIME and overlay.own is not None:
        info = store.run_info()
        own = overlay.own.tracks(info.run_id, info.started_at)
        if own.tracks:
            return own
    return store_tracks(store, {metric, *COUNTERS.get(overlay.axis, ())})


def retitle(rows: list[list[Run]], words: str, why: str) -> list[list[Run]]:
    """The title's ``by step`` made ``words``; ``why`` (the asked axis is missing) added."""
    if not rows:
        return rows
    (text, style), *rest = rows[0]
    for said in STEP_WORDS.values():
        text = text.replace(f" {said}", f" {words}", 1)
    title = [(text, style), *rest] + ([(f" ({why})", DIM)] if why else [])
    return [title, *rows[1:]]


def compare_chart(store: Store, overlay: Overlay, view: ChartView, width: int, height: int
                  ) -> Drawn:
    """The chart with ``overlay`` as the overlay's axis and difference say; ``view``'s
    smoothing and window as the chart's own (the difference is drawn on a linear scale)."""
    metric = view.metric
    source = store.series_source.get(metric)
    if overlay.tracks is None or (overlay.axis is Axis.STEP and not overlay.difference):
        ranks = [r.rank for r in store.rank_views()]
        drawn = chart_rows(view, ranks, store.series, width, height, source,
                           overlay.past(metric), diverging=diverging(store, metric))
        return replace(drawn, rows=label_past(drawn.rows, overlay, metric))
    a_run, b_run = shown_tracks(store, overlay, metric), overlay.tracks
    on = common(a_run, b_run, overlay.axis)
    # the whole sentence is the export's; a title has room for the gist
    lacking = " or ".join(run_id for run_id, _ in on.missing)
    why = f"no {SHORT[overlay.axis]} in {lacking}" if lacking else ""
    words = f"aligned by {AXIS_LABEL[on.a.axis]}"
    a, b = align(a_run, metric, on.a), align(b_run, metric, on.b)
    if not overlay.difference:
        past = [b.curves[r] for r in sorted(b.curves)]
        drawn = chart_rows(view, sorted(a.curves), lambda r, m: a.curves[r] if m == metric
                           else ([], []), width, height, source, past)
        return replace(drawn, rows=retitle(label_past(drawn.rows, overlay, metric), words, why))
    linear = replace(view, log_y=False)
    got_a, got_b = first_curve(a), first_curve(b)
    if got_a is None or got_b is None:
        missing = a_run.run_id if got_a is None else overlay.run_id
        drawn = chart_rows(linear, [], store.series, width, height, source)
        return replace(drawn, rows=retitle(drawn.rows, f"A − B {words}",
                                           f"{missing} has no {metric}"))
    (rank_a, curve_a), (rank_b, curve_b) = got_a, got_b
    diff = difference(curve_a, curve_b)
    drawn = chart_rows(linear, [rank_a], lambda r, m: diff if m == metric else ([], []),
                       width, height, source)
    names = f"A − B: r{rank_a} of {a_run.run_id} − r{rank_b} of {overlay.run_id}, {words}"
    if not diff[0]:
        why = "; ".join(s for s in (why, "no x of A inside B's range") if s)
    return replace(drawn, rows=retitle(drawn.rows, names, why))


#: What a key of the compared chart changes: its axis (``A``), the difference shown (``D``).
Change = Literal["align", "difference"]


def changed(overlay: Overlay | None, change: Change) -> tuple[Overlay | None, str]:
    """The overlay after key ``change`` (``align``: the next axis; ``difference``: A − B on
    or off), and what a toast says of it."""
    if overlay is None:
        return None, "No run is compared: C picks one, then A aligns and D shows A − B."
    if change == "align":
        axis = ORDER[(ORDER.index(overlay.axis) + 1) % len(ORDER)]
        said = {Axis.STEP: "Aligned by step.",
                Axis.TIME: "Aligned by seconds since each run's start."}.get(
            axis, f"Aligned by {AXIS_LABEL[axis]} where both runs print them, else by step.")
        return replace(overlay, axis=axis), said
    on = not overlay.difference
    return replace(overlay, difference=on), (
        f"The chart shows A − B (this run − {overlay.run_id}), B interpolated at A's x."
        if on else f"The chart shows both runs again, {overlay.run_id} dimmed.")
