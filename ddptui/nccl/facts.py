"""What NCCL said about itself, per rank and per node: the fact model and its JSON form.

Plain dataclasses that :class:`~ddptui.nccl.collect.NcclFacts` fills line by line, so a
rank's facts are complete as soon as its init lines have passed and stay small however long
the run goes (lists are capped). ``to_dict`` gives only JSON types, so the facts can be kept
in ``run.json`` beside the run they explain.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import TypeVar

from ddptui.events import JSON

T = TypeVar("T")

#: Beyond these, a rank's lists stop growing: a job that splits communicators in a loop or
#: repeats one WARN per step must not turn the facts into a second log.
MAX_COMMS = 64
MAX_WARNS = 32
MAX_NOTES = 16


@dataclass(slots=True)
class Interface:
    """A network interface NCCL chose, and for what: bootstrap, socket transport or IB's OOB."""

    name: str
    address: str
    role: str

    @property
    def label(self) -> str:
        return f"{self.name}:{self.address}"


@dataclass(slots=True)
class Hca:
    """An RDMA device of ``NET/IB : Using [0]mlx5_0:1/IB``: InfiniBand or RoCE port."""

    name: str
    port: int
    link: str
    sharp: bool = False

    @property
    def label(self) -> str:
        return f"{self.name}:{self.port}/{self.link}"


@dataclass(slots=True)
class Communicator:
    """One ``ncclComm``: identity from Init START/COMPLETE, shape from the topology line.

    ``started``/``completed`` are the arrival times of the Init START and Init COMPLETE
    lines as ddptui stamped them; ``nccl_total_s`` and ``phases`` are NCCL's own measure from
    its ``Init timings`` line (>= 2.23).
    """

    comm: str
    comm_id: str | None = None
    func: str | None = None
    rank: int | None = None
    nranks: int | None = None
    n_nodes: int | None = None
    local_ranks: int | None = None
    local_rank: int | None = None
    cuda_dev: int | None = None
    nvml_dev: int | None = None
    bus_id: str | None = None
    started: float | None = None
    completed: float | None = None
    nccl_total_s: float | None = None
    phases: dict[str, float] = field(default_factory=dict)
    evidence: str = ""  # the Init COMPLETE or Init timings line behind init_seconds

    @property
    def done(self) -> bool:
        return self.completed is not None or self.nccl_total_s is not None

    @property
    def init_seconds(self) -> float | None:
        """How long init took: NCCL's ``Init timings ... total`` when it printed one (measured
        inside libnccl, so exact); else the gap between the Init START and Init COMPLETE lines'
        arrival times (ddptui's clock, so it includes pipe and SSH delay, a few ms)."""
        if self.nccl_total_s is not None:
            return self.nccl_total_s
        if self.started is not None and self.completed is not None:
            return max(0.0, self.completed - self.started)
        return None

    @property
    def slowest_phase(self) -> tuple[str, float] | None:
        if not self.phases:
            return None
        name = max(self.phases, key=lambda k: self.phases[k])
        return name, self.phases[name]


@dataclass(slots=True)
class NcclWarn:
    """One ``NCCL WARN`` line: the message, and NCCL's source position when it printed one."""

    message: str
    position: str | None
    func: str | None
    stamp: str | None
    host: str | None
    text: str


