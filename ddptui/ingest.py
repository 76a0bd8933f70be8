"""A node log's bytes, a read at a time, into events: the session's hottest loop.

A flood is almost nothing but rank lines (``[ddptui R L] text``), and ddptui's tee
(:mod:`ddptui.nodeprog.torchrun_tee`) writes each rank's in blocks, so a read is a few long runs
of one rank's lines. A run with nothing but plain lines (INFO, no record, no NCCL line) becomes
one :class:`~ddptui.events.LineRun`: its text with the prefixes cut out, no object per line.
Anything else is cut into lines and rank prefixes by one regular expression in C, its level
settled for the whole read when no line in it could be a warning or an error; an agent line,
an empty line or a carriage return goes line by line through the parser, and the runs of rank
lines between such lines in bulk again.
All ways make exactly the events :meth:`ddptui.nodelog.NodeLogParser.feed` makes, line by
line (``tests/test_ingest.py``). Pure: no I/O, no clock of its own.
"""

from __future__ import annotations

import re

from ddptui.events import METRIC_MARK, Event, Level, LineRun, LogLine, Source, classify_level
from ddptui.nodelog import PREFIX_RE, NodeLogParser

#: A rank line whole, as torchrun prefixes it (events.PREFIX_TEMPLATE): its ids, its text.
_RANK_LINE_RE = re.compile(r"^\[ddptui (\d+ \d+)\] ([^\n]*)$", re.M)
#: What ``classify_level`` looks for before it runs a regular expression: a read without any
#: of these (and without a glog-stamped line) is INFO throughout.
_LEVEL_HINTS = ("Error", "Exception", "Traceback", "FAILED", "arn", "WARN")
#: A glog-stamped rank line (``classify_level``'s first test), found by its ``"] "``: the
#: search runs in C from one to the next, where a ``^`` anchor would try every character.
_GLOG_LINE_RE = re.compile(r"\] [IWEF]\d{4} ")
_IDS: dict[str, tuple[int, int]] = {}
#: What makes a rank line other than a plain INFO line: a word without which
#: ``classify_level``'s expressions match nothing (a WARNING holds "WARN" or "arning", an
#: ERROR one of the first four), NCCL, a record. Each is looked for only where its first
#: letter is: one character is a memchr, a word is not, and a flood is scanned for all eight.
_SPECIAL = ("Error", "Exception", "Traceback", "FAILED", "arning", "WARN", "NCCL", METRIC_MARK)
_GATED = tuple((word[0], word) for word in _SPECIAL)
#: Lines in a row of one rank from which they are kept as one LineRun: shorter runs (a job
#: printing slowly, or torch's own tee interleaving ranks line by line) go the general way.
MIN_RUN = 16
#: Short runs in a row after which the rest of a read goes the general way.
GIVE_UP = 8
_RUN_END: dict[str, re.Pattern[str]] = {}


def split_complete(buf: bytes) -> tuple[bytes, bytes]:
    """(whole lines, remainder) of a buffer."""
    i = buf.rfind(b"\n")
    return (b"", buf) if i < 0 else (buf[: i + 1], buf[i + 1:])


def parse_chunk(parser: NodeLogParser, data: bytes, now: float) -> list[Event]:
    """Every line of ``data``, as ``parser.feed`` makes its events, in order; a rank's plain
    lines in a row as one :class:`LineRun` (its :meth:`LineRun.lines` are those events)."""
    text = data.decode("utf-8", "replace")
    if text.startswith("[ddptui ") and text.endswith("\n") and "\r" not in text:
        return _runs(parser, text, now)
    return _lines(parser, text, now)


def _runs(parser: NodeLogParser, text: str, now: float) -> list[Event]:
    """A read cut where the rank changes (ddptui's tee writes a rank's lines in blocks, so a
    flood's read is a few long runs), and a run again around its lines that are not plain
    (a metric record every hundred lines): the plain pieces whole, the rest through
    :func:`_lines`, in order."""
    out: list[Event] = []
    slow = -1  # where text not yet parsed, not taken as a run, begins
    pos, end = 0, len(text)
    short = 0  # runs too short in a row: lines interleaved line by line, no runs to find
    while pos < end and short < GIVE_UP:
        m = PREFIX_RE.match(text, pos)
        if m is None:  # an agent's line amid the ranks' ones
            if slow < 0:
                slow = pos
            pos = text.index("\n", pos) + 1
            continue
        prefix = m.group()
        cut = _run_end(prefix).search(text, pos, end - 1)
        stop = end if cut is None else cut.start() + 1
        run = text[pos:stop]
        short = short + 1 if run.count("\n") < MIN_RUN else 0
        for a, b, plain in _pieces(run) if not short else ((0, len(run), False),):
            count = run.count("\n", a, b)
            if plain and count >= MIN_RUN:
                if slow >= 0:
                    out.extend(_lines(parser, text[slow:pos + a], now))
                    slow = -1
                body = run[a + len(prefix):b].replace("\n" + prefix, "\n")
                out.append(LineRun(parser.node, int(m[1]), int(m[2]), parser.attempt, now,
                                   body, count))
            elif slow < 0:
                slow = pos + a
        pos = stop
    if pos < end and slow < 0:
        slow = pos
    if slow >= 0:
        out.extend(_lines(parser, text[slow:], now))
    return out


