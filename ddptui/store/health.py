"""Whether each rank is making progress: stalls judged from the store's views; stragglers as
the run's one judge of them named them (:mod:`ddptui.insight`), read from ``RankView``.

Pure: the clock is passed in and the thresholds are the hosts file's ``health:`` section, so
every rule is tested without a run. Stalls are judged once, where the run is
(:class:`StallWatch`, as events in the store); every face shows those events
(:func:`stalled_marks`) and judges no stall of its own, so the table and the headless output
never disagree about a rank.

A rank stalls when it has printed no line and no metric for ``stall_after`` seconds. Alone,
while another rank was heard from in the last half of that, it names the rank; when every
running rank stops together the whole run is stuck, which in DDP is the usual picture of one
rank that never reached a collective: the others wait inside it and go quiet too. When ranks
report progress with step metrics, a rank that never reported one (many scripts print on
rank 0 only) is silent by design, so it is judged only with the others, when the whole run
stops.

A rank that reports steps also stalls when no step came for ``stall_steps`` times the run's
median time between step reports (and at least :data:`STEP_FLOOR_S`, or ``stall_after``
when that is less), whatever else it prints: a run of 0.2 s steps stuck for 30 s is told
then, not after ``stall_after`` of silence, and long before NCCL's or gloo's own timeout
(10 and 30 minutes by default) ends it. Alone when another rank's steps came in the last
half of that; the whole run when none did. The gaps are timed by :class:`StallWatch` as it
looks, once a second: the time between the last reports it saw, shared among the reports
that came meanwhile, counted as the step's advance over the steps a report moves it by (the
greatest common divisor of the steps seen: 10 for Megatron's ``iteration 10, 20, ...``; an
epoch fraction counts as one report). That count errs low, never high (steps of 1 seen only
at multiples of 10 look like reports every 10), so a gap is never taken for shorter than it
is and a stall is told late rather than wrongly.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ddptui.config.model import HealthConfig
from ddptui.events import NodeStatus, Stall
from ddptui.store.views import NodeView, RankView

DEFAULTS = HealthConfig()
#: Two times that stand for one moment, after a subtraction's rounding.
_SAME_S = 1e-3
#: The least time without a step that is a stall: an evaluation or a checkpoint of a run of
#: fast steps takes a few seconds, and a flood's gaps read as near 0.
STEP_FLOOR_S = 30.0
#: Gaps kept per rank, and how many it takes before they count.
_GAPS, _GAPS_NEEDED = 16, 3


@dataclass(frozen=True, slots=True)
class RankHealth:
    straggler: bool = False
    stalled: bool = False
    idle_s: float | None = None
    """Seconds since the rank last printed a line or a metric."""
    whole_run: bool = False
    """Every running rank stopped together."""
    after_error: bool = False
    """Silent past the threshold after an error: told as no stall (``Stall.after_error``)."""
    on_steps: bool = False
    """Stalled on its steps (no step for ``stall_steps`` gaps), not on its silence."""

    @property
    def mark(self) -> str:
        if self.stalled:
            return "stalled"
        if self.after_error:
            return "silent after error"
        return "straggler" if self.straggler else ""


def last_heard(r: RankView) -> float | None:
    """When the rank last said anything: a line, or a metric (which is a line of its own)."""
    times = [t for t in (r.last_line_time, r.last_step_time) if t is not None]
    return max(times) if times else None


def assess(
    ranks: Iterable[RankView],
    now: float,
    *,
    live_nodes: set[str],
    config: HealthConfig = DEFAULTS,
    step_gap: float | None = None,
) -> dict[int, RankHealth]:
    """Health of every rank; only ranks on live (running) nodes can stall or straggle.
    ``step_gap``: the run's median time between step reports, when known."""
    ranks = list(ranks)
    live = [r for r in ranks if r.node in live_nodes]
    idle: dict[int, float | None] = {}
    for r in ranks:
        last = last_heard(r)
        idle[r.rank] = None if last is None else max(0.0, now - last)
    quiet = {r.rank for r in live if (i := idle[r.rank]) is not None and i > config.stall_after}
    whole = bool(live) and len(quiet) == len(live)
    # Others "go on" when one was heard from lately: ranks that stop together stop within a
    # read of each other, and the first to pass the threshold is not alone for that.
    going = any((i := idle[r.rank]) is not None and i <= config.stall_after / 2 for r in live)
    steppers = any(r.last_step is not None for r in live)
    out: dict[int, RankHealth] = {}
    for r in ranks:
        if r.node not in live_nodes:
            out[r.rank] = RankHealth(idle_s=idle[r.rank])
            continue
        straggler = r.straggler
        alone = going and (not steppers or r.last_step is not None)
        stalled = r.rank in quiet and (whole or alone)
        health = RankHealth(straggler, stalled, idle[r.rank], stalled and whole)
        if not stalled and step_gap is not None:
            floor = min(STEP_FLOOR_S, config.stall_after)
            health = _on_steps(r, live, now, max(floor, config.stall_steps * step_gap), health)
        out[r.rank] = health
    return out


