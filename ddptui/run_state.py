"""A run's life as data: the run's and each node's states, the events that move them, and
``run.json``'s typed record.

Before this module a run's state lived in thread events, follower flags, the store's status
and ``run.json`` strings, and which of them won depended on which thread got there first: a
stop of a run that had already ended could rewrite how it ended, a late "running" could
follow a node's end. Here every change is an event looked up in one table; what the table
does not list is refused, and the session (:mod:`ddptui.live.session`), the only writer of
a run's state, drops it. The table is pure, so it is tested whole: every allowed move and
every refused one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from enum import StrEnum
from typing import Any, TypedDict, Unpack

from ddptui.events import JSON, Event, NodeState, NodeStatus, RunStatus
from ddptui.run_notes import (
    Attempt,
    Controller,
    Note,
    Preflight,
    Reconciled,
    Rendezvous,
    RouteNote,
    SyncStats,
    TimeLimitNote,
)

#: ``run.json``'s layout version; a reader refuses nothing, but a writer bumps this when a
#: field changes meaning. Version 1: the layout of ddptui up to this module, plus ``schema``;
#: the typed record (``reconciled``, ``diagnosed``, ``node_files_removed`` named fields) kept
#: every key and shape, so it is version 1 still.
SCHEMA = 1


class RunEvent(StrEnum):
    """What happens to a run as a whole."""

    LAUNCH = "launch"  # ddptui starts reaching the nodes
    RELEASE = "release"  # every node's torchrun runs the job
    ABORT = "abort"  # the launch failed and was undone
    ATTACH = "attach"  # a ddptui follows the run again
    STOP = "stop"  # a stop was asked for (a key, Ctrl-C, `ddptui stop`)
    FINISH = "finish"  # every node exited 0
    FAIL = "fail"  # a node failed or was lost, and the run ended
    END_STOPPED = "end-stopped"  # the run ended by a stop (here or beside)


R = RunStatus
RUN_TABLE: dict[tuple[RunStatus, RunEvent], RunStatus] = {
    (R.IDLE, RunEvent.LAUNCH): R.LAUNCHING,
    (R.LAUNCHING, RunEvent.RELEASE): R.RUNNING,
    (R.LAUNCHING, RunEvent.ABORT): R.FAILED,
    (R.LAUNCHING, RunEvent.STOP): R.STOPPING,
    (R.LAUNCHING, RunEvent.ATTACH): R.RUNNING,  # its ddptui died mid-launch
    (R.RUNNING, RunEvent.ATTACH): R.RUNNING,
    (R.RUNNING, RunEvent.STOP): R.STOPPING,
    (R.RUNNING, RunEvent.FINISH): R.FINISHED,
    (R.RUNNING, RunEvent.FAIL): R.FAILED,
    (R.RUNNING, RunEvent.END_STOPPED): R.STOPPED,
    (R.STOPPING, RunEvent.ATTACH): R.STOPPING,
    (R.STOPPING, RunEvent.STOP): R.STOPPING,
    (R.STOPPING, RunEvent.ABORT): R.FAILED,  # stopped while launching: the launch is undone
    (R.STOPPING, RunEvent.END_STOPPED): R.STOPPED,
}
#: The run's end, by how it ended (:func:`ddptui.outcome.run_end` says which).
END_EVENT = {R.FINISHED: RunEvent.FINISH, R.FAILED: RunEvent.FAIL,
             R.STOPPED: RunEvent.END_STOPPED}


class NodeEvent(StrEnum):
    """What happens to one node's part of a run."""

    CONNECT = "connect"
    UPLOAD = "upload"  # files, the project, or progress of either
    START = "start"  # its torchrun starts (or setup runs before it)
    RUN = "run"  # its ranks run (again, after a restart or a reconnect)
    RESTART = "restart"  # torchrun restarts its workers
    EXIT = "exit"  # torchrun exited 0
    FAIL = "fail"  # a launch phase failed there, or torchrun exited non-zero
    STOP = "stop"  # a stop was sent there
    STOPPED = "stopped"  # it ended by a stop
    LOSE = "lose"  # silent too long, or unreachable for a stop

    @classmethod
    def reporting(cls, status: NodeStatus) -> NodeEvent | None:
        """The event a report of ``status`` stands for (a follower's or a log's
        ``NodeState``); None for ``pending``, which nothing reports."""
        return _REPORTS.get(status)


N = NodeStatus
_REPORTS = {N.CONNECTING: NodeEvent.CONNECT, N.UPLOADING: NodeEvent.UPLOAD,
            N.STARTING: NodeEvent.START, N.RUNNING: NodeEvent.RUN,
            N.RESTARTING: NodeEvent.RESTART, N.EXITED: NodeEvent.EXIT, N.FAILED: NodeEvent.FAIL,
            N.STOPPING: NodeEvent.STOP, N.STOPPED: NodeEvent.STOPPED, N.LOST: NodeEvent.LOSE}
