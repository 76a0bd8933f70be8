"""What each row of the nodes table says: pure, built from store views and rank health.

A node row is followed by one row per global rank on it, which carries that rank's
progress, its loss sparkline and its straggler/stalled mark.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ddptui.chart.downsample import sparkline
from ddptui.events import NodeStatus
from ddptui.store.health import RankHealth
from ddptui.store.views import NodeView, RankView
from ddptui.tui import sample_cells
from ddptui.tui.sample_cells import SampleCells

COLUMNS = ("Node", "#", "Ranks", "State", "PID", "Rst", "Exit", "Last", "Rate", "Loss")
SPARK_WIDTH = 8


@dataclass(frozen=True, slots=True)
class Row:
    key: str
    cells: tuple[str, ...]
    tone: str  # "", "error", "warning", "dim", "success"


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    return f"{s // 3600}h"


def rate(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 1e6:
        return f"{value / 1e6:.1f}M"
    if value >= 1e3:
        return f"{value / 1e3:.1f}k"
    return f"{value:.0f}"


def rank_span(ranks: Sequence[int]) -> str:
    if not ranks:
        return "-"
    rs = sorted(ranks)
    if rs == list(range(rs[0], rs[-1] + 1)) and len(rs) > 2:
        return f"{rs[0]}-{rs[-1]}"
    return ",".join(map(str, rs))


def state_text(node: NodeView) -> str:
    if node.status is NodeStatus.RESTARTING:
        return f"restart #{node.attempt}"
    return str(node.status)


_TONE = {
    NodeStatus.FAILED: "error",
    NodeStatus.LOST: "error",
    NodeStatus.RESTARTING: "warning",
    NodeStatus.STOPPING: "warning",
    NodeStatus.EXITED: "success",
    NodeStatus.STOPPED: "dim",
}


def columns(telemetry: SampleCells | None) -> tuple[str, ...]:
    """The table's columns: the telemetry ones once any node has reported."""
    return COLUMNS + sample_cells.COLUMNS if telemetry is not None else COLUMNS


def build_rows(
    nodes: Sequence[NodeView],
    ranks: Sequence[RankView],
    health: dict[int, RankHealth],
    losses: Callable[[int], Sequence[float]],
    now: float,
    telemetry: SampleCells | None = None,
) -> list[Row]:
    """With ``telemetry``, rows carry :func:`columns`' telemetry cells and its alerts."""
    by_node: dict[str, list[RankView]] = {}
    for r in ranks:
        by_node.setdefault(r.node, []).append(r)
    rows: list[Row] = []
    for n in nodes:
        mine = by_node.get(n.name, [])
        total = sum(r.samples_per_s or 0.0 for r in mine)
        # metric lines are not log lines: the node's last sign of life is either
        heard = [t for t in (n.last_line_time, *(r.last_step_time for r in mine))
                 if t is not None]
        last = now - max(heard) if heard else None
        alert = telemetry.node_alerts.get(n.name, "") if telemetry else ""
        rows.append(Row(
            f"n:{n.name}",
            (n.name[:12], str(n.node_rank), rank_span(sorted(n.ranks | {r.rank for r in mine})),
             state_text(n) + (f" · {alert}" if alert else ""), str(n.pid) if n.pid else "-",
             str(n.attempt), "-" if n.exit_code is None else str(n.exit_code), age(last),
             rate(total) if total else "-", "", *(telemetry.node(n.name) if telemetry else ())),
            _TONE.get(n.status, "warning" if alert else ""),
        ))
        for r in sorted(mine, key=lambda r: r.rank):
            h = health.get(r.rank, RankHealth())
            loss = losses(r.rank)
            spark = sparkline(loss[-200:], SPARK_WIDTH)
            value = "" if r.loss is None else f" {r.loss:.3g}"
            mark = h.mark or (telemetry.rank_alerts.get(r.rank, "") if telemetry else "")
            rows.append(Row(
                f"r:{r.rank}",
                (f" rank {r.rank}", "", "-" if r.last_step is None else f"s{r.last_step}",
                 mark, "", "", "", age(h.idle_s), rate(r.samples_per_s),
                 spark + value, *(telemetry.rank(r.rank) if telemetry else ())),
                "warning" if mark else "",
            ))
    return rows