def _on_steps(r: RankView, live: Sequence[RankView], now: float, after: float,
              health: RankHealth) -> RankHealth:
    """``health`` stalled on its steps when rank ``r``'s last step is ``after`` seconds old:
    alone while another rank's steps came in the last half of that, else with the whole run
    (every rank that reports steps stopped)."""
    if r.last_step_time is None or now - r.last_step_time <= after:
        return health
    steps = [x.last_step_time for x in live if x.last_step_time is not None]
    whole = all(now - t > after for t in steps)
    if not whole and not any(now - t <= after / 2 for t in steps):
        return health  # the others stop a read apart: not one alone, not yet all
    return RankHealth(health.straggler, True, now - r.last_step_time, whole, on_steps=True)


def median_gap(gaps: dict[int, deque[float]]) -> float | None:
    """The run's median time between step reports: the median of each rank's median, over
    the ranks with a few gaps timed."""
    medians = [statistics.median(g) for g in gaps.values() if len(g) >= _GAPS_NEEDED]
    return statistics.median(medians) if medians else None


class StallWatch:
    """Turns assessments into events: a rank that stalled, one that went on again.

    The one judge of a rank's silence: the faces show its events (``stalled_marks`` says which
    still stand) and never assess stalls themselves. A rank is told once when it stalls and
    once when it is heard from again. A rank that is ``ending`` (its last words were an error:
    a traceback, a collective's timeout) is not judged: the failure that follows says more,
    and a dying rank's silence is no stall. When it stays silent past the threshold anyway,
    that is said once, as such (``after_error``), so that no face is left to guess. A rank
    whose node stopped running is let go without a word: its node's state says it.
    """

    def __init__(self, config: HealthConfig = DEFAULTS) -> None:
        self.config = config
        self.stalled: dict[int, Stall] = {}
        #: Ranks told silent after an error, until they are heard from again.
        self.excused: dict[int, Stall] = {}
        #: Per rank: its last step and that report's time at the last look, the steps a
        #: report moves it by (int steps), and the time between its reports since.
        self._seen: dict[int, tuple[int | float, float]] = {}
        self._stride: dict[int, int] = {}
        self.gaps: dict[int, deque[float]] = {}

    def update(self, ranks: Iterable[RankView], now: float, live_nodes: set[str],
               ending: Iterable[int] = ()) -> list[Stall]:
        gone = set(ending)
        everyone = list(ranks)
        self._time_steps(everyone)
        ranks = [r for r in everyone if r.rank not in gone]
        health = assess(ranks, now, live_nodes=live_nodes, config=self.config,
                        step_gap=median_gap(self.gaps))
        out: list[Stall] = []
        # The rank heard from longest ago first: in a whole-run stall, the likeliest culprit.
        for r in sorted(everyone, key=lambda r: (last_heard(r) or now, r.rank)):
            if r.rank in gone:
                out.extend(self._ending(r, now, live_nodes))
                continue
            self.excused.pop(r.rank, None)  # heard from since its error
            h = health[r.rank]
            was = self.stalled.get(r.rank)
            if h.stalled and was is None:
                ev = Stall(r.node, r.rank, now, True, h.idle_s or 0.0, h.whole_run,
                           step_gap_s=median_gap(self.gaps) if h.on_steps else None)
                self.stalled[r.rank] = ev
                out.append(ev)
            elif not h.stalled and was is not None:
                del self.stalled[r.rank]
                going = _going_again(r, was, now, live_nodes)
                if going is not None:
                    out.append(going)
        return out

    def _time_steps(self, ranks: Iterable[RankView]) -> None:
        """The gaps between each rank's step reports since the last look (the module's
        docstring says how they are counted); steps that went back start afresh."""
        for r in ranks:
            step, at = r.last_step, r.last_step_time
            if step is None or at is None:
                continue
            seen = self._seen.get(r.rank)
            self._seen[r.rank] = (step, at)
            if isinstance(step, int):
                self._stride[r.rank] = math.gcd(self._stride.get(r.rank, 0), step)
            if seen is None or at <= seen[1] or step <= seen[0]:
                continue
            stride = self._stride.get(r.rank, 0)
            whole = isinstance(step, int) and isinstance(seen[0], int) and stride > 0
            reports = (step - seen[0]) / stride if whole else 1.0
            self.gaps.setdefault(r.rank, deque(maxlen=_GAPS)).append((at - seen[1]) / reports)

    def _ending(self, r: RankView, now: float, live_nodes: set[str]) -> list[Stall]:
        """A rank whose last line is an error: a stall it was in ends (the error is a line),
        and its silence past the threshold is told once as no stall."""
        out: list[Stall] = []
        was = self.stalled.pop(r.rank, None)
        if was is not None and (going := _going_again(r, was, now, live_nodes)) is not None:
            out.append(going)
        heard = last_heard(r)
        if (r.rank not in self.excused and r.node in live_nodes and heard is not None
                and now - heard > self.config.stall_after):
            ev = Stall(r.node, r.rank, now, False, now - heard, after_error=True)
            self.excused[r.rank] = ev
            out.append(ev)
        return out


