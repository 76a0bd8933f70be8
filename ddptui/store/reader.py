"""A run as the dashboard reads it from disk: the list of runs, a past run's metrics (for
compare) and scrollback pages. Read-only, and without Textual (a file layer, as toolong's).

The dashboard reaches a live run through the engine's client; what is only on disk it reads
here, and nowhere else. Nothing here writes: a stale run is *shown* as it ended when every
node's end is on record, but settling it in ``run.json`` is for ``ddptui logs``, attach and
stop, through the run's recorder.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ddptui.events import NodeStatus, RunStatus
from ddptui.outcome import run_end
from ddptui.store import rundir
from ddptui.store.logfile import LineFile, SeqIndex
from ddptui.store.runs import RunSummary, list_runs, read_run, state_root

#: Up to this size a metrics file is read whole: a few tens of thousands of records.
READ_WHOLE = 4 << 20
#: A bigger file is read as this many windows of :data:`WINDOW` bytes, spread over it.
WINDOWS = 1024
WINDOW = 4096
#: A record is read whole up to this size: a run of a flood's metric lines (one follower read,
#: ``ddptui.live.follow.CHUNK``) is one record, far longer than a window.
LONGEST = 16 << 20
#: A page that keeps only some lines (a node's, a filter's) looks this far back for them.
SCAN_LINES = 200_000
_SCAN_CHUNK = 5_000

# -- the run list ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordedEnd:
    """How a run ended by the node ends its mirror recorded (``events.jsonl``)."""

    status: RunStatus
    exit_code: int | None
    nodes: dict[str, tuple[NodeStatus, int | None]]  # each node's end: status, exit code
    at: float | None  # the time of the last node state recorded


def event_records(run_dir: Path, *marks: bytes) -> Iterator[dict[str, Any]]:
    """The records of the run's ``events.jsonl`` whose line holds one of ``marks`` (a cheap
    test before parsing: most lines are a rank's); a torn last line of a killed session is
    passed over, as is a run with no events file."""
    try:
        with open(run_dir / rundir.EVENTS, "rb") as f:
            for raw in f:
                if not any(m in raw for m in marks):
                    continue
                try:
                    rec = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(rec, dict):
                    yield rec
    except OSError:
        return


def node_ends(run_dir: Path) -> tuple[dict[str, tuple[NodeStatus, int | None]], float | None]:
    """Each node's last recorded state, if it is an end; and the time of the last one."""
    last: dict[str, tuple[NodeStatus, int | None]] = {}
    when = None
    for rec in event_records(run_dir, b'"node_state"'):
        try:
            status = NodeStatus(rec["status"])
        except (ValueError, KeyError):
            continue
        last[str(rec["node"])] = (status, rec.get("exit_code"))
        when = rec.get("time", when)
    ends = {n: e for n, e in last.items() if e[0].finished or e[0] is NodeStatus.LOST}
    return ends, when


def recorded_end(run_dir: Path, nodes: list[str]) -> RecordedEnd | None:
    """The run's end when every node's end is on record (a run with no node recorded never
    started anywhere: failed); None while some node's is not."""
    if not nodes:
        return RecordedEnd(RunStatus.FAILED, None, {}, None)
    ends, when = node_ends(run_dir)
    if any(n not in ends for n in nodes):
        return None
    status, code = run_end(nodes, ends)
    return RecordedEnd(status, code, ends, when)


def run_list(root: Path | None = None) -> list[RunSummary]:
    """Every run under the state root, newest first, as it ended; nothing is written."""
    base = state_root(root)
    out = []
    for run in list_runs(base):
        end = recorded_end(rundir.run_dir(base, run.run_id), run.nodes) if run.stale else None
        out.append(run if end is None else replace(
            run, status=end.status, exit_code=end.exit_code, stale=False))
    return out


# -- a past run's metrics (compare) ----------------------------------------------------------


