"""The session's own copy of what the run's diagnosis reads, bounded per stream.

The store's rings are sized for screens and drop a flooding rank's older lines; the
diagnosis needs both ends of each rank's story: its first words (the NCCL banner, an early
``NCCL WARN``) and its last (the traceback). So every stream keeps a head and a tail of its
own, and warnings and errors are a stream apart from plain lines, so a flood of ``print``
after an error cannot push the error out. Memory is bounded by the number of streams (a
handful per rank and per node), whatever the ranks print.

The same loop hands NCCL's lines to the run's NCCL facts (:mod:`ddptui.live.nccl_watch`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ddptui.diagnose import Diagnosis, diagnose
from ddptui.events import (
    Event,
    Failure,
    Level,
    LineRun,
    LogLine,
    Metric,
    MetricRun,
    NodeState,
    Source,
)
from ddptui.live.nccl_watch import NcclWatch
from ddptui.store.store import Store

#: Lines kept per rank stream (its first ``head``, then its last ``tail``): a rank has up to
#: four streams (its own lines and NCCL's, each plain and loud).
RANK_HEAD, RANK_TAIL = 32, 128
#: Per node stream: the agent's failure blocks list every local rank, so it keeps more.
NODE_HEAD, NODE_TAIL = 64, 256
#: Node states and failures: a few per node and attempt in any real run; the cap only guards
#: against a node that flaps for days.
STATE_HEAD, STATE_TAIL = 1_000, 4_000

_Item = tuple[int, Event]


class _Stream:
    """The first ``head`` items, then a ring of the last ``tail``.

    Its adder is what :class:`Evidence` calls per line: :meth:`_to_head` while the head
    fills, then the ring's own ``append`` (a C call), so a long run's lines cost no Python
    frame here.
    """

    __slots__ = ("head", "head_max", "key", "sinks", "tail")

    def __init__(self, head: int, tail: int, sinks: dict[Any, Callable[[_Item], None]],
                 key: Any) -> None:
        self.head: list[_Item] = []
        self.head_max = head
        self.tail: deque[_Item] = deque(maxlen=tail)
        self.sinks, self.key = sinks, key
        sinks[key] = self._to_head if head else self.tail.append

    def _to_head(self, item: _Item) -> None:
        self.head.append(item)
        if len(self.head) >= self.head_max:
            self.sinks[self.key] = self.tail.append

    def items(self) -> list[_Item]:
        return [*self.head, *self.tail]

    def __len__(self) -> int:
        return len(self.head) + len(self.tail)


class Evidence:
    """Fed every batch on the session's consumer thread; read once, when the run ends.

    :meth:`add` is on the hot path (every line of every rank): a tuple key, one dict look-up
    and a deque append per line, no regex; the sorting and the rules run only at the end.
    """

    def __init__(self) -> None:
        self._n = 0  # arrival order across streams, which the rules' block parsing needs
        self._sinks: dict[Any, Callable[[_Item], None]] = {}
        self._stream_of: dict[Any, _Stream] = {}  # in the order they began
        self._states = _Stream(STATE_HEAD, STATE_TAIL, {}, None)
        self._metrics: dict[tuple[str, int], _Item] = {}
        #: The run's NCCL facts, fed here because this loop looks at every line already.
        self.nccl = NcclWatch()

    def add(self, events: Iterable[Event]) -> None:
        n, sinks, debug = self._n, self._sinks, Level.DEBUG
        error, warning = Level.ERROR, Level.WARNING
        nccl = Source.NCCL
        nccl_lines: list[LogLine] = []
        pending: dict[Any, list[tuple[int, LineRun]]] = {}
        for ev in events:
            n += 1
            if type(ev) is LogLine:
                rank, level = ev.rank, ev.level
                if ev.source is nccl:
                    nccl_lines.append(ev)
                if level is debug and rank is not None:
                    continue  # a rank's DEBUG lines are torch's INFO chatter
                key = (ev.node, rank, ev.source, level is error or level is warning)
                if pending and key in pending:
                    self._flush(key, pending.pop(key))
                add = sinks.get(key)
                if add is None:
                    self._stream(key, rank)
                    add = sinks[key]
                add((n, ev))
            elif type(ev) is LineRun:  # a rank's plain lines: see _run
                n = self._run(ev, n, pending)
            elif type(ev) is Metric:
                # The last step per rank is all the rules read (which rank stopped first).
                if ev.step is not None or (ev.node, ev.rank) not in self._metrics:
                    self._metrics[(ev.node, ev.rank)] = (n, ev)
            elif type(ev) is MetricRun:  # its last line's point: a step, as every line's
                self._metrics[(ev.node, ev.rank)] = (n, ev.last)
            elif type(ev) is NodeState or type(ev) is Failure:
                self._states.sinks[None]((n, ev))
            # the rest (telemetry samples, ddptui's own stall marks) is no evidence the
            # rules read, and has no attempt or source for them to sort by
        for key, runs in pending.items():
            self._flush(key, runs)
        self._n = n
        if nccl_lines:
            self.nccl.add(nccl_lines)

    def _run(self, run: LineRun, n: int, pending: dict[Any, list[tuple[int, LineRun]]]) -> int:
        """A run numbered from ``n``: its first lines while its stream's head fills, the rest
        held back until the batch ends (or the stream's next line), when only the newest
        lines the tail can hold are made into lines. Returns its last line's number."""
        key = (run.node, run.rank, Source.WORKER, False)
        stream = self._stream(key, run.rank)
        room = stream.head_max - len(stream.head)
        if room > 0:
            if key in pending:
                self._flush(key, pending.pop(key))
            for i, line in enumerate(run.head(room)):
                self._sinks[key]((n + i, line))  # the adder changes once the head is full
            if run.count <= room:
                return n + run.count - 1
            n, run = n + room, run.after(room)
        held = pending.setdefault(key, [])
        held.append((n, run))
        while sum(r.count for _, r in held[1:]) >= RANK_TAIL:
            held.pop(0)  # older than all the tail can hold
        return n + run.count - 1

    def _stream(self, key: Any, rank: int | None) -> _Stream:
        stream = self._stream_of.get(key)
        if stream is None:
            stream = self._stream_of[key] = (
                _Stream(RANK_HEAD, RANK_TAIL, self._sinks, key) if rank is not None
                else _Stream(NODE_HEAD, NODE_TAIL, self._sinks, key))
        return stream

    def _flush(self, key: Any, runs: list[tuple[int, LineRun]]) -> None:
        add, need = self._sinks[key], RANK_TAIL
        pieces: list[tuple[int, list[LogLine]]] = []
        for first, run in reversed(runs):
            take = min(need, run.count)
            pieces.append((first + run.count - take, run.tail(take)))
            need -= take
            if need <= 0:
                break
        for start, lines in reversed(pieces):
            for i, line in enumerate(lines):
                add((start + i, line))

    def seed(self, store: Store) -> None:
        """What an attached run's store rebuilt from disk, before following resumes: the
        rank rings, the agents' lines still in the all-lines ring, and the failures."""
        lines = [ln for ln in store.recent_lines() if ln.rank is None]
        for rank in list(store.ranks):
            lines.extend(store.rank_tail(rank))
        lines.sort(key=lambda ln: ln.time)  # stable: each ring is in order already
        self.add(lines)
        self.add(store.failure_list())

    def __len__(self) -> int:
        return (sum(len(s) for s in self._stream_of.values()) + len(self._states)
                + len(self._metrics))

    def events(self) -> list[Event]:
        """Everything kept, in the order it arrived."""
        items = [it for s in self._stream_of.values() for it in s.items()]
        items.extend(self._states.items())
        items.extend(self._metrics.values())
        items.sort(key=lambda it: it[0])
        return [ev for _, ev in items]

    def diagnose(self, nodes: Sequence[str], world_size: int | None, exit_code: int
                 ) -> tuple[Diagnosis | None, str | None]:
        """The run's diagnosis, or why there is none; a bug in a rule must not keep the run
        from ending, so it comes back as the second value (for ``run.json``), never raised."""
        try:
            return diagnose(self.events(), nodes=nodes, world_size=world_size,
                            exit_code=exit_code), None
        except Exception as e:  # reported in run.json; the run still ends
            return None, f"{type(e).__name__}: {e}"

