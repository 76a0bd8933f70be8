"""What ``ddptui clean`` removes, decided from what the nodes and the state dir say: pure.

Each node answers a scan (:mod:`ddptui.nodeprog.clean_node`): its node dirs, each with its
liveness, when it ended, its size and the code caches its ``launch.sh`` names; and its code
caches with when each was last used. :func:`choose` decides across the whole cluster, since a
run is one thing on every node: a run alive on any node is alive everywhere, and is never
touched. Of the finished runs, the ``keep`` newest stay, and with ``older_than`` only those
that ended longer ago go. A code cache goes when no run that stays (alive or kept) uses it on
that node and it was not used for :data:`CACHE_GRACE_S` (a launch writes its ``launch.sh``
just after its sync).

The node program's ``remove`` checks liveness again right before it removes anything, and
counts the bytes it frees by inode (hard links shared between synced trees).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ddptui import nodeprog
from ddptui.nodeprog import clean_node
from ddptui.store import rundir

#: ``--keep``'s default: the newest finished runs stay, so `ddptui logs` keeps recent history.
DEFAULT_KEEP = 3
#: A node dir with a ``launch.sh`` but no ``pgid`` yet is a launch under way (its setup steps
#: may take an hour) for this long; after that it is what a killed launch left.
LAUNCH_GRACE_S = 2 * 3600
#: A code cache used this recently may belong to a launch whose ``launch.sh`` is not written.
CACHE_GRACE_S = 600
#: A sync's temporary tree this old is what an interrupted sync left.
TMP_GRACE_S = 3600

#: The node program (:mod:`ddptui.nodeprog.clean_node`).
NODE_SRC = nodeprog.source(clean_node)


def node_args(workdir: str, todo: str | None = None) -> tuple[str, ...]:
    """The program's arguments: scan, or remove ``todo`` (:func:`removal_request`), in the
    runs and code caches of this workdir."""
    return ("scan" if todo is None else "remove", f"{workdir.rstrip('/')}/{rundir.NODE_RUNS}",
            rundir.code_root(workdir), rundir.CODE_MANIFEST_SUFFIX, str(LAUNCH_GRACE_S),
            *(() if todo is None else (todo,)))


@dataclass(frozen=True)
class NodeRun:
    """One node dir as a node's scan saw it."""

    run_id: str
    rank: int
    dir: str
    state: str  # live, launching or done
    ended: float
    bytes: int
    code: tuple[str, ...]

    @property
    def alive(self) -> bool:
        return self.state != "done"


@dataclass(frozen=True)
class NodeScan:
    runs: tuple[NodeRun, ...]
    code: Mapping[str, float]  # cache name -> when it was last used
    code_bytes: Mapping[str, int]
    tmp: Mapping[str, float]
    now: float


def parse_scan(stdout: str) -> NodeScan | None:
    """The scan's JSON line (a login banner may come before it); None if there is none."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict) and "runs" in d:
            runs = tuple(NodeRun(str(r["run_id"]), int(r["rank"]), str(r["dir"]),
                                 str(r["state"]), float(r["ended"]), int(r["bytes"]),
                                 tuple(r["code"])) for r in d["runs"])
            return NodeScan(runs, {c["name"]: float(c["used"]) for c in d["code"]},
                            {c["name"]: int(c["bytes"]) for c in d["code"]},
                            {t["name"]: float(t["used"]) for t in d["tmp"]}, float(d["now"]))
    return None


@dataclass(frozen=True)
class LocalRun:
    """A run dir of this machine's state dir that belongs to this hosts file's cluster."""

    run_id: str
    live: bool  # its run.json says launching, running or stopping
    ended: float  # ended_at, else started_at, else 0
    nodes: tuple[str, ...]  # the node names its run.json records


@dataclass(frozen=True)
class Policy:
    keep: int = DEFAULT_KEEP
    older_than_days: float | None = None


@dataclass
class Choice:
    """What goes, node by node and here, and what stays because it is alive."""

    node_runs: dict[str, list[NodeRun]] = field(default_factory=dict)
    node_code: dict[str, list[str]] = field(default_factory=dict)
    node_tmp: dict[str, list[str]] = field(default_factory=dict)
    local: list[str] = field(default_factory=list)
    live: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    #: Runs kept here whose node dirs no node has any more: ``ddptui logs`` marks them.
    gone_from_nodes: list[str] = field(default_factory=list)


def choose(scans: Mapping[str, NodeScan], local: Iterable[LocalRun], policy: Policy,
           now: float) -> Choice:
    """Which runs and caches go (see the module); ``scans`` covers every node of the file."""
    by_id = {r.run_id: r for r in local}
    on_nodes: dict[str, list[NodeRun]] = {}
    for scan in scans.values():
        for r in scan.runs:
            on_nodes.setdefault(r.run_id, []).append(r)
    live, ended = set(), {}
    for run_id in set(on_nodes) | set(by_id):
        entries = on_nodes.get(run_id, [])
        mine = by_id.get(run_id)
        if any(r.alive for r in entries):
            live.add(run_id)
        elif not entries and mine is not None and mine.live and (
                not mine.nodes or not set(mine.nodes) <= set(scans)):
            live.add(run_id)  # said to run, on nodes this file does not name: not ours to judge
        else:
            times = [r.ended for r in entries] or [mine.ended if mine else 0.0]
            ended[run_id] = max(times)
    finished = sorted(ended, key=lambda i: (ended[i], i), reverse=True)
    limit = None if policy.older_than_days is None else now - policy.older_than_days * 86400
    going = {i for i in finished[policy.keep:] if limit is None or ended[i] < limit}
    out = Choice(live=sorted(live), kept=sorted(set(finished) - going))
    for name, scan in scans.items():
        out.node_runs[name] = [r for r in scan.runs if r.run_id in going]
        used = {c for r in scan.runs if r.run_id not in going for c in r.code}
        out.node_code[name] = sorted(
            c for c, t in scan.code.items() if c not in used and now - t > CACHE_GRACE_S
            and (limit is None or t < limit))
        out.node_tmp[name] = sorted(t for t, m in scan.tmp.items() if now - m > TMP_GRACE_S)
    out.local = sorted(i for i in going if i in by_id)
    out.gone_from_nodes = sorted(
        i for i, r in by_id.items()
        if i not in going and i not in on_nodes and r.nodes and set(r.nodes) <= set(scans))
    return out


def removal_request(runs: list[NodeRun], code: list[str], tmp: list[str], dry: bool) -> str:
    """What the ``remove`` program is to remove (its last argument: paths, no secret)."""
    return json.dumps({"runs": [[r.dir, r.run_id, r.rank] for r in runs], "code": code,
                       "tmp": tmp, "dry": dry})


@dataclass(frozen=True)
class Freed:
    """What one node's ``remove`` freed (or, dry, would free)."""

    runs: int
    code: int
    bytes: int
    skipped: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()


def parse_freed(stdout: str) -> Freed | None:
    for line in reversed(stdout.strip().splitlines()):
        try:
            d: Any = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict) and "bytes" in d:
            return Freed(int(d["runs"]), int(d["code"]), int(d["bytes"]),
                         tuple(d.get("skipped", ())), tuple(d.get("errors", ())))
    return None
