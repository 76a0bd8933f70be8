"""Following one node's ``node.log``: one thread per node, bytes in, event batches out.

The local raw copy is the source of truth for "how far have we read": only whole lines are
appended to it, so its size is always a valid remote offset, and ``ddptui attach`` resumes
from there with nothing lost or read twice. Partial lines wait for their newline (or the end).

Liveness: a follower only reports trouble and keeps reconnecting; it records when it last
heard from its node (``last_heard``). Declaring a node lost is the session's watch's
decision (:mod:`ddptui.live.liveness`): a read on a partitioned link blocks rather than
fails, and a blocked thread cannot judge its own silence.
"""

from __future__ import annotations

import contextlib
import gc
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ddptui.config.secrets import Masker
from ddptui.events import Event, Level, LineRun, LogLine, NodeState, NodeStatus, Source, ssh_line
from ddptui.ingest import parse_chunk, split_complete
from ddptui.live.doorbell import Doorbell
from ddptui.metrics.scan import Scanner
from ddptui.nodelog import NodeLogParser
from ddptui.nodeprog import torchrun_tee
from ddptui.outcome import node_end
from ddptui.remote import nodeops
from ddptui.store import rundir
from ddptui.transport.base import Transport, TransportError

#: The most one read takes: a flood's backlog comes over in few round trips (the SSH
#: transport streams reads this big; bench/stream.py measured 1 MiB reads at a third).
CHUNK = 4 << 20
#: What all the followers read at once, at most: a node alone reads CHUNK, sixteen 1 MiB
#: each. Every follower holds its read (and a copy or two) until its turn to parse comes:
#: 16 x 4 MiB reads held so took a 16-node flood's session to 430 MiB (bench/stream.py).
READ_BUDGET = 16 << 20


