"""Spikes and NaN in a series: where a curve went wrong, found once where the series are.

A **NaN** mark is a non-finite value (NaN, inf), or a step at which Megatron-LM said its
``number of nan iterations`` was above 0 (the loss it prints then leaves those iterations
out, so the curve alone would not show them).

A **spike** is a value far above its recent smoothed level. The level is TensorBoard's
debiased EMA (:mod:`ddptui.chart.smooth`) of the finite values before it, at weight
:data:`LEVEL_WEIGHT`, whatever the chart's own smoothing; the spread is the same EMA of
each value's distance from the level before it. A value is a spike when at least
:data:`WARMUP` finite values came before it and it exceeds the level by more than
:data:`SPREADS` spreads and by more than :data:`MIN_RISE` of the level's size. Only rises:
a loss falling fast is training, not a fault. A spike counts in the level after it, so the
values that stay up after a jump are not each marked again.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

LEVEL_WEIGHT = 0.9
WARMUP = 10
SPREADS = 6.0
MIN_RISE = 0.2


class MarkKind(StrEnum):
    NAN = "NaN"
    SPIKE = "spike"


@dataclass(frozen=True, slots=True)
class Mark:
    """One place where rank ``rank``'s series went wrong, at step ``step``."""

    kind: MarkKind
    rank: int
    step: float
    value: float
    level: float | None = None
    """The smoothed level the spike rose above; None for a NaN."""
    note: str = ""
    """Where the mark comes from when it is not the value itself (Megatron's count)."""

    @property
    def text(self) -> str:
        """``spike r0 step 1200: 4.1 (level 1.2)``: a line of the chart's list."""
        where = f"{self.kind} r{self.rank} step {self.step:g}"
        if self.note:
            return f"{where}: {self.note}"
        if self.level is not None:
            return f"{where}: {self.value:.4g} (level {self.level:.4g})"
        return f"{where}: {self.value}"


def find_marks(rank: int, xs: Sequence[float], ys: Sequence[float],
               nan_counts: tuple[Sequence[float], Sequence[float]] = ((), ())
               ) -> list[Mark]:
    """Rank ``rank``'s marks in step order: its non-finite values and spikes, and the steps
    where ``nan_counts`` (Megatron's count, by step) is above 0."""
    finder = MarkFinder(rank)
    finder.extend(xs, ys)
    return finder.with_counts(nan_counts)


class MarkFinder:
    """The marks of a series taken a part at a time, as the chart redraws a growing series:
    those found so far and the level and spread the next value is judged by."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.marks: list[Mark] = []
        self._level_sum = 0.0  # TensorBoard's ``last``, before the debias
        self._spread_sum = 0.0
        self._n = 0

    def extend(self, xs: Sequence[float], ys: Sequence[float]) -> None:
        put, rank = self.marks.append, self.rank
        w, keep = LEVEL_WEIGHT, 1.0 - LEVEL_WEIGHT
        level_sum, spread_sum, n = self._level_sum, self._spread_sum, self._n
        debias = 1.0 - w ** n if n else 1.0
        for x, y in zip(xs, ys, strict=False):
            if y - y != 0.0:  # NaN or an infinity
                put(Mark(MarkKind.NAN, rank, x, y))
                continue
            level = level_sum / debias if n else y
            if n >= WARMUP:
                rise = y - level
                if rise > SPREADS * spread_sum / debias and rise > MIN_RISE * abs(level):
                    put(Mark(MarkKind.SPIKE, rank, x, y, level))
            spread_sum = spread_sum * w + keep * abs(y - level)
            level_sum = level_sum * w + keep * y
            n += 1
            if debias != 1.0 or n == 1:
                debias = 1.0 - w ** n
        self._level_sum, self._spread_sum, self._n = level_sum, spread_sum, n

    def with_counts(self, nan_counts: tuple[Sequence[float], Sequence[float]]
                    ) -> list[Mark]:
        """The marks, and a NaN mark at each step where ``nan_counts`` is above 0 (where
        the value itself is no NaN already), in step order."""
        marks = list(self.marks)
        seen = {m.step for m in marks if m.kind is MarkKind.NAN}
        for x, count in zip(*nan_counts, strict=False):
            if count > 0 and x not in seen:
                marks.append(Mark(MarkKind.NAN, self.rank, x, float("nan"),
                                  note=f"{count:g} nan iterations (Megatron-LM)"))
        if nan_counts[0]:
            marks.sort(key=lambda m: m.step)
        return marks
