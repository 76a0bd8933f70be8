"""The run's events on their way to the store, the diagnosis's copy and the faces' listeners.

One consumer thread takes what the followers, the launch phases and the watches publish, in
order, and applies it in batches; before the consumer runs (during the launch) a publish is
applied on the caller's thread, under a lock. Every event first passes the session's gate,
which drops a node state the state table refuses (:mod:`ddptui.run_state`).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from ddptui.bars import BarKeeper
from ddptui.events import Event
from ddptui.live.evidence import Evidence
from ddptui.live.follow import Batch, EventQueue, Finished
from ddptui.store.store import Store

#: What the faces' listeners see: every batch, in order, on the consumer thread.
Listener = Callable[[Batch], None]
#: Keeps the events the run's state allows (the session's node-state gate).
Gate = Callable[[list[Event]], list[Event]]


class EventBus:
    """Args:
        store: The run's store, the faces' view of it.
        evidence: The diagnosis's own copy (the store's rings may drop lines).
        gate: See :data:`Gate`.
        finished: Takes a node's end, in order with its lines.
        applied: Called after each applied batch of lines (saves what is due).
        fault: Told of an exception of the consumer's own; it goes on with the next batch,
            so a bug in one batch costs that batch, not the run.
    """

    def __init__(self, store: Store, evidence: Evidence, gate: Gate,
                 finished: Callable[[Finished], None], applied: Callable[[], None],
                 fault: Callable[[Exception], None]) -> None:
        self.store = store
        self.evidence = evidence
        self.gate, self.finished, self.applied, self.fault = gate, finished, applied, fault
        self.queue = EventQueue()
        self.listeners: list[Listener] = []
        self.bars = BarKeeper()  # a progress bar's states, at most one a second per rank
        self._lock = threading.Lock()
        self._consumer: threading.Thread | None = None

    @property
    def consuming(self) -> bool:
        return self._consumer is not None and self._consumer.is_alive()

    def publish(self, batch: Batch) -> None:
        if self.consuming:
            self.queue.put(batch)
            return
        with self._lock:  # launch threads publish at once before the consumer runs
            self.apply([batch])

    def start(self, tick: Callable[[bool], bool]) -> None:
        """Consume on a thread of its own until ``tick`` says the run is over. ``tick`` is
        called at least every 0.1 s, with whether anything was applied since the last call;
        True ends the consumer."""
        self._consumer = threading.Thread(target=self._consume, args=(tick,),
                                          name="ddptui-consumer", daemon=True)
        self._consumer.start()

    def join(self, timeout: float) -> None:
        if self._consumer is not None:
            self._consumer.join(timeout)

    def _consume(self, tick: Callable[[bool], bool]) -> None:
        last = 0.0
        while True:
            try:
                first = self.queue.get(timeout=0.1)
            except queue.Empty:
                if self.bars.holding:  # a bar that stopped moving: its newest state
                    self._guarded(self.apply, [])
                if self._guarded(tick, False):
                    self._guarded(self.apply, [None])
                    return
                continue
            items = [first]
            # At most an apply per 20 ms, so a flood is taken in batches; a line after a quiet
            # spell goes at once (the first line of a launch, a line at a moderate rate).
            deadline = last + 0.02
            while len(items) < 500:
                try:
                    items.append(self.queue.get_nowait())
                except queue.Empty:
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(0.002)
            self._guarded(self.apply, items)
            last = time.monotonic()
            if self._guarded(tick, True):
                self._guarded(self.apply, [None])
                return

    def _guarded(self, fn: Callable[[Any], Any], arg: Any) -> Any:
        try:
            return fn(arg)
        except Exception as e:
            self.fault(e)
            return None

    def apply(self, items: list[Batch | Finished | None]) -> None:
        """Apply ``items``: node ends to ``finished`` first (they cannot fail), then lines
        and states to the store, the evidence and the listeners, in order, with the bar
        states the keeper lets through (all it holds at a None: the consumer's end)."""
        due = Batch("", [], {})  # where the bar states now due go
        items = [*items, due]
        for item in items:
            if isinstance(item, Finished):
                self.finished(item)
        events: list[Any] = []
        raw_done: dict[str, int] = {}
        batches: list[Batch] = []
        for item in items:
            if isinstance(item, Finished):
                continue
            if item is None or item is due:
                held = self.bars.drain() if item is None else self.bars.due(time.time())
                if not held:
                    continue
                item = Batch(held[0].node, held, {})
            kept = self.bars.take(self.gate(item.events))
            if kept is not item.events:
                item = Batch(item.node, kept, item.raw_done)
            batches.append(item)
            events.extend(kept)
            raw_done.update(item.raw_done)
        if events or raw_done:
            self.store.apply(events, raw_done)
            self.evidence.add(events)
            self.applied()
        for batch in batches:
            for fn in self.listeners:
                fn(batch)
