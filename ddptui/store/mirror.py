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
    StackCount,
    Stall,
    all_view_text,
    in_all_view,
)
from ddptui.metrics.points import record, run_record
from ddptui.store import rundir
from ddptui.store.logfile import SEQ as _SEQ

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
                self._number(rel, numbers)
        for f in self._files.values():
            f.flush()
        if not per_file and not raw_done:
            return
        self._raw_done.update(raw_done)
        tmp = self.run_dir / (rundir.CHECKPOINT + ".tmp")
        tmp.write_text(json.dumps({"sizes": self._sizes, "raw_done": self._raw_done,
                                   "seq": self.floor}))
        os.replace(tmp, self.run_dir / rundir.CHECKPOINT)

    def _number(self, rel: str, numbers: Numbers) -> None:
        """Append ``rel``'s lines' numbers to its ``.seq`` index, each as its number less its
        line's (see :class:`ddptui.store.logfile.SeqIndex`): along a stretch of consecutive
        lines that is one value, repeated at C speed, not a Python int a line."""
        index = rundir.seq_index_name(rel)
        if index not in self._files:
            self._append(index, b"")
        line = self._sizes[index] // _SEQ.itemsize  # lines numbered so far: one entry each
        out = array(_SEQ.typecode)
        for item in numbers:
            if type(item) is int:
                out.append(item - line)
                line += 1
            else:
                first, count = cast(tuple[int, int], item)
                out += array(_SEQ.typecode, (first - line,)) * count
                line += count
        self._append(index, out.tobytes())
        self.floor = max(self.floor, out[-1] + line - 1)

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


#: The store's sequence numbers of the lines a mirrored log is given: each a line's own, or a
#: stretch of consecutive ones (first, how many), as a flood's run of lines is.
Numbers = list[int | tuple[int, int]]
Seqs = dict[str, Numbers]  # by the log's name
#: A rank's lines and their numbers, in the batch being sorted.
_Ranked = tuple[list[str], Numbers]


def _records_by_file(events: Iterable[Event], seq: int) -> tuple[dict[str, list[str]], Seqs]:
    """Each event's line or JSON record, under the run-dir-relative name of its file; and
    for each mirrored log, the store's sequence numbers of its lines (counted as the store
    counts them, from ``seq``, the batch's first)."""
    per_file: dict[str, list[str]] = {}
    shown = per_file.setdefault(rundir.ALL_LINES, [])  # the all-ranks view, for its scrollback
    shown_seqs: Numbers = []
    seqs: Seqs = {rundir.ALL_LINES: shown_seqs}
    by_rank: dict[int, _Ranked] = {}
    run: list[LogLine] = []  # rank lines in a row: nearly every event of a flood
    for ev in events:
        if type(ev) is LogLine and ev.rank is not None:
            run.append(ev)
            continue
        if run:
            _rank_lines(run, seq, shown, shown_seqs, by_rank, per_file, seqs)
            seq += len(run)
            run.clear()
        if type(ev) is LineRun:  # plain lines: INFO, no record, in the all-ranks view
            body = ev.text[:-1]
            tag = all_view_text(LogLine(ev.node, "", ev.time, rank=ev.rank))  # each line's
            shown.append(tag + body.replace("\n", "\n" + tag))
            shown_seqs.append((seq, ev.count))
            ranked = by_rank.get(ev.rank) or _rank_files(ev.rank, by_rank, per_file, seqs)
            ranked[0].append(body)
            ranked[1].append((seq, ev.count))
            seq += ev.count
            continue
        line = ev.as_line() if isinstance(ev, Metric) else ev
        if isinstance(line, LogLine):
            if in_all_view(line):
                shown.append(all_view_text(line))
                shown_seqs.append(seq)
            if line.rank is not None:
                ranked = by_rank.get(line.rank) or _rank_files(line.rank, by_rank, per_file, seqs)
                ranked[0].append(line.text)
                ranked[1].append(seq)
            elif line.source is Source.SSH:  # ddptui's own words are in no raw node log
                per_file.setdefault(rundir.EVENTS, []).append(json.dumps(event_record(line)))
            seq += 1
        if isinstance(ev, Metric):
            per_file.setdefault(rundir.METRICS, []).append(json.dumps(record(ev)))
        elif type(ev) is MetricRun:  # its lines are in the rank's log already (its LineRun)
            per_file.setdefault(rundir.METRICS, []).append(run_record(ev))
        elif isinstance(ev, NodeState | Failure | Stall | StackCount):  # samples: taken out
            per_file.setdefault(rundir.EVENTS, []).append(json.dumps(event_record(ev)))
    if run:
        _rank_lines(run, seq, shown, shown_seqs, by_rank, per_file, seqs)
    if not shown:
        del per_file[rundir.ALL_LINES]
    return per_file, seqs


def _rank_files(rank: int, by_rank: dict[int, _Ranked], per_file: dict[str, list[str]],
                seqs: Seqs) -> _Ranked:
    """Rank ``rank``'s lines and stretches, the first time the batch has one of its lines."""
    name = rundir.rank_log_name(rank)
    ranked = by_rank[rank] = (per_file.setdefault(name, []), seqs.setdefault(name, []))
    return ranked


def _rank_lines(run: list[LogLine], seq: int, shown: list[str],
                shown_seqs: Numbers, by_rank: dict[int, _Ranked],
                per_file: dict[str, list[str]], seqs: Seqs) -> None:
    """What the general case does for each rank line, a run at a time (its calls per line,
    in_all_view, all_view_text, rank_log_name, cost more than the lines' own writing)."""
    ranks = cast(list[int], [ev.rank for ev in run])  # rank lines: none is None
    texts = [ev.text for ev in run]
    if any(ev.level is Level.DEBUG for ev in run) or any(
            t.startswith(METRIC_MARK) for t in texts):
        kept = [i for i, ev in enumerate(run) if in_all_view(ev)]
        shown.extend(all_view_text(run[i]) for i in kept)
        shown_seqs.extend(seq + i for i in kept)
    else:
        shown.extend(map("[{}] {}".format, ranks, texts))
        shown_seqs.append((seq, len(run)))
    if ranks.count(ranks[0]) == len(ranks):  # one rank's lines in a row, as a flood's are
        ranked = by_rank.get(ranks[0]) or _rank_files(ranks[0], by_rank, per_file, seqs)
        ranked[0].extend(texts)
        ranked[1].append((seq, len(run)))
        return
    for number, rank, text in zip(range(seq, seq + len(run)), ranks, texts, strict=True):
        got = by_rank.get(rank)
        if got is None:
            got = _rank_files(rank, by_rank, per_file, seqs)
        got[0].append(text)
        got[1].append(number)


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


def event_record(ev: NodeState | Failure | LogLine | Stall | StackCount) -> dict[str, Any]:
    """A JSON-able record of a non-line event, for events.jsonl and `ddptui logs`."""
    if isinstance(ev, StackCount):  # read again by `ddptui logs` (faces/logs.py)
        return {"type": "stacks", "node": ev.node, "time": ev.time, "round": ev.round,
                "counts": {str(r): list(c) for r, c in ev.counts.items()},
                "problem": ev.problem, "cost": ev.cost}
    if isinstance(ev, Stall):
        return {"type": "stall", "node": ev.node, "rank": ev.rank, "time": ev.time,
                "stalled": ev.stalled, "idle_s": ev.idle_s, "whole_run": ev.whole_run,
                "after_error": ev.after_error, "step_gap_s": ev.step_gap_s}
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
