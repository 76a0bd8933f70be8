"""The sampler's output (see :mod:`ddptui.telemetry.sampler`) -> one :class:`NodeSample`
per /proc block: pure, fed line by line, so every format is tested from recorded text.

Rates come from two readings: CPU busy from the /proc/stat jiffies between two blocks, and
network bytes a second from /proc/net/dev's counters over the uptime between them. GPU rows
arrive on their own (``nvidia-smi -l 1`` keeps its own second); each sample carries the
newest row of every GPU. ``nvidia-smi``'s CSV is read by its field names, with or without
units and header, and a value it cannot give (``[N/A]``, ``[Not Supported]``) is None, never
an error. A utilization of 0 is a value like any other: some virtual machines read 0 under
load.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ddptui.telemetry.sample import GpuApp, GpuSample, NodeSample

#: A field's name as nvidia-smi's header or our query spells it -> GpuSample's attribute.
_GPU_ATTR = {
    "index": "index", "name": "name", "uuid": "uuid",
    "utilization.gpu": "util", "memory.used": "mem_used", "memory.total": "mem_total",
    "power.draw": "power", "power.limit": "power_limit", "temperature.gpu": "temp",
    "clocks.sm": "sm_clock", "clocks.current.sm": "sm_clock",
}
_TEXT_ATTRS = frozenset({"name", "uuid"})
#: After this many /proc blocks without a GPU row, the GPU values are no longer current.
GPU_STALE_BLOCKS = 5
#: /proc/stat's cpu fields that count as not busy: idle, iowait.
_IDLE_FIELDS = (3, 4)
#: user nice system idle iowait irq softirq steal (guest time is already in user).
_CPU_FIELDS = 8


def field_names(header: str) -> list[str]:
    """Names from nvidia-smi's CSV header (``utilization.gpu [%]``) or a ``--query`` list."""
    return [f.split(" [")[0].strip() for f in header.split(",")]


def number(text: str) -> float | None:
    """A value as nvidia-smi prints it, with or without its unit; None for what it could not
    read (``[N/A]``, ``[Not Supported]``, ``N/A``, empty)."""
    text = text.strip()
    if not text or text.startswith("[") or text.upper() == "N/A":
        return None
    try:
        return float(text.split()[0])
    except ValueError:
        return None


def gpu_row(fields: Sequence[str], row: str) -> GpuSample | None:
    """One CSV row as a GPU, or None when it is not one (an error message in its place)."""
    cells = [c.strip() for c in row.split(",")]
    if len(cells) != len(fields):
        # a name with a comma in it: give the extra cells to the name
        if "name" not in fields or len(cells) < len(fields):
            return None
        i = list(fields).index("name")
        extra = len(cells) - len(fields)
        cells[i:i + extra + 1] = [", ".join(cells[i:i + extra + 1])]
    values: dict[str, object] = {}
    for name, cell in zip(fields, cells, strict=True):
        attr = _GPU_ATTR.get(name)
        if attr is None:
            continue
        values[attr] = cell if attr in _TEXT_ATTRS else number(cell)
    index = values.pop("index", None)
    if not isinstance(index, float):
        return None
    return GpuSample(int(index), **values)  # type: ignore[arg-type]


