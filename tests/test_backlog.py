"""The followers' queue holds a bounded backlog: a follower waits for room before it reads."""

from __future__ import annotations

import threading
import time

from ddptui.events import LineRun, LogLine, NodeStatus
from ddptui.ingest import parse_chunk
from ddptui.live.follow import Batch, EventQueue, Finished
from ddptui.nodelog import NodeLogParser
from ddptui.store.store import Store


def batch(n: int) -> Batch:
    return Batch("a", [LogLine("a", f"l{i}", 0.0, rank=0) for i in range(n)], {"a": n})


def test_a_follower_waits_while_the_backlog_is_over_the_limit() -> None:
    q = EventQueue(limit=100)
    halt = threading.Event()
    q.put(batch(60))
    q.put(Finished("a", NodeStatus.EXITED, 0))  # no events: counts nothing
    assert q.events == 60
    q.wait_room(halt)  # under the limit: at once
    q.put(batch(60))
    assert q.events == 120
    waited = threading.Event()

    def follower() -> None:
        q.wait_room(halt)
        waited.set()

    t = threading.Thread(target=follower, daemon=True)
    t.start()
    assert not waited.wait(0.3), "over the limit: the follower must wait"
    assert isinstance(q.get(timeout=1), Batch) and q.events == 60
    assert waited.wait(15), "room again: the follower goes on (waited 15 s)"
    t.join(15)


def test_halt_releases_a_waiting_follower() -> None:
    q = EventQueue(limit=10)
    q.put(batch(50))
    halt = threading.Event()
    t = threading.Thread(target=q.wait_room, args=(halt,), daemon=True)
    t.start()
    # A negative check: the follower must still be waiting after a while. Only a real bug
    # fails it; a slow machine can only make it pass more easily (it got less far).
    time.sleep(0.1)
    assert t.is_alive()
    halt.set()
    t.join(15)
    assert not t.is_alive(), "the halt did not release the follower within 15 s"
    store = Store()
    store.apply(q.get(timeout=1).events)  # type: ignore[union-attr]
    assert store.seq == 50 and q.events == 0


def test_a_run_of_lines_counts_as_its_lines() -> None:
    """A LineRun is one object holding thousands of lines: the bound is on lines."""
    text = "".join(f"[ddptui 0 0] line {i}\n" for i in range(500))
    events = parse_chunk(NodeLogParser("a"), text.encode(), 0.0)
    assert [type(e) for e in events] == [LineRun]
    q = EventQueue(limit=100)
    q.put(Batch("a", events, {"a": len(text)}))
    assert q.events == 500
    halt = threading.Event()
    t = threading.Thread(target=q.wait_room, args=(halt,), daemon=True)
    t.start()
    t.join(0.3)
    assert t.is_alive(), "500 lines waiting: over the limit"
    q.get(timeout=1)
    t.join(2)
    assert not t.is_alive() and q.events == 0
