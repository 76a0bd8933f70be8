"""Stale runs settled: ``run.json`` says a run is live, but its session is gone.

A session that dies (a closed terminal right after a stop, a SIGKILL, a reboot) cannot
record the run's end, so the run would be listed as running for good. It is settled in two
steps, so that a listing never waits on a network:

1. **Locally, at every listing** (:func:`settle_locally`). The mirror's ``events.jsonl``
   holds every node state the session applied. When each node's end is among them, the
   run's end is known (:func:`ddptui.store.reader.recorded_end`, the judge the dashboard's
   run list shows without writing) and recorded in ``run.json``; otherwise the run is shown
   as ``running?`` (see :class:`ddptui.store.runs.RunSummary`).
2. **On its nodes, on request** (:func:`check_run`: ``ddptui logs --check``). Each node is
   asked what is left of the run there: processes carrying its marker, the exit code
   ``launch.sh`` wrote, whether a stop was requested, whether an early-started torchrun
   gave up waiting to be released (its session died mid-launch). Nothing alive on any
   node: the end is recorded. Something alive: the run is ``detached`` (``ddptui attach``
   follows it, ``ddptui stop`` ends it). A node that does not answer leaves the run ``running?``.

``ddptui attach`` and ``ddptui stop`` settle a stale run by themselves: the followers read
each node to its end, and a stop ends it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddptui import nodeprog, outcome
from ddptui.events import NodeStatus, RunStatus
from ddptui.nodeprog import remains, torchrun_tee
from ddptui.outcome import node_end
from ddptui.remote import nodeops
from ddptui.run_state import RunRecord
from ddptui.store import rundir
from ddptui.store.reader import recorded_end
from ddptui.store.record import Recorder
from ddptui.store.runs import RunSummary, list_runs, read_run, summary_of

#: What a node says of the run (:mod:`ddptui.nodeprog.remains`).
CHECK_SRC = nodeprog.source(remains)


@dataclass
class NodeEnd:
    status: NodeStatus
    exit_code: int | None


@dataclass
class Checked:
    """What the nodes of one run said; ``settled`` is the status recorded, if any."""

    run_id: str
    alive: dict[str, list[int]] = field(default_factory=dict)
    unreachable: dict[str, str] = field(default_factory=dict)
    settled: RunStatus | None = None
    #: node -> what ``outcome.node_end`` said of it, for a node whose hold ran out
    never_released: dict[str, str] = field(default_factory=dict)

    def text(self) -> str:
        if self.settled is not None:
            said = f"run {self.run_id}: nothing of it runs on its nodes; recorded as {self.settled}"
            said += "".join(f" ({n}: {why})" for n, why in self.never_released.items())
            return said
        if self.alive:
            where = ", ".join(f"{n} ({len(p)} processes)" for n, p in self.alive.items())
            return (f"run {self.run_id}: still running on {where} without a controller; "
                    f"`ddptui attach {self.run_id}` follows it, `ddptui stop {self.run_id}` "
                    "ends it")
        where = "; ".join(f"{n}: {e}" for n, e in self.unreachable.items())
        return f"run {self.run_id}: could not ask every node ({where}); its status is unknown"


def run_end(names: list[str], ends: Mapping[str, NodeEnd]) -> tuple[RunStatus, int]:
    """The run's status and exit code from every node's end, by the live run's rule."""
    return outcome.run_end(names, {n: (e.status, e.exit_code) for n, e in ends.items()})


def record_end(recorder: Recorder, status: RunStatus, code: int, ends: Mapping[str, NodeEnd],
               how: str, ended_at: float | None) -> None:
    recorder.update(status=status, exit_code=code,
                    node_exit_codes={n: e.exit_code for n, e in ends.items()},
                    ended_at=recorder.record().ended_at or ended_at,
                    reconciled={"at": time.time(), "by": how, "alive": {}})


def settle_locally(root: Path, run: RunSummary) -> RunSummary:
    """A stale run whose every node's end was recorded gets its end written; no node asked."""
    if not run.stale:
        return run
    d = rundir.run_dir(root, run.run_id)
    try:
        recorder = Recorder.of_run(d)
    except (OSError, ValueError, KeyError, TypeError):
        return run
    names = list(recorder.record().nodes)
    end = recorded_end(d, names)  # the judge the dashboard's run list shows, too
    if end is None:
        return run
    if not names:  # nodes are recorded before any file is written: none has anything of it
        recorder.update(status=end.status, reconciled={
            "at": time.time(), "by": "its controller was gone before any node had the run",
            "alive": {}})
        return summary_of(d, recorder.record().to_json())
    assert end.exit_code is not None  # every node's end is on record: the rule gave one
    record_end(recorder, end.status, end.exit_code, {n: NodeEnd(*e) for n, e in end.nodes.items()},
               "its controller was gone; every node's end had been recorded", end.at)
    return summary_of(d, recorder.record().to_json())


def list_settled(root: Path) -> list[RunSummary]:
    """:func:`ddptui.store.runs.list_runs`, with stale runs settled from local facts."""
    return [settle_locally(root, r) for r in list_runs(root)]


def _ask(meta: dict[str, Any], run_id: str, node: dict[str, Any]) -> dict[str, Any]:
    from ddptui.config import HostsConfig
    from ddptui.remote.reach import connect

    config = HostsConfig.from_dict(meta["config"])
    cfg = config.node(str(node["name"]))
    transport = connect(cfg, config)
    try:
        ndir = str(node["run_dir"])
        res = transport.run(nodeops.python_cmd(
            cfg.python, CHECK_SRC, nodeops.marker(run_id, int(node["node_rank"])),
            rundir.in_node_dir(ndir, rundir.EXIT_CODE),
            rundir.in_node_dir(ndir, rundir.STOP_REQUESTED),
            rundir.in_node_dir(ndir, torchrun_tee.EXPIRED)), timeout=30)
    finally:
        transport.close()
    for line in reversed(res.stdout.strip().splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict) and "alive" in found:
            return found
    raise OSError(f"the check failed there (exit code {res.exit_code}): {res.stderr.strip()}")


def check_run(root: Path, run_id: str) -> Checked:
    """Ask every node of a run what is left of it; record the end when nothing is."""
    from ddptui.remote.reach import Failed, map_at_once

    meta = read_run(root, run_id)
    nodes = list(meta.get("nodes", []))
    out = Checked(run_id)
    ends: dict[str, NodeEnd] = {}
    for answer in map_at_once(nodes, lambda n: _ask(meta, run_id, n)):
        name = str(answer.item["name"])
        if isinstance(answer, Failed):
            out.unreachable[name] = str(answer.error).split("\n")[0]
            continue
        got = answer.value
        if got["alive"]:
            out.alive[name] = list(got["alive"])
        else:
            expired = bool(got.get("expired"))
            status, why = node_end(got["exit_code"], got["stop_requested"], expired)
            ends[name] = NodeEnd(status, got["exit_code"])
            if expired and status is NodeStatus.FAILED:
                out.never_released[name] = why
    recorder = Recorder(rundir.run_dir(root, run_id), RunRecord.from_json(meta))
    if out.alive or out.unreachable or not nodes:
        recorder.update(reconciled={"at": time.time(), "by": "ddptui logs --check",
                                    "alive": out.alive, "unreachable": out.unreachable})
        return out
    names = [str(n["name"]) for n in nodes]
    out.settled, code = run_end(names, ends)
    record_end(recorder, out.settled, code, ends,
               "ddptui logs --check: nothing of the run was left on its nodes", time.time())
    return out
