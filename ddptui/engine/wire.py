"""A store's changes on their way to a replica in another process, as compact bytes.

Loading a pickled ``LogLine`` costs about 3.7 µs. At 50,000 lines a second that is most of the
dashboard's frame budget. So runs of lines travel as columns (enums as small integers) and are
rebuilt with one ``map``, about 1 µs a line; the rarer events travel as themselves. A
snapshot's lines travel the same way.

A dashboard that falls far behind is sent only the newest lines, and the count of those it
missed (see :class:`Backlog`). Node states, metrics and failures are always sent, and the
full record is on disk in the engine's mirror.

Both ends live here, so that the engine's module and the dashboard's each import this one
and never each other; calls go the other way, typed, on a socket of their own
(:mod:`ddptui.engine.calls`).
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from ddptui.events import Event, Level, LineRun, LogLine, Metric, Source
from ddptui.outcome import RunResult
from ddptui.store.changes import Applied, Change, NodeAdded, RunSet, Skipped
from ddptui.store.store import Store

_SOURCES = list(Source)
_LEVELS = list(Level)
_SOURCE_NO = {s: i for i, s in enumerate(_SOURCES)}
_LEVEL_NO = {lv: i for i, lv in enumerate(_LEVELS)}

def _pack_events(events: list[Any]) -> list[Any]:
    """Runs of lines as columns (the decoder builds them with one ``map``), the rest as
    themselves, in order."""
    out: list[Any] = []
    run: list[LogLine] = []

    def flush() -> None:
        if run:
            out.append((
                [ln.node for ln in run], [ln.text for ln in run], [ln.time for ln in run],
                bytes(_SOURCE_NO[ln.source] for ln in run),
                bytes(_LEVEL_NO[ln.level] for ln in run),
                [ln.rank for ln in run], [ln.local_rank for ln in run],
                [ln.attempt for ln in run], bytes(ln.bar for ln in run)))
            run.clear()

    for e in events:
        if type(e) is LogLine:
            run.append(e)
        else:
            flush()
            out.append(e)
    flush()
    return out


def _unpack_events(packed: list[Any]) -> list[Any]:
    events: list[Any] = []
    for item in packed:
        if type(item) is tuple:
            nodes, texts, times, sources, levels, ranks, local_ranks, attempts, bars = item
            events.extend(map(LogLine, nodes, texts, times, map(_SOURCES.__getitem__, sources),
                              map(_LEVELS.__getitem__, levels), ranks, local_ranks, attempts,
                              map(bool, bars)))
        else:
            events.append(item)
    return events


class Done(NamedTuple):
    """The run is over, after every change of it: its result."""

    result: RunResult | None


#: What the engine sends the dashboard: the store's changes, then :class:`Done`.
Message = Change | Done
#: Each message as a bare tuple on the wire, its kind first, as before the types: no class
#: travels, so a message is no bigger, and the replica's side rebuilds the type.
_TAGS: dict[type[Message], str] = {RunSet: "run", NodeAdded: "node", Skipped: "skip",
                                   Done: "done"}
_KINDS: dict[str, Callable[..., Message]] = {tag: kind for kind, tag in _TAGS.items()}


def encode(messages: list[Message]) -> bytes:
    out = [("apply", _pack_events(m.events)) if type(m) is Applied else (_TAGS[type(m)], *m)
           for m in messages]
    return pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)


def decode(data: bytes) -> list[Message]:
    plain: list[tuple[Any, ...]] = pickle.loads(data)
    return [Applied(_unpack_events(p[1])) if p[0] == "apply" else _KINDS[p[0]](*p[1:])
            for p in plain]


def split_changes(messages: list[Message], most: int) -> list[list[Message]]:
    """Messages in order, in parts of at most ``most`` events (a part may hold several
    messages; a long ``apply`` is cut into several)."""
    parts: list[list[Message]] = []
    part: list[Message] = []
    size = 0
    for ch in messages:
        pieces: list[Message] = [ch]
        if type(ch) is Applied and len(ch.events) > most:
            events = ch.events
            pieces = [Applied(events[i:i + most]) for i in range(0, len(events), most)]
        for piece in pieces:
            n = len(piece.events) if type(piece) is Applied else 1
            if part and size + n > most:
                parts.append(part)
                part, size = [], 0
            part.append(piece)
            size += n
    if part:
        parts.append(part)
    return parts


def apply_change(store: Store, change: Change) -> None:
    """One change, as the original store saw it; :class:`Done` is the caller's."""
    if isinstance(change, Applied):
        store.apply(change.events, mirror=False)
    elif isinstance(change, RunSet):
        store.set_run(**change.changes)
    elif isinstance(change, NodeAdded):
        store.add_node(change.name, change.node_rank)
    else:
        store.skip_lines(change.lines)


