"""The store's metric series: each rank's points of each name, as the chart reads them, bounded.

A :class:`~ddptui.events.MetricRun` (a flood's run of metric lines, see
:mod:`ddptui.metrics.bulk`) is kept whole, not made into points, until a series of its rank is
read: a flood of nanoGPT lines is then a list append per run, where a point per value per line
was most of the session's time. A single :class:`~ddptui.events.Metric` of a rank with runs
waiting waits behind them (a read's edge cuts a run, and its lines come one by one), so a
series is the same sequence of points either way (``tests/test_metric_runs.py``).

A rank's runs waiting to be read are bounded: once newer ones hold ``maxlen`` lines of every
series the oldest has, it is dropped, since its points would be pushed out of each of them
(a rare eval series amid a flood of train lines keeps its run). That holds when each line is
a new step, as a training loop prints them; a program that printed the same step over and
over would leave fewer points in the window than ``maxlen`` (never other ones).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable

from ddptui.events import Metric, MetricRun
from ddptui.metrics.bulk import made
from ddptui.store.insights import InsightBook
from ddptui.store.views import Series

#: Values a record carries that are no series.
NOT_SERIES = frozenset({"attempt", "seq", "epoch"})


class SeriesBook:
    """Every (rank, name) series; written by the store's writer, under the store's lock."""

    def __init__(self, maxlen: int) -> None:
        self.maxlen = maxlen
        self.series: dict[tuple[int, str], Series] = {}
        self.source: dict[str, tuple[str, str]] = {}  # name: (recognizer, step kind)
        self.points = 0  # values taken so far: the chart redraws only when this moved
        self._waiting: dict[int, deque[MetricRun | Metric]] = {}  # per rank, not made yet
        self.insight = InsightBook()  # the judge of what the curves tell, fed the same points

    def add(self, ev: Metric) -> None:
        """One point per value of ``ev`` (a step's later value replaces its earlier one)."""
        self.insight.add(ev)
        for name in ev.values:
            if name not in NOT_SERIES:
                self.source[name] = (ev.recognizer, ev.step_kind)
                self.points += 1
        waiting = self._waiting.get(ev.rank)
        if waiting is None:
            self._put(ev)
        else:  # its series are named at once, as a run's are: they exist before any read
            for name in ev.values:
                if name not in NOT_SERIES and (ev.rank, name) not in self.series:
                    self.series[(ev.rank, name)] = Series.empty(self.maxlen)
            waiting.append(ev)

    def add_run(self, run: MetricRun) -> None:
        """A run's points, to be made when its rank's series are read."""
        self.insight.add(run)
        named = [n for n in run.names if n not in NOT_SERIES]
        for name in named:
            if (run.rank, name) not in self.series:
                self.series[(run.rank, name)] = Series.empty(self.maxlen)
            self.source[name] = (run.recognizer, run.step_kind)
        self.points += run.count * len(named)
        waiting = self._waiting.get(run.rank)
        if waiting is None:
            waiting = self._waiting[run.rank] = deque()
        waiting.append(run)
        while len(waiting) > 1 and self._pushed_out(waiting):
            waiting.popleft()

    def _pushed_out(self, waiting: deque[MetricRun | Metric]) -> bool:
        """Whether newer items hold ``maxlen`` lines of every series the oldest one has."""
        want = {n: self.maxlen for n in _names(waiting[0]) if n not in NOT_SERIES}
        for item in itertools.islice(waiting, 1, None):
            for name in _names(item):
                if name in want:
                    want[name] -= _lines(item)
                    if want[name] <= 0:
                        del want[name]
            if not want:
                return True
        return not want

    def get(self, rank: int, name: str) -> tuple[list[int | float], list[float]]:
        if rank in self._waiting:
            self._make(rank)
        s = self.series.get((rank, name))
        return ([], []) if s is None else (list(s.steps), list(s.values))

    def names(self) -> list[str]:
        return sorted({name for _, name in self.series})

    def copy(self) -> dict[tuple[int, str], tuple[list[int | float], list[float]]]:
        for rank in list(self._waiting):
            self._make(rank)
        return {k: (list(s.steps), list(s.values)) for k, s in self.series.items()}

    def restore(self, series: dict[tuple[int, str], tuple[list[int | float], list[float]]],
                source: dict[str, tuple[str, str]]) -> None:
        for key, (steps, values) in series.items():
            self.series[key] = Series(deque(steps, maxlen=self.maxlen),
                                      deque(values, maxlen=self.maxlen))
        self.source = dict(source)

    def _make(self, rank: int) -> None:
        runs = self._waiting.pop(rank)
        for item in runs:
            if isinstance(item, Metric):
                self._put(item)
                continue
            for ev in made(item):
                self._put(ev)

    def _put(self, ev: Metric) -> None:
        rank, step = ev.rank, ev.step
        if step is None:  # no point: the store adds only metrics with a step
            return
        for name, value in ev.values.items():
            if name in NOT_SERIES:
                continue
            s = self.series.get((rank, name))
            if s is None:
                s = self.series[(rank, name)] = Series.empty(self.maxlen)
            if s.steps and s.steps[-1] == step:  # a later value of the same step wins
                s.values[-1] = value
                continue
            s.steps.append(step)
            s.values.append(value)


def _names(item: MetricRun | Metric) -> Iterable[str]:
    return item.names if isinstance(item, MetricRun) else item.values


def _lines(item: MetricRun | Metric) -> int:
    return item.count if isinstance(item, MetricRun) else 1
