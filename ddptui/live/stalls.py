"""The session's look at its ranks while the run is up: stalls told as they happen.

Called from the consumer thread, which wakes at least every 0.1 s; it looks at most once a
second (:data:`EVERY_S`), which costs a copy of the rank views. A rank that stalls or goes on
again becomes a :class:`ddptui.events.Stall` for the store and every face. On the run's first
stall the ranks' Python stacks are taken once, off the consumer thread (py-spy over SSH takes
a second or more), printed as ddptui's lines and saved under the run dir.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ddptui.config.model import HealthConfig
from ddptui.events import Level, NodeStatus, Stall, ssh_line
from ddptui.live.follow import Batch
from ddptui.rank_stacks import Stacks, node_lines, read_stacks
from ddptui.store.health import StallWatch
from ddptui.store.store import Store

EVERY_S = 1.0

#: Takes the stacks of the ranks on these nodes (all when None) and saves them.
TakeStacks = Callable[[list[str] | None], Stacks]


class HealthWatch:
    """Args:
        config: The hosts file's thresholds.
        store: The run's store, read for the ranks and written with the stalls found.
        listeners: The session's (the headless printer): they see the stalls in order.
        take_stacks: See :data:`TakeStacks`.
        publish: Sends ddptui's lines about a node through the session's queue.
        run_id: For what ddptui tells a person to type.
    """

    def __init__(self, config: HealthConfig, store: Store,
                 listeners: list[Callable[[Batch], None]], take_stacks: TakeStacks,
                 publish: Callable[[Batch], None], run_id: str) -> None:
        self.watch = StallWatch(config)
        self.store = store
        self.listeners = listeners
        self.take_stacks = take_stacks
        self.publish = publish
        self.run_id = run_id
        self._next = 0.0
        self._stacks_taken = False
        self.stacks_thread: threading.Thread | None = None

    def tick(self, stopping: bool = False) -> list[Stall]:
        """Tell the ranks that stalled or went on again since the last look (at most once
        per :data:`EVERY_S`; nothing while the run is being stopped). Called on the consumer
        thread, so the stalls are applied in order with the batches; they are ddptui's
        judgement, not evidence for the run's diagnosis."""
        if stopping or time.monotonic() < self._next:
            return []
        self._next = time.monotonic() + EVERY_S
        nodes = self.store.node_views()
        live = {n.name for n in nodes if n.status is NodeStatus.RUNNING}
        ranks = self.store.rank_views()
        ending = [r.rank for r in ranks if (last := self.store.rank_tail(r.rank, 1))
                  and last[0].level is Level.ERROR]
        found = self.watch.update(ranks, time.time(), live, ending)
        if found:
            self.store.apply(found)
            for fn in self.listeners:
                fn(Batch(found[0].node, list(found), {}))
        stalled = [ev for ev in found if ev.stalled]
        if stalled and not self._stacks_taken:
            self._stacks_taken = True
            where = None if any(ev.whole_run for ev in stalled) else sorted(
                {ev.node for ev in stalled})
            self.stacks_thread = threading.Thread(target=self._stacks, args=(where,),
                                                  name="ddptui-stacks", daemon=True)
            self.stacks_thread.start()
        return found

    def _stacks(self, nodes: list[str] | None) -> None:
        node = nodes[0] if nodes else self.store.node_views()[0].name
        try:
            stacks = self.take_stacks(nodes)
        except Exception as e:  # a failed look must not end the run or its following
            self.publish(Batch(node, [ssh_line(node, f"could not take the ranks' stacks: {e}",
                                               time.time(), Level.WARNING)], {}))
            return
        now = time.time()
        head = (f"the ranks' Python stacks (py-spy), saved to {stacks.saved}; again with "
                f"`ddptui stacks {self.run_id} --rank N`")
        verdict = read_stacks(stacks)
        self.publish(Batch(node, [ssh_line(node, text, now, Level.WARNING)
                                  for text in (head, verdict) if text], {}))
        for answer in stacks.nodes:
            self.publish(Batch(answer.node, [ssh_line(answer.node, text, now)
                                             for text in node_lines(answer)], {}))
