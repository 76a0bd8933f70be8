"""Feeding a store from recorded torchrun output, for the dashboard tests.

Times are synthetic (a fixed start and a fixed step per line) so what the dashboard shows of
a replay is the same on every machine.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ddptui.events import Event, NodeState, NodeStatus, RunStatus
from ddptui.nodelog import NodeLogParser
from ddptui.store.store import Store

T0 = 1_700_000_000.0


def node_events(node: str, lines: Iterable[str], *, t0: float = T0, dt: float = 0.05
                ) -> list[Event]:
    parser = NodeLogParser(node)
    out: list[Event] = []
    for i, line in enumerate(lines):
        out.extend(parser.feed(line, t0 + i * dt))
    return out


def replay(
    store: Store,
    logs: dict[str, Path],
    *,
    final: dict[str, tuple[NodeStatus, int | None]] | None = None,
    t0: float = T0,
    pid0: int = 4100,
) -> None:
    """Apply each node's recorded log as one running node; ``final`` sets how each ended."""
    for i, (node, path) in enumerate(logs.items()):
        store.add_node(node, i)
        store.apply([NodeState(node, NodeStatus.RUNNING, t0, pid=pid0 + i)])
        lines = path.read_text(encoding="utf-8").splitlines()
        store.apply(node_events(node, lines, t0=t0))
    for node, (status, code) in (final or {}).items():
        store.apply([NodeState(node, status, t0 + 60, exit_code=code)])


DATA = Path(__file__).resolve().parent / "data"


def shift_ranks(lines: Iterable[str], offset: int) -> list[str]:
    """Move a single-node recording's global ranks up, to play it as a later node."""
    out = []
    for line in lines:
        if offset and line.startswith("[ddptui "):
            head, _, rest = line.partition("] ")
            _, rank, local = head.split(" ")
            line = f"[ddptui {int(rank) + offset} {local}] {rest}"
        out.append(line)
    return out


def scenario(name: str, store: Store | None = None, data: Path = DATA) -> Store:
    """A store holding one of the recorded runs: train, failed, restart, nccl."""
    store = store if store is not None else Store()
    files = {
        "train": [("local-a", "train-node0.log", 0), ("local-b", "train-node1.log", 0)],
        "failed": [("local-a", "fail-node0.log", 0), ("local-b", "train-node1.log", 0)],
        "restart": [("local-a", "restart-node0.log", 0), ("local-b", "train-node1.log", 0)],
        "nccl": [("local-a", "train-node0.log", 0), ("local-b", "nccl-node1.log", 0)],
    }[name]
    store.set_run(run_id=f"{name}-run", status=RunStatus.RUNNING, started_at=T0, world_size=4)
    for i, (node, fname, offset) in enumerate(files):
        store.add_node(node, i)
        store.apply([NodeState(node, NodeStatus.RUNNING, T0, pid=4100 + i)])
        lines = shift_ranks((data / fname).read_text(encoding="utf-8").splitlines(), offset)
        store.apply(node_events(node, lines))
    if name == "failed":
        store.apply([NodeState("local-a", NodeStatus.FAILED, T0 + 5, exit_code=1),
                     NodeState("local-b", NodeStatus.STOPPED, T0 + 6, exit_code=-15)])
        store.set_run(status=RunStatus.FAILED, ended_at=T0 + 6, exit_code=1)
    elif name == "restart":
        store.apply([NodeState("local-a", NodeStatus.RESTARTING, T0 + 5,
                               "restart 1 of 3", attempt=1)])
    return store
