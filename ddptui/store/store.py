"""The store: what a face reads, bounded in memory, mirrored to the local run directory.

One writer (the session's consumer thread) calls :meth:`Store.apply` with batches; any
number of readers (the headless printer, the engine process's sender) read under a short lock.
A store in another process (the dashboard's) is a replica: built from :meth:`Store.subscribe`'s
snapshot, then kept up to date with every later change, in order (see ``ddptui.engine.wire``).
The store that the session owns also writes every batch to its disk mirror, exactly once
across a killed session (see :mod:`ddptui.store.mirror`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Unpack

from ddptui.events import Event, Failure, LineRun, LogLine, Metric, MetricRun, NodeState, Stall
from ddptui.insight.judge import Told
from ddptui.store.changes import Applied, Change, NodeAdded, RunSet
from ddptui.store.mirror import Mirror, recover_to_checkpoint
from ddptui.store.ring import Batch, LineRing, SkipMarks
from ddptui.store.samples import NodeSamples
from ddptui.store.series import SeriesBook
from ddptui.store.views import NodeView, RankView, RunInfo, RunInfoChanges, copy_node
from ddptui.telemetry.sample import NodeSample


class Store:
    def __init__(
        self,
        run_dir: Path | None = None,
        *,
        ring_lines: int = 20_000,
        rank_lines: int = 5_000,
        series_points: int = 20_000,
        mirrored: bool = True,
    ) -> None:
        self.run_dir = run_dir
        self._lock = threading.Lock()  # readers vs the writer, held briefly
        self._write_lock = threading.Lock()  # writers among themselves, held across disk I/O
        self._lines = LineRing(ring_lines)
        self._seq = 0  # number of lines ever applied; the seq of the newest line
        self._rank_lines: dict[int, LineRing] = {}
        self._rank_lines_max = rank_lines
        self._book = SeriesBook(series_points)  # the metric series (ddptui.store.series)
        self._tap: Callable[[Change], None] | None = None
        self.not_live = 0  # lines a replica too far behind was not sent (see skip_lines)
        self.skips = SkipMarks()  # where it was: a replica's seqs as the original's
        self.nodes: dict[str, NodeView] = {}
        self.ranks: dict[int, RankView] = {}
        self.failures: list[Failure] = []
        self.stalls: list[Stall] = []  # each time a rank stalled or went on again, in order
        self.latest: dict[int, dict[str, Any]] = {}  # last record of each kind, per rank
        self.summaries: dict[int, dict[str, Any]] = {}
        self.run = RunInfo()
        self.version = 0
        self._mirror = Mirror(run_dir) if run_dir is not None and mirrored else None
        #: Why the run dir could not be written (a full disk), once it could not: from then
        #: on lines are kept in memory only, and the mirror's checkpoint stays where it was,
        #: so ``ddptui attach`` fetches the rest from the nodes once there is room.
        self.disk_error: str | None = None
        self.samples = NodeSamples(run_dir if mirrored else None)  # samples, per node

    def add_node(self, name: str, node_rank: int) -> None:
        with self._write_lock:
            with self._lock:
                self.nodes.setdefault(name, NodeView(name, node_rank))
            if self._tap is not None:
                self._tap(NodeAdded(name, node_rank))

    def set_run(self, **changes: Unpack[RunInfoChanges]) -> None:
        with self._write_lock:
            with self._lock:
                self.run = replace(self.run, **changes)
                self.version += 1
            if self._tap is not None:
                self._tap(RunSet(changes))

    def run_info(self) -> RunInfo:
        with self._lock:
            return RunInfo(**vars(self.run))

    def apply(self, events: Sequence[Event], raw_done: dict[str, int] | None = None, *,
              mirror: bool = True) -> None:
        """Apply a batch; ``raw_done``: how far into each node's raw log it reaches;
        ``mirror=False``: a replay of what the disk mirror already holds."""
        with self._write_lock:
            with self._lock:
                if mirror and self._mirror is not None:  # numbers go on from the disk's
                    self._seq = max(self._seq, self._mirror.floor)
                first_seq = self._seq + 1
                run: list[LogLine] = []  # lines in a row: nearly every event, taken together
                add, apply_one = run.append, self._apply_one
                for ev in events:
                    if type(ev) is LogLine:
                        add(ev)
                        continue
                    if run:
                        self._apply_lines(run)
                        run.clear()
                    if type(ev) is LineRun:
                        self._apply_run(ev)
                    elif type(ev) is MetricRun:
                        self._apply_metric_run(ev)
                    else:
                        apply_one(ev)
                if run:
                    self._apply_lines(run)
                self.version += 1
            if self._mirror is not None and mirror:
                try:
                    self._mirror.write(self.samples.take_out(events), raw_done or {},
                                       first_seq)
                except OSError as e:
                    self._stop_mirroring(e)
            if self._tap is not None:
                self._tap(Applied(list(events)))

    def skip_lines(self, n: int) -> None:
        """``n`` older lines not sent to a replica far behind (on disk): views count them."""
        with self._write_lock, self._lock:
            self.not_live += n
            self.skips.add(self._seq, self.not_live)
            self.version += 1

    def subscribe(self, tap: Callable[[Change], None]) -> dict[str, Any]:
        """A snapshot of everything so far; every later change goes to ``tap``, none missed
        or repeated. ``tap`` is called with the writer's lock held: keep it quick."""
        with self._write_lock, self._lock:
            self._tap = tap
            return {
                "limits": (self._lines.maxlen, self._rank_lines_max, self._book.maxlen),
                "seq": self._seq,
                "lines": self._lines.tail(),
                "rank_lines": {r: ring.tail() for r, ring in self._rank_lines.items()},
                "rank_seqs": {r: ring.tail_seqs() for r, ring in self._rank_lines.items()},
                "series": self._book.copy(),
                "series_source": dict(self._book.source),
                "nodes": [copy_node(n) for n in self.nodes.values()],
                "ranks": [RankView(**vars(r)) for r in self.ranks.values()],
                "failures": list(self.failures),
                "stalls": list(self.stalls),
                "latest": {r: dict(kinds) for r, kinds in self.latest.items()},
                "summaries": dict(self.summaries),
                "run": RunInfo(**vars(self.run)),
                "telemetry": self.samples.copy(),
            }

    @classmethod
    def replica(cls, snapshot: dict[str, Any], run_dir: Path | None = None) -> Store:
        """A store rebuilt from :meth:`subscribe`'s snapshot; it reads ``run_dir`` for
        scrollback but never writes there (the original's mirror does)."""
        ring, rank_ring, points = snapshot["limits"]
        s = cls(run_dir, ring_lines=ring, rank_lines=rank_ring, series_points=points,
                mirrored=False)
        s._seq = snapshot["seq"]
        s._lines.extend(snapshot["lines"])
        for r, lines in snapshot["rank_lines"].items():
            s._rank_lines[r] = LineRing(rank_ring, numbered=True)
            s._rank_lines[r].extend(lines, snapshot["rank_seqs"][r])
        s._book.restore(snapshot["series"], snapshot.get("series_source", {}))
        s.nodes = {n.name: n for n in snapshot["nodes"]}
        s.ranks = {r.rank: r for r in snapshot["ranks"]}
        s.failures = list(snapshot["failures"])
        s.stalls = list(snapshot.get("stalls", []))
        s.latest = snapshot["latest"]
        s.summaries = snapshot["summaries"]
        s.run = snapshot["run"]
        s.samples.restore(snapshot.get("telemetry"))
        s.version = 1
        return s

    def _apply_lines(self, run: list[LogLine]) -> None:
        """Lines in a row, counted and ringed per (node, rank) rather than per line: the
        readers see none of it before the lock is let go, so only the end state counts."""
        groups: dict[tuple[str, int | None], list[LogLine]] = {}
        for ev in run:
            key = (ev.node, ev.rank)
            group = groups.get(key)
            if group is None:
                group = groups[key] = []
            group.append(ev)
        if len({rank for _, rank in groups}) < len(groups):
            # a rank on two nodes in one run (an elastic restart moved it): line by line, so
            # that it ends on the node of its last line
            for ev in run:
                self._apply_lines([ev])
            return
        self._seq += len(run)
        self._lines.extend(run)
        last_time = {run[-1].node: run[-1].time} if len(groups) == 1 else {
            ev.node: ev.time for ev in run}
        first = self._seq - len(run) + 1  # one rank's lines are numbered in a row
        seqs = range(first, self._seq + 1) if len(groups) == 1 else Batch(tuple(run), first)
        for (name, rank), group in groups.items():
            last = group[-1]
            ring = self._count(name, rank, group[0].local_rank, len(group), last_time[name],
                               last.time, last.attempt)
            if ring is not None:
                ring.extend(group, seqs)

    def _apply_run(self, run: LineRun) -> None:
        """What :meth:`_apply_lines` does for a group, for a run of one rank's lines."""
        self._seq += run.count
        self._lines.add_run(run)
        ring = self._count(run.node, run.rank, run.local_rank, run.count, run.time, run.time,
                           run.attempt)
        assert ring is not None  # a run is a rank's
        ring.add_run(run, self._seq - run.count + 1)

    def _count(self, name: str, rank: int | None, local_rank: int | None, count: int,
               node_time: float, rank_time: float, attempt: int) -> LineRing | None:
        """``count`` new lines of (node, rank) on their views; the rank's ring, for them."""
        node = self.nodes.get(name)
        if node is not None:
            node.lines += count
            node.last_line_time = node_time
        if rank is None:
            return None
        ring = self._rank_lines.get(rank)
        if ring is None:
            ring = self._rank_lines[rank] = LineRing(self._rank_lines_max, numbered=True)
        rv = self.ranks.get(rank)
        if rv is None or rv.node != name or (node is not None and rank not in node.ranks):
            rv = self._rank(rank, name, local_rank)
        rv.lines += count
        rv.last_line_time = rank_time
        rv.attempt = attempt
        return ring

    def _apply_one(self, ev: Event) -> None:
        if isinstance(ev, Metric) and (line := ev.as_line()) is not None:
            # The metrics pane is where a record is read, the rank's own view where it is checked.
            self._apply_lines([line])
        if isinstance(ev, LogLine):
            self._apply_lines([ev])
        elif isinstance(ev, Metric):
            self._apply_metric(ev)
        elif type(ev) is MetricRun:
            self._apply_metric_run(ev)
        elif isinstance(ev, NodeState):
            node = self.nodes.get(ev.node)
            if node is None:
                node = self.nodes[ev.node] = NodeView(ev.node, len(self.nodes))
            node.status = ev.status
            node.detail = ev.detail
            node.since = ev.time
            node.attempt = max(node.attempt, ev.attempt)
            if ev.pid is not None:
                node.pid = ev.pid
            if ev.exit_code is not None:
                node.exit_code = ev.exit_code
        elif isinstance(ev, Failure):
            self.failures.append(ev)
        elif type(ev) is NodeSample:
            self.samples.add(ev)
        elif isinstance(ev, Stall):  # not progress: a rank's lines and metrics are that
            self.stalls.append(ev)
        else:  # sampled stacks, counted: the judge's (ddptui.insight)
            self._book.insight.add_stacks(ev)

    def _rank(self, rank: int, node: str, local_rank: int | None) -> RankView:
        rv = self.ranks.get(rank)
        if rv is None:
            rv = self.ranks[rank] = RankView(rank, node, local_rank)
        elif rv.node != node:  # an elastic restart may move a global rank to another node
            rv.node = node
            rv.local_rank = local_rank
        if node in self.nodes:
            self.nodes[node].ranks.add(rank)
        return rv

    def _apply_metric(self, ev: Metric) -> None:
        if self._rank_metric(ev):  # a point: it has a step
            self._book.add(ev)

    def _apply_metric_run(self, run: MetricRun) -> None:  # its points made when read: series.py
        self._rank_metric(run.last)
        self._book.add_run(run)

    def _rank_metric(self, ev: Metric) -> bool:
        """``ev`` on its rank's view and latest record; whether it has a step (a point)."""
        rv = self._rank(ev.rank, ev.node, None)
        rv.attempt = ev.attempt
        record: dict[str, object] = dict(ev.values)  # then the record's other fields
        record.update(ev.extra)
        self.latest.setdefault(ev.rank, {})[ev.kind] = record
        if ev.kind == "summary":
            self.summaries[ev.rank] = record
        if ev.step is None:
            return False
        if ev.kind == "metric":
            rv.last_step, rv.last_step_time = ev.step, ev.time
            rv.step_time_s = ev.values.get("step_time_s", rv.step_time_s)
            rv.samples_per_s = ev.values.get("samples_per_s", rv.samples_per_s)
            rv.loss = ev.values.get("loss", rv.loss)
        return True

    @property
    def series_source(self) -> dict[str, tuple[str, str]]:  # name: (recognizer, step kind)
        return self._book.source

    @property
    def points(self) -> int:  # values taken into series: the chart redraws when this moved
        return self._book.points

    @property
    def seq(self) -> int:
        return self._seq

    def lines_since(self, cursor: int, limit: int | None = None) -> tuple[list[LogLine], int, int]:
        """Lines after ``cursor``: (lines, new cursor, how many fell out of the ring unseen)."""
        with self._lock:
            newest = self._seq
            available = len(self._lines)
            want = newest - cursor
            if want <= 0:
                return [], newest, 0
            skipped = max(0, want - available)
            take = min(want, available)
            if limit is not None and take > limit:
                skipped += take - limit
                take = limit
            return self._lines.tail(take), newest, skipped

    def recent_lines(self, n: int | None = None) -> list[LogLine]:
        """The newest ``n`` lines of the all-ranks ring (all of it when ``n`` is None)."""
        with self._lock:
            return self._lines.tail(n)

    def numbered_tail(self, rank: int | None = None) -> tuple[list[LogLine], list[int]]:
        """The all-ranks ring (``rank`` None) or a rank's, with each line's number."""
        with self._lock:
            if rank is None:
                lines = self._lines.tail()
                return lines, list(range(self._seq - len(lines) + 1, self._seq + 1))
            ring = self._rank_lines.get(rank)
            return ([], []) if ring is None else (ring.tail(), ring.tail_seqs())

    def rank_tail(self, rank: int, n: int | None = None) -> list[LogLine]:
        """The newest ``n`` lines of one rank's ring (all of it when ``n`` is None)."""
        with self._lock:
            ring = self._rank_lines.get(rank)
            return [] if ring is None else ring.tail(n)

    def series(self, rank: int, name: str) -> tuple[list[int | float], list[float]]:
        with self._lock:
            return self._book.get(rank, name)

    def metric_names(self) -> list[str]:
        with self._lock:
            return self._book.names()

    def node_views(self) -> list[NodeView]:
        with self._lock:
            return sorted((copy_node(n) for n in self.nodes.values()), key=lambda n: n.node_rank)

    def rank_views(self) -> list[RankView]:
        with self._lock:
            late = self._book.insight.told().stragglers
            return [replace(r, straggler=k in late) for k, r in sorted(self.ranks.items())]

    def insight(self, final: bool = False) -> Told:
        """What the curves told so far (:mod:`ddptui.insight`); ``final`` at the run's end."""
        with self._lock:
            return self._book.insight.told(final)

    def failure_list(self) -> list[Failure]:
        with self._lock:
            return list(self.failures)

    def stall_list(self) -> list[Stall]:
        with self._lock:
            return list(self.stalls)

    def node_samples(self) -> dict[str, list[NodeSample]]:
        """Each node's recent telemetry, oldest first."""
        with self._lock:
            return self.samples.copy()

    def _stop_mirroring(self, e: OSError) -> None:
        self.disk_error = f"cannot write to {e.filename or self.run_dir}: {e.strerror or e}"
        mirror, self._mirror = self._mirror, None
        with contextlib.suppress(OSError):
            if mirror is not None:
                mirror.close()
        self.samples.close(keep_writing=False)

    def close(self) -> None:
        with self._write_lock:
            if self._mirror is not None:
                with contextlib.suppress(OSError):  # a full disk: its error is said already
                    self._mirror.close()
            self.samples.close()

    #: Kept on the store, where attach and the tests look for it.
    recover = staticmethod(recover_to_checkpoint)
