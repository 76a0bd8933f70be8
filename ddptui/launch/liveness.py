"""Lost nodes: a node silent for ``health.lost_after`` seconds is lost, and the run ends.

**Silence, not errors.** A node is lost when ddptui has heard nothing from it (no log read,
no liveness answer) for ``lost_after`` seconds, whatever the reason: a dead machine, a
killed sshd, a cut cable. The judge is a thread of its own (:class:`Watch`), not the node's
follower: on a partitioned link a read does not fail, it blocks (SFTP waits a minute), and a
blocked thread cannot notice its own silence. Shorter silences cost nothing: the follower
resumes at its byte offset, so no line is lost or read twice. When no node answers at all,
the trouble is likelier on this machine's side (its network, a suspend), and no node is
declared lost for it; a run of one node is the exception, as nothing tells the two apart.

**The run ends.** The world size is fixed (``--nnodes N``), so the other nodes' ranks cannot
go on without the lost one: they would wait in a collective until its timeout (half an hour
with gloo's default). So once a node is lost, the watch stops every node still running
(SIGTERM, ``job.stop_grace``, SIGKILL) and the run ends as failed, exit code
:data:`LOST_EXIT`, with the lost node as the diagnosis's cause. If the others have already
exited, the run simply ends.

**What the lost node left running.** Its processes may well be alive behind the partition,
holding GPUs. After the run's end a :class:`Reaper` keeps trying to reach every lost node for
:data:`REAP_FACTOR` × ``lost_after`` seconds and stops what it finds there; ``run.json``
lists the nodes it has not reached yet under ``unstopped``. The headless face waits for the
reaper (Ctrl-C leaves it); the dashboard's engine keeps it running while the dashboard is
open. A node that stays away longer is stopped by ``ddptui stop RUN_ID`` once it answers.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ddptui.events import Level, NodeStatus, RunStatus
from ddptui.launch import nodeops
from ddptui.launch.reach import connect, map_at_once
from ddptui.transport.base import Transport, TransportError
from ddptui.transport.factory import make_transport

if TYPE_CHECKING:
    from ddptui.launch.controller import Controller

#: The exit code of a run that ended because a node was lost (as ssh's for a lost link).
LOST_EXIT = 255
#: After the run's end, lost nodes are sought for this many times ``lost_after``.
REAP_FACTOR = 3
TICK_S = 0.25


def close_later(transport: Transport | None) -> None:
    """Close a lost node's connection without waiting: a read blocked on the dead link holds
    the connection's lock until its own timeout."""
    if transport is not None:
        threading.Thread(target=transport.close, name="ddptui-close", daemon=True).start()


class Watch(threading.Thread):
    """Declares silent nodes lost and ends the run around them (see the module's docstring)."""

    def __init__(self, ctl: Controller, lost_after: float, tick: float = TICK_S,
                 end_after_failure: float | None = None) -> None:
        super().__init__(name="ddptui-liveness", daemon=True)
        self.ctl = ctl
        self.lost_after = lost_after
        self.tick = tick
        self.lost: list[str] = []  # nodes declared lost, in the order they were
        self.end_after_failure = (ctl.config.health.end_after_failure
                                  if end_after_failure is None else end_after_failure)
        #: The node whose failure made the watch stop the others (then the run failed).
        self.failed: str | None = None
        self._failed_at: tuple[str, float] | None = None

    def run(self) -> None:
        followers = self.ctl._followers
        while not self.ctl._done.wait(self.tick):
            if followers and all(f.halt.is_set() for f in followers.values()):
                return  # detached, or every node over
            now = time.monotonic()
            live = {n: f for n, f in followers.items() if not (f.ended or f.halt.is_set())}
            silent = {n: now - f.last_heard for n, f in live.items()
                      if now - f.last_heard >= self.lost_after}
            if len(live) > 1 and len(silent) == len(live):
                continue  # no node answers: this machine's own link is the likelier trouble
            for name, quiet in silent.items():
                f = live[name]
                why = f"; last error: {f.trouble}" if f.trouble else ""
                if f.give_up(f"lost: no answer for {quiet:.0f} s (health.lost_after is "
                             f"{self.lost_after:g} s){why}"):
                    self.lost.append(name)
                    close_later(self.ctl.transports.pop(name, None))
                    self._end_run(f"node {name} was lost")
            self._after_failure(now)

    def _after_failure(self, now: float) -> None:
        """A node whose torchrun failed (its restarts spent) leaves the others' ranks waiting
        for its ranks, in a rendezvous or a store, for up to half an hour: they get
        ``health.end_after_failure`` seconds to end by themselves, then they are stopped."""
        if self.failed is not None or self.ctl._stopping.is_set():
            return
        if self._failed_at is None:
            failed = [n for n, f in list(self.ctl._finished.items())
                      if f.status is NodeStatus.FAILED]
            if failed:
                self._failed_at = (failed[0], now)
            return
        name, since = self._failed_at
        if now - since >= self.end_after_failure and self._end_run(
                f"node {name} failed", why="its ranks are gone, so the ranks here would wait "
                                           "for them until a timeout"):
            self.failed = name

    def _end_run(self, what: str, why: str = "the run cannot go on without it") -> bool:
        """Stop the nodes still running, whose ranks cannot go on after ``what``; whether
        any was left to stop."""
        ctl = self.ctl
        others = [n for n, f in ctl._followers.items()
                  if not (f.ended or f.halt.is_set()) and n not in ctl._finished]
        if not others or ctl._stopping.is_set():
            return False
        grace = ctl.config.job.stop_grace
        for n in others:
            ctl.node_state(n, NodeStatus.STOPPING, f"{what} and {why}: SIGTERM, then SIGKILL "
                                                   f"after {grace:g} s")

        def stop(name: str) -> None:
            try:
                ctl._stop_node(name, grace)
            except Exception as e:  # unreachable too: the watch will declare it lost in turn
                ctl._publish_note(name, f"could not stop node {name}: {e}", Level.ERROR)

        threading.Thread(target=map_at_once, args=(others, stop), name="ddptui-end-run",
                         daemon=True).start()
        return True


