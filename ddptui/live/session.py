"""One run, from launch (or attach) to its end: the only writer of its state.

It owns the run's state and each node's (:mod:`ddptui.run_state`), ``run.json`` (one
:class:`~ddptui.store.record.Recorder`), its connections, followers and watches. The launch
phases, the watches, the samplers and the stopper are handed what they need, never the
session. Every stop goes through one :class:`~ddptui.remote.stop.Stopper`. The faces read
``session.store``; the headless face also sees every batch, in order, through a listener.
"""

from __future__ import annotations

import threading
import time
from functools import partial
from pathlib import Path
from typing import Unpack

from ddptui.config import HostsConfig
from ddptui.config.secrets import config_masker
from ddptui.events import Event, Level, NodeState, NodeStatus, RunStatus, ssh_line
from ddptui.launch import phases, warm, withheld
from ddptui.launch.plan import Plan
from ddptui.launch.ports import Abort, LaunchContext, NodePool
from ddptui.live import attach
from ddptui.live.allocation import Allocation
from ddptui.live.bus import EventBus, Listener
from ddptui.live.evidence import Evidence
from ddptui.live.faults import OwnFaults
from ddptui.live.follow import Batch, Finished, NodeFollower, read_size, tune_gc
from ddptui.live.liveness import Reaper, Watch, fetch_into, reap
from ddptui.live.samplers import Samplers
from ddptui.live.stalls import HealthWatch
from ddptui.metrics.scan import Scanners
from ddptui.nccl import NcclFacts
from ddptui.nodelog import NodeLogParser
from ddptui.nodeprog import torchrun_tee
from ddptui.outcome import LaunchError, RunResult, StopReport, run_end
from ddptui.rank_stacks import Stacks
from ddptui.remote.nodeops import StopResult
from ddptui.remote.stacks import take
from ddptui.remote.standby import Standby
from ddptui.remote.stop import Stopper, stop_all, targets
from ddptui.run_state import (
    END_EVENT,
    STATUS_AFTER,
    NodeEvent,
    NodeGate,
    RunChanges,
    RunEvent,
    RunRecord,
    run_next,
)
from ddptui.slurm.ending import job_ended, release
from ddptui.store import rundir
from ddptui.store.record import Recorder
from ddptui.store.runs import new_record, run_taken
from ddptui.store.runs import state_root as resolve_state_root
from ddptui.store.store import Store
from ddptui.store.views import run_info_changes


