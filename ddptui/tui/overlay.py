"""A past run's metric series, read back to be drawn dimmed under the chart ("compare").

Records come in (the store's reader samples a big ``metrics.jsonl`` as evenly spaced
windows, :func:`ddptui.store.reader.metric_records`), series go out, and the chart's title is
relabelled. The chart shows a couple of points per cell column, so each series is cut to
what a wide chart can show. The dashboard calls :func:`read_overlay` in a thread worker.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ddptui.chart.downsample import downsample
from ddptui.chart.rows import DIM, Run
from ddptui.metrics.points import points, series_of
from ddptui.store.reader import metric_records

#: Points kept per series: a chart 1000 columns wide draws no more (min and max per column).
MAX_POINTS = 2000
#: The chart's own label for the dimmed series (``ddptui.chart.rows``), replaced by the run id.
PAST_LABEL = "past run"

Series = tuple[list[float], list[float]]


@dataclass(frozen=True, slots=True, eq=False)
class Overlay:
    """A past run's series by name, each rank's in rank order; ``eq=False``: the chart's
    reactive compares overlays by identity, not by their thousands of points."""

    run_id: str
    series: dict[str, list[Series]]

    def past(self, metric: str) -> list[Series]:
        """What the chart draws under ``metric``: the past run's series of the same name."""
        return self.series.get(metric, [])


def build_overlay(run_id: str, lines: Sequence[str], max_points: int = MAX_POINTS
                  ) -> Overlay:
    """Each series name's per-rank series of ``lines`` (``metrics.jsonl`` records), each
    downsampled to about ``max_points``."""
    found = list(points(lines))
    by_name: dict[str, list[Series]] = {}
    for name in dict.fromkeys(p.name for p in found):
        ranks = series_of(found, name)
        kept = [downsample(*ranks[r], max_points // 2) for r in sorted(ranks)]
        if kept:
            by_name[name] = kept
    return Overlay(run_id, by_name)


def read_overlay(root: Path | None, run_id: str) -> Overlay:
    """Run ``run_id``'s recorded series; an empty overlay when it recorded none (no file).
    Slow on a big file's windows: call it off the event loop."""
    return build_overlay(run_id, metric_records(root, run_id))


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
