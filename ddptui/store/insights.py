"""The live run's one judge of what its curves tell (:mod:`ddptui.insight`), fed by the store.

A flood's :class:`~ddptui.events.MetricRun` is kept whole until the judge is asked, as the
series keep it (:mod:`ddptui.store.series`): its points are made once, then, in the order the
runs came. Written by the store's writer and read by its readers, under the store's lock.
"""

from __future__ import annotations

from ddptui.events import Event, Metric, MetricRun, StackCount
from ddptui.insight.judge import Judge, Told
from ddptui.metrics.bulk import made


class InsightBook:
    def __init__(self) -> None:
        self.judge = Judge()
        self._waiting: list[Metric | MetricRun] = []

    def add(self, ev: Metric | MetricRun) -> None:
        self._waiting.append(ev)

    def add_stacks(self, ev: Event) -> None:
        if isinstance(ev, StackCount):
            self.judge.add_stacks(ev.node, ev.round, ev.counts, ev.problem, ev.cost)

    def told(self, final: bool = False) -> Told:
        """The findings so far, the run's end judged when ``final``."""
        feed = self.judge.add
        for item in self._waiting:
            for ev in [item] if isinstance(item, Metric) else made(item):
                feed(ev.rank, ev.node, ev.step, ev.values, ev.time)
        self._waiting.clear()
        self.judge.judge(final)
        return self.judge.told()