def gpu_csv(text: str, fields: Sequence[str] | None = None) -> list[list[GpuSample]]:
    """A recorded ``--query-gpu`` output (with its header unless ``fields`` is given), as
    one list of GPUs per interval: a row whose index does not grow starts the next one."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if fields is None:
        fields, lines = field_names(lines[0]), lines[1:]
    out: list[list[GpuSample]] = []
    for ln in lines:
        g = gpu_row(fields, ln)
        if g is None:
            continue
        if not out or (out[-1] and g.index <= out[-1][-1].index):
            out.append([])
        out[-1].append(g)
    return out


def app_row(row: str) -> GpuApp | None:
    """One ``--query-compute-apps=gpu_uuid,pid,process_name,used_memory`` row."""
    cells = [c.strip() for c in row.split(",")]
    if len(cells) < 4 or not cells[1].isdigit():
        return None
    return GpuApp(cells[0], int(cells[1]), ", ".join(cells[2:-1]), number(cells[-1]))


@dataclass
class _Block:
    uptime: float
    cpu: list[int] | None = None
    load1: float | None = None
    mem: dict[str, int] = field(default_factory=dict)
    net: dict[str, tuple[int, int]] = field(default_factory=dict)


class SamplerParser:
    """One node's sampler output, line by line; keeps what rates need between blocks."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.gpu_fields: list[str] | None = None
        self.has_gpus: bool | None = None  # None until the sampler says
        self.ended = ""  # the sampler's own words when it exits by itself
        self._epoch: tuple[float, float] | None = None  # (node clock, uptime) once
        self._gpus: dict[int, GpuSample] = {}
        self._gpu_age = 0
        self._gpu_error = ""
        self._apps: list[GpuApp] | None = None
        self._apps_next: list[GpuApp] | None = None
        self._block: _Block | None = None
        self._prev: _Block | None = None

    def feed(self, line: str, now: float) -> list[NodeSample]:
        """``now`` is the session's clock, used only until the sampler said its own. A
        line that is not what its tag promises (a torn read) is left out."""
        try:
            return self._feed(line, now)
        except (ValueError, IndexError):
            return []

    def _feed(self, line: str, now: float) -> list[NodeSample]:
        tag, _, rest = line.partition(" ")
        b = self._block
        if tag == "G":
            self._gpu(rest)
        elif tag == "N" and b is not None:
            name, _, counters = rest.partition(":")
            cols = counters.split()
            if len(cols) >= 9:
                b.net[name.strip()] = (int(cols[0]), int(cols[8]))
        elif tag == "T":
            self._block = _Block(float(rest))
        elif tag == "C" and b is not None:
            b.cpu = [int(x) for x in rest.split()[1:1 + _CPU_FIELDS]]
        elif tag == "L" and b is not None:
            b.load1 = float(rest.split()[0])
        elif tag == "M" and b is not None:
            key, _, value = rest.partition(" ")
            b.mem[key.rstrip(":")] = int(value) * 1024
        elif tag == "E" and b is not None:
            self._block = None
            return [self._sample(b, now)]
        elif tag.startswith("P"):
            self._app(tag, rest)
        elif tag.startswith("@"):
            self._control(tag, rest)
        return []

    def _control(self, tag: str, rest: str) -> None:
        if tag == "@epoch":
            clock, up = rest.split()
            self._epoch = (float(clock), float(up))
        elif tag == "@gpu":
            self.gpu_fields, self.has_gpus = field_names(rest), True
        elif tag == "@gpu-none":
            self.has_gpus = False
        elif tag == "@gpu-ended":
            self._gpu_error = self._gpu_error or "nvidia-smi ended; it is started again"
        elif tag == "@bye":
            self.ended = rest

    def _gpu(self, row: str) -> None:
        g = gpu_row(self.gpu_fields, row) if self.gpu_fields else None
        if g is None:
            if row.strip():
                self._gpu_error = row.strip()
            return
        self._gpus[g.index] = g
        self._gpu_age = 0
        self._gpu_error = ""

    def _app(self, tag: str, rest: str) -> None:
        if tag == "P@":
            self._apps_next = []
        elif tag == "P.":
            if self._apps_next is not None:
                self._apps = self._apps_next
            self._apps_next = None
        elif self._apps_next is not None and (app := app_row(rest)) is not None:
            app.ours = {"P+": True, "P-": False}.get(tag)
            self._apps_next.append(app)

    def _time(self, uptime: float, now: float) -> float:
        if self._epoch is None:
            return now
        return self._epoch[0] + (uptime - self._epoch[1])

    def _sample(self, b: _Block, now: float) -> NodeSample:
        s = NodeSample(self.node, self._time(b.uptime, now), load1=b.load1)
        total, avail = b.mem.get("MemTotal"), b.mem.get("MemAvailable")
        if total is not None:
            s.mem_total = total
            if avail is not None:
                s.mem_used = total - avail
        p = self._prev
        if p is not None:
            s.cpu = cpu_busy(p.cpu, b.cpu)
            dt = b.uptime - p.uptime
            if dt > 0:
                s.net = {k: (max(0, v[0] - p.net[k][0]) / dt, max(0, v[1] - p.net[k][1]) / dt)
                         for k, v in b.net.items() if k in p.net}
        self._prev = b
        self._gpu_age += 1
        if self._gpu_age <= GPU_STALE_BLOCKS:
            s.gpus = [self._gpus[i] for i in sorted(self._gpus)]
        elif self.has_gpus and not self._gpu_error:
            self._gpu_error = f"no answer from nvidia-smi for {self._gpu_age} s"
        s.gpu_error = self._gpu_error
        by_uuid = {g.uuid: g.index for g in self._gpus.values() if g.uuid}
        if self._apps is not None:
            for a in self._apps:
                a.gpu = by_uuid.get(a.gpu_uuid)
            s.apps = list(self._apps)
        return s


def cpu_busy(before: list[int] | None, after: list[int] | None) -> float | None:
    """Percent of CPU time not idle between two /proc/stat cpu lines."""
    if not before or not after or len(before) != len(after):
        return None
    total = sum(after) - sum(before)
    if total <= 0:
        return None
    idle = sum(after[i] - before[i] for i in _IDLE_FIELDS if i < len(after))
    return max(0.0, min(100.0, 100.0 * (total - idle) / total))
