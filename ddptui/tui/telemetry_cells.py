"""The nodes table's telemetry: GPU, GPU memory and network cells with sparklines, and the
telemetry alerts for the health column. Pure, built off the event loop with the table.

A node's GPU cell gives its worst GPU and the mean (``12/48%``: the least busy GPU, then the
mean over its GPUs); the memory cell the fullest GPU and the mean; each is followed by a
sparkline of the mean over the last minute. A rank's row gives its own GPU, the one its
local rank picks. Values older than ``STALE_S`` are not shown as current.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ddptui.chart.downsample import sparkline
from ddptui.events import NodeStatus
from ddptui.store.store import NodeView, RankView
from ddptui.telemetry import alerts
from ddptui.telemetry.sample import GpuSample, NodeSample
from ddptui.telemetry.text import size, worst_and_mean

COLUMNS = ("GPU", "GMem", "Net")
SPARK_WIDTH = 6
#: The sparklines' span, in samples (about seconds).
SPARK_SPAN = 60
STALE_S = alerts.STALE_AFTER_S
_BLANK = ("-", "-", "-")


@dataclass(frozen=True)
class TelemetryCells:
    nodes: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    ranks: dict[int, tuple[str, str, str]] = field(default_factory=dict)
    node_alerts: dict[str, str] = field(default_factory=dict)
    rank_alerts: dict[int, str] = field(default_factory=dict)

    def node(self, name: str) -> tuple[str, str, str]:
        return self.nodes.get(name, _BLANK)

    def rank(self, rank: int) -> tuple[str, str, str]:
        return self.ranks.get(rank, ("", "", ""))


def _util(gpus: Sequence[GpuSample]) -> list[float]:
    return [g.util for g in gpus if g.util is not None]


def _mem(gpus: Sequence[GpuSample]) -> list[float]:
    return [f for g in gpus if (f := g.mem_fraction) is not None]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _spark(history: Sequence[NodeSample], pick: object) -> str:
    values = [v for s in history[-SPARK_SPAN:] if (v := pick(s)) is not None]  # type: ignore[operator]
    return sparkline(values, SPARK_WIDTH) if len(values) > 1 else ""


def _pair(values: list[float], worst: str, fmt: str) -> str:
    wm = worst_and_mean(values, worst)
    if wm is None:
        return "-"
    w, m = wm
    if len(values) == 1:
        return format(w, fmt)
    return f"{format(w, fmt).rstrip('%')}/{format(m, fmt)}"


def node_cells(history: Sequence[NodeSample]) -> tuple[str, str, str]:
    s = history[-1]
    util, mem = _util(s.gpus), _mem(s.gpus)
    net = s.net_rate
    gpu = _pair(util, "min", ".0f") + ("%" if util else "")
    gpu_spark = _spark(history, lambda x: _mean(_util(x.gpus)))
    mem_cell = _pair(mem, "max", ".0%")
    mem_spark = _spark(history, lambda x: _mean(_mem(x.gpus)))
    net_cell = "-" if net is None else f"{size(net[0] + net[1])}/s"
    net_spark = _spark(history, lambda x: None if x.net_rate is None else sum(x.net_rate))
    if not s.gpus:
        gpu = mem_cell = "-" if not s.gpu_error else "n/a"
    return (f"{gpu} {gpu_spark}".rstrip(), f"{mem_cell} {mem_spark}".rstrip(),
            f"{net_cell} {net_spark}".rstrip())


def rank_cells(latest: NodeSample, local_rank: int | None) -> tuple[str, str, str]:
    g = next((g for g in latest.gpus if g.index == local_rank), None)
    if g is None:
        return ("", "", "")
    frac = g.mem_fraction
    return ("-" if g.util is None else f"{g.util:.0f}%",
            "-" if frac is None else f"{frac:.0%}", "")


def build(samples: dict[str, list[NodeSample]], nodes: Sequence[NodeView],
          ranks: Sequence[RankView], now: float) -> TelemetryCells | None:
    """None while no node has reported: the table then has no telemetry columns."""
    if not any(samples.values()):
        return None
    cells = TelemetryCells()
    for name, history in samples.items():
        if history and now - history[-1].time <= STALE_S:
            cells.nodes[name] = node_cells(history)
        elif history:
            cells.nodes[name] = ("-", "-", "stale")
    for r in ranks:
        history = samples.get(r.node)
        if history and now - history[-1].time <= STALE_S:
            cells.ranks[r.rank] = rank_cells(history[-1], r.local_rank)
    running = {n.name for n in nodes if n.status is NodeStatus.RUNNING}
    seats = [alerts.RankSeat(r.rank, r.node, r.local_rank, r.node in running) for r in ranks]
    for a in alerts.assess(samples, seats, now):
        if a.rank is not None:
            cells.rank_alerts[a.rank] = a.text
        else:
            before = cells.node_alerts.get(a.node)
            cells.node_alerts[a.node] = a.text if before is None else f"{before}; {a.text}"
    return cells
