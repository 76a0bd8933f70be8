"""The allocation's time limit, seen coming: a run killed at its limit loses everything since
its last checkpoint, and a cluster may never send the signal that would have saved it.

With each look at the job (:class:`~ddptui.slurm.ending.JobWatch`) the time left is known.
It is said as it runs down; ``slurm.signal_before`` seconds before the end, ``slurm.signal``
(USR2) goes to every rank itself (not torchrun, which USR2 would kill), and the run's
checkpoint (``slurm.checkpoint``; the bundled worker's snapshots by default) is looked for
until one newer than the signal is seen ("checkpoint step 1200 written 14 s after the
signal") or the run or the job ends, when its absence is said plainly. :meth:`rehearse`
sends the same signal on demand.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime

from ddptui.config import HostsConfig, NodeConfig
from ddptui.events import Level
from ddptui.remote import checkpoint
from ddptui.remote.checkpoint import Seen, Signalled
from ddptui.remote.reach import Done, map_at_once
from ddptui.run_notes import Checkpoint, TimeLimitNote
from ddptui.slurm.jobinfo import JobInfo, seconds_left, slurm_duration
from ddptui.transport.base import Transport, TransportError

#: Why a signal was sent, as the record and the messages say it.
LIMIT, REHEARSAL = "time limit", "rehearsal"
#: Time left at which the run is told so, once each (seconds).
MILESTONES = (3600, 1800, 600, 300, 120, 60)
#: Seconds between two looks for the checkpoint after the signal.
LOOK_EVERY_S = 1.0
#: Seconds between two tries of a signal no rank could take yet (none catches it, or none
#: runs) while the time limit is near.
RETRY_S = 2.0
#: Time left at which a checkpoint still unseen is said to be missing (seconds).
ABSENT_AT_S = 5

Note = Callable[[str, str, Level], None]


class TimeLimit:
    """Args:
        transport: A node's connection, by name.
        cwd: Where the run's script runs on a node (the checkpoint pattern is relative to it).
        node_dir: The run's node dir on a node, where the signal leaves its mark.
        note: ddptui's line about a node, for every face.
        record: Takes the signal's record (``run.json``'s ``time_limit``) as it changes.
        done: Set once the run is over: the look for a checkpoint ends then.
        sent: The signal already sent, for a run reopened (``ddptui attach``).
    """

    def __init__(self, config: HostsConfig, run_id: str, transport: Callable[[str], Transport],
                 cwd: Callable[[str], str], node_dir: Callable[[str], str], note: Note,
                 record: Callable[[TimeLimitNote], None], done: threading.Event,
                 sent: TimeLimitNote | None = None) -> None:
        s = config.slurm
        self.config, self.run_id = config, run_id
        self.signal = s.signal if s is not None else "USR2"
        self.lead = s.signal_before if s is not None else 0
        self.pattern = checkpoint.pattern(config)
        self.transport, self.cwd, self.node_dir = transport, cwd, node_dir
        self.note, self.record = note, record
        self.done = done
        self.sent = sent  # as run.json kept it, for a run reopened (attach)
        self._lock = threading.Lock()
        self._told: set[int] | None = None
        self._absent_said = False
        self._said: set[str] = set()
        self._final: threading.Thread | None = None
        #: Whether a mark left from elsewhere is worth reading at the end (not once Slurm has
        #: ended the job: its nodes hold nothing of the run to read).
        self.marks_readable: Callable[[], bool] = lambda: True
        self._first = config.nodes[0].name

    @property
    def left_at_signal(self) -> bool:
        """The ranks were signalled because the time limit was near, or to rehearse it (here,
        or by ``ddptui rehearse`` from elsewhere: its mark read at the end)."""
        return self.sent is not None and self.sent["ranks"] > 0

    @property
    def found(self) -> Checkpoint | None:
        return self.sent["checkpoint"] if self.sent is not None else None

    def heard(self, info: JobInfo) -> float | None:
        """One look at the job (the job watch's thread): says the time left as it runs down
        and signals at the lead; returns the seconds until the next look should be."""
        left = seconds_left(info, datetime.now()) if info.running else None
        if left is None:
            return None
        self._tell(info, left)
        if self.lead <= 0:
            return None
        if left > self.lead:
            return max(0.5, left - self.lead)
        if self._claim(LIMIT):
            threading.Thread(target=self._send_and_look, args=(LIMIT, left), daemon=True,
                             name="ddptui-time-limit").start()
        elif left <= ABSENT_AT_S and self.found is None and self.left_at_signal:
            self.say_absent(f"Slurm job {info.job_id} ends in {left} s")
        if left <= ABSENT_AT_S:
            return None
        # until the signal reached a rank, each look tries again (see _send)
        return RETRY_S if not self.left_at_signal else max(0.5, left - ABSENT_AT_S)

    def rehearse(self) -> str:
        """Send the signal now, as the time limit would, then look for the checkpoint in the
        background; what was done."""
        if not self._claim(REHEARSAL):
            return "the ranks were already sent the signal; the run is saving or has left"
        ranks = self._send(REHEARSAL, None)
        if not ranks:
            return (f"no rank of the run could take SIG{self.signal} now (none runs, or none "
                    "catches it): nothing was sent")
        threading.Thread(target=self._look_until_found, daemon=True,
                         name="ddptui-time-limit").start()
        return f"sent SIG{self.signal} to {ranks} rank(s), as the time limit would"

    def settled(self, applied: Callable[[], bool]) -> bool:
        """Every node of the run has ended: True once the last look for a checkpoint still
        unseen (or, on Slurm, for a signal sent from elsewhere) is done and what it said is
        in the store (``applied``: nothing waits to be)."""
        if self.found is not None or (self.sent is None and self.config.slurm is None) or (
                self.sent is not None and not self.left_at_signal):  # sent to no rank
            return True
        with self._lock:
            if self._final is None:
                self._final = threading.Thread(target=self._last_look, daemon=True,
                                               name="ddptui-time-limit-end")
                self._final.start()
        return not self._final.is_alive() and applied()

    def _last_look(self) -> None:
        if self.sent is None and not (self.marks_readable() and self._marked()):
            return
        if not self.left_at_signal:
            return
        self._look()
        if self.found is None:
            self.say_absent("the run has ended")

    def _marked(self) -> bool:
        """Whether a signal sent from elsewhere (``ddptui rehearse``) left its mark on node
        rank 0: then it is this run's signal, said and kept as if sent here."""
        zero = self.config.ordered_nodes[0].name
        try:
            mark = checkpoint.signal_mark(self.transport(zero), self.node_dir(zero))
        except (TransportError, OSError, KeyError):
            return False
        if mark is None:
            return False
        why, at, ranks = mark.get("why"), mark.get("sent_at"), mark.get("ranks")
        self.sent = TimeLimitNote(signal=str(mark.get("signal") or self.signal),
                                  sent_at=float(at) if isinstance(at, float) else time.time(),
                                  why=str(why or REHEARSAL),
                                  ranks=ranks if isinstance(ranks, int) else 1, checkpoint=None)
        self.record(self.sent)
        self.note(zero, f"the ranks were sent SIG{self.sent['signal']} from elsewhere "
                        f"({self.sent['why']}, `ddptui rehearse`)", Level.WARNING)
        return True

    def _claim(self, why: str) -> bool:
        with self._lock:
            if self.sent is not None:
                return False
            self.sent = TimeLimitNote(signal=self.signal, sent_at=time.time(), why=why,
                                      ranks=0, checkpoint=None)
            return True

    def _tell(self, info: JobInfo, left: int) -> None:
        crossed = {m for m in MILESTONES if left <= m}
        if self._told is None or crossed - self._told:
            self._told = crossed
            self.note(self._first, f"Slurm job {info.job_id} {info.state}: "
                                   f"{slurm_duration(left)} left "
                                   f"(time limit {info.time_limit}, ends {info.end_time})",
                      Level.INFO)

    def _send(self, why: str, left: int | None) -> int:
        """The signal to every rank that catches it; it counts as sent once one got it.
        Until then (no rank runs: the run has just ended, or torchrun starts its ranks again;
        no rank catches it yet: a script still starting) the claim goes, and the next look
        tries again: a rank that saves on it gets it as soon as it can."""
        assert self.sent is not None
        answered = map_at_once(self.config.nodes, self._signal_one)
        ranks = sum(len(g.value.ranks) for g in answered if isinstance(g, Done))
        deaf = [f"rank {r} on node {g.item.name}" for g in answered if isinstance(g, Done)
                for r, _pid in g.value.deaf]
        for g in answered:
            name = g.item.name
            if isinstance(g, Done):
                for rank, pid, err in g.value.failed:
                    self._once(name, f"did not send SIG{self.signal} to rank {rank} (pid "
                                     f"{pid}) on node {name}: {err}", Level.ERROR)
            else:
                self._once(name, f"could not send SIG{self.signal} to the ranks on node "
                                 f"{name}: {g.error}", Level.ERROR)
        head = (f"the allocation ends in {left} s (its time limit): " if why == LIMIT else
                "rehearsing the time limit: ")
        if ranks == 0:
            with self._lock:
                self.sent = None
            if deaf:  # said once for each why (its head changes with the time left)
                self._once(self._first, f"{head}no rank of the run catches SIG{self.signal} "
                                        f"yet ({', '.join(deaf)}), so none was sent it (it "
                                        "would end them now); ddptui sends it as soon as one "
                                        "does. A run that never does goes on until Slurm ends "
                                        "it, and what it has not saved is lost: make the "
                                        f"script save on SIG{self.signal} (`slurm.signal` "
                                        "names another)", Level.ERROR, key=why)
            return 0
        if deaf:
            self._once(self._first, f"did not send SIG{self.signal} to {', '.join(deaf)}: "
                                    "it does not catch it (yet), and it would end it now",
                       Level.WARNING)
        self.sent = {**self.sent, "ranks": ranks}
        self.record(self.sent)
        where = (f"watching {self.pattern} for the checkpoint" if self.pattern else
                 "no checkpoint path is set (`slurm.checkpoint`), so ddptui cannot tell "
                 "whether the run saved anything")
        self.note(self._first, f"{head}sent SIG{self.signal} to {ranks} rank(s) on "
                               f"{len(self.config.nodes)} node(s) so that the run saves a "
                               f"checkpoint; {where}", Level.WARNING)
        return ranks

    def _once(self, node: str, text: str, level: Level, key: str | None = None) -> None:
        """A problem of the signal, said once (by its text, or ``key``) however many looks
        find it again."""
        with self._lock:
            if (key or text) in self._said:
                return
            self._said.add(key or text)
        self.note(node, text, level)

    def _send_and_look(self, why: str, left: int | None) -> None:
        self._send(why, left)
        self._look_until_found()

    def _look_until_found(self) -> None:
        while (self.pattern and self.found is None and self.left_at_signal
               and not self.done.wait(LOOK_EVERY_S)):
            self._look()

    def _signal_one(self, node: NodeConfig) -> Signalled:
        assert self.sent is not None
        return checkpoint.signal_node(self.transport(node.name), node.python, self.run_id,
                                      self.config.node_rank(node), node.name, self.signal,
                                      self.sent["why"], self.node_dir(node.name))

    def _look(self) -> None:
        """One look on every node; the newest checkpoint since the signal, said once."""
        sent, pattern = self.sent, self.pattern
        if sent is None or pattern is None:
            return
        seen: list[Seen] = []
        for g in map_at_once(self.config.nodes, lambda n: checkpoint.seen_on(
                self.transport(n.name), n.python, n.name, self.cwd(n.name), pattern,
                sent["sent_at"])):
            if isinstance(g, Done) and g.value is not None:  # a node not answering: next look
                seen.append(g.value)
        if not seen:
            return
        best = max(seen, key=lambda s: s.mtime)
        found = Checkpoint(node=best.node, path=best.path, step=checkpoint.step_of(best.path),
                           after_s=round(max(0.0, best.mtime - sent["sent_at"]), 1))
        with self._lock:
            if self.found is not None:
                return
            self.sent = {**sent, "checkpoint": found}
            self.record(self.sent)
        step = f"step {found['step']}" if found["step"] is not None else best.path
        self.note(best.node, f"checkpoint {step} written {found['after_s']:g} s after the "
                             f"signal (node {best.node}: {best.path})", Level.INFO)

    def say_absent(self, when: str) -> None:
        """No checkpoint newer than the signal was seen by ``when``: said once, plainly."""
        with self._lock:  # the job watch's thread and the run's end may both come here
            if self._absent_said:
                return
            self._absent_said = True
        what = (f"no checkpoint newer than the signal was found on any node "
                f"({self.pattern})" if self.pattern else
                "nothing was saved that ddptui can see (no `slurm.checkpoint` is set)")
        self.note(self._first, f"{when}, and {what}: the work since the run's last checkpoint "
                               f"is lost. Make the script save when it gets SIG{self.signal} "
                               "(the bundled worker does), and set `slurm.checkpoint` to "
                               "where it saves", Level.ERROR)