@dataclass(slots=True)
class RankFacts:
    """Everything one process's NCCL said about its setup."""

    label: str
    rank: int | None = None
    host: str | None = None
    pid: int | None = None
    nccl_version: str | None = None
    cuda_runtime: str | None = None
    cuda_driver: str | None = None
    network: str | None = None
    net_notes: list[str] = field(default_factory=list)
    net_plugin: str | None = None
    bootstrap: list[Interface] = field(default_factory=list)
    sockets: list[Interface] = field(default_factory=list)
    ib_oob: list[Interface] = field(default_factory=list)
    hcas: list[Hca] | None = None
    gdr: dict[str, bool] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    speed_fallbacks: dict[str, str] = field(default_factory=dict)
    no_socket_interface: bool = False
    comms: dict[str, Communicator] = field(default_factory=dict)
    channels: dict[str, int] = field(default_factory=dict)
    ring_channels: int | None = None
    ring_order: list[int] = field(default_factory=list)
    transports: dict[str, int] = field(default_factory=dict)
    gdr_connections: int = 0
    rings_connected: bool = False
    ring_pxn: bool | None = None
    ring_gdr: bool | None = None
    trees_connected: bool = False
    nvls_tree: bool = False
    nvls_multicast: bool | None = None
    warns: list[NcclWarn] = field(default_factory=list)
    lines: int = 0
    unknown: int = 0
    evidence: dict[str, str] = field(default_factory=dict)

    def note(self, text: str) -> None:
        if text not in self.net_notes and len(self.net_notes) < MAX_NOTES:
            self.net_notes.append(text)

    @property
    def ib_found(self) -> bool | None:
        """Whether NCCL's IB plugin saw any HCA; None when it never said."""
        if self.hcas:
            return True
        if self.hcas is not None or any("No device found" in n for n in self.net_notes):
            return False
        return None

    @property
    def fallback_reason(self) -> str | None:
        """Why this rank is on sockets, in NCCL's words, when IB was tried first."""
        if self.network != "Socket":
            return None
        for key in ("NET/IB : No device found", "Failed to open libibverbs", "NCCL_IB_DISABLE",
                    "Failed to initialize NET plugin IB"):
            for n in self.net_notes:
                if key in n:
                    return n
        return None

    def to_dict(self) -> dict[str, JSON]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["bootstrap"] = [asdict(i) for i in self.bootstrap]
        d["sockets"] = [asdict(i) for i in self.sockets]
        d["ib_oob"] = [asdict(i) for i in self.ib_oob]
        d["hcas"] = None if self.hcas is None else [asdict(h) for h in self.hcas]
        d["comms"] = {k: asdict(c) | {"init_seconds": c.init_seconds}
                      for k, c in self.comms.items()}
        d["warns"] = [asdict(w) for w in self.warns]
        d["fallback_reason"] = self.fallback_reason
        return {k: (dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v)
                for k, v in d.items()}


def _first(values: Iterable[T | None]) -> list[T]:
    """Distinct values in first-seen order: what a node "uses" across its ranks."""
    out: list[T] = []
    for v in values:
        if v is not None and v not in out:
            out.append(v)
    return out


@dataclass(slots=True)
class NodeFacts:
    """One node's ranks, and what they say together (the table's column)."""

    node: str
    ranks: dict[str, RankFacts] = field(default_factory=dict)

    @property
    def nccl_versions(self) -> list[str]:
        return _first([r.nccl_version for r in self.ranks.values()])

    @property
    def cuda_runtimes(self) -> list[str]:
        return _first([r.cuda_runtime for r in self.ranks.values()])

    @property
    def cuda_drivers(self) -> list[str]:
        return _first([r.cuda_driver for r in self.ranks.values()])

    @property
    def networks(self) -> list[str]:
        return _first([r.network for r in self.ranks.values()])

    @property
    def fallback_reasons(self) -> list[str]:
        return _first([r.fallback_reason for r in self.ranks.values()])

    @property
    def interfaces(self) -> list[Interface]:
        seen: list[Interface] = []
        for r in self.ranks.values():
            for i in (*r.bootstrap, *r.sockets, *r.ib_oob):
                if i not in seen:
                    seen.append(i)
        return seen

    @property
    def hcas(self) -> list[Hca]:
        return _first([h for r in self.ranks.values() for h in (r.hcas or [])])

    @property
    def has_ib(self) -> bool:
        return bool(self.hcas)

    @property
    def comms(self) -> list[tuple[RankFacts, Communicator]]:
        return [(r, c) for r in self.ranks.values() for c in r.comms.values()]

    @property
    def n_nodes(self) -> int | None:
        """The job's node count as NCCL counted it (``nNodes``), the largest any comm saw."""
        seen = [c.n_nodes for _, c in self.comms if c.n_nodes is not None]
        return max(seen) if seen else None

    @property
    def warns(self) -> list[tuple[RankFacts, NcclWarn]]:
        return [(r, w) for r in self.ranks.values() for w in r.warns]

    def init_median(self) -> float | None:
        times = [t for _, c in self.comms if (t := c.init_seconds) is not None]
        return statistics.median(times) if times else None

    def to_dict(self) -> dict[str, JSON]:
        return {
            "node": self.node,
            "nccl_versions": [*self.nccl_versions],
            "cuda_runtimes": [*self.cuda_runtimes],
            "cuda_drivers": [*self.cuda_drivers],
            "networks": [*self.networks],
            "fallback_reasons": [*self.fallback_reasons],
            "interfaces": [asdict(i) for i in self.interfaces],
            "hcas": [asdict(h) for h in self.hcas],
            "n_nodes": self.n_nodes,
            "ranks": {k: r.to_dict() for k, r in self.ranks.items()},
        }
