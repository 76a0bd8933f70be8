"""The parts of ``run.json`` that their owners write, typed: who follows the run, what
preflight found and chose, a node's sync, the rendezvous, notes of commands other than the
run's own, the time limit's signal and the attempts. :class:`ddptui.run_state.RunRecord`
holds them; each is written whole by the one module its docstring names."""

from __future__ import annotations

from typing import NotRequired, TypedDict

from ddptui.events import JSON


class Controller(TypedDict):
    """The process that follows the run (:func:`ddptui.store.owner.this_controller`)."""

    host: str
    boot: str
    pid: int
    start: str
    detached: NotRequired[bool]  # it let go of the run (``ddptui attach`` takes it up)


class Preflight(TypedDict):
    seconds: float
    ok: bool
    problems: list[str]


class RouteNote(TypedDict):
    """The address and interface preflight gave a node whose own name leads nowhere
    (:mod:`ddptui.diagnose.preflight.route`), and what it set for that."""

    ifname: str
    addr: str
    why: str
    local_addr: str | None
    env: dict[str, str]


class SyncStats(TypedDict):
    """One node's sync (:func:`ddptui.sync.manifest.stats`); tests read these counts."""

    digest: str
    files_sent: int
    bytes_sent: int
    files: int
    seconds: float
    cached: bool


class Rendezvous(TypedDict):
    """The store's node, address and port, and the port's lock there (launch.reserve)."""

    node: str
    host: str
    port: int
    lock: str


class NcclMeta(TypedDict):
    """The NCCL facts and ddptui's warnings about them, so that a script reading
    ``run.json`` needs no ddptui to know what is wrong (``live.nccl_watch.facts_meta``)."""

    nccl: dict[str, JSON]
    nccl_warnings: list[dict[str, JSON]]


class Note(TypedDict):
    """When a command other than the run's own wrote to its record, and which."""

    at: float
    by: str


class Reconciled(Note):
    """What a stale run's nodes said when it was settled (:mod:`ddptui.afterwards.reconcile`)."""

    alive: dict[str, list[int]]
    unreachable: NotRequired[dict[str, str]]


class Checkpoint(TypedDict):
    """A checkpoint seen on a node after the time limit's signal (:mod:`ddptui.live.timelimit`)."""

    node: str
    path: str
    step: int | None
    after_s: float  # written this long after the signal


class TimeLimitNote(TypedDict):
    """The signal sent to the ranks before the allocation's time limit (or to rehearse it),
    and the checkpoint it brought, None while (or if) none is seen."""

    signal: str
    sent_at: float
    why: str
    ranks: int
    checkpoint: Checkpoint | None


class Attempt(TypedDict):
    """One allocation's try at a run resubmitted after its time limit (``slurm.resubmit``):
    the first attempt's run id links them all."""

    first: str
    number: int
    job: str
    resumed_from: Checkpoint | None