def _going_again(r: RankView, was: Stall, now: float, live_nodes: set[str]) -> Stall | None:
    heard = last_heard(r) if was.step_gap_s is None else r.last_step_time
    if r.node in live_nodes and heard is not None and heard > was.time - was.idle_s:
        return Stall(r.node, r.rank, now, False, heard - (was.time - was.idle_s), was.whole_run,
                     step_gap_s=was.step_gap_s)
    return None


def stalled_marks(stalls: Sequence[Stall], ranks: Iterable[RankView],
                  nodes: Iterable[NodeView]) -> dict[int, Stall]:
    """The verdicts that still stand, by rank: each rank's last one, while its node has kept
    the state it had then and the rank has not been heard from since. No judging here:
    the faces' way of reading the watch's events alike."""
    since = {n.name: n.since for n in nodes if n.status is NodeStatus.RUNNING}
    heard = {r.rank: last_heard(r) for r in ranks}
    last: dict[int, Stall] = {}
    for s in stalls:
        last[s.rank] = s
    out: dict[int, Stall] = {}
    for rank, s in last.items():
        if not (s.stalled or s.after_error) or s.node not in since:
            continue
        start, then = since[s.node], heard.get(rank)
        if start is not None and start > s.time:
            continue
        if then is not None and then > s.time - s.idle_s + _SAME_S:
            continue
        out[rank] = s
    return out


def shown_health(ranks: Sequence[RankView], nodes: Sequence[NodeView], stalls: Sequence[Stall],
                 now: float, config: HealthConfig = DEFAULTS) -> dict[int, RankHealth]:
    """What a face shows of each rank: its idle time and whether it straggles, read off the
    views here; whether it stalled only as the watch told it (:func:`stalled_marks`)."""
    live = {n.name for n in nodes if n.status is NodeStatus.RUNNING}
    told = stalled_marks(stalls, ranks, nodes)
    out: dict[int, RankHealth] = {}
    for rank, h in assess(ranks, now, live_nodes=live, config=config).items():
        s = told.get(rank)
        out[rank] = RankHealth(h.straggler, s is not None and s.stalled, h.idle_s,
                               s is not None and s.whole_run, s is not None and s.after_error)
    return out