def lost_nodes(ctl: Controller) -> list[str]:
    """Nodes whose end is ``lost``: declared by the watch, or unreachable for a stop."""
    return [n for n, f in ctl._finished.items() if f.status is NodeStatus.LOST]


def stop_command(ctl: Controller, name: str, grace: float | None) -> str:
    """The stop program for one node of the run; ``grace`` None: on standby."""
    return nodeops.stop_cmd(ctl.config.node(name).python, ctl.run_id, ctl._rank_of(name),
                            grace, ctl._pgids.get(name), ctl._node_dir(name))


def stop_remote(ctl: Controller, name: str, transport: Transport, grace: float
                ) -> nodeops.StopResult:
    """Stop the run's processes on one node through ``transport`` (SIGTERM, ``grace``,
    SIGKILL): what was found, killed and is still alive there."""
    res = transport.run(stop_command(ctl, name, grace), timeout=grace + 60)
    parsed = nodeops.parse_stop(res.stdout)
    if parsed is None:
        raise TransportError(name, f"node {name}: the stop command failed (exit code "
                                   f"{res.exit_code}): {res.stderr.strip()}")
    return parsed


class Reaper(threading.Thread):
    """After the run's end: reach each lost node within ``seconds`` and stop what is left."""

    def __init__(self, ctl: Controller, names: list[str], seconds: float,
                 retry: float = 1.0) -> None:
        super().__init__(name="ddptui-reaper", daemon=True)
        self.ctl = ctl
        self.pending = list(names)
        self.seconds = seconds
        self.retry = retry
        self.cancel = threading.Event()
        self.report: dict[str, str] = {}  # node -> what was done there, in ddptui's words

    def run(self) -> None:
        ctl = self.ctl
        end = time.monotonic() + self.seconds
        grace = ctl.config.job.stop_grace
        while self.pending and not self.cancel.is_set():
            for name in list(self.pending):
                transport = None
                try:
                    transport = connect(ctl.config.node(name), ctl.config)
                    left = stop_remote(ctl, name, transport, grace).leftover
                except Exception:
                    continue
                finally:
                    if transport is not None:
                        with contextlib.suppress(Exception):
                            transport.close()
                self.pending.remove(name)
                self.report[name] = ("reached again; nothing of the run is left there"
                                     if not left else
                                     f"reached again, but processes {left} are still alive")
                self._record()
            if time.monotonic() >= end or self.cancel.wait(self.retry):
                break
        for name in self.pending:
            self.report[name] = (f"not reached within {self.seconds:g} s: what the run left "
                                 f"there may still run; `ddptui stop {ctl.run_id}` stops it "
                                 "once the node answers")

    def _record(self) -> None:
        for name, what in self.report.items():
            self.ctl._meta["nodes"][name]["cleanup"] = what
        self.ctl.write_meta(unstopped=list(self.pending))


def follow_unreached(ctl: Controller, results: list[Any]) -> None:
    """Attach follows a node it could not reach all the same, as silent from the start: the
    watch declares it lost after ``lost_after``, so attaching settles a run whose node is gone
    (``results``: what connecting to each node gave, in hosts-file order)."""
    for node, res in zip(ctl.config.nodes, results, strict=True):
        if isinstance(res, Exception):
            ctl.transports[node.name] = make_transport(node, ctl.config.ssh)  # not connected
            ctl._publish_note(node.name, f"could not reach node {node.name} ({res}); it is "
                              f"lost unless it answers within {ctl.config.health.lost_after:g} s",
                              Level.WARNING)


def ended_before(ctl: Controller, unreached: Mapping[str, str]) -> bool:
    """A stop of a run that had already ended (``ddptui stop`` after a lost node came back)
    cleans up and records it, but does not rewrite how the run ended."""
    if RunStatus.read(ctl._meta.get("status")).live:
        return False
    ctl.write_meta(unstopped=[n for n in ctl._meta.get("unstopped", []) if n in unreached])
    return True


def reap(ctl: Controller, lost_after: float) -> Reaper | None:
    """Start seeking the run's lost nodes, if any (called once the run has ended)."""
    names = [n for n in lost_nodes(ctl) if n in ctl._meta.get("nodes", {})]
    if not names:
        return None
    ctl.write_meta(unstopped=names)
    for n in names:  # the connection of a node given up by a stop may be blocked as well
        close_later(ctl.transports.pop(n, None))
    reaper = Reaper(ctl, names, REAP_FACTOR * lost_after)
    reaper.start()
    return reaper
