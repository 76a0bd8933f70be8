"""The nodes table's telemetry: GPU, GPU memory and network cells with sparklines, and the
telemetry alerts for the health column. Pure, built off the event loop with the table.

A node's GPU cell gives its worst GPU and the mean (``12/48%``: the least busy GPU, then the
mean over its GPUs); the memory cell the fullest GPU and the mean; each is followed by a
sparkline of the mean over the last minute. A rank's row gives its own GPU, the one its
local rank picks. Values older than ``STALE_S`` are not shown as current.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ddptui.chart.downsample import sparkline
from ddptui.events import NodeStatus
from ddptui.store.views import NodeView, RankView
from ddptui.telemetry import alerts
from ddptui.telemetry.sample import NodeSample
from ddptui.telemetry.text import size

COLUMNS = ("GPU", "GMem", "Net")
SPARK_WIDTH = 6
#: The sparklines' span, in samples (about seconds).
SPARK_SPAN = 60
STALE_S = alerts.STALE_AFTER_S
_BLANK = ("-", "-", "-")


@dataclass(frozen=True)
class SampleCells:
    nodes: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    ranks: dict[int, tuple[str, str, str]] = field(default_factory=dict)
    node_alerts: dict[str, str] = field(default_factory=dict)
    rank_alerts: dict[int, str] = field(default_factory=dict)

    def node(self, name: str) -> tuple[str, str, str]:
        return self.nodes.get(name, _BLANK)

    def rank(self, rank: int) -> tuple[str, str, str]:
        return self.ranks.get(rank, ("", "", ""))


def _spark(values: Sequence[float | None]) -> str:
    known = [v for v in values if v is not None]
    return sparkline(known, SPARK_WIDTH) if len(known) > 1 else ""


def _pair(worst: float | None, mean: float | None, gpus: int, fmt: str, unit: str) -> str:
    """``45%`` for one GPU, ``12/48%`` (the worst, then the mean) for several."""
    if worst is None or mean is None:
        return "-"
    if gpus == 1:
        return f"{format(worst, fmt)}{unit}"
    return f"{format(worst, fmt)}/{format(mean, fmt)}{unit}"


def node_cells(history: Sequence[NodeSample]) -> tuple[str, str, str]:
    recent = [s.summary() for s in history[-SPARK_SPAN:]]
    last, sample = recent[-1], history[-1]
    gpu = _pair(last.util_min, last.util_mean, last.gpus, ".0f", "%")
    mem = _pair(None if last.mem_max is None else last.mem_max * 100,
                None if last.mem_mean is None else last.mem_mean * 100, last.gpus, ".0f", "%")
    if not sample.gpus:
        gpu = mem = "n/a" if sample.gpu_error else "-"
    net = "-" if last.net is None else f"{size(last.net)}/s"
    return (f"{gpu} {_spark([x.util_mean for x in recent])}".rstrip(),
            f"{mem} {_spark([x.mem_mean for x in recent])}".rstrip(),
            f"{net} {_spark([x.net for x in recent])}".rstrip())


def rank_cells(latest: NodeSample, gpu: int | None) -> tuple[str, str, str]:
    g = next((g for g in latest.gpus if g.index == gpu), None)
    if g is None:
        return ("", "", "")
    frac = g.mem_fraction
    return ("-" if g.util is None else f"{g.util:.0f}%",
            "-" if frac is None else f"{frac:.0%}", "")


def build(samples: dict[str, list[NodeSample]], nodes: Sequence[NodeView],
          ranks: Sequence[RankView], now: float,
          visible: Mapping[str, str | None] | None = None) -> SampleCells | None:
    """None while no node has reported: the table then has no telemetry columns.
    ``visible``: each node's ``CUDA_VISIBLE_DEVICES`` from its ``env:``, where one is set."""
    if not any(samples.values()):
        return None
    cells = SampleCells()
    for name, history in samples.items():
        if history and now - history[-1].time <= STALE_S:
            cells.nodes[name] = node_cells(history)
        elif history:
            cells.nodes[name] = ("-", "-", "stale")
    visible = visible or {}
    gpu = {r.rank: alerts.rank_gpu(r.local_rank, visible.get(r.node)) for r in ranks}
    for r in ranks:
        seen = samples.get(r.node)
        if seen and now - seen[-1].time <= STALE_S:
            cells.ranks[r.rank] = rank_cells(seen[-1], gpu[r.rank])
    running = {n.name for n in nodes if n.status is NodeStatus.RUNNING}
    seats = [alerts.RankSeat(r.rank, r.node, gpu[r.rank], r.node in running) for r in ranks]
    for a in alerts.assess(samples, seats, now):
        if a.rank is not None:
            cells.rank_alerts[a.rank] = a.text
        else:
            before = cells.node_alerts.get(a.node)
            cells.node_alerts[a.node] = a.text if before is None else f"{before}; {a.text}"
    return cells
