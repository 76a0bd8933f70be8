"""What a launch phase is given, and how it says the launch cannot go on.

A phase (``launch/phases.py``, ``launch/project.py``) sees the run through this narrow
context, never through the session that owns the run: the config and plan, the nodes'
connections, a way to say a node's state and to publish lines, the run's record, and the one
stopper. It returns values, or raises :class:`Abort`, after which the session undoes what
was done on every node. So a new way of reaching nodes (a scheduler) changes what the
context holds, not the phases.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ddptui.config import HostsConfig, NodeConfig
from ddptui.diagnose.preflight.route import RouteChoice
from ddptui.events import Event
from ddptui.launch.plan import NodeLaunch, Plan
from ddptui.remote.reach import connect, failures, map_at_once
from ddptui.remote.stop import Stopper
from ddptui.run_state import NodeEvent
from ddptui.store.record import Recorder
from ddptui.transport.base import Transport


class Abort(Exception):
    """The launch cannot go on. ``cleanup``: remove the node dirs written so far; ``kill``:
    stop what was started (a node already started is always stopped and cleaned up)."""

    def __init__(self, problems: list[str], *, cleanup: bool, kill: bool = False) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems
        self.cleanup = cleanup
        self.kill = kill


def on_every_node(plan: Plan, fn: Callable[[NodeLaunch], object], *, cleanup: bool,
                  kill: bool = False) -> None:
    """``fn`` on every node of ``plan`` at once; any node's failure ends the launch with
    every node's error (an :class:`Abort` with ``cleanup`` and ``kill``)."""
    errs = [str(f.error) for f in failures(map_at_once(plan.nodes, fn))]
    if errs:
        raise Abort(errs, cleanup=cleanup, kill=kill)


class NodePool:
    """The run's connections, one per node, reused by every phase, follower and stop."""

    def __init__(self, config: HostsConfig) -> None:
        self.config = config
        self._by_node: dict[str, Transport] = {}
        self._lock = threading.Lock()

    def open(self, node: NodeConfig) -> Transport:
        """Connect to ``node`` (again), replacing and closing its old connection."""
        transport = connect(node, self.config)
        self.put(node.name, transport)
        return transport

    def reopen(self, node: NodeConfig, first: Callable[[], None]) -> Transport:
        """A follower lost ``node``: ``first`` is told before it is opened again (a Slurm
        job's watch looks at once, since the job ending is one reason)."""
        first()
        return self.open(node)

    def put(self, name: str, transport: Transport) -> None:
        with self._lock:
            old, self._by_node[name] = self._by_node.get(name), transport
        if old is not None and old is not transport:
            with contextlib.suppress(Exception):
                old.close()

    def get(self, name: str) -> Transport:
        """The node's connection; a node with none is connected now."""
        with self._lock:
            transport = self._by_node.get(name)
        return transport if transport is not None else self.open(self.config.node(name))

    def current(self, name: str) -> Transport | None:
        with self._lock:
            return self._by_node.get(name)

    def all(self) -> dict[str, Transport]:
        with self._lock:
            return dict(self._by_node)

    def drop(self, name: str) -> None:
        """Forget a node's connection and close it without waiting: a read blocked on a
        dead link holds the connection's lock until its own timeout."""
        with self._lock:
            transport = self._by_node.pop(name, None)
        if transport is not None:
            threading.Thread(target=transport.close, name="ddptui-close", daemon=True).start()

    def close_all(self) -> None:
        with self._lock:
            transports, self._by_node = list(self._by_node.values()), {}
        for transport in transports:
            with contextlib.suppress(Exception):
                transport.close()


#: Says a node's state changed (``event``), with a detail for the person watching.
NodeUpdate = Callable[[str, NodeEvent, str], None]
#: Events a phase makes about a node (setup output), seen by every face like a node's.
Publish = Callable[[str, list[Event]], None]


@dataclass
class LaunchContext:
    config: HostsConfig
    run_id: str
    state_root: Path
    pool: NodePool
    node_update: NodeUpdate
    publish: Publish
    record: Recorder
    stopper: Stopper
    hold_s: float | None = None
    #: Nodes whose workdir this launch made (an undone launch removes it, if empty).
    new_workdirs: set[str] = field(default_factory=set)
    #: Nodes whose node dir a run of the same name had made: an undone launch leaves it.
    not_ours: set[str] = field(default_factory=set)
    #: The address and interfaces preflight chose for nodes whose own name fails.
    routes: dict[str, RouteChoice] = field(default_factory=dict)
    #: Nodes whose torchrun was started before the plan (``launch.warm``): as ddptui started,
    #: or (SSH) once its node was reached.
    warm: set[str] = field(default_factory=set)

    def started(self) -> bool:
        """Some node's launch.sh runs (or ran) for this launch: it has a pgid."""
        return any(n.pgid is not None for n in self.record.nodes().values())
