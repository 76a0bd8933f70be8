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

A third source serves any script, where neither of those reveals anything: **stacks**, each
rank's stack sampled in rounds (``ddptui.live.stack_sampler``), every sample counted on its
node as inside a collective or its wait, or not (``ddptui.nodeprog.spy``). The rank the others
wait for waits least. In a round, a rank with at least :data:`ROUND_SAMPLES` samples is
**behind** when its share inside is the smallest, below the others' median by at least
:data:`SHARE_MARGIN`, while that median is at least :data:`WAITING` (the others mostly
wait). A rank behind in :data:`CHRONIC_ROUNDS` or more rounds, at least :data:`CHRONIC` of
those judged, with :data:`MIN_SAMPLES` samples or more over them, is a chronic straggler; one
behind in a single round, then not in the :data:`CHRONIC_ROUNDS` - 1 rounds after, was
behind **once**. :class:`StackWatch` judges them.

Pure: steps come in, verdicts go out.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

FRACTION = 0.3
FLOOR_S = {"compute": 0.001, "arrival": 0.05}
CHRONIC = 0.5
MIN_STEPS = 20
ONE_OFF_S = 2.0
ONE_OFF_STEPS = 5.0
#: Steps of the rolling median that is an arrival step's length.
PERIOD_STEPS = 21


#: Samples a rank needs in a round for the round to judge it.
ROUND_SAMPLES = 4
#: Samples a rank needs over the run before it is called a chronic straggler.
MIN_SAMPLES = 20
SHARE_MARGIN = 0.3
WAITING = 0.4
CHRONIC_ROUNDS = 3


class Evidence(StrEnum):
    COMPUTE = "compute"
    ARRIVAL = "arrival"
    STACKS = "stacks"

    @property
    def words(self) -> str:
        if self is Evidence.COMPUTE:
            return "its compute_ms against the others' (the ranks print their own timing)"
        if self is Evidence.STACKS:
            return "the ranks' sampled stacks"
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


@dataclass(frozen=True, slots=True)
class StackStraggle:
    """Rank ``rank`` inside a collective in ``share`` of its ``samples`` sampled stacks, the
    others in ``low``..``high`` of theirs (their median ``median``): behind in ``behind`` of
    ``judged`` rounds (chronic), or in round ``round`` only (once)."""

    rank: int
    chronic: bool
    behind: int
    judged: int
    samples: int
    share: float
    low: float
    high: float
    median: float
    round: int


Counts = Mapping[int, tuple[int, int]]


def _behind(counts: Counts, least: int) -> tuple[int, float, list[float]] | None:
    """The rank behind in these counts (rank -> samples, inside), its share and the others'."""
    shares = {r: inside / n for r, (n, inside) in counts.items() if n >= least}
    if len(shares) < 2:
        return None
    rank = min(shares, key=lambda r: shares[r])
    others = [v for r, v in shares.items() if r != rank]
    mid = statistics.median(others)
    if mid >= WAITING and shares[rank] <= mid - SHARE_MARGIN and shares[rank] < min(others):
        return rank, shares[rank], others
    return None


class StackWatch:
    """The sampling rounds' counts, fed as each node's burst arrives; a round is judged once
    a later one began (every node is sampled at once each round), or at the run's end."""

    def __init__(self) -> None:
        self.rounds: dict[int, dict[int, tuple[int, int]]] = {}
        self.totals: dict[int, tuple[int, int]] = {}
        self.judged = 0
        self.behind: dict[int, list[int]] = {}  # rank -> the rounds it was behind in
        self.chronic: dict[int, StackStraggle] = {}
        self.once: dict[int, StackStraggle] = {}
        self.problems: dict[str, str] = {}  # node -> why it gave no samples
        self.cost = ""
        self._at: dict[int, int] = {}  # a round a rank was behind in -> rounds judged then

    def add(self, node: str, round_no: int, counts: Counts, problem: str = "",
            cost: str = "") -> None:
        if problem:
            self.problems[node] = problem
        self.cost = cost or self.cost
        if counts:
            self.rounds.setdefault(round_no, {}).update(counts)

    def judge(self, final: bool = False) -> list[StackStraggle]:
        out: list[StackStraggle] = []
        newest = max(self.rounds, default=None)
        for no in sorted(self.rounds):
            if no == newest and not final:
                break
            counts = self.rounds.pop(no)
            for r, (n, inside) in counts.items():
                tn, ti = self.totals.get(r, (0, 0))
                self.totals[r] = (tn + n, ti + inside)
            found = _behind(counts, ROUND_SAMPLES)
            if found is None and not any(n >= ROUND_SAMPLES for n, _ in counts.values()):
                continue
            self.judged += 1
            if found is not None:
                self.behind.setdefault(found[0], []).append(no)
                self._at[no] = self.judged
            out.extend(self._found(no))
        return out

    def _found(self, no: int) -> list[StackStraggle]:
        out = []
        for r, rounds in self.behind.items():
            if r in self.chronic:
                continue
            if (len(rounds) >= CHRONIC_ROUNDS and len(rounds) >= CHRONIC * self.judged
                    and self.totals[r][0] >= MIN_SAMPLES):
                self.chronic[r] = self.now(r, no)
                out.append(self.chronic[r])
            elif (len(rounds) == 1 and r not in self.once
                  and self.judged - self._at[rounds[0]] >= CHRONIC_ROUNDS - 1):
                self.once[r] = replace(self.now(r, rounds[0]), chronic=False)
                out.append(self.once[r])
        return out

    def now(self, rank: int, no: int) -> StackStraggle:
        """A rank's figures over every round judged so far."""
        n, inside = self.totals[rank]
        others = [i / m for r, (m, i) in self.totals.items() if r != rank and m]
        return StackStraggle(rank, True, len(self.behind.get(rank, ())), self.judged, n,
                             inside / n if n else 0.0, min(others, default=0.0),
                             max(others, default=0.0),
                             statistics.median(others) if others else 0.0, no)

    def standing(self) -> dict[int, StackStraggle]:
        return {r: s for r, s in self.chronic.items()
                if len(self.behind.get(r, ())) >= CHRONIC * self.judged}

    def alike(self) -> tuple[float, float] | None:
        """The lowest and highest share over the run when it named no rank, with enough
        samples of each to say so."""
        shares = [i / n for n, i in self.totals.values() if n >= MIN_SAMPLES]
        if len(shares) < 2 or self.chronic:
            return None
        return min(shares), max(shares)