def pack_snapshot(snapshot: dict[str, Any]) -> bytes:
    """Every distinct line once, packed as a batch's are; the rings as indices into them, so
    the replica shares one line object between its rings, as the original does."""
    lines: list[LogLine] = snapshot["lines"]
    every = list(lines)
    index = {id(ln): i for i, ln in enumerate(every)}
    rings: dict[int, list[int]] = {}
    for r, ring in snapshot["rank_lines"].items():
        refs = rings[r] = []
        for ln in ring:
            i = index.get(id(ln))
            if i is None:
                i = index[id(ln)] = len(every)
                every.append(ln)
            refs.append(i)
    packed = dict(snapshot, lines=_pack_events(every), all_lines=len(lines), rank_lines=rings)
    return pickle.dumps(packed, protocol=pickle.HIGHEST_PROTOCOL)


def unpack_snapshot(data: bytes) -> dict[str, Any]:
    snapshot: dict[str, Any] = pickle.loads(data)
    every = _unpack_events(snapshot["lines"])
    snapshot["lines"] = every[:snapshot.pop("all_lines")]
    snapshot["rank_lines"] = {r: [every[i] for i in refs]
                              for r, refs in snapshot["rank_lines"].items()}
    return snapshot


def _line_count(events: list[Any]) -> int:
    return sum(e.count if type(e) is LineRun else 1 for e in events
               if type(e) is LogLine or type(e) is LineRun or (type(e) is Metric and e.text))


class Backlog:
    """The changes not yet sent to the dashboard. A dashboard that falls far behind (it
    stopped reading, or a flood outruns it) is sent the newest lines: past ``max_lines``
    waiting, the oldest plain lines are left out down to ``keep_lines``, and counted. Node
    states, metrics and failures are never left out, and every line is on disk, in the
    engine's mirror. Memory stays bounded either way."""

    def __init__(self, max_lines: int = 60_000, keep_lines: int = 20_000) -> None:
        self.max_lines, self.keep_lines = max_lines, keep_lines
        self._changes: list[Change] = []
        self._lines = 0
        self._skipped = 0
        self._ready = threading.Condition()

    def add(self, change: Change) -> None:
        with self._ready:
            self._changes.append(change)
            if isinstance(change, Applied):
                self._lines += _line_count(change.events)
                if self._lines > self.max_lines:
                    self._drop(self._lines - self.keep_lines)
            self._ready.notify()

    def take(self, timeout: float) -> list[Change]:
        """What is waiting (a :class:`Skipped` first when lines were left out), after at most
        ``timeout`` seconds."""
        with self._ready:
            if not self._changes and not self._skipped:
                self._ready.wait(timeout)
            changes, self._changes, self._lines = self._changes, [], 0
            if self._skipped:
                changes.insert(0, Skipped(self._skipped))
                self._skipped = 0
            return changes

    def _drop(self, n: int) -> None:
        """Leave out the ``n`` oldest plain lines (a metric's line is its record: it stays)."""
        for i, ch in enumerate(self._changes):
            if n <= 0:
                break
            if not isinstance(ch, Applied):
                continue
            kept: list[Event] = []
            for e in ch.events:
                if n > 0 and type(e) is LogLine:
                    n -= 1
                    self._skipped += 1
                    self._lines -= 1
                elif n > 0 and type(e) is LineRun:
                    out = min(n, e.count)
                    n -= out
                    self._skipped += out
                    self._lines -= out
                    if out < e.count:
                        kept.append(e.after(out))
                else:
                    kept.append(e)
            self._changes[i] = Applied(kept)

