"""A node's events, with the metrics its ranks' own lines say added right after those lines.

The one place recognized metrics are made: the follower (and ``ddptui attach``'s replay) hands
each read's events, as :func:`ddptui.ingest.parse_chunk` made them, to :meth:`Scanner.scan`.
A flood's read is a few :class:`LineRun` texts; one substring test per gate word on the whole
text settles most of them (``bench/ingest.py``), and only the lines that hold a gate word are
cut out and tried. A bar state (a carriage-return line, split or not) is read like any line.

A run whose every line the rank's recognizer reads (a flood of nanoGPT ``iter`` lines) is proven
in a few passes in C and said as one :class:`MetricRun` (:mod:`ddptui.metrics.bulk`), whose points
are made only when read: the per-line way cost 97 % of the session's rate on such a flood.
A rank's first metric line is always read line by line, which settles its recognizer.

Stateful per node: a rank's count of matched lines (the step of lines that name none), the last
reading of each series (a progress bar repeats its state; a repeat is no new point), and the
ranks that print ``@ddptui`` records: those win, so from a rank's first record on its other
lines are not read for metrics (said once). Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ddptui.events import Event, Level, LineRun, LogLine, Metric, MetricRun, Source, ssh_line
from ddptui.metrics.bulk import UNIFORM, Last, fits, repeats
from ddptui.metrics.recognizers import BUILT_IN, GATES, Recognizer, user_pattern

#: ``metrics.parse``'s words for every built-in recognizer and none.
AUTO, OFF = "auto", "off"


def recognizers(parse: str | Sequence[str], patterns: Sequence[str]) -> tuple[Recognizer, ...]:
    """The hosts file's ``metrics:`` as the recognizers a line is tried with, in order: the
    file's own patterns first (they say what the person wants), then the built-in ones."""
    own = tuple(user_pattern(i, re.compile(p)) for i, p in enumerate(patterns))
    if parse == AUTO:
        return own + BUILT_IN
    if parse == OFF:
        return own
    wanted = set(parse)
    return own + tuple(r for r in BUILT_IN if r.name in wanted)


