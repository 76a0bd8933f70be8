"""Straggler and stall detection from the rank views: pure, clock passed in."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from ddptui.store.store import RankView

#: A rank is a straggler when its step time exceeds the median by this fraction.
STRAGGLER_FRACTION = 0.25
#: A rank is stalled when it made no progress for this many seconds.
STALL_AFTER_S = 60.0


@dataclass(frozen=True, slots=True)
class RankHealth:
    straggler: bool = False
    stalled: bool = False
    idle_s: float | None = None  # seconds since the rank last made progress

    @property
    def mark(self) -> str:
        if self.stalled:
            return "stalled"
        return "straggler" if self.straggler else ""


def assess(
    ranks: Iterable[RankView],
    now: float,
    *,
    live_nodes: set[str],
    straggler_fraction: float = STRAGGLER_FRACTION,
    stall_after: float = STALL_AFTER_S,
) -> dict[int, RankHealth]:
    """Health of every rank; only ranks on live (running) nodes can stall or straggle.

    Progress is the last metric with a step; a rank that never printed one (a user script
    without metric lines) is judged by its last line instead.
    """
    ranks = list(ranks)
    live = [r for r in ranks if r.node in live_nodes]
    times = [r.step_time_s for r in live if r.step_time_s is not None and r.step_time_s > 0]
    median = statistics.median(times) if len(times) >= 2 else None
    out: dict[int, RankHealth] = {}
    for r in ranks:
        last = r.last_step_time if r.last_step_time is not None else r.last_line_time
        idle = None if last is None else max(0.0, now - last)
        if r.node not in live_nodes:
            out[r.rank] = RankHealth(idle_s=idle)
            continue
        straggler = (
            median is not None
            and r.step_time_s is not None
            and r.step_time_s > median * (1 + straggler_fraction)
        )
        stalled = idle is not None and idle > stall_after
        out[r.rank] = RankHealth(straggler, stalled, idle)
    return out
