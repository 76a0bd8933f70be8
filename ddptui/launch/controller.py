"""The run controller: launch, follow, stop and attach, one thread per node.

Everything that touches a node is done for all nodes at once (see :mod:`ddptui.launch.reach`),
so sixteen nodes cost about what one does. Launch is all-or-nothing: torchrun, started early
on every node, holds until every check has passed, and a failure in any phase stops what was
started and removes what was written on every node, so a bad hosts file never leaves a
half-started cluster (see :mod:`ddptui.launch.sequence`).

Faces (the dashboard, the headless printer) read ``controller.store``; the headless face
also registers a listener that sees every batch, so it can print every line in order.
"""

from __future__ import annotations

import contextlib
import functools
import queue
import secrets
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from ddptui.config import HostsConfig, NodeConfig
from ddptui.config.secrets import config_masker
from ddptui.events import Level, NodeState, NodeStatus, RunStatus, ssh_line
from ddptui.launch import liveness, sequence, torchrun_tee, withheld
from ddptui.launch.attach import reopen
from ddptui.launch.evidence import Evidence
from ddptui.launch.follow import (
    Batch,
    EventQueue,
    Finished,
    NodeFollower,
    read_size,
    tune_gc,
)
from ddptui.launch.outcome import LaunchError, RunResult, StopReport, run_exit_code
from ddptui.launch.plan import Plan, new_run_id
from ddptui.launch.reach import connect, map_at_once
from ddptui.launch.stacks import Stacks, take
from ddptui.launch.standby import Standby
from ddptui.launch.telemetry import Samplers
from ddptui.launch.watch import HealthWatch
from ddptui.nccl import NcclFacts
from ddptui.nodelog import NodeLogParser
from ddptui.store import rundir
from ddptui.store.owner import this_controller
from ddptui.store.runs import state_root as resolve_state_root
from ddptui.store.runs import write_run
from ddptui.store.store import Store
from ddptui.transport.base import Transport


