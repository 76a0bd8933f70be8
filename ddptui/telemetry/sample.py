"""One node's telemetry at one moment: what the sampler's output is parsed into.

A :class:`NodeSample` travels like the other events (store, engine wire, disk), so it is a
plain slotted dataclass. Its JSON record (``telemetry.jsonl``, ``ddptui logs --telemetry``)
is written and read here, in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NotRequired, TypedDict


@dataclass(slots=True)
class GpuSample:
    """One GPU as ``nvidia-smi --query-gpu`` reported it; a field it could not give
    (``[N/A]``, ``[Not Supported]``, not asked for) is None."""

    index: int
    name: str = ""
    uuid: str = ""
    util: float | None = None  # percent
    mem_used: float | None = None  # MiB
    mem_total: float | None = None  # MiB
    power: float | None = None  # W
    power_limit: float | None = None  # W
    temp: float | None = None  # degrees C
    sm_clock: float | None = None  # MHz

    @property
    def mem_fraction(self) -> float | None:
        if self.mem_used is None or not self.mem_total:
            return None
        return self.mem_used / self.mem_total


@dataclass(slots=True)
class GpuApp:
    """A compute process on a GPU; ``ours`` says whether it belongs to this run (its
    environment carries the run's marker), None when the sampler could not tell."""

    gpu_uuid: str
    pid: int
    name: str
    mem_used: float | None  # MiB
    ours: bool | None = None
    gpu: int | None = None  # the GPU's index, joined on its uuid


@dataclass(frozen=True, slots=True)
class Summary:
    """What the nodes table shows of a sample: worst and mean GPU, network in and out."""

    util_min: float | None
    util_mean: float | None
    mem_max: float | None  # fraction of the fullest GPU's memory
    mem_mean: float | None
    gpus: int
    net: float | None  # bytes a second, in and out, loopback left out


def _min_mean(values: list[float], worst: str) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return (min(values) if worst == "min" else max(values)), sum(values) / len(values)


@dataclass(slots=True)
class NodeSample:
    """A node's telemetry, once a second. Rates need two readings, so a sampler's first
    sample has no CPU busy and no network rates."""

    node: str
    time: float
    cpu: float | None = None  # percent busy, all CPUs
    load1: float | None = None
    mem_used: int | None = None  # bytes
    mem_total: int | None = None  # bytes
    #: interface -> (received, sent) bytes a second
    net: dict[str, tuple[float, float]] = field(default_factory=dict)
    gpus: list[GpuSample] = field(default_factory=list)
    #: the last compute-process listing (None: never listed, as on a node without GPUs)
    apps: list[GpuApp] | None = None
    #: why there are no GPU values, when the node has nvidia-smi but it did not answer
    gpu_error: str = ""
    #: :meth:`summary`, computed once where it is read (never sent, never compared)
    _summary: Summary | None = field(default=None, compare=False, repr=False)

    def summary(self) -> Summary:
        """Worked out once per sample: the table reads a minute of them twice a second."""
        if self._summary is None:
            util = [g.util for g in self.gpus if g.util is not None]
            mem = [f for g in self.gpus if (f := g.mem_fraction) is not None]
            rate = self.net_rate
            self._summary = Summary(*_min_mean(util, "min"), *_min_mean(mem, "max"),
                                    len(self.gpus), None if rate is None else sum(rate))
        return self._summary

    @property
    def net_rate(self) -> tuple[float, float] | None:
        """(in, out) bytes a second over every interface but loopback."""
        if not self.net:
            return None
        rx = sum(v[0] for k, v in self.net.items() if k != "lo")
        tx = sum(v[1] for k, v in self.net.items() if k != "lo")
        return rx, tx

    def to_record(self) -> SampleRecord:
        rec: SampleRecord = {"node": self.node, "time": round(self.time, 3),
                               "cpu": self.cpu, "load1": self.load1,
                               "mem_used": self.mem_used, "mem_total": self.mem_total,
                               "net": {k: [round(a, 1), round(b, 1)]
                                       for k, (a, b) in self.net.items()},
                               "gpus": [_gpu_record(g) for g in self.gpus]}
        if self.apps is not None:
            rec["apps"] = [{"gpu_uuid": a.gpu_uuid, "gpu": a.gpu, "pid": a.pid,
                            "name": a.name, "mem_used": a.mem_used, "ours": a.ours}
                           for a in self.apps]
        if self.gpu_error:
            rec["gpu_error"] = self.gpu_error
        return rec

    @classmethod
    def from_record(cls, rec: SampleRecord) -> NodeSample:
        apps = rec.get("apps")
        return cls(
            str(rec["node"]), float(rec["time"]), rec.get("cpu"), rec.get("load1"),
            rec.get("mem_used"), rec.get("mem_total"),
            {k: (float(v[0]), float(v[1])) for k, v in (rec.get("net") or {}).items()},
            [GpuSample(**g) for g in rec.get("gpus") or []],
            None if apps is None else [GpuApp(**a) for a in apps],
            str(rec.get("gpu_error", "")))


def _gpu_record(g: GpuSample) -> GpuRecord:
    return {"index": g.index, "name": g.name, "uuid": g.uuid, "util": g.util,
            "mem_used": g.mem_used, "mem_total": g.mem_total, "power": g.power,
            "power_limit": g.power_limit, "temp": g.temp, "sm_clock": g.sm_clock}


class GpuRecord(TypedDict):
    """A :class:`GpuSample` as ``telemetry.jsonl`` holds it: its fields by name (a record
    written before a field existed lacks it, and reads back with its default)."""

    index: int
    name: NotRequired[str]
    uuid: NotRequired[str]
    util: NotRequired[float | None]
    mem_used: NotRequired[float | None]
    mem_total: NotRequired[float | None]
    power: NotRequired[float | None]
    power_limit: NotRequired[float | None]
    temp: NotRequired[float | None]
    sm_clock: NotRequired[float | None]


class AppRecord(TypedDict):
    """A :class:`GpuApp` as its sample's record holds it."""

    gpu_uuid: str
    pid: int
    name: str
    mem_used: float | None
    ours: NotRequired[bool | None]
    gpu: NotRequired[int | None]


class SampleRecord(TypedDict):
    """A :class:`NodeSample` as one line of ``telemetry.jsonl`` holds it."""

    node: str
    time: float
    cpu: NotRequired[float | None]
    load1: NotRequired[float | None]
    mem_used: NotRequired[int | None]
    mem_total: NotRequired[int | None]
    net: NotRequired[dict[str, list[float]]]  # interface -> [received, sent] a second
    gpus: NotRequired[list[GpuRecord]]
    apps: NotRequired[list[AppRecord]]
    gpu_error: NotRequired[str]
