"""Samples as short text, for the plain faces and the dashboard's cells: pure."""

from __future__ import annotations

import time

from ddptui.telemetry.sample import GpuSample, NodeSample


def size(n: float | None, unit: str = "B") -> str:
    """1536 -> '1.5k', in powers of 1000 (network) with ``unit`` after it."""
    if n is None:
        return "-"
    for step, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= step:
            return f"{n / step:.1f}{suffix}{unit}"
    return f"{n:.0f}{unit}"


def gib(n: float | None) -> str:
    return "-" if n is None else f"{n / (1 << 30):.1f}"


def pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}%"


def gpu_text(g: GpuSample) -> str:
    mem = "-" if g.mem_used is None or g.mem_total is None else \
        f"{g.mem_used / 1024:.1f}/{g.mem_total / 1024:.1f}GiB"
    power = "-" if g.power is None else f"{g.power:.0f}/{g.power_limit or 0:.0f}W"
    temp = "-" if g.temp is None else f"{g.temp:.0f}C"
    clock = "-" if g.sm_clock is None else f"{g.sm_clock:.0f}MHz"
    return f"gpu{g.index} {pct(g.util)} {mem} {power} {temp} {clock}"


def sample_line(s: NodeSample, node_width: int = 0) -> str:
    """One line a sample, as ``ddptui logs --telemetry`` prints it."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s.time))
    net = s.net_rate
    parts = [f"{stamp} {s.node:<{node_width}}", f"cpu {pct(s.cpu)}",
             f"load {'-' if s.load1 is None else f'{s.load1:.2f}'}",
             f"mem {gib(s.mem_used)}/{gib(s.mem_total)}GiB",
             "net -" if net is None else f"net in {size(net[0])}/s out {size(net[1])}/s"]
    parts.extend(gpu_text(g) for g in s.gpus)
    if s.gpu_error:
        parts.append(f"gpu: {s.gpu_error}")
    for a in s.apps or []:
        if a.ours is False:
            where = "gpu?" if a.gpu is None else f"gpu{a.gpu}"
            parts.append(f"{where} pid {a.pid} {a.name} is not this run's")
    return " | ".join(parts)
