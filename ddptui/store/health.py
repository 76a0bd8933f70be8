"""Whether each rank is making progress: stragglers and stalls, judged from the store's views.

Pure: the clock is passed in and the thresholds are the hosts file's ``health:`` section, so
the engine (which marks stalls as events, :class:`StallWatch`) and the dashboard (which marks
the nodes table) judge alike, and every rule is tested without a run.

A rank stalls when it has printed no line and no metric for ``stall_after`` seconds. Alone,
while another rank was heard from in the last half of that, it names the rank; when every
running rank stops together the whole run is stuck, which in DDP is the usual picture of one
rank that never reached a collective: the others wait inside it and go quiet too. When ranks
report progress with step metrics, a rank that never reported one (many scripts print on
rank 0 only) is silent by design, so it is judged only with the others, when the whole run
stops.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ddptui.config.model import HealthConfig
from ddptui.events import Stall
from ddptui.store.views import RankView

DEFAULTS = HealthConfig()


@dataclass(frozen=True, slots=True)
class RankHealth:
    straggler: bool = False
    stalled: bool = False
    idle_s: float | None = None
    """Seconds since the rank last printed a line or a metric."""
    whole_run: bool = False
    """Every running rank stopped together."""

    @property
    def mark(self) -> str:
        if self.stalled:
            return "stalled"
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
) -> dict[int, RankHealth]:
    """Health of every rank; only ranks on live (running) nodes can stall or straggle."""
    ranks = list(ranks)
    live = [r for r in ranks if r.node in live_nodes]
    times = [r.step_time_s for r in live if r.step_time_s is not None and r.step_time_s > 0]
    median = statistics.median(times) if len(times) >= 2 else None
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
        straggler = (
            median is not None
            and r.step_time_s is not None
            and r.step_time_s > median * (1 + config.straggler_fraction)
        )
        alone = going and (not steppers or r.last_step is not None)
        stalled = r.rank in quiet and (whole or alone)
        out[r.rank] = RankHealth(straggler, stalled, idle[r.rank], stalled and whole)
    return out


class StallWatch:
    """Turns assessments into events: a rank that stalled, one that went on again.

    A rank is told once when it stalls and once when it is heard from again. A rank whose
    node stopped running, or that is ``ending`` (its last words were an error: a traceback,
    a collective's timeout), is let go without a word, and not judged: the failure that
    follows says more, and a dying rank's silence is no stall.
    """

    def __init__(self, config: HealthConfig = DEFAULTS) -> None:
        self.config = config
        self.stalled: dict[int, Stall] = {}

    def update(self, ranks: Iterable[RankView], now: float, live_nodes: set[str],
               ending: Iterable[int] = ()) -> list[Stall]:
        gone = set(ending)
        ranks = [r for r in ranks if r.rank not in gone]
        for rank in gone & set(self.stalled):
            del self.stalled[rank]
        health = assess(ranks, now, live_nodes=live_nodes, config=self.config)
        out: list[Stall] = []
        # The rank heard from longest ago first: in a whole-run stall, the likeliest culprit.
        for r in sorted(ranks, key=lambda r: (last_heard(r) or now, r.rank)):
            h = health[r.rank]
            was = self.stalled.get(r.rank)
            if h.stalled and was is None:
                ev = Stall(r.node, r.rank, now, True, h.idle_s or 0.0, h.whole_run)
                self.stalled[r.rank] = ev
                out.append(ev)
            elif not h.stalled and was is not None:
                del self.stalled[r.rank]
                heard = last_heard(r)
                if r.node in live_nodes and heard is not None and heard > was.time - was.idle_s:
                    out.append(Stall(r.node, r.rank, now, False, heard - (was.time - was.idle_s),
                                     was.whole_run))
        return out


def stall_text(ev: Stall) -> str:
    """What ddptui says of one rank's stall, or of its end."""
    who = f"rank {ev.rank} on {ev.node}"
    if not ev.stalled:
        return f"{who} is going again after {ev.idle_s:.0f} s without a line or metric"
    if ev.whole_run:
        return whole_run_text([ev])
    return (f"{who} stalled: no line or metric for {ev.idle_s:.0f} s while the other ranks "
            "go on")


def whole_run_text(stalls: Sequence[Stall]) -> str:
    """The ranks of a whole-run stall, in one sentence: a line a rank would drown 128 ranks."""
    by_node: dict[str, list[int]] = {}
    for s in stalls:
        by_node.setdefault(s.node, []).append(s.rank)
    where = "; ".join(f"{_span(ranks)} on {node}" for node, ranks in by_node.items())
    idle = max(s.idle_s for s in stalls)
    return (f"the whole run stalled: no rank has printed a line or metric for {idle:.0f} s "
            f"(rank{'s' if len(stalls) > 1 else ''} {where}); one rank is likely stuck before "
            "a collective the others wait in, and its Python stack shows which")


def stall_texts(stalls: Sequence[Stall]) -> list[tuple[Stall, str]]:
    """What to say of a batch of stalls, in order: a whole-run stall once, then each rank's
    own stall or end; each with the stall it starts from (its node heads the line)."""
    whole = [s for s in stalls if s.stalled and s.whole_run]
    out = [(whole[0], whole_run_text(whole))] if whole else []
    out.extend((s, stall_text(s)) for s in stalls if not (s.stalled and s.whole_run))
    return out


def _span(ranks: list[int]) -> str:
    rs = sorted(ranks)
    if len(rs) > 2 and rs == list(range(rs[0], rs[-1] + 1)):
        return f"{rs[0]}-{rs[-1]}"
    return ", ".join(map(str, rs))
