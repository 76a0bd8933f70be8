"""torch's c10d rendezvous, paced for the job it serves (inlined into ``torchrun_tee``).

Its pace is set for the largest jobs, and every launch pays it:

* a node that has joined and waits for the others reads the rendezvous state again only
  after **1 s** ("to avoid overloading the backend"): the last node to join completes the
  rendezvous, and each other node learns it up to a second later, in every multi-node launch
  and every restart;
* before its first join a node sleeps **0-0.3 s** at random, to spread the joins of many
  nodes over time;
* it names the method behind each event it records with ``inspect.stack()``, which reads the
  source lines of every frame on the stack: 20-50 ms a call, about ten calls a rendezvous.

The first two protect the store (one TCP server on node 0) from thousands of nodes at once.
Here they are scaled to the job's node count (``--nnodes``), so that the store's load stays
at or under what torch's pace gives 333 nodes: a wait for the others polls every 3 ms per
node (50 ms at least, torch's 1 s from 333 nodes on), and the joins are spread over 1 ms per
node (torch's 0.3 s from 300 nodes on). The names are read from the frames themselves: the
same names. Each is put in place only where torch's function has the shape it replaces;
torchrun is otherwise as it is.
"""

from __future__ import annotations

import inspect

#: torch's pauses that :func:`paced` scales: the wait's poll, and the spread of first joins.
TORCH_POLL_S = 1.0
TORCH_SPREAD_S: tuple[float, float] = (0.0, 0.3)
#: Seconds per node of the job, for the poll and the spread.
POLL_PER_NODE_S = 0.003
SPREAD_PER_NODE_S = 0.001
#: The shortest poll of a wait for the other nodes.
FASTEST_POLL_S = 0.05
#: torch's function that makes each pause (a module-private name: looked up by name).
_PAUSE = "_delay"


def job_nodes(argv: list[str]) -> int | None:
    """The most nodes the job may have, from torchrun's ``--nnodes N`` or ``MIN:MAX``."""
    for i, arg in enumerate(argv):
        value = arg.split("=", 1)[1] if arg.startswith("--nnodes=") else (
            argv[i + 1] if arg == "--nnodes" and i + 1 < len(argv) else None)
        if value is not None:
            try:
                return max(1, int(value.rsplit(":", 1)[-1]))
            except ValueError:
                return None
    return None


def paced(nodes: int, seconds: float | tuple[float, float]) -> float | tuple[float, float]:
    """One of torch's pauses, scaled to a job of ``nodes`` nodes; any other as it is."""
    if isinstance(seconds, tuple):
        if seconds == TORCH_SPREAD_S:
            return (0.0, min(TORCH_SPREAD_S[1], nodes * SPREAD_PER_NODE_S))
        return seconds
    if seconds == TORCH_POLL_S:
        return min(TORCH_POLL_S, max(FASTEST_POLL_S, nodes * POLL_PER_NODE_S))
    return seconds


def install_pace(argv: list[str]) -> bool:
    """The rendezvous's pauses scaled to the job's node count, read from torchrun's
    arguments (none there: torch's own)."""
    nodes = job_nodes(argv)
    try:
        from torch.distributed.elastic.rendezvous import dynamic_rendezvous as rendezvous
        delay = getattr(rendezvous, _PAUSE)
        if nodes is None or tuple(inspect.signature(delay).parameters) != ("seconds",):
            return False
    except Exception:  # no torch, or another layout: torchrun as it is
        return False

    def pause(seconds: float | tuple[float, float]) -> None:
        delay(paced(nodes, seconds))

    setattr(rendezvous, _PAUSE, pause)  # looked up by name at each pause
    return True


def install_names() -> bool:
    """The names of the rendezvous's records read from the frames, not ``inspect.stack()``."""
    try:
        from torch.distributed.elastic.rendezvous import dynamic_rendezvous as rendezvous
        if tuple(inspect.signature(rendezvous.get_method_name).parameters) != ("depth",):
            return False
    except Exception:  # no torch, or another layout: torchrun as it is
        return False

    def get_method_name(depth: int = 2) -> str:
        frame = inspect.currentframe()  # inspect.stack()[depth]: this frame's depth-th caller
        for _ in range(depth):
            frame = frame.f_back if frame is not None else None
        return frame.f_code.co_name if frame is not None else "no_method_name"  # as torch's

    rendezvous.get_method_name = get_method_name  # looked up by name at each record
    return True
