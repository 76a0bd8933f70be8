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
:data:`ddptui.outcome.LOST_EXIT`, with the lost node as the diagnosis's cause. If the
others have already exited, the run simply ends.

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
from collections.abc import Callable, Mapping

from ddptui.bars import BarKeeper
from ddptui.config import HostsConfig
from ddptui.events import LineRun, LogLine, NodeStatus
from ddptui.live.follow import NodeFollower
from ddptui.remote.nodeops import StopResult
from ddptui.remote.reach import connect
from ddptui.remote.stop import Stopper
from ddptui.store.record import Recorder
from ddptui.store.store import Store
from ddptui.transport.base import Transport

#: After the run's end, lost nodes are sought for this many times ``lost_after``.
REAP_FACTOR = 3
TICK_S = 0.25

#: Stops the named nodes, still running, because of what is said (the session's stop path,
#: which says so on each node and stops them off the caller's thread).
EndRun = Callable[[list[str], str], None]


class Watch(threading.Thread):
    """Declares silent nodes lost and ends the run around them (see the module's docstring).

    Args:
        followers: The run's followers by node (read only).
        finished: How each node that has ended ended, so far.
        stopping: Set once a stop was asked for: the watch then ends nothing itself.
        done: Set once the run is over.
        end_run: See :data:`EndRun`.
        drop: Forgets a lost node's connection.
    """

    def __init__(self, *, followers: Mapping[str, NodeFollower],
                 finished: Callable[[], Mapping[str, NodeStatus]], stopping: threading.Event,
                 done: threading.Event, end_run: EndRun, drop: Callable[[str], None],
                 lost_after: float, end_after_failure: float, tick: float = TICK_S) -> None:
        super().__init__(name="ddptui-liveness", daemon=True)
        self.followers, self.finished = followers, finished
        self.stopping, self.done = stopping, done
        self.end_run, self.drop = end_run, drop
        self.lost_after = lost_after
        self.tick = tick
        self.lost: list[str] = []  # nodes declared lost, in the order they were
        self.end_after_failure = end_after_failure
        #: The node whose failure made the watch stop the others (then the run failed).
        self.failed: str | None = None
        self._failed_at: tuple[str, float] | None = None

    def run(self) -> None:
        followers = self.followers
        while not self.done.wait(self.tick):
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
                    self.drop(name)
                    self._end_run(f"node {name} was lost")
            self._after_failure(now)

    def _after_failure(self, now: float) -> None:
        """A node whose torchrun failed (its restarts spent) leaves the others' ranks waiting
        for its ranks, in a rendezvous or a store, for up to half an hour: they get
        ``health.end_after_failure`` seconds to end by themselves, then they are stopped."""
        if self.failed is not None or self.stopping.is_set():
            return
        if self._failed_at is None:
            failed = [n for n, s in self.finished().items() if s is NodeStatus.FAILED]
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
        finished = self.finished()
        others = [n for n, f in self.followers.items()
                  if not (f.ended or f.halt.is_set()) and n not in finished]
        if not others or self.stopping.is_set():
            return False
        self.end_run(others, f"{what} and {why}")
        return True