#: States a node's part may still change from; exited, failed, stopped and lost are final.
NODE_LIVE = (N.PENDING, N.CONNECTING, N.UPLOADING, N.STARTING, N.RUNNING, N.RESTARTING,
             N.STOPPING)
_LAUNCHING = (N.PENDING, N.CONNECTING, N.UPLOADING, N.STARTING)
_UP = (N.RUNNING, N.RESTARTING, N.STOPPING)  # torchrun runs there (or is being stopped)


def _node_table() -> dict[tuple[NodeStatus, NodeEvent], NodeStatus]:
    t: dict[tuple[NodeStatus, NodeEvent], NodeStatus] = {
        (N.PENDING, NodeEvent.CONNECT): N.CONNECTING,
        (N.CONNECTING, NodeEvent.UPLOAD): N.UPLOADING,
        (N.UPLOADING, NodeEvent.UPLOAD): N.UPLOADING,
        (N.CONNECTING, NodeEvent.START): N.STARTING,
        (N.UPLOADING, NodeEvent.START): N.STARTING,
        (N.STARTING, NodeEvent.START): N.STARTING,
        (N.STARTING, NodeEvent.RUN): N.RUNNING,
        (N.RUNNING, NodeEvent.RUN): N.RUNNING,  # reachable again, a detail changes
        (N.RESTARTING, NodeEvent.RUN): N.RUNNING,
        (N.RUNNING, NodeEvent.RESTART): N.RESTARTING,
        (N.RESTARTING, NodeEvent.RESTART): N.RESTARTING,
    }
    for s in NODE_LIVE:
        t[(s, NodeEvent.FAIL)] = N.FAILED
        t[(s, NodeEvent.LOSE)] = N.LOST
    for s in (*_LAUNCHING[1:], *_UP):
        t[(s, NodeEvent.STOP)] = N.STOPPING
    for s in (*_LAUNCHING[1:], *_UP):
        t[(s, NodeEvent.STOPPED)] = N.STOPPED
    for s in _UP:
        t[(s, NodeEvent.EXIT)] = N.EXITED
    return t


NODE_TABLE = _node_table()


def run_next(state: RunStatus, event: RunEvent) -> RunStatus | None:
    """The run's state after ``event``; None when the table refuses it."""
    return RUN_TABLE.get((state, event))


def node_next(state: NodeStatus, event: NodeEvent) -> NodeStatus | None:
    """A node's state after ``event``; None when the table refuses it."""
    return NODE_TABLE.get((state, event))


@dataclass(frozen=True)
class NodeRecord:
    """One node in ``run.json``: enough to find and stop its part of the run without the
    hosts file. ``run_dir`` is the node dir (the key older runs wrote)."""

    name: str
    node_rank: int
    run_dir: str
    pgid: int | None = None
    cleanup: str | None = None  # what the reaper did there, in ddptui's words
    #: Where the ranks run there (the project), when not in the node dir.
    project_dir: str | None = None

    @property
    def cwd(self) -> str:
        return self.project_dir or self.run_dir


class NodeChanges(TypedDict, total=False):
    """The fields of a :class:`NodeRecord` that change once it is recorded."""

    pgid: int | None
    cleanup: str | None


class RunChanges(TypedDict, total=False):
    """The fields of a :class:`RunRecord` that change after it is made: what
    :meth:`RunRecord.changed` (and so the :class:`~ddptui.store.record.Recorder`) takes, each
    with its type, so that a misspelt or mistyped change is the type checker's error."""

    config: dict[str, JSON]
    status: RunStatus
    controller: Controller | None
    world_size: int | None
    started_at: float | None
    ended_at: float | None
    exit_code: int | None
    error: list[str] | None
    preflight: Preflight | None
    routes: dict[str, RouteNote] | None
    sync: dict[str, SyncStats] | None
    node_exit_codes: dict[str, int | None] | None
    diagnosis: dict[str, JSON] | None
    diagnosis_error: str | None
    diagnosed: Note | None
    curves: list[str] | None
    nccl: dict[str, JSON] | None
    nccl_warnings: list[dict[str, JSON]] | None
    unstopped: list[str] | None
    rendezvous: Rendezvous | None
    slurm: str | None
    reconciled: Reconciled | None
    node_files_removed: Note | None
    time_limit: TimeLimitNote | None
    attempt: Attempt | None
    attempts: list[str] | None


