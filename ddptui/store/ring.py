"""The store's line rings: the newest lines, held as they came (lines and runs of lines).

A flood arrives as :class:`~ddptui.events.LineRun` objects, thousands of lines each. A ring
of :class:`~ddptui.events.LogLine` objects would make one per line only to drop most of them
again; this one keeps the runs whole and makes lines when a reader asks for them (a screen
reads a screenful, the diagnosis a rank's tail).
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterable, Sequence
from itertools import repeat
from typing import NamedTuple

from ddptui.events import LineRun, LogLine


class Batch(NamedTuple):
    """Lines applied together, several ranks' in a row, and the number of the first: a line's
    own is found by its place among them, when asked (rarely: a rank's view rebuilt, a
    replica's snapshot), not worked out line by line as they come."""

    lines: tuple[LogLine, ...]
    first: int


class LineRing:
    """``numbered``: it keeps the store's sequence number of each part's first line (a rank's
    ring, whose lines are not consecutive in the store's count); the all-ranks ring holds
    every line, so its numbers follow from the store's newest."""

    def __init__(self, maxlen: int, numbered: bool = False) -> None:
        self.maxlen = maxlen
        self._parts: deque[LogLine | LineRun] = deque()
        self._firsts: deque[int | Batch] | None = deque() if numbered else None
        self._len = 0
        self._skip = 0  # lines of the oldest part that are out of the ring already

    def __len__(self) -> int:
        return self._len

    def extend(self, lines: Iterable[LogLine], seqs: Sequence[int] | Batch = ()) -> None:
        """``seqs``: each line's sequence number, or the batch they are found in, for a
        numbered ring."""
        before = len(self._parts)
        self._parts.extend(lines)
        added = len(self._parts) - before
        self._len += added
        if self._firsts is not None:
            self._firsts.extend(repeat(seqs, added) if isinstance(seqs, Batch) else seqs)
        self._trim()

    def add_run(self, run: LineRun, seq: int = 0) -> None:
        """``seq``: the sequence number of the run's first line, for a numbered ring."""
        self._parts.append(run)
        self._len += run.count
        if self._firsts is not None:
            self._firsts.append(seq)
        self._trim()

    def _trim(self) -> None:
        over = self._len - self.maxlen
        parts = self._parts
        while over > 0:
            first = parts[0]
            left = (first.count if type(first) is LineRun else 1) - self._skip
            if left <= over:
                parts.popleft()
                if self._firsts is not None:
                    self._firsts.popleft()
                self._skip = 0
                self._len -= left
                over -= left
            else:
                self._skip += over
                self._len -= over
                over = 0

    def tail(self, n: int | None = None) -> list[LogLine]:
        """The newest ``n`` lines, oldest first (all of them when ``n`` is None)."""
        need = self._len if n is None else min(n, self._len)
        newest_first: list[LogLine] = []
        oldest = self._parts[0] if self._parts else None
        for part in reversed(self._parts):
            if need <= 0:
                break
            if type(part) is LineRun:
                take = min(need, part.count - (self._skip if part is oldest else 0))
                newest_first.extend(reversed(part.tail(take)))
                need -= take
            else:
                newest_first.append(part)  # type: ignore[arg-type]  # a LogLine
                need -= 1
        newest_first.reverse()
        return newest_first

    def tail_seqs(self, n: int | None = None) -> list[int]:
        """The sequence numbers of :meth:`tail`'s lines (a numbered ring's), oldest first."""
        firsts = self._firsts
        assert firsts is not None, "an unnumbered ring: its numbers follow from the store's"
        need = self._len if n is None else min(n, self._len)
        newest_first: list[int] = []
        oldest = self._parts[0] if self._parts else None
        places: dict[int, dict[int, int]] = {}  # a batch's lines' places, by the batch's id
        for part, first in zip(reversed(self._parts), reversed(firsts), strict=True):
            if need <= 0:
                break
            if isinstance(first, Batch):
                at = places.get(id(first))
                if at is None:
                    at = places[id(first)] = {id(ln): i for i, ln in enumerate(first.lines)}
                newest_first.append(first.first + at[id(part)])
                need -= 1
            elif type(part) is LineRun:
                take = min(need, part.count - (self._skip if part is oldest else 0))
                end = first + part.count - 1
                newest_first.extend(range(end, end - take, -1))
                need -= take
            else:
                newest_first.append(first)
                need -= 1
        newest_first.reverse()
        return newest_first


class SkipMarks:
    """Where a replica was sent no lines (see ``Store.skip_lines``): a line after such a
    place is that many later in the original store's count, and in its mirror on disk."""

    def __init__(self) -> None:
        self._marks: list[tuple[int, int]] = []  # (the replica's seq then, skipped so far)

    def add(self, seq: int, skipped: int) -> None:
        self._marks.append((seq, skipped))

    def disk_seqs(self, seqs: Sequence[int]) -> Sequence[int]:
        """:meth:`disk_seq` of each; a range after every skip stays a range."""
        if not self._marks:
            return seqs
        last, skipped = self._marks[-1]
        if isinstance(seqs, range) and seqs.start > last:
            return range(seqs.start + skipped, seqs.stop + skipped)
        return [self.disk_seq(s) for s in seqs]

    def disk_seq(self, seq: int) -> int:
        """Line ``seq`` of the replica as the original numbered it. A metric's line kept
        among skipped plain ones may be off by as many as were skipped around it."""
        at = bisect.bisect_left(self._marks, (seq,)) - 1
        return seq if at < 0 else seq + self._marks[at][1]
