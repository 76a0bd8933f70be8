"""Where a run's end meets its allocation.

- While the run is followed, the job is watched (:class:`JobWatch`): its state and time left
  for every face, and, the moment Slurm stops running it (scancel, its time limit, a node
  failure, preemption), every node still followed is given up with Slurm's reason, instead of
  waiting out ``health.lost_after`` for connections that cannot come back.
- A failed run whose allocation ended under it has Slurm's reason as its cause; what the
  ranks then reported (lost connections, a lost node) are its consequences.
- An allocation ddptui asked for is given back at the end.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Protocol

from ddptui.config import HostsConfig
from ddptui.diagnose.diagnosis import Cause, Diagnosis
from ddptui.slurm import client
from ddptui.slurm.allocation import give_back
from ddptui.slurm.client import UnknownJob
from ddptui.slurm.jobinfo import JobEnd, JobInfo, SlurmError, ended_words, time_left


class Followed(Protocol):
    def give_up(self, detail: str) -> bool: ...


class RunInfo(Protocol):
    def set_run(self, *, scheduler: str) -> None: ...


def job_ended(config: HostsConfig, found: Diagnosis | None, seen: JobEnd | None = None
              ) -> Diagnosis | None:
    """The diagnosis when the run's Slurm job is no longer running; None while it runs (or
    Slurm cannot say), so the ranks' own diagnosis stands. ``seen``: the end the job watch
    already saw (Slurm may have forgotten the job since)."""
    job = config.slurm.job if config.slurm is not None else None
    if job is None:
        return None
    if seen is not None:
        return ended_diagnosis(seen, found)
    try:
        info = client.show_job(job)
    except UnknownJob:  # ended, and forgotten already
        return ended_diagnosis(forgotten_end(job), found)
    except SlurmError:
        return None
    return None if info.running else ended_diagnosis(end_of(info), found)


def end_of(info: JobInfo) -> JobEnd:
    return JobEnd(info.job_id, info.state, info.reason)


def forgotten_end(job: str) -> JobEnd:
    """The end of a job slurmctld no longer knows: from accounting where there is some."""
    return client.accounted_end(job) or JobEnd(job, "", "")


def ended_diagnosis(end: JobEnd, found: Diagnosis | None) -> Diagnosis:
    """Slurm's reason as the cause; what the ranks and nodes then said, its consequences."""
    what, advice = ended_words(end.state)
    d = Diagnosis(Cause.SLURM_JOB_ENDED,
                  f"Slurm job {end.job_id} {what}: the run could not go on.", what,
                  advice.replace("JOB", end.job_id) or "start the run again in a new allocation",
                  evidence=[end.evidence()])
    if found is not None:  # what the ranks and nodes then said follows from it
        d.details = {n: [ln.replace("(the cause)", "(a consequence)") for ln in lines]
                     for n, lines in found.details.items()}
    return d


def release(config: HostsConfig) -> str | None:
    """Give back the run's allocation if ddptui asked for it and was not told to keep it;
    what was done, for the run's output (None: nothing to do)."""
    s = config.slurm
    if s is None or not s.owned or s.keep or s.job is None:
        return None
    try:
        give_back(s.job)
    except SlurmError as e:
        return f"could not give back Slurm job {s.job}: {e}"
    return f"gave back Slurm job {s.job} (ddptui asked for it for this run)"


#: Seconds between two looks at the job (one ``scontrol`` call each).
EVERY_S = 5.0
#: Seconds between two looks while the job is COMPLETING: its final state (why it ended) may
#: be readable only until slurmctld forgets it (MinJobAge, 2 s on the test cluster).
ENDING_EVERY_S = 0.1


def describe(info: JobInfo, now_iso: str) -> str:
    """``slurm 123 RUNNING 01:02:03 left`` for the header and ``run.json``."""
    left = time_left(info, now_iso) if info.running else None
    return f"slurm {info.job_id} {info.state}" + (f" {left} left" if left else "")


class JobWatch:
    """Args:
        job: The allocation's id; None makes a watch that does nothing (no Slurm).
        show: Takes the job's one-line state whenever it changes.
        ended: Takes ddptui's sentence once the job stops running; called once.
        heard: Sees the job at each look while it runs, and may ask for the next look
            sooner (seconds): the time limit's lead (:mod:`ddptui.live.timelimit`).
    """

    def __init__(self, job: str | None, show: Callable[[str], None],
                 ended: Callable[[str], None], every: float = EVERY_S,
                 heard: Callable[[JobInfo], float | None] | None = None) -> None:
        self.job, self.show, self.ended, self.every = job, show, ended, every
        self.heard = heard
        self._said = ""
        self._poke = threading.Event()
        #: How Slurm ended the job, once the watch saw it end.
        self.end: JobEnd | None = None

    @property
    def gone(self) -> bool:
        """Slurm ended the job: nothing of the run can be left on its nodes to seek."""
        return self.end is not None

    @classmethod
    def of(cls, config: HostsConfig, store: RunInfo, followers: Mapping[str, Followed],
           heard: Callable[[JobInfo], float | None] | None = None) -> JobWatch:
        """Shown in the store's run info; ending gives up every node still followed."""
        def ended(why: str) -> None:
            for f in list(followers.values()):
                f.give_up(why)

        return cls(config.slurm.job if config.slurm else None,
                   lambda said: store.set_run(scheduler=said), ended, heard=heard)

    def start(self, done: threading.Event) -> None:
        if self.job is not None:
            threading.Thread(target=self._run, args=(done,), daemon=True,
                             name="ddptui-slurm-job").start()

    def poke(self) -> None:
        """Look now, not at the next tick: a node's connection was lost, and Slurm ending
        the job is one reason (its final state may be readable for a moment only)."""
        self._poke.set()

    def look(self) -> JobInfo | None:
        """One look: the state shown if it changed; None when Slurm did not answer. Raises
        :class:`UnknownJob` for a job Slurm has already forgotten (it has ended)."""
        assert self.job is not None
        try:
            info = client.show_job(self.job)
        except UnknownJob:
            raise
        except SlurmError:
            return None  # slurmctld busy or restarting: the next look may answer
        said = describe(info, datetime.now().isoformat(timespec="seconds"))
        if said != self._said:
            self._said = said
            self.show(said)
        return info

    def _run(self, done: threading.Event) -> None:
        assert self.job is not None
        pause = self.every
        while not done.is_set():
            self._poke.wait(pause)
            self._poke.clear()
            if done.is_set():
                return
            try:
                info = self.look()
            except UnknownJob:  # it ended between two looks, and Slurm forgot it already
                self._ended(forgotten_end(self.job))
                return
            if info is not None and not info.running and not info.pending:
                self._ended(end_of(info))
                return
            ending = info is not None and info.state == "COMPLETING"
            pause = ENDING_EVERY_S if ending else self.every
            sooner = self.heard(info) if info is not None and self.heard is not None else None
            pause = min(pause, sooner) if sooner is not None else pause

    def _ended(self, end: JobEnd) -> None:
        self.end = end
        self.ended(f"Slurm job {self.job} {ended_words(end.state)[0].replace('JOB', end.job_id)}"
                   + (f" (JobState={end.state}, Reason={end.reason})" if end.state else ""))
