"""The store's disk mirror: append-only files under the local run dir, exact across a kill.

After each batch the mirror records the size of every file it appends to, together with how
far into each node's raw log the batch reached, in one atomically replaced checkpoint. A
session killed between the two leaves files longer than the checkpoint says:
:func:`recover_to_checkpoint` truncates them back, and the raw logs are replayed from there,
so no line is mirrored twice or lost.
"""

from __future__ import annotations

import json
import os
from array import array
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any, cast

from ddptui.events import (
    METRIC_MARK,
    Event,
    Failure,
    Level,
    LineRun,
    LogLine,
    Metric,
    MetricRun,
    NodeState,
    Source,
    Stall,
    all_view_text,
    in_all_view,
)
from ddptui.metrics.points import record, run_record
from ddptui.store import rundir

#: The files recovery removes when the checkpoint never saw them (rank logs aside).
_WHOLE_RUN_FILES = (rundir.METRICS, rundir.EVENTS, rundir.ALL_LINES,
                    rundir.seq_index_name(rundir.ALL_LINES))


class Mirror:
    """Keeps each file open for appending; only :class:`ddptui.store.store.Store` writes it."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        (run_dir / rundir.RANKS).mkdir(parents=True, exist_ok=True)
        self._files: dict[str, IO[bytes]] = {}
        self._sizes: dict[str, int] = {}
        self._raw_done: dict[str, int] = {}
        #: The newest sequence number on disk: a store that replayed fewer lines (attach)
        #: numbers on from it, so that each ``.seq`` index keeps increasing.
        self.floor = 0
        self._numbered: dict[str, bool] = {}  # a log mirrored before .seq indexes has none
        self._began: dict[str, int] = {}  # each file's size when this mirror opened it
        ck = run_dir / rundir.CHECKPOINT
        if ck.exists():
            data = json.loads(ck.read_text())
            self._raw_done = {k: int(v) for k, v in data.get("raw_done", {}).items()}
            self.floor = int(data.get("seq", 0))

    def _append(self, rel: str, data: bytes) -> None:
        f = self._files.get(rel)
        if f is None:
            f = self._files[rel] = open(self.run_dir / rel, "ab")  # noqa: SIM115
            self._sizes[rel] = self._began[rel] = f.tell()
        f.write(data)
        self._sizes[rel] += len(data)

    def write(self, events: Iterable[Event], raw_done: dict[str, int], first_seq: int = 1
              ) -> None:
        """``first_seq``: the store's sequence number of the batch's first line."""
        per_file, seqs = _records_by_file(events, first_seq)
        for rel, lines in per_file.items():
            self._append(rel, ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
        for rel, numbers in seqs.items():
            if numbers and self._is_numbered(rel):
                self._append(rundir.seq_index_name(rel), numbers.tobytes())
                self.floor = max(self.floor, numbers[-1])
        for f in self._files.values():
            f.flush()
        if not per_file and not raw_done:
            return
        self._raw_done.update(raw_done)
        tmp = self.run_dir / (rundir.CHECKPOINT + ".tmp")
        tmp.write_text(json.dumps({"sizes": self._sizes, "raw_done": self._raw_done,
                                   "seq": self.floor}))
        os.replace(tmp, self.run_dir / rundir.CHECKPOINT)

    def _is_numbered(self, rel: str) -> bool:
        """Whether ``rel`` has its ``.seq`` index: not when an older ddptui began it."""
        known = self._numbered.get(rel)
        if known is None:  # asked once its lines are written: was there any before?
            known = self._numbered[rel] = self._began.get(rel, 0) == 0 or (
                self.run_dir / rundir.seq_index_name(rel)).exists()
        return known

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()


Seqs = dict[str, "array[int]"]  # a mirrored log's name: the seq of each line it is given


def _records_by_file(events: Iterable[Event], seq: int) -> tuple[dict[str, list[str]], Seqs]:
    """Each event's line or JSON record, under the run-dir-relative name of its file; and
    for each mirrored log, the store's sequence number of each of its lines (counted as the
    store counts them, from ``seq``, the batch's first)."""
    per_file: dict[str, list[str]] = {}
    shown = per_file.setdefault(rundir.ALL_LINES, [])  # the all-ranks view, for its scrollback
    seqs: Seqs = {rundir.ALL_LINES: array("q")}
    by_rank: dict[int, list[str]] = {}
    run: list[LogLine] = []  # rank lines in a row: nearly every event of a flood
    for ev in events:
        if type(ev) is LogLine and ev.rank is not None:
            run.append(ev)
            continue
        if run:
            _rank_lines(run, seq, shown, by_rank, per_file, seqs)
            seq += len(run)
            run.clear()
        if type(ev) is LineRun:  # plain lines: INFO, no record, in the all-ranks view
            body = ev.text[:-1]
            tag = all_view_text(LogLine(ev.node, "", ev.time, rank=ev.rank))  # each line's
            shown.append(tag + body.replace("\n", "\n" + tag))
            numbers = range(seq, seq + ev.count)
            seqs[rundir.ALL_LINES].extend(numbers)
            ranked = by_rank.get(ev.rank)
            if ranked is None:
                ranked = by_rank[ev.rank] = per_file.setdefault(rundir.rank_log_name(ev.rank), [])
            ranked.append(body)
            seqs.setdefault(rundir.rank_log_name(ev.rank), array("q")).extend(numbers)
            seq += ev.count
            continue
        line = ev.as_line() if isinstance(ev, Metric) else ev
        if isinstance(line, LogLine):
            if in_all_view(line):
                shown.append(all_view_text(line))
                seqs[rundir.ALL_LINES].append(seq)
            if line.rank is not None:
                per_file.setdefault(rundir.rank_log_name(line.rank), []).append(line.text)
                seqs.setdefault(rundir.rank_log_name(line.rank), array("q")).append(seq)
            elif line.source is Source.SSH:  # ddptui's own words are in no raw node log
                per_file.setdefault(rundir.EVENTS, []).append(json.dumps(event_record(line)))
            seq += 1
        if isinstance(ev, Metric):
            per_file.setdefault(rundir.METRICS, []).append(json.dumps(record(ev)))
        elif type(ev) is MetricRun:  # its lines are in the rank's log already (its LineRun)
            per_file.setdefault(rundir.METRICS, []).append(run_record(ev))
        elif isinstance(ev, NodeState | Failure | Stall):  # samples: the store took them out
            per_file.setdefault(rundir.EVENTS, []).append(json.dumps(event_record(ev)))
    if run:
        _rank_lines(run, seq, shown, by_rank, per_file, seqs)
    if not shown:
        del per_file[rundir.ALL_LINES]
    return per_file, seqs


