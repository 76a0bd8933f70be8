"""What telemetry says is wrong, in ddptui's words: pure, clock passed in.

Three rules, each naming the node, the GPU and, where it can, the rank:

* a running rank whose GPU has read 0 % for ``IDLE_AFTER_S``: it waits for something (a
  peer, data, a lock) while it should compute. A rank's GPU is the one its local rank picks
  (torchrun's ``LOCAL_RANK``), through the node's ``CUDA_VISIBLE_DEVICES`` when its ``env:``
  sets one (:func:`rank_gpu`). One zero is no alert: some virtual machines read 0 under
  load now and then, and only a whole window of zeros counts;
* a GPU within ``MEM_FULL_FRACTION`` of its memory: the next allocation may fail;
* a GPU used by a compute process that does not carry this run's marker: another job
  shares the GPU and slows this one (or holds memory it needs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ddptui.telemetry.sample import NodeSample

IDLE_AFTER_S = 30.0
#: "within 2 % of full".
MEM_FULL_FRACTION = 0.98
#: A node whose newest sample is older than this says nothing: stale values are no alarm.
STALE_AFTER_S = 10.0
#: The idle window must be this well covered by samples (a sampler that just started, or a
#: gap, is no evidence of a GPU sitting idle).
_COVER = 0.8


@dataclass(frozen=True, slots=True)
class Alert:
    node: str
    kind: str  # "gpu-idle", "gpu-mem-full", "gpu-foreign"
    text: str  # a short phrase for the health column
    gpu: int | None = None
    rank: int | None = None


@dataclass(frozen=True, slots=True)
class RankSeat:
    """Where a rank runs, as far as the alerts need it: ``gpu`` as nvidia-smi numbers it."""

    rank: int
    node: str
    gpu: int | None
    running: bool


def rank_gpu(local_rank: int | None, visible: str | None) -> int | None:
    """The GPU (nvidia-smi's index) of the rank with ``local_rank``, on a node whose env sets
    ``CUDA_VISIBLE_DEVICES`` to ``visible`` (None: not set, every GPU in order).

    None when it cannot be told: UUIDs or MIG instances in the list, a rank beyond it. The
    list is taken in nvidia-smi's (PCI bus) order, which CUDA's own can differ from without
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; an alert about the wrong GPU would be worse than none,
    hence no guess past that.
    """
    if local_rank is None or visible is None:
        return local_rank
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    if local_rank >= len(entries) or not entries[local_rank].isdecimal():
        return None
    return int(entries[local_rank])


def idle_gpus(history: Sequence[NodeSample], now: float,
              idle_after: float = IDLE_AFTER_S) -> set[int]:
    """GPUs that read 0 % in every sample of the last ``idle_after`` seconds."""
    window: list[NodeSample] = []
    for s in reversed(history):  # from the newest: the window is a small tail of the history
        if s.time < now - idle_after:
            break
        if s.gpus:
            window.append(s)
    window.reverse()
    if not window or window[-1].time - window[0].time < idle_after * _COVER:
        return set()
    idle: set[int] | None = None
    for s in window:
        zero = {g.index for g in s.gpus if g.util == 0}
        idle = zero if idle is None else idle & zero
        if not idle:
            return set()
    return idle or set()


def node_alerts(latest: NodeSample) -> list[Alert]:
    """Alerts from one sample alone: full memory, another job's process."""
    out: list[Alert] = []
    for g in latest.gpus:
        frac = g.mem_fraction
        if frac is not None and frac >= MEM_FULL_FRACTION:
            out.append(Alert(latest.node, "gpu-mem-full", f"gpu{g.index} mem {frac:.0%}",
                             g.index))
    for a in latest.apps or []:
        if a.ours is False:
            where = "a gpu" if a.gpu is None else f"gpu{a.gpu}"
            out.append(Alert(latest.node, "gpu-foreign",
                             f"{where}: pid {a.pid} not ours", a.gpu))
    return out


def assess(histories: Mapping[str, Sequence[NodeSample]], seats: Iterable[RankSeat],
           now: float, *, idle_after: float = IDLE_AFTER_S) -> list[Alert]:
    """Every alert of the run now: per node from its newest sample, per running rank from its
    GPU's history."""
    out: list[Alert] = []
    idle: dict[str, set[int]] = {}
    for node, history in histories.items():
        if not history or now - history[-1].time > STALE_AFTER_S:
            continue
        out.extend(node_alerts(history[-1]))
        idle[node] = idle_gpus(history, now, idle_after)
    for seat in seats:
        if not seat.running or seat.gpu is None:
            continue
        if seat.gpu in idle.get(seat.node, ()):
            out.append(Alert(seat.node, "gpu-idle", f"gpu{seat.gpu} 0% {idle_after:.0f}s",
                             seat.gpu, seat.rank))
    return out