class Controller:
    """One run, from launch (or attach) to its end: the only writer of its store and of
    ``run.json``, so that the faces, ``ddptui logs`` and a later attach see one story."""

    def __init__(
        self,
        config: HostsConfig,
        *,
        state_root: Path | None = None,
        run_id: str | None = None,
        poll: float = 0.2,
    ) -> None:
        self.config = config
        self.root = resolve_state_root(state_root)
        self.run_id = run_id or new_run_id(datetime.now(), secrets.token_hex(2))
        self.local_dir = rundir.run_dir(self.root, self.run_id)
        (self.local_dir / rundir.NODES).mkdir(parents=True, exist_ok=True)
        self.store = Store(self.local_dir)
        self.store.set_run(run_id=self.run_id)
        for n in config.nodes:
            self.store.add_node(n.name, config.node_rank(n))
        self.plan: Plan | None = None
        #: Run the fast preflight before starting anything (``--no-preflight``: False).
        self.preflight = True
        #: How long torchrun, started before the probe, preflight and sync, holds at most
        #: (``sequence.launch``).
        self.hold_s = torchrun_tee.HOLD_S
        self.result: RunResult | None = None
        self.poll = poll
        self.transports: dict[str, Transport] = {}
        self._pgids: dict[str, int | None] = {}
        self.new_workdirs: set[str] = set()  # nodes whose workdir this launch made
        self._queue = EventQueue()
        self._followers: dict[str, NodeFollower] = {}
        self._finished: dict[str, Finished] = {}
        self._stopping = threading.Event()
        self._done = threading.Event()
        self._consumer: threading.Thread | None = None
        self._listeners: list[Callable[[Batch], None]] = []
        self._publish_lock = threading.Lock()
        self._meta: dict[str, Any] = {"controller": this_controller()}  # for stale runs
        self.watch = liveness.Watch(self, config.health.lost_after)
        self.reaper: liveness.Reaper | None = None
        self._meta_lock = threading.Lock()
        self.evidence = Evidence()  # the diagnosis's own copy: the store's rings may drop lines
        self.health = HealthWatch(config.health, self.store, self._listeners,  # stalls
                                  lambda on: self.stacks(nodes=on), self._publish, self.run_id)
        self.samplers = Samplers()  # each node's telemetry, from start_following to the end
        self.standby = Standby()  # each node's stop program, waiting: a stop is one line
        self.masker = config_masker(config)  # secret env values, hidden in every line kept

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def add_listener(self, fn: Callable[[Batch], None]) -> None:
        """``fn`` sees every batch, in order, on the consumer thread (keep it quick)."""
        self._listeners.append(fn)

    def _publish_note(self, node: str, text: str, level: Level = Level.INFO) -> None:
        text = self.masker.text(text)
        self._publish(Batch(node, [ssh_line(node, text, time.time(), level)], {}))

    def publish(self, node: str, events: list[Any]) -> None:
        """Events a launch phase makes (setup output), seen by every face like a node's."""
        self._publish(Batch(node, withheld.mask_lines(self.masker, events), {}))

    def node_state(self, node: str, status: NodeStatus, detail: str = "",
                    exit_code: int | None = None) -> None:
        ev = NodeState(node, status, time.time(), self.masker.text(detail),
                       self._pgids.get(node), exit_code)
        self._publish(Batch(node, [ev], {}))

    def _publish(self, batch: Batch) -> None:
        if self._consumer is not None and self._consumer.is_alive():
            self._queue.put(batch)
            return
        with self._publish_lock:  # launch threads publish at once before the consumer runs
            self.store.apply(batch.events, batch.raw_done)
            self.evidence.add(batch.events)
            for fn in self._listeners:
                fn(batch)

    def _rank_of(self, name: str) -> int:
        return self.config.node_rank(self.config.node(name))

    def _node_dir(self, name: str) -> str:
        return self._meta["nodes"][name]["run_dir"]  # run.json's key for the node dir

    def write_meta(self, **changes: Any) -> None:
        with self._meta_lock:  # the consumer saves NCCL facts while others may save too
            self._meta.update(changes)
            data = dict(self._meta)
            data["nodes"] = list(self._meta.get("nodes", {}).values())
            write_run(self.local_dir, data)

    def set_status(self, status: RunStatus, **changes: Any) -> None:
        """The run's status, in the store (for the faces) and in ``run.json`` (for
        ``ddptui logs`` and attach) at once, so the two never disagree."""
        self.store.set_run(status=status, **changes)
        self.write_meta(status=status, **changes)

    def launch(self) -> None:
        """Start the run on every node, all or nothing (see :mod:`ddptui.launch.sequence`)."""
        sequence.launch(self)

    def record_pgid(self, name: str, pgid: int | None) -> None:
        self._pgids[name] = pgid
        self._meta["nodes"][name]["pgid"] = pgid

    def pgid(self, name: str) -> int | None:
        return self._pgids.get(name)

    @property
    def started(self) -> bool:
        """Some node's launch.sh runs (or ran) for this launch: it has a pgid."""
        return any(p is not None for p in self._pgids.values())

    def abort(self, problems: list[str], *, cleanup: bool, kill: bool = False) -> None:
        """Undo a launch on every node, then raise: all or nothing. A node already started
        (early, see ``sequence.launch``) is always stopped and its node dir removed."""
        problems = [self.masker.text(p) for p in problems]
        kill, cleanup = kill or self.started, cleanup or self.started
        if kill and self.plan is not None:
            self._stopping.set()
        sequence.undo(self, kill=kill, cleanup=cleanup)
        self._close_transports()
        self.store.set_run(status=RunStatus.FAILED, message=problems[0], ended_at=time.time())
        self.write_meta(status=RunStatus.FAILED, error=problems, ended_at=time.time())
        self.store.close()
        raise LaunchError(problems)

    def _close_transports(self) -> None:
        for transport in self.transports.values():
            with contextlib.suppress(Exception):
                transport.close()

    def start_following(self, parsers: dict[str, NodeLogParser]) -> None:
        tune_gc()
        self._consumer = threading.Thread(target=self._consume, name="ddptui-consumer",
                                          daemon=True)
        self._consumer.start()
        for node in self.config.nodes:
            name = node.name
            f = NodeFollower(
                node=name, transport=self.transports[name], node_dir=self._node_dir(name),
                raw_path=rundir.node_log(self.local_dir, name),
                parser=parsers.get(name) or NodeLogParser(name), out=self._queue,
                masker=self.masker,
                pgid=self._pgids.get(name), stopping=self._stopping,
                reconnect=functools.partial(self._reconnect, node), poll=self.poll,
                chunk=read_size(len(self.config.nodes)), python=node.python)
            self._followers[name] = f
            f.start()
        self.watch.start()
        self.samplers.start(self)
        threading.Thread(target=map_at_once, daemon=True, name="ddptui-standby", args=(
            [n.name for n in self.config.nodes], lambda name: self.standby.start(
                name, self.transports[name], liveness.stop_command(self, name, None)))).start()

    def _reconnect(self, node: NodeConfig) -> Transport:
        transport = connect(node, self.config)
        old = self.transports.get(node.name)
        self.transports[node.name] = transport
        if old is not None:
            with contextlib.suppress(Exception):
                old.close()
        return transport

    def _consume(self) -> None:
        total = len(self.config.nodes)
        applied = 0.0
        while True:
            try:
                first = self._queue.get(timeout=0.1)
            except queue.Empty:
                self.health.tick(self._stopping.is_set())
                if all(f.halt.is_set() for f in self._followers.values()) and self._followers:
                    return
                continue
            items = [first]
            # At most an apply per 20 ms, so a flood is taken in batches; a line after a quiet
            # spell goes at once (the first line of a launch, a line at a moderate rate).
            deadline = applied + 0.02
            while len(items) < 500:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(0.002)
            self._apply(items)
            applied = time.monotonic()
            self.health.tick(self._stopping.is_set())
            if len(self._finished) == total:
                self._conclude()
                return

    def _apply(self, items: list[Batch | Finished]) -> None:
        events: list[Any] = []
        raw_done: dict[str, int] = {}
        for item in items:
            if isinstance(item, Finished):
                self._finished[item.node] = item
                continue
            events.extend(item.events)
            raw_done.update(item.raw_done)
        if events or raw_done:
            self.store.apply(events, raw_done)
            self.evidence.add(events)
            if self.evidence.nccl.due():
                self.write_meta(**self.evidence.nccl.meta())
        for item in items:
            if isinstance(item, Batch):
                for fn in self._listeners:
                    fn(item)

    def _conclude(self) -> None:
        codes = {n: f.exit_code for n, f in self._finished.items()}
        lost = bool(self.watch.lost) and not self._stopping.is_set()  # a stop comes first
        ended = lost or (self.watch.failed is not None and not self._stopping.is_set())
        stopped = not ended and (self._stopping.is_set() or any(
            f.status is NodeStatus.STOPPED for f in self._finished.values()))
        failures = self.store.failure_list()
        names = [n.name for n in self.config.nodes]
        code = liveness.LOST_EXIT if lost else run_exit_code(codes, failures, names, stopped)
        found, why_not = None, None
        if code != 0 and not stopped:  # a run a person stopped has no cause to find
            world = self.plan.world_size if self.plan else self._meta.get("world_size")
            found, why_not = self.evidence.diagnose(names, world, code)
        self.reaper = liveness.reap(self, self.config.health.lost_after)  # before the result
        self.result = RunResult(code, failures, codes, stopped, found)
        status = RunStatus.STOPPED if stopped else (
            RunStatus.FINISHED if code == 0 else RunStatus.FAILED)
        self.set_status(status, exit_code=code, ended_at=time.time())
        self.write_meta(node_exit_codes=codes, diagnosis=found.to_dict() if found else None,
                         **({"diagnosis_error": why_not} if why_not else {}),
                         **self.evidence.nccl.meta())
        self.samplers.end(frozenset(n for n, f in self._finished.items()
                                    if f.status is NodeStatus.LOST))
        self.store.close()
        self.standby.end()
        self._close_transports()
        self._done.set()

    def stacks(self, rank: int | None = None, nodes: list[str] | None = None) -> Stacks:
        """The ranks' Python stacks now (:mod:`ddptui.launch.stacks`), saved in the run dir."""
        return take(self.run_id, self.config, self.transports, self.local_dir, nodes=nodes,
                    rank=rank, mask=self.masker.text)

    def wait(self, timeout: float | None = None) -> RunResult | None:
        """The result once the run is over and ``run.json`` says so; ``None`` until then.
        ``result`` itself is set a moment earlier (before the status is written), so a face
        that went by it could exit with ``running`` left in ``run.json``."""
        return self.result if self._done.wait(timeout) else None

    def nccl_facts(self) -> NcclFacts:
        """What NCCL said so far, on every node (a copy: lines go on arriving)."""
        return self.evidence.nccl.snapshot()

    def _stop_node(self, name: str, grace: float) -> list[int]:
        transport = self.transports.get(name)
        if transport is None:
            transport = self._reconnect(self.config.node(name))
        parsed = (self.standby.stop(name, transport, grace)
                  or liveness.stop_remote(self, name, transport, grace))
        if parsed.killed:
            self._publish_note(name, f"{len(parsed.killed)} process(es) ignored SIGTERM for "
                                     f"{grace:g} s and were killed", Level.WARNING)
        follower = self._followers.get(name)
        if follower is not None and not parsed.leftover:
            follower.gone.set()
        return parsed.leftover

    def stop(self, grace: float | None = None) -> StopReport:
        """SIGTERM every process of the run on every node, then SIGKILL after ``grace``."""
        grace = self.config.job.stop_grace if grace is None else grace
        self._stopping.set()
        self.store.set_run(status=RunStatus.STOPPING)
        names = [n.name for n in self.config.nodes]
        for n in names:
            if n not in self._finished:
                self.node_state(n, NodeStatus.STOPPING, f"SIGTERM, then SIGKILL after {grace:g} s")
        report = StopReport()
        for name, res in zip(names, map_at_once(names, lambda n: self._stop_node(n, grace)),
                             strict=True):
            if isinstance(res, Exception):
                report.errors[name] = str(res)
                self._give_up_on(name, f"could not be reached to stop it ({res}); its "
                                       "processes may still be running there")
            else:
                report.leftover[name] = res
        if self._consumer is not None:
            self._done.wait(grace + 15)
        else:
            self._conclude_without_followers(report)
        return report

    def _give_up_on(self, name: str, why: str) -> None:
        """A node that cannot be reached must not hold the run open: it ends as lost."""
        f = self._followers.get(name)
        if f is not None and name not in self._finished:
            f.give_up(why)

    def _conclude_without_followers(self, report: StopReport) -> None:
        for n in self.config.nodes:
            if n.name in report.errors:  # the run's end names it; the reaper records it
                self.node_state(n.name, NodeStatus.LOST, "could not be reached to stop it")
                self._finished[n.name] = Finished(n.name, NodeStatus.LOST, None)
            else:
                self.node_state(n.name, NodeStatus.STOPPED, "stopped")
                self._finished[n.name] = Finished(n.name, NodeStatus.STOPPED, None)
        if not self._done.is_set() and not liveness.ended_before(self, report.errors):
            self._conclude()

    def detach(self) -> None:
        """Stop following; the job goes on, and ``ddptui attach`` picks it up again."""
        for f in self._followers.values():
            f.halt.set()
        for f in self._followers.values():
            f.join(timeout=10)
        if self._consumer is not None:
            self._consumer.join(timeout=10)
        self.samplers.end()  # nobody watches: a new one starts on attach
        self.standby.end()
        self._close_transports()
        if self._meta.get("nodes"):  # run.json must not name a follower that is no more
            self.write_meta(controller={**this_controller(), "detached": True})
        self.store.close()

    @classmethod
    def attach(cls, run_id: str, *, state_root: Path | None = None, poll: float = 0.2,
               follow: bool = True) -> Controller:
        """Reopen a run: rebuild the store from the local mirror, resume every node's log
        (:func:`ddptui.launch.attach.reopen`)."""
        return reopen(cls, run_id, state_root=state_root, poll=poll, follow=follow)