def _rank_lines(run: list[LogLine], seq: int, shown: list[str],
                by_rank: dict[int, list[str]], per_file: dict[str, list[str]],
                seqs: Seqs) -> None:
    """What the general case does for each rank line, a run at a time (its calls per line,
    in_all_view, all_view_text, rank_log_name, cost more than the lines' own writing)."""
    ranks = cast(list[int], [ev.rank for ev in run])  # rank lines: none is None
    texts = [ev.text for ev in run]
    numbers = range(seq, seq + len(run))
    if any(ev.level is Level.DEBUG for ev in run) or any(
            t.startswith(METRIC_MARK) for t in texts):
        kept = [i for i, ev in enumerate(run) if in_all_view(ev)]
        shown.extend(all_view_text(run[i]) for i in kept)
        seqs[rundir.ALL_LINES].extend(seq + i for i in kept)
    else:
        shown.extend(map("[{}] {}".format, ranks, texts))
        seqs[rundir.ALL_LINES].extend(numbers)
    if len(set(ranks)) == 1:  # one rank's lines in a row, as a flood's are
        name = rundir.rank_log_name(ranks[0])
        ranked = by_rank.get(ranks[0])
        if ranked is None:
            ranked = by_rank[ranks[0]] = per_file.setdefault(name, [])
        ranked.extend(texts)
        seqs.setdefault(name, array("q")).extend(numbers)
        return
    numbered: dict[int, array[int]] = {}
    for rank, text, number in zip(ranks, texts, numbers, strict=True):
        ranked = by_rank.get(rank)
        if ranked is None:
            ranked = by_rank[rank] = per_file.setdefault(rundir.rank_log_name(rank), [])
        ranked.append(text)
        at = numbered.get(rank)
        if at is None:
            at = numbered[rank] = seqs.setdefault(rundir.rank_log_name(rank), array("q"))
        at.append(number)


def recover_to_checkpoint(run_dir: Path) -> dict[str, int]:
    """Truncate the mirror to its last checkpoint; return how far each raw log was applied.

    Call it before a store opens the mirror: files created after the checkpoint hold nothing
    that counts, and without a checkpoint nothing written counts at all.
    """
    path = run_dir / rundir.CHECKPOINT
    data = json.loads(path.read_text()) if path.exists() else {}
    sizes: dict[str, int] = data.get("sizes", {})
    for rel, size in sizes.items():
        p = run_dir / rel
        if p.exists() and p.stat().st_size > size:
            with open(p, "r+b") as fh:
                fh.truncate(size)
    ranks = run_dir / rundir.RANKS
    if ranks.is_dir():
        for p in ranks.iterdir():
            if f"{rundir.RANKS}/{p.name}" not in sizes:
                p.unlink()
    for name in _WHOLE_RUN_FILES:
        if name not in sizes and (run_dir / name).exists():
            (run_dir / name).unlink()
    return {k: int(v) for k, v in data.get("raw_done", {}).items()}


def event_record(ev: NodeState | Failure | LogLine | Stall) -> dict[str, Any]:
    """A JSON-able record of a non-line event, for events.jsonl and `ddptui logs`."""
    if isinstance(ev, Stall):
        return {"type": "stall", "node": ev.node, "rank": ev.rank, "time": ev.time,
                "stalled": ev.stalled, "idle_s": ev.idle_s, "whole_run": ev.whole_run,
                "after_error": ev.after_error}
    if isinstance(ev, NodeState):
        return {"type": "node_state", "node": ev.node, "status": str(ev.status), "time": ev.time,
                "detail": ev.detail, "pid": ev.pid, "exit_code": ev.exit_code,
                "attempt": ev.attempt}
    if isinstance(ev, Failure):
        return {"type": "failure", "node": ev.node, "rank": ev.rank, "exit_code": ev.exit_code,
                "signal": ev.signal, "root_cause": ev.root_cause, "time": ev.time,
                "local_rank": ev.local_rank, "host": ev.host, "error_file": ev.error_file,
                "traceback": ev.traceback}
    return {"type": "line", "node": ev.node, "text": ev.text, "source": str(ev.source),
            "level": str(ev.level), "rank": ev.rank, "time": ev.time}
