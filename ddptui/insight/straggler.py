"""Which rank holds the others back, from what the run reveals of each rank's timing.

In synchronous DDP every rank ends a step together (the gradients' all-reduce waits for the
last), so step times are equal and hide a slow rank: it is the one that waits *least*. Two
things reveal it, the first preferred where a step has both (``docs/metrics.md``, "What the
curves tell"):

* **compute**: ranks that print their own ``compute_ms`` (the step's work) and ``wait_ms``
  (its time inside the collective), as the bundled worker does. A rank's lateness at a step
  is its ``compute_ms``; the step lasts the ranks' median ``compute_ms + wait_ms``.
* **arrival**: ranks that print a step's line before its collective. A rank's lateness is
  when its line of the step reached ddptui; the step lasts the rolling median of the steps'
  median arrival, one step to the next. Ranks that print after the collective print
  together and reveal nothing this way: then no rank is ever behind, and none is named.

At one step, a rank is **behind** when its lateness exceeds every other rank's by more than
:data:`FRACTION` of the step and more than the evidence's floor (:data:`FLOOR_S`: a line's
time is when ddptui read it, some tens of ms after it was printed; the floor keeps a node
read a little later from being taken for a slow rank). A rank behind at :data:`CHRONIC` or
more of at least :data:`MIN_STEPS` judged steps is a **chronic straggler**. A rank behind
once by more than :data:`ONE_OFF_S` and :data:`ONE_OFF_STEPS` steps' time, but not chronic,
fell behind **once** (a pause: a checkpoint written, a collection, a slow read).

Pure: steps come in, verdicts go out.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

FRACTION = 0.3
FLOOR_S = {"compute": 0.001, "arrival": 0.05}
CHRONIC = 0.5
MIN_STEPS = 20
ONE_OFF_S = 2.0
ONE_OFF_STEPS = 5.0
#: Steps of the rolling median that is an arrival step's length.
PERIOD_STEPS = 21


class Evidence(StrEnum):
    COMPUTE = "compute"
    ARRIVAL = "arrival"

    @property
    def words(self) -> str:
        if self is Evidence.COMPUTE:
            return "its compute_ms against the others' (the ranks print their own timing)"
        return "when each rank's line of a step arrives (they print it before the collective)"


@dataclass(frozen=True, slots=True)
class Straggle:
    """Rank ``rank`` behind the others: at ``behind`` of ``judged`` steps (chronic), or once
    at ``step`` (a one-off), by a median ``gap_s`` in steps of ``period_s``."""

    rank: int
    evidence: Evidence
    chronic: bool
    behind: int
    judged: int
    gap_s: float
    period_s: float
    step: float


class StragglerWatch:
    """The steps' timing, fed in step order, for one kind of evidence."""

    def __init__(self, evidence: Evidence) -> None:
        self.evidence = evidence
        self.judged = 0
        self.behind: dict[int, int] = {}
        self.gaps: dict[int, deque[float]] = {}
        self.chronic: dict[int, Straggle] = {}
        self.once: dict[int, Straggle] = {}
        self._periods: deque[float] = deque(maxlen=PERIOD_STEPS)
        self._last_mid: float | None = None

    def step(self, step: float, late: Mapping[int, float],
             period_s: float | None = None) -> list[Straggle]:
        """Judge one step: each rank's lateness in seconds and, for compute, the step's
        length (arrival measures its own); what is newly found at it."""
        if len(late) < 2:
            return []
        if period_s is None:
            mid = statistics.median(late.values())
            if self._last_mid is not None and mid > self._last_mid:
                self._periods.append(mid - self._last_mid)
            self._last_mid = mid
            if not self._periods:
                return []
            period_s = statistics.median(self._periods)
        self.judged += 1
        ordered = sorted(late.items(), key=lambda kv: kv[1])
        (rank, last), (_, next_last) = ordered[-1], ordered[-2]
        gap = last - next_last
        out: list[Straggle] = []
        if gap > max(FLOOR_S[self.evidence], FRACTION * period_s):
            self.behind[rank] = self.behind.get(rank, 0) + 1
            self.gaps.setdefault(rank, deque(maxlen=101)).append(gap)
            if (gap > max(ONE_OFF_S, ONE_OFF_STEPS * period_s) and rank not in self.once
                    and rank not in self.chronic):
                self.once[rank] = Straggle(rank, self.evidence, False, 1, self.judged, gap,
                                           period_s, step)
                out.append(self.once[rank])
        if self.judged >= MIN_STEPS:
            for r, n in self.behind.items():
                if r not in self.chronic and n >= CHRONIC * self.judged:
                    gap_s = statistics.median(self.gaps[r])
                    self.chronic[r] = Straggle(r, self.evidence, True, n, self.judged, gap_s,
                                               period_s, step)
                    out.append(self.chronic[r])
        return out

    def now(self, s: Straggle) -> Straggle:
        """A chronic straggler's figures over every step judged so far."""
        gaps = self.gaps.get(s.rank)
        return Straggle(s.rank, s.evidence, True, self.behind.get(s.rank, 0), self.judged,
                        statistics.median(gaps) if gaps else s.gap_s, s.period_s, s.step)

    def standing(self) -> dict[int, Straggle]:
        """The chronic stragglers as they stand now: behind at most steps still."""
        return {r: s for r, s in self.chronic.items()
                if self.behind.get(r, 0) >= CHRONIC * self.judged}
