"""A rank whose values leave the other ranks' spread, judged step by step over a window.

The rule (``docs/metrics.md``, "What the curves tell"): at each step that at least
:data:`MIN_RANKS` ranks reported with a finite value, a rank's value is set against the
*other* ranks' median, in units of their robust spread: 1.4826 times their median absolute
deviation (the normal's σ, for a MAD), and at least :data:`FLOOR` of the median's size, since
ranks fed different shards never agree exactly and three values may agree by chance. That
is the rank's robust z-score at the step. A rank **diverges** once its z-score lies beyond
:data:`Z` on the same side at :data:`WITHIN` of its last :data:`WINDOW` judged steps. It
diverges since the first of those steps, or earlier where the steps just before it were
already beyond half of :data:`Z` on that side (a drift crosses the threshold later than it
starts). One step far out is a spike, not a divergence.

Pure: steps come in, verdicts go out.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

Z = 4.0
FLOOR = 0.05
WINDOW = 10
WITHIN = 8
MIN_RANKS = 3
#: 1 / Φ⁻¹(3/4): a median absolute deviation in units of a normal's σ.
MAD_SIGMA = 1.4826


@dataclass(frozen=True, slots=True)
class Divergence:
    """Rank ``rank`` left the others from step ``since``; its figures at step ``step``."""

    rank: int
    since: float
    step: float
    value: float
    center: float
    """The other ranks' median at ``step``."""
    spread: float
    """Their robust spread there (at least the floor)."""


def robust_z(value: float, others: list[float]) -> tuple[float, float, float]:
    """``value``'s robust z-score among ``others``, with their median and spread."""
    center = statistics.median(others)
    mad = statistics.median(abs(v - center) for v in others)
    spread = max(MAD_SIGMA * mad, FLOOR * abs(center), 1e-12)
    return (value - center) / spread, center, spread


class DivergenceWatch:
    """One series' steps, fed in step order; each rank's last :data:`WINDOW` z-scores."""

    def __init__(self) -> None:
        self._recent: dict[int, deque[tuple[float, float]]] = {}  # rank: (step, z)
        self.found: dict[int, Divergence] = {}

    def step(self, step: float, values: Mapping[int, float]) -> list[Divergence]:
        """Judge one step's values, by rank (finite ones only); the ranks found diverging
        at it, each once in the watch's life."""
        if len(values) < MIN_RANKS:
            return []
        out: list[Divergence] = []
        for rank, v in values.items():
            others = [w for r, w in values.items() if r != rank]
            z, center, spread = robust_z(v, others)
            recent = self._recent.setdefault(rank, deque(maxlen=3 * WINDOW))
            recent.append((step, z))
            if rank in self.found or len(recent) < WINDOW:
                continue
            window = list(recent)[-WINDOW:]
            for sign in (1.0, -1.0):
                out_steps = [s for s, zz in window if zz * sign > Z]
                if len(out_steps) >= WITHIN and z * sign > Z:
                    found = Divergence(rank, _since(recent, out_steps[0], sign), step, v,
                                       center, spread)
                    self.found[rank] = found
                    out.append(found)
                    break
        return out


def _since(recent: deque[tuple[float, float]], first: float, sign: float) -> float:
    """The step a drift began: back from ``first`` while the steps were beyond Z / 2."""
    since = first
    for s, z in reversed(recent):
        if s >= first:
            continue
        if z * sign <= Z / 2:
            break
        since = s
    return since
