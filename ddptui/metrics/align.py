"""Two runs on one x axis: by step, by consumed samples or tokens, or by wall time since start.

Runs of different batch sizes or speeds only line up on what they share: a step of one run
is not a step of the other, but a sample, a token or a second is. Each axis maps a point
(rank, step, time) to its x through a :class:`Ruler`:

- ``step``: the step as printed;
- ``samples``: the run's count of samples so far at that step, read from a series it prints
  (Megatron's ``consumed samples``, or a ``samples`` series); ``tokens`` likewise
  (``tokens``, or the Hugging Face Trainer's ``num_input_tokens_seen``). A counter printed at
  other steps than the series is interpolated linearly between the two counter steps around
  the point's step; a point before the counter's first step or after its last has no x and
  is left out (and counted), never extrapolated. A rank that prints no counter of its own
  reads the lowest rank's that does: the count is the run's, and Megatron prints it on one
  rank only;
- ``time``: wall seconds since the run's start (``run.json``'s ``started_at``, else the
  run's first recorded point), from the time each point was recorded.

Where an axis is missing from one of two runs, both are aligned by step and :func:`common`
says why, in ddptui's words; nothing is guessed. The difference curve A − B takes B's value
at each of A's x by linear interpolation between B's two neighbouring points, only inside
B's x range. Pure: points come in, curves go out; the dashboard's overlay and ``ddptui logs
--metrics --csv`` both read them from here.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # `ddptui logs`' parser names the axes: it imports no recognizer for that
    from ddptui.metrics.points import Point


class Axis(StrEnum):
    """What the x of a compared chart or export counts."""

    STEP = "step"
    SAMPLES = "samples"
    TOKENS = "tokens"
    TIME = "time"


#: The series a counting axis reads, the first a run prints winning.
COUNTERS: dict[Axis, tuple[str, ...]] = {
    Axis.SAMPLES: ("consumed samples", "samples"),
    Axis.TOKENS: ("tokens", "num_input_tokens_seen"),
}
#: What a run lacks when an axis is missing from it, as a sentence says it.
LACKS = {Axis.SAMPLES: "prints no consumed samples (a `consumed samples` or `samples` series)",
         Axis.TOKENS: "prints no tokens (a `tokens` or `num_input_tokens_seen` series)",
         Axis.TIME: "has no recorded time for its points"}
#: What a run lacks, in a chart's title.
SHORT = {Axis.SAMPLES: "consumed samples", Axis.TOKENS: "tokens", Axis.TIME: "recorded times"}
#: The axis as a chart's title and an export's header name it.
AXIS_LABEL = {Axis.STEP: "step", Axis.SAMPLES: "samples", Axis.TOKENS: "tokens",
              Axis.TIME: "seconds"}
#: The order a key cycles through.
ORDER = (Axis.STEP, Axis.SAMPLES, Axis.TOKENS, Axis.TIME)

Curve = tuple[list[float], list[float]]


@dataclass(frozen=True, slots=True)
class Track:
    """One rank's points of one series, in the order recorded: step, value and, where the
    points came from ``metrics.jsonl``, the wall time each was recorded (the live store
    keeps none)."""

    steps: list[float]
    values: list[float]
    times: list[float] | None = None


@dataclass(frozen=True, slots=True)
class RunTracks:
    """A run's series by name, then rank; ``start``: its start's wall time, if known."""

    run_id: str
    tracks: dict[str, dict[int, Track]]
    start: float | None = None

    def has(self, name: str) -> bool:
        return any(t.steps for t in self.tracks.get(name, {}).values())


def tracks_of(run_id: str, found: Iterable[Point], start: float | None = None,
              names: frozenset[str] | None = None) -> RunTracks:
    """A run's tracks from its recorded points (``names``: only these series); a later
    value of the same step replaces the earlier one, as in the store."""
    tracks: dict[str, dict[int, Track]] = {}
    for p in found:
        if p.step is None or (names is not None and p.name not in names):
            continue
        t = tracks.setdefault(p.name, {}).get(p.rank)
        if t is None:
            t = tracks[p.name][p.rank] = Track([], [], [])
        if t.steps and t.steps[-1] == p.step:
            t.values[-1] = p.value
            continue
        t.steps.append(float(p.step))
        t.values.append(p.value)
        assert t.times is not None
        t.times.append(p.time)
    return RunTracks(run_id, tracks, start)


def interpolate(xs: Sequence[float], ys: Sequence[float], at: float) -> float | None:
    """``ys`` at ``at``, linear between the two ``xs`` around it (``xs`` ascending); None
    outside ``[xs[0], xs[-1]]``: nothing is extrapolated."""
    if not xs or at < xs[0] or at > xs[-1]:
        return None
    i = bisect.bisect_left(xs, at)
    if xs[i] == at:
        return ys[i]
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (at - x0) / (x1 - x0)


def ascending(xs: Sequence[float], ys: Sequence[float]) -> Curve:
    """The points sorted by x, one per x (the one recorded last), so that
    :func:`interpolate` can read them: a restarted run prints some steps twice."""
    last = dict(zip(xs, ys, strict=True))
    keys = sorted(last)
    return keys, [last[k] for k in keys]


@dataclass(frozen=True, slots=True)
class Ruler:
    """A run's points mapped to one axis: :meth:`x` of a point, None where it has none."""

    axis: Axis
    counters: dict[int, Curve] = field(default_factory=dict)
    start: float = 0.0

    def x(self, rank: int, step: float, time: float | None) -> float | None:
        if self.axis is Axis.STEP:
            return step
        if self.axis is Axis.TIME:
            return None if time is None else time - self.start
        counter = self.counters.get(rank) or self.counters[min(self.counters)]
        return interpolate(*counter, step)