def stall_text(ev: Stall) -> str:
    """What ddptui says of one rank's stall, or of its end."""
    who = f"rank {ev.rank} on {ev.node}"
    if ev.after_error:
        return after_error_text([ev])
    nothing = "a line or metric" if ev.step_gap_s is None else "a step"
    if not ev.stalled:
        return f"{who} is going again after {ev.idle_s:.0f} s without {nothing}"
    if ev.whole_run:
        return whole_run_text([ev])
    if ev.step_gap_s is not None:
        return (f"{who} stalled: no step for {ev.idle_s:.0f} s, {_times(ev)} while the "
                "other ranks go on")
    return (f"{who} stalled: no line or metric for {ev.idle_s:.0f} s while the other ranks "
            "go on")


def _times(ev: Stall) -> str:
    """``60 times the run's usual 0.5 s between steps,``"""
    gap = ev.step_gap_s or 0.0
    many = f"{ev.idle_s / gap:.0f} times" if gap > 0 else "long past"
    return f"{many} the run's usual {gap:.2g} s between steps,"


def whole_run_text(stalls: Sequence[Stall]) -> str:
    """The ranks of a whole-run stall, in one sentence: a line a rank would drown 128 ranks."""
    idle = max(s.idle_s for s in stalls)
    on_steps = [s for s in stalls if s.step_gap_s is not None]
    if on_steps:
        times = _times(max(on_steps, key=lambda s: s.idle_s))[:-1]
        return (f"the whole run stalled: no step for {idle:.0f} s, {times} ({_where(stalls)});"
                " the ranks still print, so they wait on something (data, a file, a "
                "checkpoint, a collective): their Python stacks show where")
    return (f"the whole run stalled: no rank has printed a line or metric for {idle:.0f} s "
            f"({_where(stalls)}); one rank is likely stuck before a collective the others "
            "wait in, and its Python stack shows which")


def after_error_text(stalls: Sequence[Stall]) -> str:
    """Ranks silent past the threshold after an error, in one sentence: why ddptui does not
    call them stalled."""
    idle = min(s.idle_s for s in stalls)
    one = len(stalls) == 1
    return (f"{_where(stalls)}: no line or metric for {idle:.0f} s since "
            f"{'its last line, an error' if one else 'their last lines, errors'}; not a stall: "
            f"the error{'' if one else 's'} say{'s' if one else ''} why")


def _where(stalls: Sequence[Stall]) -> str:
    """``rank 3 on b``; ``ranks 0, 1 on a; 2 on b``."""
    by_node: dict[str, list[int]] = {}
    for s in stalls:
        by_node.setdefault(s.node, []).append(s.rank)
    where = "; ".join(f"{_span(ranks)} on {node}" for node, ranks in by_node.items())
    return f"rank{'s' if len(stalls) > 1 else ''} {where}"


def stall_texts(stalls: Sequence[Stall]) -> list[tuple[Stall, str]]:
    """What to say of a batch of stalls, in order: a whole-run stall once, then each rank's
    own stall or end, then the ranks silent after an error, once; each with the stall it
    starts from (its node heads the line)."""
    whole = [s for s in stalls if s.stalled and s.whole_run]
    excused = [s for s in stalls if s.after_error]
    out = [(whole[0], whole_run_text(whole))] if whole else []
    out.extend((s, stall_text(s)) for s in stalls
               if not (s.stalled and s.whole_run) and not s.after_error)
    if excused:
        out.append((excused[0], after_error_text(excused)))
    return out


def _span(ranks: list[int]) -> str:
    rs = sorted(ranks)
    if len(rs) > 2 and rs == list(range(rs[0], rs[-1] + 1)):
        return f"{rs[0]}-{rs[-1]}"
    return ", ".join(map(str, rs))