class Session:
    """Args:
        config: The hosts file, resolved.
        state_root: Where runs are kept (``--state-dir``; default the XDG state dir).
        run_id: The run's name (default a new one).
        poll: Seconds between a follower's reads when its doorbell is silent.
        record: The run's ``run.json`` when it is reopened (attach); None for a new run.
    """

    def __init__(self, config: HostsConfig, *, state_root: Path | None = None,
                 run_id: str | None = None, poll: float = 0.2,
                 record: RunRecord | None = None) -> None:
        self.config, self.scanner = config, Scanners(config.metrics.parse, config.metrics.patterns)
        self.root = resolve_state_root(state_root)
        self.run_id = run_id or warm.fresh_run_id()
        self.local_dir = rundir.run_dir(self.root, self.run_id)
        if record is None and (taken := run_taken(self.root, self.run_id)):
            raise LaunchError([taken])
        (self.local_dir / rundir.NODES).mkdir(parents=True, exist_ok=True)
        self.store = Store(self.local_dir)
        self.store.set_run(run_id=self.run_id)
        for n in config.nodes:
            self.store.add_node(n.name, config.node_rank(n))
        record = record or new_record(self.local_dir, self.run_id, config)  # + hosts.yaml
        self.recorder = Recorder.controlling(self.local_dir, record)
        self._state = record.status
        self._nodes = NodeGate([n.name for n in config.nodes], NodeStatus.RUNNING
                                 if record.nodes else NodeStatus.PENDING)  # reopened: up
        self._state_lock = threading.Lock()
        self.plan: Plan | None = None
        #: Run the fast preflight before starting anything (``--no-preflight``: False).
        self.preflight = True
        #: How long torchrun, started before the probe, preflight and sync, holds at most.
        self.hold_s = torchrun_tee.HOLD_S
        self.warm: frozenset[str] = frozenset()  # nodes of a ``launch.warm`` start
        self.result: RunResult | None = None
        self.poll = poll
        self.masker = config_masker(config)  # secret env values, hidden in every line kept
        self.pool, self.evidence = NodePool(config), Evidence()
        self.faults = OwnFaults(self.run_id, config.nodes[0].name, self.note)
        self.bus = EventBus(self.store, self.evidence, self._gate, self._node_finished,
                            self._applied, lambda e: self.faults.failed("consumer", e))
        self._followers: dict[str, NodeFollower] = {}
        self._finished: dict[str, Finished] = {}
        self._stopping, self._done = threading.Event(), threading.Event()
        self.standby = Standby()  # each node's stop program, waiting: a stop is one line
        self._target = targets(config, self.run_id, self.recorder.nodes)
        self.stopper = Stopper(self._target, self.pool.get, self.standby, self.note)
        self.watch = Watch(followers=self._followers, stopping=self._stopping, finished=lambda: {
            n: f.status for n, f in list(self._finished.items())}, done=self._done,
            end_run=self.stop_nodes, drop=self.pool.drop, lost_after=config.health.lost_after,
            end_after_failure=config.health.end_after_failure)
        self.reaper: Reaper | None = None
        self.health = HealthWatch(config.health, self.store, self.bus.listeners,  # stalls
                                  lambda on: self.stacks(nodes=on), self.bus.publish,
                                  self.run_id)
        self.samplers = Samplers()  # each node's telemetry, from start_following to the end
        self.slurm = Allocation(config, self.run_id, self.store, self._followers, self.pool.get,
                                self.recorder, self.note, self._done)

    def advance(self, event: RunEvent, **record: Unpack[RunChanges]) -> bool:
        """Move the run by ``event`` and record it (with ``record``'s fields) in the store
        and ``run.json`` at once; False, changing nothing, when the table refuses it."""
        with self._state_lock:
            new = run_next(self._state, event)
            if new is None:
                return False
            self._state = new
        self.store.set_run(**run_info_changes(new, record))
        self.recorder.update(**(record | {"status": new}))
        return True

    def _gate(self, events: list[Event]) -> list[Event]:
        with self._state_lock:
            return self._nodes.admit(events)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def add_listener(self, fn: Listener) -> None:
        """``fn`` sees every batch, in order, on the consumer thread (keep it quick)."""
        self.bus.listeners.append(fn)

    def note(self, node: str, text: str, level: Level = Level.INFO) -> None:
        """ddptui's own line about ``node``, masked, seen by every face."""
        self.bus.publish(Batch(node, [ssh_line(node, self.masker.text(text), time.time(),
                                               level)], {}))

    def publish(self, node: str, events: list[Event]) -> None:
        """Events a launch phase makes (setup output), seen by every face like a node's."""
        self.bus.publish(Batch(node, withheld.mask_lines(self.masker, events), {}))

    def node_update(self, node: str, event: NodeEvent, detail: str = "") -> None:
        """Say ``event`` happened to ``node`` (the gate drops it if the table refuses it)."""
        state = NodeState(node, STATUS_AFTER[event], time.time(), self.masker.text(detail),
                          self.recorder.pgid(node))
        self.bus.publish(Batch(node, [state], {}))

    def _context(self) -> LaunchContext:
        return LaunchContext(self.config, self.run_id, self.root, self.pool,
                             self.node_update, self.publish, self.recorder, self.stopper,
                             self.hold_s, warm=set(self.warm))

    def launch(self) -> None:
        """Every phase in order (:func:`ddptui.launch.phases.launch`), all or nothing; on
        return every node runs torchrun and the followers run."""
        ctx = self._context()
        self.advance(RunEvent.LAUNCH, started_at=time.time())
        try:
            phases.launch(ctx, checks_first=self.preflight, planned=self._planned)
            self.config = ctx.config  # with the rendezvous port reserved
        except Abort as e:
            self._abort(ctx, e.problems, cleanup=e.cleanup, kill=e.kill)
        self.advance(RunEvent.RELEASE)
        self.start_following({})

    def _planned(self, plan: Plan) -> Plan:
        self.plan = plan
        self.store.set_run(world_size=plan.world_size)
        return plan

    def _abort(self, ctx: LaunchContext, problems: list[str], *, cleanup: bool,
               kill: bool) -> None:
        """Undo a launch on every node (one started early too), then raise LaunchError."""
        problems, started = [self.masker.text(p) for p in problems], ctx.started()
        kill, cleanup = kill or started, cleanup or started
        if self.recorder.has_nodes() or self.recorder.record().rendezvous:
            if kill:
                self._stopping.set()
            phases.undo(ctx, kill=kill, cleanup=cleanup)
        self.pool.close_all()
        self.recorder.update(slurm=release(self.config))
        self.store.set_run(message=problems[0])
        self.advance(RunEvent.ABORT, error=problems, ended_at=time.time())
        self.store.close()
        raise LaunchError(problems)

    def start_following(self, parsers: dict[str, NodeLogParser]) -> None:
        tune_gc()
        self.bus.start(self._tick)
        for node in self.config.nodes:
            name = node.name
            f = NodeFollower(
                node=name, transport=self.pool.get(name), node_dir=self.recorder.node_dir(name),
                raw_path=rundir.node_log(self.local_dir, name), scanner=self.scanner[name],
                parser=parsers.get(name) or NodeLogParser(name), out=self.bus.queue,
                masker=self.masker, pgid=self.recorder.pgid(name), stopping=self._stopping,
                reconnect=partial(self.pool.reopen, node, self.slurm.job.poke),  # lost
                poll=self.poll, chunk=read_size(len(self.config.nodes)), python=node.python)
            self._followers[name] = f
            f.start()
        self.watch.start()
        self.slurm.job.start(self._done)
        self.samplers.start(self.config, self.run_id, transport=self.pool.current,
                            node_dir=self.recorder.node_dir, pgid=self.recorder.pgid,
                            publish=self.publish, note=self.note)
        self.standby.start_all([n.name for n in self.config.nodes], self.pool.current,
                               lambda name: self._target(name).command(None),
                               lambda name: self._followers[name].offset > 0)

    def _node_finished(self, item: Finished) -> None:  # on the consumer, in order
        self._finished[item.node] = item

    def _applied(self) -> None:
        if self.evidence.nccl.due():  # to run.json, and the store: every face reads them there
            self.evidence.nccl.publish(self.recorder.update, self.store.set_run)
        self.faults.check(self.store.disk_error, self.recorder.error,
                          {n: f.disk_error for n, f in self._followers.items()})

    def _tick(self, applied: bool) -> bool:
        if len(self._finished) == len(self.config.nodes) and self.slurm.limit.settled(
                self.bus.queue.empty):  # its last look said, in the store, before the end
            try:
                self.conclude()
            finally:  # a conclusion that failed still ends the run, its fault said
                self.result = self.result or RunResult(1, [], {}, False, problem=self.faults.text())
                self._done.set()
            return True
        self.health.tick(self._stopping.is_set())
        followers = self._followers.values()
        return not applied and bool(followers) and all(f.halt.is_set() for f in followers)

    def conclude(self) -> None:
        """Every node has ended: decide how the run ended (``outcome.run_end``, the rule
        ``ddptui logs --check`` uses too), record it, and let go of the nodes."""
        names = [n.name for n in self.config.nodes]
        stopping = self._stopping.is_set()
        failures = self.store.failure_list()
        status, code = run_end(names, {n: (f.status, f.exit_code)
                                       for n, f in self._finished.items()}, failures,
                               stopping=stopping, lost=bool(self.watch.lost),
                               failed=self.watch.failed is not None)
        stopped = status is RunStatus.STOPPED
        found, why_not = None, None
        if code != 0 and not stopped:  # a run a person stopped has no cause to find
            world = self.plan.world_size if self.plan else self.recorder.record().world_size
            found, why_not = self.evidence.diagnose(names, world, code)
            found = job_ended(self.config, found, self.slurm.job.end) or found  # Slurm ended it
        lost = [n for n, f in self._finished.items() if f.status is NodeStatus.LOST]
        for n in lost:  # the connection of a node given up by a stop may be blocked as well
            self.pool.drop(n)
        seek = [n for n in lost if n in self.recorder.nodes() and not self.slurm.job.gone]
        self.reaper = reap(seek, self.config, self.run_id, self.stopper, self.recorder,  # first
                           lambda n, t: fetch_into(self.store, self._followers[n], t))
        codes = {n: f.exit_code for n, f in self._finished.items()}
        self.result = RunResult(code, failures, codes, stopped, found, self.faults.text())
        if self.advance(END_EVENT[status], exit_code=code, ended_at=time.time()):
            self.evidence.nccl.publish(  # with the run's end: run.json, and the store
                self.recorder.update, self.store.set_run, node_exit_codes=codes,
                diagnosis=found.to_dict() if found else None, diagnosis_error=why_not,
                curves=list(self.store.insight(final=True).summary))  # ddptui.insight's
        self.samplers.end(frozenset(lost))
        self.store.close()
        self.standby.end()
        self.pool.close_all()
        self.recorder.update(slurm=release(self.config))  # an allocation ddptui asked for
        self._done.set()

    def stacks(self, rank: int | None = None, nodes: list[str] | None = None) -> Stacks:
        return take(self.run_id, self.config, self.pool.all(), self.local_dir, nodes=nodes,
                    rank=rank, mask=self.masker.text)  # saved in the run dir, secrets hidden

    def wait(self, timeout: float | None = None) -> RunResult | None:
        return self.result if self._done.wait(timeout) else None  # once run.json says so

    def rehearse(self) -> str:  # the time limit's signal now: a preemption tried beforehand
        return self.slurm.limit.rehearse()

    def again(self) -> str | None:  # a new allocation for the run now over (slurm.resubmit)?
        return self.slurm.again(self.recorder.attempt(), stopped=bool(self.result and
                                                                      self.result.stopped))

    def nccl_facts(self) -> NcclFacts:  # a copy: lines go on arriving
        return self.evidence.nccl.snapshot()

    def _stop_one(self, name: str, grace: float) -> StopResult:
        found = self.stopper.stop_found(name, grace)
        if not found.leftover and (follower := self._followers.get(name)) is not None:
            follower.gone.set()
        return found

    def stop_nodes(self, names: list[str], why: str) -> None:
        """Stop these nodes off this thread, because of ``why`` (the watch's verdicts)."""
        grace = self.config.job.stop_grace
        for n in names:
            self.node_update(n, NodeEvent.STOP, f"{why}: SIGTERM, then SIGKILL after {grace:g} s")

        def stop() -> None:  # one unreachable too: the watch declares it lost in turn
            for name, e in stop_all(names, lambda n: self._stop_one(n, grace)).errors.items():
                self.note(name, f"could not stop node {name}: {e}", Level.ERROR)

        threading.Thread(target=stop, name="ddptui-end-run", daemon=True).start()

    def stop(self, grace: float | None = None) -> StopReport:
        """SIGTERM every process of the run on every node, then SIGKILL after ``grace``. A
        run that has already ended is cleaned up, but how it ended is not rewritten."""
        grace = self.config.job.stop_grace if grace is None else grace
        self._stopping.set()
        self.advance(RunEvent.STOP)
        names = [n.name for n in self.config.nodes]
        for n in (n for n in names if n not in self._finished):
            self.node_update(n, NodeEvent.STOP, f"SIGTERM, then SIGKILL after {grace:g} s")
        report = stop_all(names, lambda n: self._stop_one(n, grace))
        for name, why in report.errors.items():
            f = self._followers.get(name)  # unreachable: it must not hold the run open
            if f is not None and name not in self._finished:
                f.give_up(f"could not be reached to stop it ({why}); its processes may still "
                          "be running there")
        if self.bus.consuming:
            self._done.wait(grace + 15)
        else:
            self._conclude_without_followers(report)
        return report

    def _conclude_without_followers(self, report: StopReport) -> None:
        for n in self.config.nodes:  # one not reached is lost; the reaper seeks it
            lost = n.name in report.errors
            self.node_update(n.name, NodeEvent.LOSE if lost else NodeEvent.STOPPED,
                             "could not be reached to stop it" if lost else "stopped")
            self._finished[n.name] = Finished(n.name, STATUS_AFTER[
                NodeEvent.LOSE if lost else NodeEvent.STOPPED], None)
        if self._state.live:
            self.conclude()
        elif not self._done.is_set():  # ended before: record who is still unreached
            self.recorder.update(unstopped=[n for n in self.recorder.record().unstopped or []
                                            if n in report.errors])

    def detach(self) -> None:
        """Stop following; the job goes on, and ``ddptui attach`` picks it up again."""
        for f in self._followers.values():
            f.halt.set()
        for f in self._followers.values():
            f.join(timeout=10)
        self.bus.join(timeout=10)
        self.samplers.end()  # nobody watches: a new one starts on attach
        self.standby.end()
        self.pool.close_all()
        if self.recorder.has_nodes():  # run.json must not name a follower that is no more
            self.recorder.let_go()
        self.store.close()

    @classmethod
    def attach(cls, run_id: str, *, state_root: Path | None = None, poll: float = 0.2,
               follow: bool = True) -> Session:
        """Reopen a run from its run dir and (``follow``) resume its nodes' logs."""
        root = resolve_state_root(state_root)
        record = attach.read_record(root, run_id)
        session = cls(HostsConfig.from_dict(record.config), state_root=root, run_id=run_id,
                      poll=poll, record=record)
        session.reopen(record, follow)
        return session

    def reopen(self, record: RunRecord, follow: bool) -> None:
        """The store rebuilt from the raw copies, the nodes reconnected, following resumed
        (``follow``) where the copies end; a run left mid-launch goes on only if let go."""
        parsers = attach.replay_raw_logs(self.store, self.local_dir, record.nodes, self.scanner)
        self.evidence.seed(self.store)
        self.evidence.nccl.reread(self.local_dir, list(record.nodes), record.nccl)
        launching = record.status is RunStatus.LAUNCHING
        if not launching:
            self.advance(RunEvent.ATTACH)  # an ended run stays as it ended
        self.store.set_run(run_id=self.run_id, status=self._state, started_at=record.started_at,
                           world_size=record.world_size, nccl=self.evidence.nccl.snapshot())
        attach.reconnect(self.config, self.pool, self.note)
        self.config = withheld.recover(self.config, self.pool.all(),
                                       {n: r.run_dir for n, r in record.nodes.items()})
        self.masker = config_masker(self.config)
        self.recorder.write()  # run.json names this session now: the run is not stale
        found = attach.marks(self.pool, record.nodes) if follow else {}
        attach.nothing_left(self.run_id, record, found)  # raises: then there is no run here
        if launching and follow and (held := attach.unreleased(found)):
            self._abort(self._context(), [attach.caught_in_launch(self.run_id, held)],
                        cleanup=True, kill=True)
        if launching:
            self.advance(RunEvent.ATTACH)
        if follow:
            self.start_following(parsers)
