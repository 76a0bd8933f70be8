"""What a face reads of the run, as the store keeps it: plain records, copied out under the
store's lock so that a reader never sees one half changed."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TypedDict

from ddptui.events import NodeStatus, RunStatus
from ddptui.nccl import NcclFacts
from ddptui.run_state import RunChanges


@dataclass
class NodeView:
    name: str
    node_rank: int
    status: NodeStatus = NodeStatus.PENDING
    detail: str = ""
    pid: int | None = None
    exit_code: int | None = None
    attempt: int = 0
    ranks: set[int] = field(default_factory=set)
    lines: int = 0
    last_line_time: float | None = None
    since: float | None = None


@dataclass
class RankView:
    rank: int
    node: str
    local_rank: int | None = None
    lines: int = 0
    last_line_time: float | None = None
    last_step: int | float | None = None  # an epoch fraction is a float
    last_step_time: float | None = None  # wall clock of the last metric with a step
    step_time_s: float | None = None
    samples_per_s: float | None = None
    loss: float | None = None
    attempt: int = 0
    straggler: bool = False  # the run's judge names it (ddptui.insight.straggler)


@dataclass
class RunInfo:
    """The run as a whole, for the header and the views: set by the session."""

    run_id: str = ""
    status: RunStatus = RunStatus.IDLE
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    world_size: int | None = None
    message: str = ""
    #: The scheduler's word on the run's allocation (``slurm 123 RUNNING 01:02:03 left``).
    scheduler: str = ""
    #: What NCCL said so far, as the run's one gatherer (``ddptui.live.nccl_watch``) has it:
    #: a copy, never changed once set, so every face reads the same facts from its store.
    nccl: NcclFacts | None = None


class RunInfoChanges(TypedDict, total=False):
    """What :meth:`ddptui.store.store.Store.set_run` sets of :class:`RunInfo`, each typed."""

    run_id: str
    status: RunStatus
    started_at: float | None
    ended_at: float | None
    exit_code: int | None
    world_size: int | None
    message: str
    scheduler: str
    nccl: NcclFacts | None


def run_info_changes(status: RunStatus, record: RunChanges) -> RunInfoChanges:
    """What the header shows of a move of the run and what ``run.json`` records with it:
    the status, its times and exit code."""
    out: RunInfoChanges = {"status": status}
    if "started_at" in record:
        out["started_at"] = record["started_at"]
    if "ended_at" in record:
        out["ended_at"] = record["ended_at"]
    if "exit_code" in record:
        out["exit_code"] = record["exit_code"]
    return out


@dataclass
class Series:
    """One metric of one rank: parallel step/value columns, bounded."""

    steps: deque[int | float]  # an epoch fraction's are floats
    values: deque[float]

    @classmethod
    def empty(cls, maxlen: int) -> Series:
        return cls(deque(maxlen=maxlen), deque(maxlen=maxlen))


def copy_node(n: NodeView) -> NodeView:
    c = NodeView(**vars(n))
    c.ranks = set(n.ranks)
    return c
