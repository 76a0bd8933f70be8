"""The store's line rings: the newest lines, held as they came (lines and runs of lines).

A flood arrives as :class:`~ddptui.events.LineRun` objects, thousands of lines each. A ring
of :class:`~ddptui.events.LogLine` objects would make one per line only to drop most of them
again; this one keeps the runs whole and makes lines when a reader asks for them (a screen
reads a screenful, the diagnosis a rank's tail).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from ddptui.events import LineRun, LogLine


class LineRing:
    def __init__(self, maxlen: int) -> None:
        self.maxlen = maxlen
        self._parts: deque[LogLine | LineRun] = deque()
        self._len = 0
        self._skip = 0  # lines of the oldest part that are out of the ring already

    def __len__(self) -> int:
        return self._len

    def extend(self, lines: Iterable[LogLine]) -> None:
        before = len(self._parts)
        self._parts.extend(lines)
        self._len += len(self._parts) - before
        self._trim()

    def add_run(self, run: LineRun) -> None:
        self._parts.append(run)
        self._len += run.count
        self._trim()

    def _trim(self) -> None:
        over = self._len - self.maxlen
        parts = self._parts
        while over > 0:
            first = parts[0]
            left = (first.count if type(first) is LineRun else 1) - self._skip
            if left <= over:
                parts.popleft()
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