def read_size(nodes: int) -> int:
    """Bytes one follower reads at a time when ``nodes`` are followed."""
    return max(1 << 20, min(CHUNK, READ_BUDGET // max(1, nodes)))


#: Seconds between reads until the node's ranks have printed a line.
FIRST_POLL = 0.05

#: The collector's thresholds while lines are followed. Every line is a few objects that
#: live until the store's rings let them go, none in a cycle; at Python's default (a young
#: collection every 700 allocations) the collector cost a fifth of a flood's delivery rate
#: (bench/stream.py, 1 host: 205k lines/s at the default, 246-260k with young collections
#: every 50,000 or none). The older generations still come round every 1 and 10 million
#: allocations (seconds to minutes in a flood), so what cycles there are do not pile up.
GC_THRESHOLDS = (50_000, 20, 10)


def tune_gc() -> None:
    """Collect less often in a process that follows nodes (the headless face, the engine)."""
    if gc.get_threshold()[0] < GC_THRESHOLDS[0]:
        gc.set_threshold(*GC_THRESHOLDS)


@dataclass(frozen=True)
class Batch:
    node: str
    events: list[Event]
    raw_done: dict[str, int]


@dataclass(frozen=True)
class Finished:
    node: str
    status: NodeStatus
    exit_code: int | None


#: Events read from the nodes and not yet taken by the consumer (a LineRun counted as its
#: lines), beyond which a follower waits before its next read: a flood the session cannot
#: keep up with then waits on its node, in node.log, instead of in this process's memory.
#: Unbounded, a 16-node flood piled up faster than one consumer could take it (16 reading
#: threads against one).
BACKLOG_EVENTS = 100_000
#: Followers parsing a read at once. Parsing holds the interpreter lock, so more at once is no
#: faster, but each one holds a read's worth of lines twice over (text, then events): with 16
#: nodes in a flood, all parsing 4 MiB reads together took the session from 375 to 1,075
#: MiB (bench/stream.py).
PARSERS = 2


def weight(events: list[Event]) -> int:
    """What a batch holds, in lines: a LineRun is thousands of them in one object."""
    return sum(e.count if type(e) is LineRun else 1 for e in events)


class EventQueue(queue.Queue[Batch | Finished]):
    """The followers' batches (and the launch's notes) on their way to the consumer, counting
    the events in them, so that a follower can wait for room (:meth:`wait_room`)."""

    def __init__(self, limit: int = BACKLOG_EVENTS) -> None:
        super().__init__()
        self.limit = limit
        self.events = 0
        self.room = threading.Condition(self.mutex)
        self.parsing = threading.BoundedSemaphore(PARSERS)  # held from the room to the put

    def _put(self, item: Batch | Finished) -> None:
        super()._put(item)
        if type(item) is Batch:
            self.events += weight(item.events)

    def _get(self) -> Batch | Finished:
        item = super()._get()
        if type(item) is Batch:
            self.events -= weight(item.events)
            self.room.notify_all()
        return item

    def wait_room(self, halt: threading.Event) -> None:
        """Until the consumer has taken enough (or following stops)."""
        with self.room:
            while self.events > self.limit and not halt.is_set():
                self.room.wait(0.2)


class NodeFollower(threading.Thread):
    def __init__(
        self,
        *,
        node: str,
        transport: Transport,
        node_dir: str,
        raw_path: Path,
        parser: NodeLogParser,
        out: EventQueue,
        pgid: int | None,
        stopping: threading.Event,
        reconnect: Callable[[], Transport],
        poll: float = 0.2,
        masker: Masker | None = None,
        chunk: int = CHUNK,
        python: str | None = None,
        scanner: Scanner | None = None,
    ) -> None:
        super().__init__(name=f"follow-{node}", daemon=True)
        self.node = node
        self.transport = transport
        self.node_dir = node_dir
        self.raw_path = raw_path
        self.parser = parser
        self.scanner = scanner or Scanner(node, ())  # the ranks' own metric lines
        self.out = out
        self.pgid = pgid
        self.stopping = stopping
        self.reconnect = reconnect
        self.poll = poll
        self.chunk = chunk
        self.python = python  # the node's: runs its doorbell (none: poll only, as in tests)
        self._bell: tuple[Transport, Doorbell] | None = None
        self.masker = masker or Masker()  # secret env values, masked before anything keeps a line
        self.halt = threading.Event()  # detach: stop following, leave the job alone
        #: The stop program saw none of the run's processes left here: what is in the log
        #: is all there will be. Without it the end shows at the next liveness check, which
        #: a group of unreaped zombies still passes.
        self.gone = threading.Event()
        self.last_heard = time.monotonic()  # the node's last answer (read by the watch)
        self.trouble = ""  # why the node does not answer now; "" while it does
        self._end_lock = threading.Lock()
        self._ended = False
        self.offset = raw_path.stat().st_size if raw_path.exists() else 0
        self._buf = b""
        self._status = NodeStatus.RUNNING
        self._ranks_spoke = False
        #: Why the raw copy could not be written, once it could not (see ``Store.disk_error``).
        self.disk_error: str | None = None

    def _remote(self, name: str) -> str:
        return rundir.in_node_dir(self.node_dir, name)

    def _emit(self, events: list[Event]) -> None:
        if events:
            self.out.put(Batch(self.node, events, {self.node: self.offset}))

    def _state(self, status: NodeStatus, detail: str = "", exit_code: int | None = None) -> None:
        self._status = status
        self._emit([NodeState(self.node, status, time.time(), self.masker.text(detail),
                              self.pgid, exit_code, self.parser.attempt)])

    def _take(self, raw: BinaryIO, data: bytes) -> list[Event]:
        """Whole lines into the raw copy (its size stays a valid offset), then parsed.

        Secret values are masked first, byte for byte, so that nothing after this point (the
        raw copy, the store, the faces) holds one, and offsets stay the node's.
        """
        data = self.masker.data(data)
        if self.disk_error is None:  # a full disk: the lines go on, the copy waits for attach
            try:
                raw.write(data)
                raw.flush()
            except OSError as e:
                self.disk_error = f"cannot write {self.raw_path}: {e.strerror or e}"
        self.offset += len(data)
        return self.scanner.scan(parse_chunk(self.parser, data, time.time()))

    def _claim_end(self) -> bool:
        """True once: the node's end (exit code, lost, crash) is reported exactly once, whether
        this thread or the watch sees it first."""
        with self._end_lock:
            ended, self._ended = self._ended, True
            return not ended

    @property
    def ended(self) -> bool:
        return self._ended

    def give_up(self, detail: str) -> bool:
        """The watch's verdict: the node is lost. Stop following; False if it ended already."""
        if not self._claim_end():
            return False
        self.halt.set()
        self._state(NodeStatus.LOST, detail)
        self.out.put(Finished(self.node, NodeStatus.LOST, None))
        return True

    def _read_some(self, raw: BinaryIO) -> bool:
        """Read what is new; True when anything arrived."""
        self.out.wait_room(self.halt)
        try:
            data = self.transport.read_from(self._remote(rundir.NODE_LOG),
                                            self.offset + len(self._buf), self.chunk)
        except FileNotFoundError:
            self.last_heard = time.monotonic()
            return False
        self.last_heard = time.monotonic()
        if not data or self.halt.is_set():  # given up meanwhile: the raw copy stays as consumed
            return False
        complete, self._buf = split_complete(self._buf + data)
        if complete:
            with self.out.parsing:  # room is made sure of again: others may have put meanwhile
                self.out.wait_room(self.halt)
                if self.halt.is_set():  # given up or detached while waiting: as above
                    return False
                self._parse_and_emit(raw, complete)
        return True

    def _parse_and_emit(self, raw: BinaryIO, complete: bytes) -> None:
        events = self._take(raw, complete)
        if self._status is NodeStatus.RESTARTING and any(
            (type(e) is LogLine and e.source is Source.WORKER) or type(e) is LineRun
            for e in events
        ):
            events.append(NodeState(self.node, NodeStatus.RUNNING, time.time(),
                                    f"attempt {self.parser.attempt}", self.pgid, None,
                                    self.parser.attempt))
        for e in events:
            if type(e) is NodeState:
                self._status = e.status
        if not self._ranks_spoke:
            self._ranks_spoke = any((type(e) is LogLine and e.rank is not None)
                                    or type(e) is LineRun for e in events)
        self._emit(events)

    def _drain(self, raw: BinaryIO) -> None:
        while self._read_some(raw):
            pass
        if self._buf:  # the job is over: a last line without its newline is still a line
            rest, self._buf = self._buf, b""
            self._emit(self._take(raw, rest))

    def catch_up(self, transport: Transport, most: int = CHUNK * 16) -> list[Event]:
        """A lost node, reached again after its run ended: what it wrote while cut off, from
        where following stopped to its end (at most ``most`` bytes), as following takes it."""
        events: list[Event] = []
        with open(self.raw_path, "ab") as raw:
            for _ in range(max(1, most // self.chunk)):
                data = transport.read_from(self._remote(rundir.NODE_LOG), self.offset, self.chunk)
                whole, _rest = split_complete(data)
                last = len(data) < self.chunk  # the end: a last line without its newline too
                events += self._take(raw, data if last else whole) if data else []
                if last or not whole:
                    break
        return events

    def _exit_code(self) -> int | None:
        try:
            data = self.transport.read_from(self._remote(rundir.EXIT_CODE), 0, 64)
        except FileNotFoundError:
            return None
        text = data.decode().strip()
        return int(text) if text.lstrip("-").isdigit() else None

    def _alive(self) -> bool:
        if self.pgid is None:
            return True
        alive = self.transport.run(nodeops.alive_cmd(self.pgid), timeout=15).exit_code == 0
        self.last_heard = time.monotonic()
        return alive

    def run(self) -> None:
        try:
            with open(self.raw_path, "ab") as raw:
                self._follow(raw)
        except Exception as e:  # a bug must not vanish with the thread
            self._emit([ssh_line(self.node, f"ddptui stopped following node {self.node}: "
                                 f"{e!r}; `ddptui attach` follows it again", time.time(),
                                 Level.ERROR)])
            if self._claim_end():
                self.out.put(Finished(self.node, NodeStatus.LOST, None))
        finally:
            if self._bell is not None:
                self._bell[1].close()

    def _wait(self, timeout: float, first: bool = False) -> None:
        """Until the log grows (its doorbell rings), ``timeout`` passes (without a bell and
        ``first``: FIRST_POLL) or following stops; a bell starts on each connection, or polls."""
        transport = self.transport
        if self.python is not None and (self._bell is None or self._bell[0] is not transport):
            if self._bell is not None:
                self._bell[1].close()
            self._bell = (transport, Doorbell(transport, self.python,
                                              self._remote(rundir.NODE_LOG)))
        bell = self._bell[1] if self._bell is not None else None
        if bell is not None and bell.ringing and not (self.halt.is_set()
                                                      or self.stopping.is_set()):
            bell.wait(self.offset + len(self._buf), timeout)
            if bell.ringing:
                return
        self.halt.wait(min(timeout, FIRST_POLL) if first else timeout)

    def _follow(self, raw: BinaryIO) -> None:
        next_check = 0.0
        next_alive = time.monotonic() + 2.0
        while not self.halt.is_set():
            try:
                got = self._read_some(raw)
                if self.trouble and not self.halt.is_set():
                    self.trouble = ""
                    self._state(NodeStatus.STOPPING if self.stopping.is_set()
                                else NodeStatus.RUNNING, "reachable again")
                if got:
                    continue
                now = time.monotonic()
                if now >= next_check or self.gone.is_set():
                    next_check = now + 0.5
                    code = self._exit_code()
                    if code is not None or self.gone.is_set():
                        self._drain(raw)
                        self._finish(code)
                        return
                    if now >= next_alive:
                        next_alive = now + 2.0
                        if not self._alive():
                            code = self._exit_code()
                            self._drain(raw)
                            self._finish(code)
                            return
            except (TransportError, OSError, EOFError) as e:
                if isinstance(e, FileNotFoundError):
                    raise
                if not self.trouble and not self.halt.is_set():
                    self.trouble = str(e) or type(e).__name__
                    self._state(self._status, f"unreachable, reconnecting: {self.trouble}")
                if self.halt.wait(1.0):
                    return
                with contextlib.suppress(TransportError, OSError, EOFError):
                    self.transport = self.reconnect()
                continue
            # Until a rank's first line, look more often where no doorbell rings: it is the
            # line a person waits for; a look is a command on the node, beside the torch
            # import that line waits for, and a doorbell rings as it comes.
            self._wait(self.poll, first=not self._ranks_spoke)

    def _has(self, name: str) -> bool:
        """Whether the node's run directory holds ``name`` (a marker file). A transport error
        goes up to the loop, which reconnects and asks again: a guess here would be the
        node's final word."""
        try:
            self.transport.read_from(self._remote(name), 0, 1)
        except FileNotFoundError:
            return False
        return True

    def _verdict(self, code: int | None) -> tuple[NodeStatus, str]:
        stopped = self.stopping.is_set() or self._has(rundir.STOP_REQUESTED)
        return node_end(code, stopped, not stopped and code is None
                        and self._has(torchrun_tee.EXPIRED))

    def _finish(self, code: int | None) -> None:
        # The verdict's remote reads come before the claim: if one fails, the end is still
        # unclaimed when the loop comes back here after reconnecting.
        status, detail = self._verdict(code)
        if not self._claim_end():
            return
        self._state(status, detail, code)
        self.out.put(Finished(self.node, status, code))