class Scanner:
    """One node's metric lines into :class:`Metric` events (see the module's docstring)."""

    def __init__(self, node: str, tried: Sequence[Recognizer] = BUILT_IN, *,
                 bulk: bool = True) -> None:
        self.node = node
        self.tried = tuple(tried)
        #: Without a pattern of the file's own, a line holding no gate word matches nothing.
        self.gates: tuple[str, ...] | None = GATES if all(r.gates for r in tried) else None
        #: One word is one search in C (``re``'s literal search: half the time of ``in``
        #: here); several, a substring test each (an alternation is a slow search).
        self._gated = (re.compile(re.escape(self.gates[0])).search if self.gates
                       and len(self.gates) == 1 else None)
        self.bulk = bulk  # False: every line on its own (the reference the tests compare with)
        self._counts: dict[int, int] = {}
        self._last: dict[tuple[int, str], Last] = {}
        self._records: set[int] = set()  # ranks that print @ddptui records
        self._first: dict[int, Recognizer] = {}

    def scan(self, events: list[Event]) -> list[Event]:
        """``events`` with each recognized metric right after the line it came from."""
        if not self.tried:
            return events
        out: list[Event] | None = None
        for i, ev in enumerate(events):
            found: list[Event] | None = None
            if type(ev) is LineRun:
                found = self._run(ev)
            elif type(ev) is LogLine:
                if ev.rank is not None and ev.source is Source.WORKER \
                        and ev.rank not in self._records:
                    found = self._line(ev.text, ev.rank, ev.time, ev.attempt)
            elif type(ev) is Metric:
                found = self._record(ev)
            if found:
                if out is None:
                    out = events[:i]
                out.append(ev)
                out.extend(found)
            elif out is not None:
                out.append(ev)
        return events if out is None else out

    def _run(self, run: LineRun) -> list[Event] | None:
        text, gates = run.text, self.gates
        if run.rank in self._records:
            return None
        if gates is not None and not (self._gated(text) if self._gated is not None
                                      else any(g in text for g in gates)):
            return None
        found: list[Event] = []
        if self.bulk:
            whole = self._bulk(run, text, run.count)
            if whole is not None:
                return whole
            first = self._first.get(run.rank)
            if run.count > 1 and (first is None or first.name not in UNIFORM):
                # The first line settles the rank's recognizer; the rest may be one run.
                cut = text.index("\n") + 1
                found = self._lines(text[:cut], run)
                text = text[cut:]
                rest = self._bulk(run, text, run.count - 1)
                if rest is not None:
                    return found + rest
        found.extend(self._lines(text, run))
        return found

    def _lines(self, text: str, run: LineRun) -> list[Event]:
        """The metrics of ``text``'s lines, each read on its own."""
        gates = self.gates
        lines = text[:-1].split("\n") if gates is None else _lines_with(text, gates)
        found: list[Event] = []
        read, rank, t, attempt = self._read, run.rank, run.time, run.attempt
        for line in lines:  # a run's lines hold no carriage return (ingest keeps them apart)
            m = read(line, rank, t, attempt)
            if m is not None:
                found.append(m)
        return found

    def _bulk(self, run: LineRun, text: str, count: int) -> list[Event] | None:
        """``text``'s lines as one :class:`MetricRun` when the rank's recognizer reads every
        one of them with a step, and its first is no repeat of the rank's last point (then
        the per-line way, which drops it); None otherwise, nothing changed."""
        r = self._first.get(run.rank)
        if r is None or r.redraws or count < 1:
            return None
        found = fits(r, text, count, self.gates)
        if found is None:
            return None
        names, kind = found
        first = r.read(text[:text.index("\n")])
        last = r.read(text[text.rfind("\n", 0, len(text) - 1) + 1:-1])
        if first is None or last is None:  # a verdict cannot be wrong; a bug must not lose lines
            return None
        key = (run.rank, r.name)
        if repeats(self._last.get(key), first.step, first.values, r.redraws):
            return None
        # the last line's reading is the last point's: a line dropped as a repeat equals it
        self._last[key] = (last.step, last.values)
        point = Metric(self.node, run.rank, "metric", last.step, dict(last.values), run.time,
                       run.attempt, {}, "", r.name, kind)
        return [MetricRun(self.node, run.rank, run.attempt, run.time, r.name, kind, names,
                          text, count, point)]

    def _line(self, text: str, rank: int, time: float, attempt: int) -> list[Event] | None:
        gates = self.gates
        if gates is not None and not any(g in text for g in gates):
            return None
        parts = [p for p in text.split("\r") if p.strip()] if "\r" in text else (text,)
        found: list[Event] = []
        for part in parts:
            m = self._read(part, rank, time, attempt)
            if m is not None:
                found.append(m)
        return found

    def _read(self, text: str, rank: int, time: float, attempt: int) -> Metric | None:
        first = self._first.get(rank)  # the rank's last recognizer first: one stack a rank
        for r in (first, *self.tried) if first is not None else self.tried:
            if r.gates and not any(g in text for g in r.gates):
                continue
            reading = r.read(text)
            if reading is None:
                continue
            step, kind = reading.step, reading.step_kind
            if step is None:
                step = self._counts[rank] = self._counts.get(rank, 0) + 1
                kind = "count"
            key = (rank, r.name)
            if repeats(self._last.get(key), step, reading.values, r.redraws):
                return None  # a bar drawn again: no new point
            self._last[key] = (step, reading.values)
            self._first[rank] = r
            return Metric(self.node, rank, "metric", step, dict(reading.values), time, attempt,
                          {}, "", r.name, kind)
        return None

    def _record(self, ev: Metric) -> list[Event] | None:
        if ev.recognizer != "ddptui" or ev.rank in self._records:
            return None
        self._records.add(ev.rank)
        note = ssh_line(self.node, f"rank {ev.rank} prints @ddptui records: its metrics are "
                        "read from those alone, not from its other lines", ev.time, Level.DEBUG)
        return [note]


class Scanners(dict[str, Scanner]):
    """A run's scanner of each node, made when first asked for, so that one made for
    ``ddptui attach``'s replay goes on following with the state the replay left."""

    def __init__(self, parse: str | Sequence[str], patterns: Sequence[str]) -> None:
        super().__init__()
        self.tried = recognizers(parse, patterns)

    def __missing__(self, node: str) -> Scanner:
        made = self[node] = Scanner(node, self.tried)
        return made


def _lines_with(text: str, gates: Sequence[str]) -> list[str]:
    """The lines of ``text`` (each ending in a newline) that hold any of ``gates``, in order."""
    starts: set[int] = set()
    for g in gates:
        i = text.find(g)
        while i >= 0:
            start = text.rfind("\n", 0, i) + 1
            starts.add(start)
            i = text.find(g, text.index("\n", i))
    return [text[s:text.index("\n", s)] for s in sorted(starts)]
