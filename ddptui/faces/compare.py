"""``ddptui logs RUN --metrics [--align AXIS] [--compare OTHER]``: points on one axis, or two runs.

By step and alone, the points are printed as ever (``faces/logs.py``). With ``--align``,
every point of the run gets its x on the axis (a column named by it); with ``--compare``, one
row per x of the run's series (its lowest rank's, or ``--rank``'s), the other run's value
there (interpolated, blank outside its range) and the difference. Both come from
:mod:`ddptui.metrics.align`, the core the dashboard's compared chart draws from, so an export
and the chart agree. The flags are declared here, once, for ``cli.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ddptui.metrics.align import (
    AXIS_LABEL,
    COUNTERS,
    Axis,
    Row,
    Ruler,
    RunTracks,
    align,
    at_each,
    common,
    first_curve,
    ruler,
    tracks_of,
)
from ddptui.store import rundir

if TYPE_CHECKING:
    from ddptui.metrics.points import Point

# The recognizers and the store's readers are imported where used: the parser imports this
# module for its flags, on every command.


class Refused(Exception):
    """What cannot be exported, in one paragraph (the command exits 2)."""


def add_flags(parser: argparse.ArgumentParser) -> None:
    """``--align``, ``--compare`` and ``--metric`` on ``ddptui logs``."""
    parser.add_argument("--align", type=Axis, choices=list(Axis), default=Axis.STEP,
                        help="with --metrics: the x of each point: step (default), samples "
                             "(Megatron's consumed samples or a `samples` series), tokens (a "
                             "`tokens` series), time (seconds since the run's start)")
    parser.add_argument("--compare", metavar="OTHER_RUN", default=None,
                        help="with --metrics: one row per x of the run's series with "
                             "OTHER_RUN's value there (interpolated) and the difference")
    parser.add_argument("--metric", default="loss",
                        help="with --compare: the series compared (default: loss)")


def _metrics_path(base: Path, run_id: str) -> Path:
    from ddptui.store.runs import no_run

    d = rundir.run_dir(base, run_id)
    if not (d / rundir.RUN_JSON).exists():
        raise Refused(no_run(base, run_id))
    if not (d / rundir.METRICS).exists():
        raise Refused(f"run {run_id} recorded no metrics (no {rundir.METRICS} in {d}): its "
                      "ranks printed no line ddptui reads as one")
    return d / rundir.METRICS


def _points(base: Path, run_id: str) -> Iterator[Point]:
    from ddptui.metrics.points import points

    with open(_metrics_path(base, run_id), encoding="utf-8", errors="replace") as f:
        yield from points(f)


def _tracks(base: Path, run_id: str, names: frozenset[str] | None) -> RunTracks:
    from ddptui.store.reader import run_start

    return tracks_of(run_id, _points(base, run_id), run_start(base, run_id), names)


def export(root: Path | None, run_id: str, *, axis: Axis, other: str | None, metric: str,
           style: str, rank: int | None, node: str | None, out: TextIO | None = None) -> int:
    """The command: 0, or 2 once the reason is said on stderr (``out``: stdout as it is
    when called). By step and alone, every point as ``--metrics`` always printed it."""
    from ddptui.store.runs import state_root

    if other is None and axis is Axis.STEP:
        from ddptui.faces.logs import show_metrics

        return show_metrics(root, run_id, style=style, rank=rank, node=node, out=out)

    base = state_root(root)
    out = sys.stdout if out is None else out
    try:
        if other is None:
            lines = aligned_points(base, run_id, axis, style, rank, node)
        else:
            lines = comparison(base, run_id, other, axis, metric, style, rank)
        for line in lines:
            out.write(line + "\n")
    except Refused as e:
        sys.stderr.write(f"ddptui: {e}\n")
        return 2
    return 0


def aligned_points(base: Path, run_id: str, axis: Axis, style: str, rank: int | None,
                   node: str | None) -> Iterator[str]:
    """Every point of the run, as ``--metrics`` prints it, with its x on ``axis``. Two
    reads of the file: the counters first (a few series), then the points one by one."""
    from ddptui.metrics.points import as_text
    from ddptui.store.reader import run_start

    by: Ruler | str
    if axis is Axis.TIME:  # every recorded point has its time: only the start is wanted
        start = run_start(base, run_id)
        if start is None:
            start = min((p.time for p in _points(base, run_id)), default=0.0)
        by = Ruler(axis, start=start)
    else:
        by = ruler(_tracks(base, run_id, frozenset(COUNTERS.get(axis, ()))), axis)
    if isinstance(by, str):
        raise Refused(f"{by}, so its points cannot be aligned by {axis}; `--align step` or "
                      "`--align time` always can")
    label = AXIS_LABEL[axis]

    def x(p_rank: int, step: float | None, time: float) -> float | None:
        return None if step is None else by.x(p_rank, step, time)

    found = (p for p in _points(base, run_id) if (rank is None or p.rank == rank)
             and (node is None or p.node == node))
    return as_text(found, style, (label, x))


def comparison(base: Path, a_id: str, b_id: str, axis: Axis, metric: str, style: str,
               rank: int | None) -> Iterator[str]:
    """Rows of x, A's value, B's there and A − B (B blank outside its range)."""
    names = frozenset({metric, *COUNTERS.get(axis, ())})
    a_run, b_run = _tracks(base, a_id, names), _tracks(base, b_id, names)
    if not (a_run.has(metric) and b_run.has(metric)):
        lacking = " and ".join(r.run_id for r in (a_run, b_run) if not r.has(metric))
        raise Refused(f"series {metric!r} is not in both runs: {lacking} printed none. "
                      f"`ddptui logs RUN --metrics` lists a run's series; --metric names one")
    on = common(a_run, b_run, axis)
    if len(on.missing) == 2:
        raise Refused(f"neither run can be aligned by {axis}: "
                      + "; ".join(why for _, why in on.missing))
    if on.why:
        sys.stderr.write(f"ddptui: {on.why}\n")
    aligned = [align(run, metric, by) for run, by in ((a_run, on.a), (b_run, on.b))]
    for run, got in zip((a_run, b_run), aligned, strict=True):
        if got.left_out:
            sys.stderr.write(f"ddptui: {got.left_out} points of {metric} in run {run.run_id} "
                             f"lie outside the steps where it counted its "
                             f"{AXIS_LABEL[on.a.axis]}: left out, not extrapolated\n")
    got_a, got_b = first_curve(aligned[0], rank), first_curve(aligned[1], rank)
    if got_a is None or got_b is None:
        of_rank = f" of rank {rank}" if rank is not None else ""
        raise Refused(f"run {a_id if got_a is None else b_id} has no {metric}{of_rank} on "
                      f"this axis")
    head = (AXIS_LABEL[on.a.axis], f"{a_id} r{got_a[0]}", f"{b_id} r{got_b[0]}", "A - B")
    return _rows(head, at_each(got_a[1], got_b[1]), style)


def _rows(head: tuple[str, str, str, str], cells: list[Row], style: str) -> Iterator[str]:
    if style == "json":  # keyed as the CSV's header names its columns
        for row in cells:
            yield json.dumps(dict(zip(head, row, strict=True)))
        return
    if style == "csv":
        yield ",".join(head)
        for row in cells:
            yield ",".join("" if v is None else f"{v:.10g}" for v in row)
        return
    yield "".join(f"{h:>20}" for h in head)
    for row in cells:
        yield "".join(f"{'-' if v is None else f'{v:.6g}':>20}" for v in row)