def metrics_file(root: Path | None, run_id: str) -> Path:
    """Where run ``run_id`` recorded its metrics, under the state root (``None``: default)."""
    return rundir.run_dir(state_root(root), run_id) / rundir.METRICS


def sample_lines(path: Path, read_whole: int = READ_WHOLE, windows: int = WINDOWS,
                 window: int = WINDOW) -> list[str]:
    """Every line of a small file; of a big one, the whole lines inside ``windows`` evenly
    spaced windows, in file order (so each series stays in step order, thinned); a window
    that holds no whole line takes the first one that starts in it, however long."""
    with path.open("rb") as f:
        size = f.seek(0, 2)
        f.seek(0)
        if size <= read_whole:
            return f.read().decode(errors="replace").splitlines()
        out: list[str] = []
        reached = 0  # where the last window's reading ended
        for i in range(windows):
            start = i * size // windows
            if start < reached:
                continue  # a long record read for the window before reaches past this one
            f.seek(start)
            if start > 0:
                f.readline(LONGEST)  # torn at the front: the window began mid-line
            chunk = f.read(window)
            if b"\n" not in chunk:  # a record longer than a window: a flood's run of lines
                chunk += f.readline(LONGEST)
            reached = f.tell()
            parts = chunk.split(b"\n")[:-1]  # what follows the last newline is torn
            out.extend(p.decode(errors="replace") for p in parts if p)
        return out


def run_start(root: Path | None, run_id: str) -> float | None:
    """When run ``run_id`` started, by its ``run.json``; None when that cannot be read."""
    try:
        started = read_run(state_root(root), run_id).get("started_at")
    except (OSError, ValueError):
        return None
    return float(started) if isinstance(started, int | float) else None


def metric_records(root: Path | None, run_id: str) -> list[str]:
    """Run ``run_id``'s ``metrics.jsonl`` records, sampled as :func:`sample_lines` does;
    none when it recorded none. Slow on a big file: call it off the event loop."""
    try:
        return sample_lines(metrics_file(root, run_id))
    except FileNotFoundError:
        return []


# -- scrollback ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Page:
    """Lines older than a view's first, oldest first, each with its sequence number (none
    from a run dir mirrored before logs had a ``.seq`` index)."""

    lines: list[str]
    seqs: list[int]


def page_before(run_dir: Path, rank: int | None, before: int | None, text: str, n: int,
                keep: Callable[[str], bool] | None = None) -> Page:
    """The ``n`` lines before line ``before`` (its sequence number) of rank ``rank``'s log,
    or of the all-ranks log when ``rank`` is None; only those ``keep`` keeps (a node's, a
    filter's), looked for :data:`SCAN_LINES` back. ``text``: that line as the log holds it,
    found by its text only in a run dir without an index (or when ``before`` is None)."""
    log = rundir.rank_log(run_dir, rank) if rank is not None else run_dir / rundir.ALL_LINES
    lines = LineFile(log)
    total = lines.refresh()
    index = SeqIndex(log.with_name(rundir.seq_index_name(log.name)))
    numbered = before is not None and total > 0 and index.count() >= total
    if numbered:
        assert before is not None
        at = index.below(before, total)
    else:
        found = lines.find_before(text, total, window=SCAN_LINES) if text else None
        at = 0 if found is None else found
    if keep is None:
        got = lines.read(at - n, at)
        return Page(got, index.read(at - len(got), at) if numbered else [])
    kept: list[str] = []
    seqs: list[int] = []
    stop = at
    while stop > 0 and len(kept) < n and at - stop < SCAN_LINES:
        start = max(0, stop - _SCAN_CHUNK)
        chunk = lines.read(start, stop)
        nums = index.read(start, stop) if numbered else [0] * len(chunk)
        picked = [(line, seq) for line, seq in zip(chunk, nums, strict=True) if keep(line)]
        kept[:0] = [line for line, _ in picked]
        seqs[:0] = [seq for _, seq in picked]
        stop = start
    return Page(kept[-n:] if n else [], seqs[-n:] if numbered and n else [])
