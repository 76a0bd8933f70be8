"""Reading a mirrored log by line number, and its sequence numbers, for scrollback older
than the in-memory rings.

Like Textualize's toolong, this layer imports nothing from Textual: it keeps the byte offset
of every line start, extends that index incrementally as the file grows, and reads only the
lines asked for. The index costs 8 bytes a line (an ``array('q')``), not the text.
"""

from __future__ import annotations

from array import array
from pathlib import Path

_CHUNK = 1 << 20
#: The .seq index's item (its type code and size): an int64, in this machine's byte order.
SEQ = array("q")


class LineFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._starts = array("q", [0])  # offset of each line start; last is the open line's
        self._scanned = 0

    @property
    def line_count(self) -> int:
        """Complete lines indexed so far (call :meth:`refresh` first to see new ones)."""
        return len(self._starts) - 1

    def refresh(self) -> int:
        """Index what was appended since the last call; returns the number of complete lines."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return self.line_count
        if size < self._scanned:  # truncated (a recovered mirror): start over
            self._starts = array("q", [0])
            self._scanned = 0
        if size == self._scanned:
            return self.line_count
        with open(self.path, "rb") as f:
            f.seek(self._scanned)
            pos = self._scanned
            while pos < size:
                chunk = f.read(min(_CHUNK, size - pos))
                if not chunk:
                    break
                i = chunk.find(b"\n")
                while i != -1:
                    self._starts.append(pos + i + 1)
                    i = chunk.find(b"\n", i + 1)
                pos += len(chunk)
        self._scanned = size
        return self.line_count

    def read(self, start: int, stop: int) -> list[str]:
        """Lines ``start`` to ``stop`` (exclusive) of the complete ones, without newlines."""
        start = max(0, start)
        stop = min(stop, self.line_count)
        if stop <= start:
            return []
        begin, end = self._starts[start], self._starts[stop]
        with open(self.path, "rb") as f:
            f.seek(begin)
            data = f.read(end - begin)
        return data.decode("utf-8", "replace").split("\n")[: stop - start]

    def find_before(self, text: str, stop: int, window: int = 2000) -> int | None:
        """Index of the last line equal to ``text`` before ``stop`` (searching ``window`` back).

        Only for a run dir that ddptui mirrored before logs had a ``.seq`` index: a line
        that repeats later can anchor there instead.
        """
        lo = max(0, stop - window)
        lines = self.read(lo, stop)
        for i in range(len(lines) - 1, -1, -1):
            if lines[i] == text:
                return lo + i
        return None


class SeqIndex:
    """A mirrored log's ``.seq`` index (see ``rundir.SEQ_SUFFIX``): entry ``i`` plus ``i`` is
    the store's sequence number of the log's line ``i``, which increases. (Less its line's
    own number, a stretch of consecutive lines, a flood's, is one value repeated.) Searched in
    place, a few reads of 8 bytes, never loaded whole (a long run's holds tens of millions)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def count(self) -> int:
        try:
            return self.path.stat().st_size // SEQ.itemsize
        except FileNotFoundError:
            return 0

    def read(self, start: int, stop: int) -> list[int]:
        """Entries ``start`` to ``stop`` (exclusive)."""
        start, stop = max(0, start), min(stop, self.count())
        if stop <= start:
            return []
        out = array(SEQ.typecode)
        with open(self.path, "rb") as f:
            f.seek(start * SEQ.itemsize)
            out.frombytes(f.read((stop - start) * SEQ.itemsize))
        return [v + i for i, v in enumerate(out, start)]

    def below(self, seq: int, stop: int) -> int:
        """How many of the first ``stop`` entries are below ``seq``: the log's line number
        of the first line at or after it."""
        lo, hi = 0, min(stop, self.count())
        with open(self.path, "rb") as f:
            while lo < hi:
                mid = (lo + hi) // 2
                f.seek(mid * SEQ.itemsize)
                if array(SEQ.typecode, f.read(SEQ.itemsize))[0] + mid < seq:
                    lo = mid + 1
                else:
                    hi = mid
        return lo
