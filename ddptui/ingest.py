"""A node log's bytes, a read at a time, into events: the controller's hottest loop.

A flood is almost nothing but rank lines (``[ddptui R L] text``): a read of them is cut into
lines and their rank prefixes by one regular expression in C, and their level settled for
the whole read when no line in it could be a warning or an error. Anything else (an agent
line, an empty line, a carriage return) goes line by line through the parser, and the runs
of rank lines between such lines in bulk again.
Both ways make exactly the events :meth:`ddptui.nodelog.NodeLogParser.feed` makes, line by
line (``tests/test_ingest.py``). Pure: no I/O, no clock of its own.
"""

from __future__ import annotations

import re

from ddptui.events import METRIC_MARK, Event, Level, LogLine, Source, classify_level
from ddptui.nodelog import NodeLogParser

#: A rank line whole, as torchrun prefixes it (events.PREFIX_TEMPLATE): its ids, its text.
_RANK_LINE_RE = re.compile(r"^\[ddptui (\d+ \d+)\] ([^\n]*)$", re.M)
#: What ``classify_level`` looks for before it runs a regular expression: a read without any
#: of these (and without a glog-stamped line) is INFO throughout.
_LEVEL_HINTS = ("Error", "Exception", "Traceback", "FAILED", "arn", "WARN")
#: A glog-stamped rank line (``classify_level``'s first test), found by its ``"] "``: the
#: search runs in C from one to the next, where a ``^`` anchor would try every character.
_GLOG_LINE_RE = re.compile(r"\] [IWEF]\d{4} ")
_IDS: dict[str, tuple[int, int]] = {}


def split_complete(buf: bytes) -> tuple[bytes, bytes]:
    """(whole lines, remainder) of a buffer."""
    i = buf.rfind(b"\n")
    return (b"", buf) if i < 0 else (buf[: i + 1], buf[i + 1:])


def parse_chunk(parser: NodeLogParser, data: bytes, now: float) -> list[Event]:
    """Every line of ``data``, as ``parser.feed`` makes its events, in order."""
    text = data.decode("utf-8", "replace")
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
