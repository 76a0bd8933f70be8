"""One node's telemetry in full: every GPU, the compute processes on them, CPU, memory and
each network interface, refreshed once a second from the dashboard's store."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from ddptui.chart.downsample import sparkline
from ddptui.telemetry.sample import NodeSample
from ddptui.telemetry.text import gib, pct, size
from ddptui.tui.screens.dialog import DialogScreen

SPARK = 20


def _num(v: float | None, fmt: str = ".0f", unit: str = "") -> str:
    return "-" if v is None else f"{format(v, fmt)}{unit}"


def detail(node: str, history: Sequence[NodeSample], now: float) -> Group:
    """The whole view as Rich renderables: pure, so it is tested without a screen."""
    if not history:
        return Group(Text(f"{node}: no telemetry yet (the sampler reports once a second)"))
    s = history[-1]
    age = now - s.time
    head = Text.assemble((node, "bold"), f"  {time.strftime('%H:%M:%S', time.localtime(s.time))}",
                         (f"  ({age:.0f} s old)", "yellow") if age > 10 else "")
    host = Table.grid(padding=(0, 2))
    host.add_row("CPU busy", pct(s.cpu),
                 sparkline([x.cpu for x in history if x.cpu is not None][-120:], SPARK))
    host.add_row("load (1 min)", _num(s.load1, ".2f"), "")
    host.add_row("memory", f"{gib(s.mem_used)} / {gib(s.mem_total)} GiB", "")
    gpus = Table(title="GPUs", title_justify="left", expand=False)
    for col in ("GPU", "name", "util", "", "memory (GiB)", "", "power (W)", "temp", "SM MHz"):
        gpus.add_column(col, no_wrap=True)
    for g in s.gpus:
        util = [u for x in history for h in x.gpus if h.index == g.index
                and (u := h.util) is not None][-120:]
        mem = [f for x in history for h in x.gpus if h.index == g.index
               and (f := h.mem_fraction) is not None][-120:]
        gpus.add_row(str(g.index), g.name, pct(g.util), sparkline(util, 12),
                     "-" if g.mem_used is None or g.mem_total is None
                     else f"{g.mem_used / 1024:.1f} / {g.mem_total / 1024:.1f}",
                     sparkline(mem, 12),
                     f"{_num(g.power)} / {_num(g.power_limit)}", _num(g.temp, unit="C"),
                     _num(g.sm_clock))
    parts: list[RenderableType] = [head, host]
    if s.gpus:
        parts.append(gpus)
    elif s.gpu_error:
        parts.append(Text(f"GPUs: {s.gpu_error}", "yellow"))
    else:
        parts.append(Text("no GPUs (no nvidia-smi on this node's PATH)", "dim"))
    if s.apps:
        apps = Table(title="compute processes", title_justify="left")
        for col in ("GPU", "pid", "process", "memory (MiB)", "run"):
            apps.add_column(col, no_wrap=True)
        for a in s.apps:
            whose = {True: "this run", False: "another job", None: "?"}[a.ours]
            apps.add_row("?" if a.gpu is None else str(a.gpu), str(a.pid), a.name,
                         _num(a.mem_used), Text(whose, "bold red" if a.ours is False else ""))
        parts.append(apps)
    net = Table(title="network (bytes/s)", title_justify="left")
    for col in ("interface", "in", "out", ""):
        net.add_column(col, no_wrap=True)
    for name, (rx, tx) in sorted(s.net.items()):
        series = [sum(x.net[name]) for x in history if name in x.net][-120:]
        net.add_row(name, size(rx), size(tx), sparkline(series, 12))
    parts.append(net)
    return Group(*parts)


class NodeDetailScreen(DialogScreen[None]):
    """Opened with ``g`` on a node's (or a rank's) row; ``esc`` closes it."""

    BINDINGS = [Binding("escape,q,g", "dismiss", "Close")]
    DEFAULT_CSS = """
    NodeDetailScreen .dialog { width: 110; height: 90%; }
    """

    def __init__(self, node: str, samples: Callable[[], dict[str, list[NodeSample]]],
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self.node = node
        self.samples = samples
        self.clock = clock

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog"):
            yield Static(id="node-detail")

    def on_mount(self) -> None:
        self.refresh_detail()
        self.set_interval(1.0, self.refresh_detail)

    def refresh_detail(self) -> None:
        history = self.samples().get(self.node, [])
        self.query_one("#node-detail", Static).update(detail(self.node, history, self.clock()))