@dataclass(frozen=True)
class RunRecord:
    """``run.json``, typed, and never changed in place: a change makes a new record
    (:meth:`changed`), so that a reader's copy stays as it was read. Fields left None are not
    written, as before this record; keys this ddptui does not know ride in ``extra``. What it
    keeps of other modules' records (the hosts file as resolved, a diagnosis, the NCCL facts)
    is ``JSON``, read back by their owners (``HostsConfig.from_dict``, ...), not here."""

    run_id: str
    config: dict[str, JSON] = field(default_factory=dict)
    status: RunStatus = RunStatus.IDLE
    controller: Controller | None = None
    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    world_size: int | None = None
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    error: list[str] | None = None
    preflight: Preflight | None = None
    #: By node: the address and interface given to a node whose own name leads nowhere.
    routes: dict[str, RouteNote] | None = None
    sync: dict[str, SyncStats] | None = None
    node_exit_codes: dict[str, int | None] | None = None
    diagnosis: dict[str, JSON] | None = None  # Diagnosis.to_dict()
    diagnosis_error: str | None = None
    #: A diagnosis made again from the stored logs (:mod:`ddptui.afterwards.hindsight`).
    diagnosed: Note | None = None
    #: What the curves told over the run (``ddptui.insight``'s summary), at its end.
    curves: list[str] | None = None
    nccl: dict[str, JSON] | None = None  # NcclFacts.to_dict()
    nccl_warnings: list[dict[str, JSON]] | None = None
    unstopped: list[str] | None = None
    rendezvous: Rendezvous | None = None
    #: The Slurm allocation given back at the end, if ddptui asked for it (slurm.allocation).
    slurm: str | None = None
    reconciled: Reconciled | None = None
    #: ``ddptui clean`` removed (or found gone) the run's node dirs.
    node_files_removed: Note | None = None
    time_limit: TimeLimitNote | None = None
    attempt: Attempt | None = None
    #: On the first attempt: the run ids of the attempts after it, in order.
    attempts: list[str] | None = None
    extra: dict[str, JSON] = field(default_factory=dict)
    #: Fields set since the record was made or read: written even when None (a reader may
    #: count on ``"diagnosis": null`` meaning "looked, found none").
    written: frozenset[str] = field(default_factory=frozenset, repr=False, compare=False)

    def changed(self, **changes: Unpack[RunChanges]) -> RunRecord:
        return replace(self, **changes, written=self.written | changes.keys())

    def with_nodes(self, nodes: dict[str, NodeRecord]) -> RunRecord:
        return replace(self, nodes=nodes)

    def to_json(self) -> dict[str, JSON]:
        out: dict[str, JSON] = {"schema": SCHEMA}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("extra", "written") or (value is None and f.name not in self.written):
                continue
            if f.name == "nodes":
                value = [{k: v for k, v in asdict(n).items()  # no project: not written
                          if v is not None or k != "project_dir"} for n in value.values()]
            out[f.name] = str(value) if f.name == "status" else value
        return {**out, **self.extra}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunRecord:
        """Any ``run.json`` this ddptui or an older one wrote (schema 1, or none); KeyError,
        TypeError or ValueError when it is not one. ``Any``: what ``json`` read, each field
        kept as it was written (older runs' records are read, not judged, here)."""
        known = _FIELDS - {"extra", "written"}
        kw: dict[str, Any] = {k: v for k, v in data.items() if k in known}
        status = data.get("status")
        kw["status"] = RunStatus.read(status if isinstance(status, str) else None)
        nodes = data.get("nodes") or []
        if not isinstance(nodes, list):
            raise TypeError(f"run.json's nodes are not a list: {nodes!r}")
        kw["nodes"] = {str(n["name"]): _node_record(n) for n in nodes if isinstance(n, dict)}
        extra = {k: v for k, v in data.items() if k not in known and k != "schema"}
        return cls(**kw, extra=extra, written=frozenset(kw))


def _node_record(n: Mapping[str, Any]) -> NodeRecord:
    rank, pgid, cleanup = n["node_rank"], n.get("pgid"), n.get("cleanup")
    if not isinstance(rank, int) or not (pgid is None or isinstance(pgid, int)):
        raise TypeError(f"run.json's node {n.get('name')!r} has no whole node rank or pgid")
    project = n.get("project_dir")
    return NodeRecord(str(n["name"]), rank, str(n["run_dir"]), pgid,
                      cleanup if isinstance(cleanup, str) else None,
                      project if isinstance(project, str) else None)


_FIELDS = frozenset(f.name for f in fields(RunRecord))


class NodeGate:
    """Each node's state, moved only by :data:`NODE_TABLE`: the gate every node report passes
    before the store, the faces or the diagnosis see it. Not thread-safe: its owner locks."""

    def __init__(self, names: list[str], first: NodeStatus = NodeStatus.PENDING) -> None:
        self._by_node = dict.fromkeys(names, first)

    def admit(self, events: list[Event]) -> list[Event]:
        """``events`` in order, less the node states the table refuses (a late "running"
        after a node's end, a "restarting" while it is being stopped)."""
        kept: list[Event] = []
        for ev in events:
            if type(ev) is NodeState:
                event = NodeEvent.reporting(ev.status)
                new = None if event is None else node_next(self._by_node[ev.node], event)
                if new is None:
                    continue
                self._by_node[ev.node] = new
            kept.append(ev)
        return kept


#: The state a node event leads to, from every state that allows it.
STATUS_AFTER: dict[NodeEvent, NodeStatus] = {
    e: s for s in NodeStatus if (e := NodeEvent.reporting(s)) is not None}