class Reaper(threading.Thread):
    """After the run's end: reach each lost node within ``seconds``, fetch what it wrote
    while cut off, and stop what is left.

    Args:
        connect: A fresh connection to a node (the run's own were given up).
        fetch: Reads what the node wrote since following stopped into the run's logs here;
            the lines fetched. Before the stop, and again after it: what the ranks wrote
            until the stop ended them (their last words on SIGTERM too).
        stop: Stops the run on a node through the connection given.
        record: Saves what was done on a node reached (node, words) and the nodes not
            reached yet.
    """

    def __init__(self, names: list[str], seconds: float, *, run_id: str,
                 connect: Callable[[str], Transport],
                 fetch: Callable[[str, Transport], int],
                 stop: Callable[[str, Transport], StopResult],
                 record: Callable[[str, str, list[str]], None],
                 retry: float = 1.0) -> None:
        super().__init__(name="ddptui-reaper", daemon=True)
        self.pending = list(names)
        self.seconds = seconds
        self.run_id = run_id
        self.connect, self.fetch, self.stop, self.record = connect, fetch, stop, record
        self.retry = retry
        self.cancel = threading.Event()
        self.report: dict[str, str] = {}  # node -> what was done there, in ddptui's words

    def run(self) -> None:
        end = time.monotonic() + self.seconds
        while self.pending and not self.cancel.is_set():
            for name in list(self.pending):
                transport = None
                try:
                    transport = self.connect(name)
                    fetched = self._fetch(name, transport, 0)
                    found = self.stop(name, transport)
                    # and what its ranks wrote between that fetch and their end
                    fetched = self._fetch(name, transport, fetched)
                except Exception:
                    continue
                finally:
                    if transport is not None:
                        with contextlib.suppress(Exception):
                            transport.close()
                self.pending.remove(name)
                self.report[name] = reached_again(fetched, found, self.run_id)
                self.record(name, self.report[name], list(self.pending))
            if time.monotonic() >= end or self.cancel.wait(self.retry):
                break
        for name in self.pending:
            self.report[name] = (f"not reached within {self.seconds:g} s: what the run left "
                                 f"there may still run; `ddptui stop {self.run_id}` stops it "
                                 "once the node answers")

    def _fetch(self, name: str, transport: Transport, before: int | str) -> int | str:
        """Lines fetched so far, or why the fetch failed (what is there stays, for attach)."""
        if isinstance(before, str):
            return before
        try:
            return before + self.fetch(name, transport)
        except Exception as e:
            return f"{type(e).__name__}: {e}"


def reached_again(fetched: int | str, found: StopResult, run_id: str) -> str:
    """What the reaper did on a node it reached, plainly: the lines it fetched (or why it
    could not) and the processes it stopped there."""
    parts = ["reached again"]
    if isinstance(fetched, str):
        parts.append(f"what it wrote while cut off could not be fetched ({fetched}); "
                     f"`ddptui attach {run_id}` fetches it later")
    elif fetched:
        parts.append(f"fetched the {fetched} line(s) its ranks and agent wrote while cut off")
    pids = ", ".join(str(p) for p in found.found)
    if found.leftover:
        parts.append(f"processes {found.leftover} of the run are still alive after a stop")
    elif found.found:
        killed = f", {len(found.killed)} of them by SIGKILL" if found.killed else ""
        parts.append(f"stopped {len(found.found)} process(es) of the run still running there "
                     f"(pids {pids}){killed}")
    else:
        parts.append("nothing of the run is left there")
    return "; ".join(parts)


def fetch_into(store: Store, follower: NodeFollower, transport: Transport) -> int:
    """What a lost node wrote while cut off, into the run's logs here (the store, closed at
    the run's end, opens its files again for it and closes them after); the lines fetched."""
    try:
        events = follower.catch_up(transport)
    except FileNotFoundError:  # the node dir went with the node (a new machine, a clean)
        return 0
    if events:
        keeper = BarKeeper()
        store.apply(keeper.take(events) + keeper.drain(), {follower.node: follower.offset})
        store.close()
    return sum(e.count if type(e) is LineRun else 1 for e in events
               if type(e) is LineRun or type(e) is LogLine)


def reap(names: list[str], config: HostsConfig, run_id: str, stopper: Stopper,
         recorder: Recorder, fetch: Callable[[str, Transport], int]) -> Reaper | None:
    """Start seeking the run's lost nodes ``names``, if any, once the run has ended; what it
    finds goes to ``run.json`` (each node's ``cleanup``, the ``unstopped`` list)."""
    if not names:
        return None
    recorder.update(unstopped=names)
    grace = config.job.stop_grace

    def record(name: str, what: str, pending: list[str]) -> None:
        recorder.node(name, cleanup=what)
        recorder.update(unstopped=pending)

    reaper = Reaper(names, REAP_FACTOR * config.health.lost_after, run_id=run_id,
                    connect=lambda name: connect(config.node(name), config), fetch=fetch,
                    stop=lambda name, t: stopper.stop_found(name, grace, t), record=record)
    reaper.start()
    return reaper
