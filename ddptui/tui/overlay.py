"""A past run's metric series, read back to be drawn dimmed under the chart ("compare").

Records come in (the store's reader samples a big ``metrics.jsonl`` as evenly spaced
windows, :func:`ddptui.store.reader.metric_records`), series go out, and the chart's title is
relabelled. The chart shows a couple of points per cell column, so each series is cut to
what a wide chart can show, each point keeping its step and recorded time so that the chart
can align the runs on any axis (:mod:`ddptui.tui.compare`). The dashboard calls
:func:`read_overlay` in a thread worker.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ddptui.chart.downsample import downsample
from ddptui.chart.rows import DIM
from ddptui.chart.view import Run
from ddptui.metrics.align import Axis, RunTracks, Track, tracks_of
from ddptui.metrics.points import points
from ddptui.store.reader import metric_records, run_start

#: Points kept per series: a chart 1000 columns wide draws no more (min and max per column).
MAX_POINTS = 2000
#: The chart's own label for the dimmed series (``ddptui.chart.rows``), replaced by the run id.
PAST_LABEL = "past run"
#: How often the shown run's own ``metrics.jsonl`` is read again while aligned by time: the
#: store keeps no time per point, and a live run's file grows.
REREAD_S = 5.0

Series = tuple[list[float], list[float]]


class OwnRecords:
    """The shown run's recorded points with their times, from its ``metrics.jsonl`` (the
    store's series have none), read again at most every :data:`REREAD_S`. Used by the
    chart's one worker thread at a time."""

    def __init__(self, root: Path | None, max_points: int = MAX_POINTS) -> None:
        self.root = root
        self.max_points = max_points
        self._got: tuple[str, float, RunTracks] | None = None

    def tracks(self, run_id: str, start: float | None) -> RunTracks:
        now = time.monotonic()
        got = self._got
        if got is None or got[0] != run_id or now - got[1] >= REREAD_S:
            lines = metric_records(self.root, run_id) if run_id else []
            got = self._got = (run_id, now, thin(tracks_of(run_id, points(lines), start),
                                                 self.max_points))
        return got[2]


@dataclass(frozen=True, slots=True, eq=False)
class Overlay:
    """A past run's series by name, each rank's in rank order; ``eq=False``: the chart's
    reactive compares overlays by identity, not by their thousands of points.

    ``tracks`` holds the same points with their steps and times, ``axis`` and
    ``difference`` how the chart compares (``A`` and ``D`` change them), ``own`` reads the
    shown run's times."""

    run_id: str
    series: dict[str, list[Series]]
    tracks: RunTracks | None = None
    axis: Axis = Axis.STEP
    difference: bool = False
    own: OwnRecords | None = None

    def past(self, metric: str) -> list[Series]:
        """What the chart draws under ``metric``: the past run's series of the same name."""
        return self.series.get(metric, [])


def thin(run: RunTracks, max_points: int) -> RunTracks:
    """Each track cut to about ``max_points`` (min and max per bucket, as the chart draws),
    its steps and times cut alike."""
    out: dict[str, dict[int, Track]] = {}
    for name, by_rank in run.tracks.items():
        for rank, t in by_rank.items():
            index, values = downsample(range(len(t.values)), t.values, max_points // 2)
            kept = [int(i) for i in index]
            times = None if t.times is None else [t.times[i] for i in kept]
            out.setdefault(name, {})[rank] = Track([t.steps[i] for i in kept], values, times)
    return RunTracks(run.run_id, out, run.start)


def build_overlay(run_id: str, lines: Sequence[str], max_points: int = MAX_POINTS,
                  start: float | None = None, own: OwnRecords | None = None) -> Overlay:
    """Each series name's per-rank series of ``lines`` (``metrics.jsonl`` records), each
    downsampled to about ``max_points``; ``start``: the run's start, for alignment by time."""
    run = thin(tracks_of(run_id, points(lines), start), max_points)
    by_name = {name: [(t.steps, t.values) for _, t in sorted(by_rank.items())]
               for name, by_rank in run.tracks.items()}
    return Overlay(run_id, by_name, run, own=own)


def read_overlay(root: Path | None, run_id: str) -> Overlay:
    """Run ``run_id``'s recorded series; an empty overlay when it recorded none (no file).
    Slow on a big file's windows: call it off the event loop."""
    return build_overlay(run_id, metric_records(root, run_id), start=run_start(root, run_id),
                         own=OwnRecords(root))


def label_past(rows: list[list[Run]], overlay: Overlay, metric: str) -> list[list[Run]]:
    """The chart's title names the compared run (``vs RUN_ID``) where the chart says
    ``past run``, or says the run has no such series; ``rows`` is left as it was."""
    if not rows:
        return rows
    title = list(rows[0])
    named = [(f"vs {overlay.run_id}", DIM) if run == (PAST_LABEL, DIM) else run
             for run in title]
    if named == title:
        named.append((f"vs {overlay.run_id}: no {metric}", DIM))
    return [named, *rows[1:]]


def overlay_notice(overlay: Overlay, metric: str) -> str:
    """What the toast says once a run is compared: which series it has, and the one shown."""
    names = ", ".join(list(overlay.series)[:6]) + (", ..." if len(overlay.series) > 6 else "")
    shown = f"its {metric} is drawn dimmed under this run's" if overlay.past(metric) \
        else f"it has no {metric}; c shows another metric"
    return f"Comparing with {overlay.run_id} ({names}): {shown}."