def _pieces(run: str) -> list[tuple[int, int, bool]]:
    """``run`` as (start, end, plain) pieces of whole lines: the lines that are not plain
    apart. Past one such line per MIN_RUN lines, the run is not worth cutting: one piece."""
    if _plain(run):
        return [(0, len(run), True)]
    most = run.count("\n") // MIN_RUN + 1
    starts: set[int] = set()
    for word in _SPECIAL:
        i = run.find(word)
        while i >= 0 and len(starts) <= most:
            starts.add(run.rfind("\n", 0, i) + 1)
            i = run.find(word, run.index("\n", i))
    for g in _GLOG_LINE_RE.finditer(run):
        if len(starts) > most:
            break
        starts.add(run.rfind("\n", 0, g.start()) + 1)
    if len(starts) > most:
        return [(0, len(run), False)]
    out, a = [], 0
    for s in sorted(starts):
        e = run.index("\n", s) + 1
        if s > a:
            out.append((a, s, True))
        out.append((s, e, False))
        a = e
    if a < len(run):
        out.append((a, len(run), True))
    return out


def _run_end(prefix: str) -> re.Pattern[str]:
    """The first newline not followed by ``prefix``: where a rank's run of lines ends."""
    found = _RUN_END.get(prefix)
    if found is None:
        found = re.compile("\n(?!" + re.escape(prefix) + ")")
        if len(_RUN_END) < 65536:
            _RUN_END[prefix] = found
    return found


def _plain(run: str) -> bool:
    """INFO throughout, and no line the parser makes anything else of (see _rank_lines)."""
    return not any(g in run and w in run for g, w in _GATED) \
        and not _GLOG_LINE_RE.search(run)


def _lines(parser: NodeLogParser, text: str, now: float) -> list[Event]:
    found = _RANK_LINE_RE.findall(text) if text.startswith("[ddptui ") else []
    if found and len(found) == text.count("\n") + (not text.endswith("\n")) \
            and "\r" not in text:
        return _rank_lines(parser, text, found, now)
    # Other lines too (torchrun's agent speaks a few times a run, and a read that catches up
    # on a log holds them): those go through the parser one by one, the runs of rank lines
    # between them still in bulk.
    out: list[Event] = []
    run: list[str] = []
    for line in text.split("\n"):
        if line.startswith("[ddptui ") and "\r" not in line:
            run.append(line)
            continue
        if run:
            out.extend(_run(parser, run, now))
            run = []
        if line:
            out.extend(parser.feed(line, now))
    if run:
        out.extend(_run(parser, run, now))
    return out


def _run(parser: NodeLogParser, lines: list[str], now: float) -> list[Event]:
    """Lines that start like rank lines: in bulk when every one is (``[ddptui x 1]`` is not)."""
    text = "\n".join(lines)
    found = _RANK_LINE_RE.findall(text)
    if len(found) == len(lines):
        return _rank_lines(parser, text, found, now)
    return [e for line in lines for e in parser.feed(line, now)]


def _rank_lines(parser: NodeLogParser, text: str, found: list[tuple[str, str]],
                now: float) -> list[Event]:
    """Events of a read that holds only rank lines (the flood's case)."""
    node, attempt = parser.node, parser.attempt  # only agent lines move the attempt
    uniform = not any(h in text for h in _LEVEL_HINTS) and not _GLOG_LINE_RE.search(text)
    special = "NCCL" in text or METRIC_MARK in text
    out: list[Event] = []
    append, worker, ids_of, info = out.append, Source.WORKER, _IDS.get, Level.INFO
    for ids_text, line in found:
        ids = ids_of(ids_text) or _ids(ids_text)
        if special and (line.startswith(METRIC_MARK) or "NCCL" in line):
            out.extend(parser.worker_line(line, ids[0], ids[1], now))
        else:
            append(LogLine(node, line, now, worker, info if uniform else classify_level(line),
                           ids[0], ids[1], attempt))
    return out


def _ids(ids_text: str) -> tuple[int, int]:
    rank, _, local = ids_text.partition(" ")
    ids = (int(rank), int(local))
    if len(_IDS) < 65536:
        _IDS[ids_text] = ids
    return ids
