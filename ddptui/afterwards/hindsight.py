"""A settled run's diagnosis, for ``ddptui logs RUN_ID``: the one ``run.json`` holds, or one
made again from what the run dir kept.

The live diagnosis is made once, at the run's end, and stored in ``run.json``. Some failed runs
have none there: the ddptui that ran them predates the rule that names their cause (or any
diagnosis), the rules failed on them, or ``ddptui logs --check`` recorded their end from their
nodes, with no session left to diagnose them. Their raw node copies are all the rules need:
they are read again as ``ddptui attach``'s replay reads them (the parser, the metric scanner,
the bar keeper), into the session's own bounded copy (:class:`Evidence`), followed by each
node's end as ``events.jsonl`` (or, failing that, ``run.json``) recorded it.

The raw copies hold no times, so every line gets the run's start (attach's replay makes the
same ties): the lines keep their order, but where the live run picked the earliest of two
findings by the clock, the rules' own order picks here.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

from ddptui.bars import BarKeeper
from ddptui.config import HostsConfig
from ddptui.diagnose import Diagnosis
from ddptui.events import Event, Level, LogLine, NodeState, NodeStatus, RunStatus, Source
from ddptui.ingest import parse_chunk, split_complete
from ddptui.live.evidence import Evidence
from ddptui.metrics.scan import AUTO, Scanners
from ddptui.nodelog import NodeLogParser
from ddptui.outcome import node_end
from ddptui.run_state import RunRecord
from ddptui.store import rundir
from ddptui.store.reader import event_records
from ddptui.store.record import Recorder

#: Bytes of a raw node copy parsed at a time: a long run's copy is never read whole.
CHUNK = 1 << 20
#: What ``run.json`` says of a diagnosis made here, and by which command.
MADE_BY = "from the run's stored logs"


def explained(meta: dict[str, Any]) -> bool:
    """Whether the run is one a diagnosis explains: it failed once its nodes ran it. A run
    that finished, one a person stopped, one still going (or whose end is unknown) have no
    cause to find, and a launch that failed said why itself (``run.json``'s ``error``)."""
    return (RunStatus.read(meta.get("status")) is RunStatus.FAILED
            and meta.get("exit_code") != 0 and not meta.get("error"))


def stored(meta: dict[str, Any]) -> Diagnosis | None:
    """The diagnosis ``run.json`` holds, if it holds one this ddptui can read."""
    found = meta.get("diagnosis")
    if not isinstance(found, dict):
        return None
    try:
        return Diagnosis.from_dict(found)
    except ValueError:
        return None


def run_diagnosis(run_dir: Path, meta: dict[str, Any], *, record: bool = False
                  ) -> tuple[Diagnosis | None, str | None]:
    """The failed run's diagnosis (the stored one, else made again) and, when there is none,
    why not if the rules failed; ``record``: a diagnosis made again is written to ``run.json``
    (``ddptui logs --check``), so the next look reads it."""
    if not explained(meta):
        return None, None
    found = stored(meta)
    if found is not None:
        return found, None
    found, why_not = rediagnose(run_dir, meta)
    if record:  # shown all the same if it cannot be written; the next --check writes it
        with suppress(KeyError, TypeError, ValueError):  # a record this ddptui cannot type
            Recorder(run_dir, RunRecord.from_json(meta)).update(
                diagnosis=found.to_dict() if found else None, diagnosis_error=why_not,
                diagnosed={"at": time.time(), "by": f"ddptui logs --check, {MADE_BY}"})
    return found, why_not


def rediagnose(run_dir: Path, meta: dict[str, Any]) -> tuple[Diagnosis | None, str | None]:
    """The diagnosis the run's stored logs give, by the live run's rules and bounds."""
    names = node_names(meta)
    evidence = Evidence()
    start = float(meta.get("started_at") or 0.0)
    scanners = _scanners(meta)
    for name in names:
        for events in node_events(run_dir, name, scanners, start):
            evidence.add(events)
    evidence.add(list(recorded_events(run_dir, meta, names, start)))
    return evidence.diagnose(names, meta.get("world_size"), int(meta.get("exit_code") or 1))


def node_names(meta: dict[str, Any]) -> list[str]:
    """The run's nodes in the hosts file's order (the plan's, once it recorded them)."""
    names = [str(n["name"]) for n in meta.get("nodes", []) if "name" in n]
    return names or [str(n["name"]) for n in meta.get("config", {}).get("nodes", [])
                     if "name" in n]


def _scanners(meta: dict[str, Any]) -> Scanners:
    """The run's own ``metrics:`` (its steps name when a rank left); the built-in
    recognizers for a record this ddptui cannot read as a hosts file."""
    try:
        metrics = HostsConfig.from_dict(meta["config"]).metrics
    except (KeyError, TypeError, ValueError, AttributeError):
        return Scanners(AUTO, ())
    return Scanners(metrics.parse, metrics.patterns)


def node_events(run_dir: Path, name: str, scanners: Scanners, when: float
                ) -> Iterator[list[Event]]:
    """A node's raw copy as its follower made it into events, a chunk at a time; a torn last
    line (a killed session's) is left out, as attach leaves it."""
    path = rundir.node_log(run_dir, name)
    if not path.exists():
        return
    parser, bars, scan = NodeLogParser(name), BarKeeper(), scanners[name].scan
    rest = b""
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            whole, rest = split_complete(rest + block)
            if whole:
                yield bars.take(scan(parse_chunk(parser, whole, when)))
    yield bars.drain()


def recorded_events(run_dir: Path, meta: dict[str, Any], names: list[str], start: float
                    ) -> Iterator[Event]:
    """What the raw copies lack, from ``events.jsonl``: each node's states (its end, with
    its exit code) and ddptui's own lines about it. A node whose end was never recorded
    there (a run settled by ``ddptui logs --check``) ends as ``run.json``'s exit codes say."""
    ended: set[str] = set()
    for rec in event_records(run_dir, b'"node_state"', b'"ssh"'):
        try:
            if rec.get("type") == "node_state":
                status = NodeStatus(rec["status"])
                if status is NodeStatus.RESTARTING:  # the parser made it from the raw copy
                    continue
                if status.finished or status is NodeStatus.LOST:
                    ended.add(str(rec["node"]))
                yield NodeState(str(rec["node"]), status, float(rec.get("time") or start),
                                rec.get("detail") or "", rec.get("pid"), rec.get("exit_code"),
                                int(rec.get("attempt") or 0))
            elif rec.get("type") == "line" and rec.get("source") == Source.SSH:
                yield LogLine(str(rec["node"]), str(rec["text"]), float(rec.get("time") or start),
                              Source.SSH, Level(rec.get("level", Level.INFO)), rec.get("rank"))
        except (KeyError, TypeError, ValueError):
            continue  # a torn last line of a killed session
    codes = meta.get("node_exit_codes") or {}
    for name in names:
        if name not in ended and codes.get(name) is not None:
            status, why = node_end(codes[name], False, False)
            yield NodeState(name, status, float(meta.get("ended_at") or start), why,
                            exit_code=codes[name])