def ruler(run: RunTracks, axis: Axis) -> Ruler | str:
    """How ``run`` maps to ``axis``, or why it cannot (a sentence naming the run)."""
    if axis is Axis.STEP:
        return Ruler(axis)
    if axis is Axis.TIME:
        tracks = [t for by_rank in run.tracks.values() for t in by_rank.values() if t.steps]
        if not tracks or any(t.times is None for t in tracks):
            return f"run {run.run_id} {LACKS[axis]}"
        first = min(min(t.times or [0.0]) for t in tracks)
        return Ruler(axis, start=first if run.start is None else run.start)
    for name in COUNTERS[axis]:
        if run.has(name):
            counters = {rank: ascending(t.steps, t.values)
                        for rank, t in run.tracks[name].items() if t.steps}
            return Ruler(axis, counters)
    return f"run {run.run_id} {LACKS[axis]}"


@dataclass(frozen=True, slots=True)
class Aligned:
    """One series of one run on an axis: each rank's curve, and how many points had no x."""

    curves: dict[int, Curve]
    left_out: int = 0


def align(run: RunTracks, name: str, by: Ruler) -> Aligned:
    """Series ``name`` of ``run`` on ``by``'s axis, each rank's points in the order
    recorded."""
    curves: dict[int, Curve] = {}
    left_out = 0
    for rank, t in sorted(run.tracks.get(name, {}).items()):
        xs: list[float] = []
        ys: list[float] = []
        times: Sequence[float | None] = t.times if t.times is not None else [None] * len(t.steps)
        for step, value, time in zip(t.steps, t.values, times, strict=True):
            x = by.x(rank, step, time)
            if x is None:
                left_out += 1
                continue
            xs.append(x)
            ys.append(value)
        if xs:
            curves[rank] = (xs, ys)
    return Aligned(curves, left_out)


@dataclass(frozen=True, slots=True)
class Common:
    """Two runs' rulers on one axis; ``missing``: the id of each run that lacks the asked
    axis and why, both runs then being on step."""

    a: Ruler
    b: Ruler
    missing: tuple[tuple[str, str], ...] = ()

    @property
    def why(self) -> str:
        """``run B prints no consumed samples (...): aligned by step``; empty when the asked
        axis holds."""
        said = "; ".join(why for _, why in self.missing)
        return f"{said}: aligned by step" if said else ""


def common(a: RunTracks, b: RunTracks, axis: Axis) -> Common:
    """The two runs' rulers on ``axis`` where both have it, else on step."""
    got_a, got_b = ruler(a, axis), ruler(b, axis)
    if isinstance(got_a, Ruler) and isinstance(got_b, Ruler):
        return Common(got_a, got_b)
    missing = tuple((r.run_id, got) for r, got in ((a, got_a), (b, got_b))
                    if isinstance(got, str))
    return Common(Ruler(Axis.STEP), Ruler(Axis.STEP), missing)


def first_curve(aligned: Aligned, rank: int | None = None) -> tuple[int, Curve] | None:
    """The curve a comparison takes of a run: ``rank``'s, else the lowest rank's (the one
    that prints, for most stacks); None when there is none."""
    if rank is not None:
        curve = aligned.curves.get(rank)
        return None if curve is None else (rank, curve)
    if not aligned.curves:
        return None
    low = min(aligned.curves)
    return low, aligned.curves[low]


Row = tuple[float, float, float | None, float | None]


def at_each(a: Curve, b: Curve) -> list[Row]:
    """For each point of ``a`` (sorted by x, one per x): its x, its value, ``b``'s value
    there, interpolated, and A − B; None outside ``b``'s x range. A − B is kept to 12
    significant digits: the subtraction's float noise (``-20.000000000000004``) would make a
    steady difference a chart of noise."""
    bx, by = ascending(*b)
    ax, ay = ascending(*a)
    rows: list[Row] = []
    for x, y in zip(ax, ay, strict=True):
        other = interpolate(bx, by, x)
        rows.append((x, y, other, None if other is None else float(f"{y - other:.12g}")))
    return rows


def difference(a: Curve, b: Curve) -> Curve:
    """The curve A − B at each of A's x inside B's x range."""
    inside = [(x, d) for x, _, _, d in at_each(a, b) if d is not None]
    return [x for x, _ in inside], [d for _, d in inside]
